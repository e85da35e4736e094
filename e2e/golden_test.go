//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sjson "k8s.io/apimachinery/pkg/util/json"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
	"github.com/challenge-hook/challenge-hook/internal/golden"
)

// goldenCase is one testdata/<case>/ directory with a request and its recorded response.
type goldenCase struct {
	name     string
	request  []byte
	response []byte
	// flags are the case's hook flags on top of testdata/dev.flags (testdata/<case>/hook.flags, e.g.
	// a Gateway), nil for most cases.
	flags []string
}

func (g goldenCase) customize() bool { return strings.HasPrefix(g.name, "customize-") }

// goldenCases reads every testdata case that has both request.json and response.json.
func goldenCases(t *testing.T, root string) []goldenCase {
	t.Helper()
	corpus, err := golden.Cases(filepath.Join(root, "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	for _, c := range corpus {
		if c.Response == nil {
			t.Logf("golden case %s has no response.json yet: skipped", c.Name)
			continue
		}
		cases = append(cases, goldenCase{name: c.Name, request: c.Request, response: c.Response, flags: c.Flags})
	}
	if len(cases) == 0 {
		t.Fatal("no golden cases (testdata/*/request.json with response.json)")
	}
	return cases
}

// decodeJSONObject decodes JSON keeping integers as int64 (like objects read from the API server).
func decodeJSONObject(t *testing.T, data []byte, what string) map[string]any {
	t.Helper()
	var obj map[string]any
	if err := k8sjson.Unmarshal(data, &obj); err != nil {
		t.Fatalf("decode %s: %v", what, err)
	}
	return obj
}

// TestGoldenResponsesFromBinary: the built binary, served over HTTP with testdata/dev.flags plus
// the case's own testdata/<case>/hook.flags, answers every golden request with its response.json
// (the golden test checks the sync package; this checks the server and flag parsing in front of
// it). Each distinct set of case flags gets its own hook process.
func TestGoldenResponsesFromBinary(t *testing.T) {
	root := repoRoot(t)
	hooks := map[string]*hookServer{}
	ctx := e2eutil.TestContext(t)
	for _, gc := range goldenCases(t, root) {
		key := strings.Join(gc.flags, " ")
		hook, ok := hooks[key]
		if !ok {
			hook = startHook(t, root, append(devFlags(t, root), gc.flags...)...)
			hooks[key] = hook
		}
		t.Run(gc.name, func(t *testing.T) {
			path := "/sync"
			req := decodeJSONObject(t, gc.request, "request.json")
			switch {
			case gc.customize():
				path = "/customize"
			case req["finalizing"] == true:
				path = "/finalize"
			}
			got, err := hook.post(ctx, path, gc.request)
			if err != nil {
				t.Fatal(err)
			}
			want := decodeJSONObject(t, gc.response, "response.json")
			if diff := jsonDiff(want, decodeJSONObject(t, got, "hook answer")); len(diff) > 0 {
				t.Errorf("POST %s answered differently from response.json (want -> got):\n%s", path, indentLines(diff))
			}
		})
	}
}

// templateSpecs returns the instance templates a request carries: the parent's inline template
// and the specs of related ChallengeDefinitions.
func templateSpecs(request map[string]any) []map[string]any {
	var specs []map[string]any
	if tpl, ok, _ := unstructured.NestedMap(request, "parent", "spec", "template"); ok {
		specs = append(specs, tpl)
	}
	for _, def := range relatedDefinitions(request) {
		if spec, ok, _ := unstructured.NestedMap(def, "spec"); ok {
			specs = append(specs, spec)
		}
	}
	return specs
}

// relatedDefinitions are the ChallengeDefinitions in a request's related objects.
func relatedDefinitions(request map[string]any) []map[string]any {
	var out []map[string]any
	related, _ := request["related"].(map[string]any)
	for key, group := range related {
		if !strings.HasPrefix(key, "ChallengeDefinition.") {
			continue
		}
		objs, _ := group.(map[string]any)
		for _, obj := range objs {
			out = append(out, obj.(map[string]any))
		}
	}
	return out
}

// needsBaseline: the template opts out of runAsNonRoot or allows privilege escalation (setuid),
// which Pod Security "restricted" forbids and "baseline" admits.
func needsBaseline(request map[string]any) bool {
	return optsOut(request, "runAsRoot") || optsOut(request, "allowPrivilegeEscalation")
}

// runtimeClasses are the RuntimeClasses the templates name (Pods naming a missing one are refused).
func runtimeClasses(request map[string]any) []string {
	var names []string
	for _, spec := range templateSpecs(request) {
		if name, ok, _ := unstructured.NestedString(spec, "runtimeClassName"); ok && name != "" {
			names = append(names, name)
		}
	}
	return names
}

// cleanForCreate keeps what a user would write of an object (name, labels, annotations, spec and
// the like), in namespace ns. A Challenge without the owner label (a golden case written for a
// hook without --max-instances-per-owner) gets it, equal to spec.owner, as the platform creates
// every Challenge (manifests/challenge-owner-policy.yaml refuses one without it); one whose label
// says another owner keeps it, and is refused.
func cleanForCreate(obj *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	for key, value := range obj.Object {
		if key != "metadata" && key != "status" {
			out.Object[key] = value
		}
	}
	out.SetName(obj.GetName())
	out.SetNamespace(ns)
	labels := obj.GetLabels()
	if owner, ok, _ := unstructured.NestedString(obj.Object, "spec", "owner"); ok && obj.GetKind() == "Challenge" {
		if _, labelled := labels[ownerLabel]; !labelled {
			if labels == nil {
				labels = map[string]string{}
			}
			labels[ownerLabel] = owner
		}
	}
	out.SetLabels(labels)
	out.SetAnnotations(obj.GetAnnotations())
	return out.DeepCopy()
}

// goldenInstance is a golden case's Challenge (and the ChallengeDefinitions its request relates),
// as a user would create them, for a namespace the test chooses.
type goldenInstance struct {
	parent      *unstructured.Unstructured
	definitions []*unstructured.Unstructured
	// podSecurity is the level its Pods need: restricted, or baseline for a runAsRoot or allowPrivilegeEscalation opt-out.
	podSecurity      string
	runtimeClasses   []string
	hasSpecExpiresAt bool
}

func goldenInstanceOf(t *testing.T, gc goldenCase) goldenInstance {
	t.Helper()
	request := decodeJSONObject(t, gc.request, gc.name+"/request.json")
	golden := &unstructured.Unstructured{Object: request["parent"].(map[string]any)}
	parent := cleanForCreate(golden, "")
	if ref, ok, _ := unstructured.NestedMap(parent.Object, "spec", "definitionRef"); ok && ref["namespace"] != nil {
		t.Fatalf("%s: a definitionRef to another namespace; the test would have to create that namespace", gc.name)
	}
	g := goldenInstance{parent: parent, podSecurity: podSecurityRestricted, runtimeClasses: runtimeClasses(request)}
	if needsBaseline(request) {
		g.podSecurity = podSecurityBaseline
	}
	_, g.hasSpecExpiresAt, _ = unstructured.NestedString(parent.Object, "spec", "expiresAt")
	for _, def := range relatedDefinitions(request) {
		g.definitions = append(g.definitions, cleanForCreate(&unstructured.Unstructured{Object: def}, ""))
	}
	return g
}

// create makes the instance's RuntimeClasses, definitions and Challenge in ns (watched from before
// its creation).
func (g goldenInstance) create(ctx context.Context, t *testing.T, c *cluster, ns string) (*challengeWatch, *unstructured.Unstructured) {
	t.Helper()
	for _, rc := range g.runtimeClasses {
		c.ensureRuntimeClass(ctx, t, rc)
	}
	for _, def := range g.definitions {
		createObject(ctx, t, c, ns, def)
	}
	return startChallenge(ctx, t, c, ns, g.parent)
}

// TestPodSecurityRefusesRoot: each golden case that opts into runAsRoot or allowPrivilegeEscalation
// (setuid), created in a namespace enforcing "restricted", has its Pod refused by Pod Security
// admission and never runs; the same case in a namespace enforcing "baseline" is admitted and
// reaches Running. This is what the other instances' Running under "restricted" proves they passed.
func TestPodSecurityRefusesRoot(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	var optOuts []goldenCase
	for _, gc := range goldenCases(t, c.root) {
		if !gc.customize() && len(gc.flags) == 0 && needsBaseline(decodeJSONObject(t, gc.request, gc.name)) {
			optOuts = append(optOuts, gc)
		}
	}
	for _, opt := range []string{"runAsRoot", "allowPrivilegeEscalation"} {
		if !slices.ContainsFunc(optOuts, func(gc goldenCase) bool { return optsOut(decodeJSONObject(t, gc.request, gc.name), opt) }) {
			t.Errorf("no golden case opts into %s", opt)
		}
	}
	for _, gc := range optOuts {
		t.Run(gc.name, func(t *testing.T) {
			t.Parallel()
			g := goldenInstanceOf(t, gc)
			if g.podSecurity != podSecurityBaseline {
				t.Fatalf("level %s, want baseline", g.podSecurity)
			}
			restricted := c.createNamespace(ctx, t, "psa-r-"+gc.name, podSecurityRestricted)
			wRefused, _ := g.create(ctx, t, c, restricted)
			baseline := c.createNamespace(ctx, t, "psa-b-"+gc.name, podSecurityBaseline)
			wAdmitted, _ := g.create(ctx, t, c, baseline)
			var refusal string
			e2eutil.WaitFor(ctx, t, 60*time.Second, "an event saying Pod Security refused the instance's Pod", func() (bool, error) {
				events, err := c.dyn.Resource(eventGVR).Namespace(restricted).List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				for _, ev := range events.Items {
					if message, _, _ := unstructured.NestedString(ev.Object, "message"); strings.Contains(message, "violates PodSecurity") {
						refusal = message
						return true, nil
					}
				}
				return false, nil
			})
			t.Logf("restricted: %s", refusal)
			wAdmitted.phase(t, 60*time.Second, "Running")
			if phases := wRefused.phases(); slices.Contains(phases, "Running") {
				t.Errorf("ran in a restricted namespace: phases %v", phases)
			}
		})
	}
}

// optsOut: a template of the request sets security.<optOut>: true.
func optsOut(request map[string]any, optOut string) bool {
	for _, spec := range templateSpecs(request) {
		if set, _, _ := unstructured.NestedBool(spec, "security", optOut); set {
			return true
		}
	}
	return false
}
