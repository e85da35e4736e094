//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// ctfGroup is the API group of the project's resources.
const ctfGroup = "ctf.challenge-hook.dev"

// TestCRDsEstablished: both CRDs are served, Established, and the Challenge has the status
// subresource Metacontroller requires of a parent.
func TestCRDsEstablished(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	for _, name := range []string{"challenges." + ctfGroup, "challengedefinitions." + ctfGroup} {
		crd, err := c.dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("CRD %s: %v", name, err)
		}
		if !conditionTrue(crd, "Established") || !conditionTrue(crd, "NamesAccepted") {
			t.Errorf("CRD %s is not Established with names accepted: %v", name, crd.Object["status"])
		}
	}
	for kind, want := range map[string]string{"Challenge": "challenges", "ChallengeDefinition": "challengedefinitions"} {
		mapping, err := c.mapper.RESTMapping(chalGVR.GroupVersion().WithKind(kind).GroupKind(), chalGVR.Version)
		if err != nil || mapping.Resource.Resource != want || mapping.Scope.Name() != "namespace" {
			t.Errorf("%s is not served as namespaced %s: %v (err %v)", kind, want, mapping, err)
		}
	}
	// Metacontroller writes the parent's status through the status subresource.
	ns := c.createNamespace(ctx, t, "crd", podSecurityRestricted)
	chal := validChallenge("status-probe")
	chal.SetNamespace(ns)
	created, err := c.dyn.Resource(chalGVR).Namespace(ns).Create(ctx, chal, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Challenge: %v", err)
	}
	// Metacontroller syncs it too (and may write its status first): retry on conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest, err := c.dyn.Resource(chalGVR).Namespace(ns).Get(ctx, created.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		latest.Object["status"] = map[string]any{"phase": "None"}
		_, err = c.dyn.Resource(chalGVR).Namespace(ns).UpdateStatus(ctx, latest, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("Challenge has no working status subresource: %v", err)
	}
}

// sample is one object from the README, docs/, examples/ or a golden request, to be admitted.
type sample struct {
	source string
	obj    *unstructured.Unstructured
	// mayBeRefused marks golden inputs that test the hook's own defences (their response says
	// InvalidSpec or InvalidDefinition): the API server may refuse them, and usually should.
	mayBeRefused bool
}

// TestSamplesAccepted: every Challenge and ChallengeDefinition in the README and docs/, in
// examples/ and in the golden requests (parents and related definitions) is accepted by the API server.
func TestSamplesAccepted(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "samples", podSecurityRestricted)
	docs, examples, golden := docSamples(t, c.root), exampleSamples(t, c.root), goldenSamples(t, c.root)
	t.Logf("samples: %d from README.md and docs/, %d from examples/, %d from testdata/", len(docs), len(examples), len(golden))
	if len(docs) == 0 || len(examples) == 0 || len(golden) == 0 {
		t.Fatal("no samples found in the README and docs/, examples/ or testdata/")
	}
	samples := append(append(docs, examples...), golden...)
	counts := map[bool]int{}
	for _, s := range samples {
		obj := cleanForCreate(s.obj, ns)
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Errorf("%s: %v", s.source, err)
			continue
		}
		_, err = client.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil:
			counts[true]++
		case s.mayBeRefused && apierrors.IsInvalid(err):
			counts[false]++
			t.Logf("%s: refused as expected for a defence-in-depth case: %v", s.source, err)
		default:
			t.Errorf("%s: %s %s refused: %v", s.source, obj.GetKind(), obj.GetName(), err)
		}
	}
	t.Logf("%d samples accepted, %d defence-in-depth inputs refused", counts[true], counts[false])
}

var yamlFence = regexp.MustCompile("(?s)```ya?ml\n(.*?)```")

// readmeSamples are the project's objects in the README's YAML code blocks: its example
// definition and Challenge.
func readmeSamples(t *testing.T, root string) []sample {
	t.Helper()
	return markdownSamples(t, root, "README.md")
}

// docSamples are the project's objects in the YAML code blocks of the README and of docs/*.md.
func docSamples(t *testing.T, root string) []sample {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := readmeSamples(t, root)
	for _, page := range pages {
		out = append(out, markdownSamples(t, root, filepath.Join("docs", filepath.Base(page)))...)
	}
	return out
}

// markdownSamples are the project's objects in the YAML code blocks of page (relative to root).
func markdownSamples(t *testing.T, root, page string) []sample {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for i, block := range yamlFence.FindAllSubmatch(data, -1) {
		if !strings.Contains(string(block[1]), "apiVersion: "+ctfGroup+"/") {
			continue
		}
		objs, err := decodeYAMLObjects(block[1], page)
		if err != nil {
			t.Errorf("%s YAML block %d: %v", page, i+1, err)
			continue
		}
		for _, obj := range objs {
			if obj.GroupVersionKind().Group == ctfGroup {
				out = append(out, sample{source: fmt.Sprintf("%s block %d", page, i+1), obj: obj})
			}
		}
	}
	return out
}

func exampleSamples(t *testing.T, root string) []sample {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for _, path := range paths {
		objs, err := readYAMLObjects(path)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		for _, obj := range objs {
			if obj.GroupVersionKind().Group == ctfGroup {
				out = append(out, sample{source: "examples/" + filepath.Base(path), obj: obj})
			}
		}
	}
	return out
}

// goldenSamples are the parents and related ChallengeDefinitions of every golden request.
func goldenSamples(t *testing.T, root string) []sample {
	t.Helper()
	var out []sample
	for _, gc := range goldenCases(t, root) {
		request := decodeJSONObject(t, gc.request, gc.name+"/request.json")
		response := decodeJSONObject(t, gc.response, gc.name+"/response.json")
		// The hook calls the input invalid now, or did at the previous sync (a case that reaches
		// its deadline with the same invalid input answers Expired but was recorded invalid).
		reason, _, _ := unstructured.NestedString(response, "status", "reason")
		previous, _, _ := unstructured.NestedString(request, "parent", "status", "reason")
		defence := invalidInputReason(reason) || invalidInputReason(previous)
		if parent, ok := request["parent"].(map[string]any); ok {
			out = append(out, sample{source: "testdata/" + gc.name + " parent", obj: &unstructured.Unstructured{Object: parent}, mayBeRefused: defence})
		}
		related, _ := request["related"].(map[string]any)
		for key, group := range related {
			if !strings.HasPrefix(key, "ChallengeDefinition.") {
				continue
			}
			objs, _ := group.(map[string]any)
			for objKey, obj := range objs {
				out = append(out, sample{source: "testdata/" + gc.name + " related " + objKey, obj: &unstructured.Unstructured{Object: obj.(map[string]any)}, mayBeRefused: defence})
			}
		}
	}
	return out
}

// invalidInputReason: the status reasons by which the hook says its input is invalid.
func invalidInputReason(reason string) bool {
	return reason == "InvalidSpec" || reason == "InvalidDefinition"
}

// validTemplate is a correct instance template; each invalid case below breaks one thing in it.
func validTemplate() map[string]any {
	return map[string]any{
		"containers": []any{map[string]any{
			"name":  "web",
			"image": "ghcr.io/example/web:1.0",
			"ports": []any{map[string]any{"name": "http", "containerPort": int64(8080), "protocol": "TCP"}},
			"resources": map[string]any{
				"requests": map[string]any{"cpu": "100m", "memory": "64Mi"},
				"limits":   map[string]any{"cpu": "500m", "memory": "128Mi"},
			},
		}},
		"expose":      []any{map[string]any{"port": int64(8080), "type": "HTTP"}},
		"timeout":     "30m",
		"maxLifetime": "2h",
		"flag":        map[string]any{"dynamic": true, "env": "FLAG"},
	}
}

func validDefinition(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ctfGroup + "/v1alpha1",
		"kind":       "ChallengeDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       validTemplate(),
	}}
}

func validChallenge(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ctfGroup + "/v1alpha1",
		"kind":       "Challenge",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{ownerLabel: "team-1"}},
		"spec":       map[string]any{"owner": "team-1", "template": validTemplate()},
	}}
}

// validPlatformChallenge is a correct Challenge whose inline template takes its flag from the
// platform, which gives it in spec.flag.
func validPlatformChallenge(name string) *unstructured.Unstructured {
	obj := validChallenge(name)
	template(obj)["flag"] = map[string]any{"platform": true, "env": "FLAG"}
	spec(obj)["flag"] = "rctf{x}"
	return obj
}

// validPodsTemplate is a correct template of several pods: a web app players reach by HTTP,
// which its admin bot also visits (internal 8080 from bot); its database, which only the web app
// reaches (internal 5432 from web); the bot, with no port, which holds the flag.
func validPodsTemplate() map[string]any {
	return map[string]any{
		"pods": []any{
			map[string]any{
				"name": "web",
				"containers": []any{map[string]any{
					"name":  "app",
					"image": "ghcr.io/example/web:1.0",
					"ports": []any{map[string]any{"name": "http", "containerPort": int64(8080), "protocol": "TCP"}},
				}},
				"expose":   []any{map[string]any{"port": int64(8080), "type": "HTTP"}},
				"internal": []any{map[string]any{"port": int64(8080), "from": []any{"bot"}}},
			},
			map[string]any{
				"name": "db",
				"containers": []any{map[string]any{
					"name":  "postgres",
					"image": "postgres:17",
					"ports": []any{map[string]any{"containerPort": int64(5432), "protocol": "TCP"}},
				}},
				"internal": []any{map[string]any{"port": int64(5432), "from": []any{"web"}}},
			},
			map[string]any{
				"name":       "bot",
				"containers": []any{map[string]any{"name": "bot", "image": "ghcr.io/example/bot:1.0", "flag": true}},
				"egress":     true,
			},
		},
		"timeout":     "30m",
		"maxLifetime": "2h",
		"flag":        map[string]any{"dynamic": true, "env": "FLAG"},
	}
}

func validPodsDefinition(name string) *unstructured.Unstructured {
	obj := validDefinition(name)
	obj.Object["spec"] = validPodsTemplate()
	return obj
}

func validPodsChallenge(name string) *unstructured.Unstructured {
	obj := validChallenge(name)
	spec(obj)["template"] = validPodsTemplate()
	return obj
}

// Helpers to reach into the objects of the table below.
func spec(obj *unstructured.Unstructured) map[string]any { return obj.Object["spec"].(map[string]any) }
func template(obj *unstructured.Unstructured) map[string]any {
	if tpl, ok := spec(obj)["template"].(map[string]any); ok {
		return tpl
	}
	return spec(obj)
}
func container(obj *unstructured.Unstructured) map[string]any {
	return template(obj)["containers"].([]any)[0].(map[string]any)
}
func port(obj *unstructured.Unstructured) map[string]any {
	return container(obj)["ports"].([]any)[0].(map[string]any)
}
func pod(obj *unstructured.Unstructured, i int) map[string]any {
	return template(obj)["pods"].([]any)[i].(map[string]any)
}
func podContainer(obj *unstructured.Unstructured, i int) map[string]any {
	return pod(obj, i)["containers"].([]any)[0].(map[string]any)
}
func internal(obj *unstructured.Unstructured, i int) map[string]any {
	return pod(obj, i)["internal"].([]any)[0].(map[string]any)
}

// TestInvalidObjectsRejected: the API server refuses each broken ChallengeDefinition or Challenge
// with the CRD's message, before the hook ever sees it.
func TestInvalidObjectsRejected(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "invalid", podSecurityRestricted)
	type invalidCase struct {
		name   string
		base   func(name string) *unstructured.Unstructured
		mutate func(obj *unstructured.Unstructured)
		want   string
	}
	cases := []invalidCase{
		{"timeout not a duration", validDefinition, func(o *unstructured.Unstructured) { spec(o)["timeout"] = "30 minutes" },
			"spec.timeout in body should match"},
		{"prePull in an inline template", validChallenge, func(o *unstructured.Unstructured) { template(o)["prePull"] = false },
			"template.prePull applies to ChallengeDefinitions only"},
		{"timeout zero", validDefinition, func(o *unstructured.Unstructured) { spec(o)["timeout"] = "0s" },
			"timeout must be a positive duration such as 30m or 1h30m"},
		{"maxLifetime zero", validDefinition, func(o *unstructured.Unstructured) { spec(o)["maxLifetime"] = "0h" },
			"maxLifetime must be a positive duration such as 2h"},
		{"timeout above maxLifetime", validDefinition, func(o *unstructured.Unstructured) { spec(o)["timeout"] = "3h" },
			"timeout must not exceed maxLifetime"},
		{"containerPort above 65535", validDefinition, func(o *unstructured.Unstructured) { port(o)["containerPort"] = int64(70000) },
			"containerPort in body should be less than or equal to 65535"},
		{"containerPort zero", validDefinition, func(o *unstructured.Unstructured) { port(o)["containerPort"] = int64(0) },
			"containerPort in body should be greater than or equal to 1"},
		{"expose port not a containerPort", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["expose"] = []any{map[string]any{"port": int64(9090), "type": "NodePort"}}
		}, "every expose.port must be a containerPort of one of the containers"},
		{"expose type unknown", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["expose"] = []any{map[string]any{"port": int64(8080), "type": "Route"}}
		}, `Unsupported value: "Route"`},
		{"two HTTP exposures", validDefinition, func(o *unstructured.Unstructured) {
			container(o)["ports"] = []any{
				map[string]any{"containerPort": int64(8080), "protocol": "TCP"},
				map[string]any{"containerPort": int64(8081), "protocol": "TCP"},
			}
			spec(o)["expose"] = []any{map[string]any{"port": int64(8080), "type": "HTTP"}, map[string]any{"port": int64(8081), "type": "HTTP"}}
		}, "at most one expose entry may be of type HTTP"},
		{"cpu not a quantity", validDefinition, func(o *unstructured.Unstructured) {
			container(o)["resources"].(map[string]any)["requests"].(map[string]any)["cpu"] = "lots"
		}, "must be a Kubernetes quantity such as 250m, 1 or 256Mi"},
		{"request above limit", validDefinition, func(o *unstructured.Unstructured) {
			container(o)["resources"].(map[string]any)["requests"].(map[string]any)["memory"] = "1Gi"
		}, "each resource request must be less than or equal to its limit"},
		{"container name not a DNS label", validDefinition, func(o *unstructured.Unstructured) { container(o)["name"] = "Web_1" },
			"spec.containers[0].name in body should match"},
		{"container named like the policy gate", validDefinition, func(o *unstructured.Unstructured) { container(o)["name"] = "policy-gate" },
			"is reserved for the hook's init container"},
		{"nine containers", validDefinition, func(o *unstructured.Unstructured) {
			var containers []any
			for i := range 9 {
				containers = append(containers, map[string]any{"name": fmt.Sprintf("c%d", i), "image": "busybox:1.36"})
			}
			spec(o)["containers"] = containers
			delete(spec(o), "expose")
		}, "must have at most 8 items"},
		{"flag both static and dynamic", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["flag"] = map[string]any{"value": "flag{x}", "dynamic": true, "env": "FLAG"}
		}, "flag must set exactly one of value, dynamic: true or platform: true"},
		{"flag both dynamic and the platform's", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["flag"] = map[string]any{"dynamic": true, "platform": true, "env": "FLAG"}
		}, "flag must set exactly one of value, dynamic: true or platform: true"},
		{"flag of no kind", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["flag"] = map[string]any{"env": "FLAG"}
		}, "flag must set exactly one of value, dynamic: true or platform: true"},
		{"prefix on the platform's flag", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["flag"] = map[string]any{"platform": true, "prefix": "CTF", "env": "FLAG"}
		}, "flag.prefix applies only to dynamic: true flags"},
		{"flag path relative", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["flag"] = map[string]any{"value": "flag{x}", "path": "flag.txt"}
		}, "spec.flag.path in body should match"},
		{"runAsUser 0 without runAsRoot", validDefinition, func(o *unstructured.Unstructured) {
			spec(o)["security"] = map[string]any{"runAsUser": int64(0)}
		}, "runAsUser 0 is root: set runAsRoot: true to run as root"},
		{"definition name longer than a label", validDefinition, func(o *unstructured.Unstructured) { o.SetName(strings.Repeat("d", 64)) },
			"metadata.name must be at most 63 characters"},
		{"challenge with template and definitionRef", validChallenge, func(o *unstructured.Unstructured) {
			spec(o)["definitionRef"] = map[string]any{"name": "web"}
		}, "spec must set exactly one of definitionRef or template"},
		{"challenge with neither template nor definitionRef", validChallenge, func(o *unstructured.Unstructured) {
			delete(spec(o), "template")
		}, "spec must set exactly one of definitionRef or template"},
		{"challenge without owner", validChallenge, func(o *unstructured.Unstructured) { delete(spec(o), "owner") },
			"spec.owner: Required value"},
		{"challenge name not a DNS-1035 label", validChallenge, func(o *unstructured.Unstructured) { o.SetName("1st-try") },
			"metadata.name must be a DNS-1035 label"},
		{"challenge name with --, the separator of its pods' children's names", validChallenge, func(o *unstructured.Unstructured) { o.SetName("a--web") },
			"metadata.name must not contain '--': the children of an instance of several pods are named <challenge>--<pod>"},
		{"challenge timeout not a duration", validChallenge, func(o *unstructured.Unstructured) { spec(o)["timeout"] = "forever" },
			"spec.timeout in body should match"},
		{"challenge expiresAt not a time", validChallenge, func(o *unstructured.Unstructured) { spec(o)["expiresAt"] = "tomorrow" },
			"spec.expiresAt in body must be of type date-time"},
		{"inline template timeout above maxLifetime", validChallenge, func(o *unstructured.Unstructured) { template(o)["timeout"] = "3h" },
			"timeout must not exceed maxLifetime"},
		{"challenge spec.flag longer than 1024 characters", validPlatformChallenge, func(o *unstructured.Unstructured) {
			spec(o)["flag"] = "rctf{" + strings.Repeat("x", 1020) + "}"
		}, "spec.flag: Too long: may not be more than 1024"},
		{"inline template taking the platform's flag without spec.flag", validPlatformChallenge, func(o *unstructured.Unstructured) { delete(spec(o), "flag") },
			"with an inline template, spec.flag is set exactly when the template's flag says platform: true"},
		{"spec.flag with an inline template's dynamic flag", validChallenge, func(o *unstructured.Unstructured) { spec(o)["flag"] = "rctf{x}" },
			"with an inline template, spec.flag is set exactly when the template's flag says platform: true"},
	}
	// The rules of a template of several pods, on a ChallengeDefinition and on an inline template.
	podsCases := []struct {
		name   string
		mutate func(obj *unstructured.Unstructured)
		want   string
	}{
		{"both containers and pods", func(o *unstructured.Unstructured) { template(o)["containers"] = validTemplate()["containers"] },
			"set exactly one of containers (an instance of one Pod) and pods (an instance of several)"},
		{"neither containers nor pods", func(o *unstructured.Unstructured) { delete(template(o), "pods"); delete(template(o), "flag") },
			"set exactly one of containers (an instance of one Pod) and pods (an instance of several)"},
		{"expose on the template with pods", func(o *unstructured.Unstructured) {
			template(o)["expose"] = []any{map[string]any{"port": int64(8080), "type": "HTTP"}}
		}, "with pods, set expose, egress, dns and security on each pod, not on the template"},
		{"dns on the template with pods", func(o *unstructured.Unstructured) { template(o)["dns"] = true },
			"with pods, set expose, egress, dns and security on each pod, not on the template"},
		{"pod name with --", func(o *unstructured.Unstructured) {
			pod(o, 2)["name"] = "admin--bot"
			internal(o, 0)["from"] = []any{"admin--bot"}
		}, "a pod's name must not contain '--': it separates the parts of its children's names"},
		{"internal.from naming its own pod", func(o *unstructured.Unstructured) { internal(o, 1)["from"] = []any{"web", "db"} },
			"each internal.from must name another pod of the template"},
		{"internal.from naming an unknown pod", func(o *unstructured.Unstructured) { internal(o, 1)["from"] = []any{"admin"} },
			"each internal.from must name another pod of the template"},
		{"two HTTP exposures in two pods", func(o *unstructured.Unstructured) {
			pod(o, 1)["expose"] = []any{map[string]any{"port": int64(5432), "type": "HTTP"}}
		}, "at most one expose entry of type HTTP in all pods (an instance has one host)"},
		{"flag that no container receives", func(o *unstructured.Unstructured) { delete(podContainer(o, 2), "flag") },
			"with pods, set flag: true on each container that receives the flag"},
		{"flag: true without a flag", func(o *unstructured.Unstructured) { delete(template(o), "flag") },
			"a container asks for the flag (flag: true) but the template has no flag"},
		{"internal.port not a containerPort", func(o *unstructured.Unstructured) { internal(o, 1)["port"] = int64(3306) },
			"every internal.port must be a containerPort of one of the pod's containers"},
	}
	for _, pc := range podsCases {
		for _, base := range []func(string) *unstructured.Unstructured{validPodsDefinition, validPodsChallenge} {
			kind := base("x").GetKind()
			cases = append(cases, invalidCase{"pods " + kind + " " + pc.name, base, pc.mutate, pc.want})
		}
	}
	// The unbroken objects are accepted: each refusal below is due to the one thing broken.
	for _, base := range []*unstructured.Unstructured{validDefinition("base"), validChallenge("base"), validPodsDefinition("base"), validPodsChallenge("base"), validPlatformChallenge("base")} {
		base.SetNamespace(ns)
		if err := createDryRun(ctx, c, base); err != nil {
			t.Fatalf("valid %s refused: %v", base.GetKind(), err)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.base("broken")
			obj.SetNamespace(ns)
			tc.mutate(obj)
			err := createDryRun(ctx, c, obj)
			if err == nil {
				t.Fatalf("%s accepted, want refused with %q", obj.GetKind(), tc.want)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused with %v\nwant an Invalid error containing %q", err, tc.want)
			}
		})
	}
}

// TestChallengeOwnerImmutable: an update that changes spec.owner is refused.
func TestChallengeOwnerImmutable(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "immutable", podSecurityRestricted)
	chal := validChallenge("owned")
	chal.SetNamespace(ns)
	created, err := c.dyn.Resource(chalGVR).Namespace(ns).Create(ctx, chal, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	// A merge patch, not an update: Metacontroller adds its finalizer meanwhile, and an update
	// from the stale copy would be refused for that (Conflict) before the rule is checked.
	_, err = c.dyn.Resource(chalGVR).Namespace(ns).Patch(ctx, created.GetName(), types.MergePatchType, []byte(`{"spec":{"owner":"team-2"}}`), metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.owner is immutable") {
		t.Errorf("owner change: got %v, want Invalid with %q", err, "spec.owner is immutable")
	}
}

func createDryRun(ctx context.Context, c *cluster, obj *unstructured.Unstructured) error {
	client, err := c.resourceFor(obj)
	if err != nil {
		return err
	}
	_, err = client.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}
