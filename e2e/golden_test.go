//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	k8sjson "k8s.io/apimachinery/pkg/util/json"
)

// goldenCase is one testdata/<case>/ directory with a request and its recorded response.
type goldenCase struct {
	name     string
	request  []byte
	response []byte
}

func (g goldenCase) customize() bool { return strings.HasPrefix(g.name, "customize-") }

// goldenCases reads every testdata case that has both request.json and response.json.
func goldenCases(t *testing.T, root string) []goldenCase {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(root, "testdata", "*", "request.json"))
	if err != nil {
		t.Fatalf("list golden cases: %v", err)
	}
	var cases []goldenCase
	for _, reqPath := range dirs {
		dir := filepath.Dir(reqPath)
		request, err := os.ReadFile(reqPath)
		if err != nil {
			t.Fatal(err)
		}
		response, err := os.ReadFile(filepath.Join(dir, "response.json"))
		if os.IsNotExist(err) {
			t.Logf("golden case %s has no response.json yet: skipped", filepath.Base(dir))
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, goldenCase{name: filepath.Base(dir), request: request, response: response})
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

// TestGoldenResponsesFromBinary: the built binary, served over HTTP with testdata/dev.flags,
// answers every golden request with its response.json (the golden test checks the sync package;
// this checks the server and flags in front of it).
func TestGoldenResponsesFromBinary(t *testing.T) {
	root := repoRoot(t)
	hook := startHook(t, root, devFlags(t, root)...)
	ctx := testContext(t)
	for _, gc := range goldenCases(t, root) {
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

// TestGoldenChildrenAreRealAndStable replays every golden sync case against the API server:
//   - the hook's children are created as Metacontroller would create them, in a namespace that
//     enforces Pod Security "restricted" ("baseline" when the template opts out, see needsBaseline), and
//     the API server accepts them; the controller-manager's Pods for each Deployment are admitted;
//   - the children are read back and fed to the hook as observed children; Metacontroller's
//     three-way merge of last-applied, newly desired and live changes nothing, no child would be
//     created or deleted;
//   - the status survives a round trip through the status subresource unchanged, and the hook
//     answers the same status and children again (a fixed point: no status write loop).
//
// The golden request is rewritten to the test namespace and to the uid of a real Challenge object
// that owns the children; everything else the hook sees is the golden request.
func TestGoldenChildrenAreRealAndStable(t *testing.T) {
	c := newCluster(t)
	hook := startHook(t, c.root, devFlags(t, c.root)...)
	for _, gc := range goldenCases(t, c.root) {
		if gc.customize() {
			continue
		}
		t.Run(gc.name, func(t *testing.T) {
			t.Parallel()
			replayGolden(t, c, hook, gc)
		})
	}
}

// goldenReplay is a golden request moved into a fresh namespace, with a real Challenge owning
// the children, and the hook's first answer to it.
type goldenReplay struct {
	driver  *driver
	ns      string
	parent  *unstructured.Unstructured
	request map[string]any
	// desired are the children of the first answer, as Metacontroller would create them.
	desired map[string]*unstructured.Unstructured
	first   hookResponse
}

// prepareGolden moves a golden case into a fresh namespace enforcing the Pod Security level
// (empty: restricted, or baseline when the template opts out, see needsBaseline) and syncs it once.
func prepareGolden(ctx context.Context, t *testing.T, c *cluster, hook *hookServer, gc goldenCase, level string) goldenReplay {
	t.Helper()
	d := newDriver(t, c, hook)
	request := decodeJSONObject(t, gc.request, "request.json")
	goldenParent := &unstructured.Unstructured{Object: request["parent"].(map[string]any)}
	if level == "" {
		level = podSecurityRestricted
		if needsBaseline(request) {
			level = podSecurityBaseline
		}
	}
	ns := c.createNamespace(ctx, t, "g-"+gc.name, level)
	for _, rc := range runtimeClasses(request) {
		c.ensureRuntimeClass(ctx, t, rc)
	}
	parent := createOwnerChallenge(ctx, t, c, ns, goldenParent)
	rewrite := identityRewrite{
		fromNS: goldenParent.GetNamespace(), toNS: ns,
		fromUID: string(goldenParent.GetUID()), toUID: string(parent.GetUID()),
	}
	request = rewrite.request(d, request)
	first, err := d.callHook(ctx, request)
	if err != nil {
		t.Fatalf("sync 1: %v", err)
	}
	return goldenReplay{driver: d, ns: ns, parent: parent, request: request, first: first, desired: d.desiredChildren(parent, first.Children)}
}

func replayGolden(t *testing.T, c *cluster, hook *hookServer, gc goldenCase) {
	ctx := testContext(t)
	// Sync 1: the golden request; create what it answers, as Metacontroller creates children.
	g := prepareGolden(ctx, t, c, hook, gc, "")
	d, parent, request, desired := g.driver, g.parent, g.request, g.desired
	ns := g.ns
	res := syncResult{updated: map[string][]string{}}
	if err := d.manageChildren(ctx, parent, map[string]*unstructured.Unstructured{}, desired, &res); err != nil {
		t.Fatalf("the API server refused the hook's children: %v", err)
	}
	t.Logf("created %d children: %v", len(res.created), res.created)
	for _, child := range desired {
		if child.GetKind() != "Deployment" {
			continue
		}
		if refusal := podAdmission(ctx, t, c, child); refusal != "" {
			t.Errorf("the Pod of Deployment %s was refused: %s", child.GetName(), refusal)
		}
	}

	// Sync 2: the same request with the live children (last-applied annotation included).
	live, err := d.observeChildren(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != len(desired) {
		t.Fatalf("read back %d children, created %d", len(live), len(desired))
	}
	request["children"] = d.childrenMap(live)
	second, err := d.callHook(ctx, request)
	if err != nil {
		t.Fatalf("sync 2 (children observed): %v", err)
	}
	for _, problem := range churn(live, d.desiredChildren(parent, second.Children)) {
		t.Errorf("churn: %s", problem)
	}

	// The status through the status subresource, then sync 3 with it: nothing may change.
	written := copyMap(second.Status)
	if _, err := d.updateStatus(ctx, parent, second.Status); err != nil {
		t.Fatalf("write status: %v", err)
	}
	written["observedGeneration"] = parent.GetGeneration()
	stored, err := c.dyn.Resource(chalGVR).Namespace(ns).Get(ctx, parent.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	storedStatus, _ := stored.Object["status"].(map[string]any)
	if diff := jsonDiff(written, storedStatus); len(diff) > 0 {
		t.Errorf("the API server changed the status on write (Metacontroller would rewrite it every sync), written -> stored:\n%s", indentLines(diff))
	}
	request["parent"].(map[string]any)["status"] = storedStatus
	third, err := d.callHook(ctx, request)
	if err != nil {
		t.Fatalf("sync 3 (status written): %v", err)
	}
	if third.Status == nil {
		third.Status = map[string]any{}
	}
	third.Status["observedGeneration"] = parent.GetGeneration()
	if diff := jsonDiff(storedStatus, third.Status); len(diff) > 0 {
		t.Errorf("status is not a fixed point (stored -> next answer):\n%s", indentLines(diff))
	}
	for _, problem := range churn(live, d.desiredChildren(parent, third.Children)) {
		t.Errorf("churn after the status write: %s", problem)
	}
}

// churn lists what Metacontroller would write if desired were the hook's answer and live the
// observed children: creations, deletions, and in-place updates with the fields they change.
func churn(live, desired map[string]*unstructured.Unstructured) []string {
	var problems []string
	for id, obj := range desired {
		current, ok := live[id]
		if !ok {
			problems = append(problems, "would create "+id)
			continue
		}
		merged, err := applyUpdate(current, obj)
		if err != nil {
			problems = append(problems, fmt.Sprintf("merge %s: %v", id, err))
			continue
		}
		if !reflect.DeepEqual(merged.Object, current.Object) {
			problems = append(problems, fmt.Sprintf("would update %s (live -> merged):\n%s", id, indentLines(jsonDiff(current.Object, merged.Object))))
		}
	}
	for id, obj := range live {
		if _, ok := desired[id]; !ok && obj.GetDeletionTimestamp() == nil {
			problems = append(problems, "would delete "+id)
		}
	}
	sort.Strings(problems)
	return problems
}

// templateSpecs returns the instance templates a request carries: the parent's inline template
// and the specs of related ChallengeDefinitions.
func templateSpecs(request map[string]any) []map[string]any {
	var specs []map[string]any
	if tpl, ok, _ := unstructured.NestedMap(request, "parent", "spec", "template"); ok {
		specs = append(specs, tpl)
	}
	related, _ := request["related"].(map[string]any)
	for key, group := range related {
		if !strings.HasPrefix(key, "ChallengeDefinition.") {
			continue
		}
		objs, _ := group.(map[string]any)
		for _, obj := range objs {
			if spec, ok, _ := unstructured.NestedMap(obj.(map[string]any), "spec"); ok {
				specs = append(specs, spec)
			}
		}
	}
	return specs
}

// needsBaseline: the template opts out of runAsNonRoot or allows privilege escalation (setuid),
// which Pod Security "restricted" forbids and "baseline" admits.
func needsBaseline(request map[string]any) bool {
	for _, spec := range templateSpecs(request) {
		for _, optOut := range []string{"runAsRoot", "allowPrivilegeEscalation"} {
			if set, _, _ := unstructured.NestedBool(spec, "security", optOut); set {
				return true
			}
		}
	}
	return false
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

// createOwnerChallenge creates the Challenge that owns a replayed case's children: the golden
// parent itself when the API server accepts it, else (cases that feed the hook a spec the CRD
// refuses, to test its defences) a minimal valid Challenge with the same name.
func createOwnerChallenge(ctx context.Context, t *testing.T, c *cluster, ns string, golden *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	client := c.dyn.Resource(chalGVR).Namespace(ns)
	obj := cleanForCreate(golden, ns)
	created, err := client.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsInvalid(err) {
		t.Logf("golden parent refused by the API server, owning the children with a stand-in: %v", err)
		owner, _, _ := unstructured.NestedString(golden.Object, "spec", "owner")
		if owner == "" {
			owner = "e2e"
		}
		obj.Object["spec"] = map[string]any{"owner": owner, "definitionRef": map[string]any{"name": "stand-in"}}
		created, err = client.Create(ctx, obj, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("create Challenge %s/%s: %v", ns, golden.GetName(), err)
	}
	return created
}

// cleanForCreate keeps what a user would write of an object (name, labels, annotations, spec and
// the like), in namespace ns.
func cleanForCreate(obj *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	for key, value := range obj.Object {
		if key != "metadata" && key != "status" {
			out.Object[key] = value
		}
	}
	out.SetName(obj.GetName())
	out.SetNamespace(ns)
	out.SetLabels(obj.GetLabels())
	out.SetAnnotations(obj.GetAnnotations())
	return out.DeepCopy()
}

// podAdmission waits until the controller-manager has created a Pod for the Deployment (and
// returns "") or its ReplicaSet reports that creating the Pod was refused (and returns why, e.g.
// a Pod Security violation).
func podAdmission(ctx context.Context, t *testing.T, c *cluster, deployment *unstructured.Unstructured) string {
	t.Helper()
	matchLabels, _, _ := unstructured.NestedStringMap(deployment.Object, "spec", "selector", "matchLabels")
	selector := labels.Set(matchLabels).String()
	ns := deployment.GetNamespace()
	var refusal string
	waitFor(ctx, t, 60*time.Second, "a Pod of Deployment "+deployment.GetName(), func() (bool, error) {
		sets, err := c.dyn.Resource(rsGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for _, rs := range sets.Items {
			conditions, _, _ := unstructured.NestedSlice(rs.Object, "status", "conditions")
			for _, raw := range conditions {
				cond, _ := raw.(map[string]any)
				if cond["type"] == "ReplicaFailure" && cond["status"] == "True" {
					refusal = fmt.Sprintf("%v: %v", cond["reason"], cond["message"])
					return true, nil
				}
			}
		}
		pods, err := c.dyn.Resource(podGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		return len(pods.Items) > 0, nil
	})
	return refusal
}

// TestPodSecurityCheckCatchesOptOuts proves that the Pod admission check can fail: each golden
// case that opts into runAsRoot or allowPrivilegeEscalation, replayed in a namespace enforcing
// "restricted" instead of "baseline", has its Pod refused by Pod Security admission.
func TestPodSecurityCheckCatchesOptOuts(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	hook := startHook(t, c.root, devFlags(t, c.root)...)
	checked := 0
	for _, gc := range goldenCases(t, c.root) {
		if gc.customize() || !needsBaseline(decodeJSONObject(t, gc.request, gc.name)) {
			continue
		}
		g := prepareGolden(ctx, t, c, hook, gc, podSecurityRestricted)
		res := syncResult{updated: map[string][]string{}}
		err := g.driver.manageChildren(ctx, g.parent, map[string]*unstructured.Unstructured{}, g.desired, &res)
		if hasKind(g.desired, "Pod") {
			// A Pod child is refused when it is created.
			if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
				t.Errorf("%s: an opted-out Pod in a restricted namespace: got %v, want a PodSecurity violation", gc.name, err)
			}
			t.Logf("%s: %v", gc.name, err)
			checked++
			continue
		}
		if err != nil {
			t.Fatalf("%s: create children: %v", gc.name, err)
		}
		for _, child := range g.desired {
			if child.GetKind() != "Deployment" {
				continue
			}
			refusal := podAdmission(ctx, t, c, child)
			if !strings.Contains(refusal, "violates PodSecurity") {
				t.Errorf("%s: an opted-out Pod in a restricted namespace: got refusal %q, want a PodSecurity violation", gc.name, refusal)
			}
			t.Logf("%s: %s", gc.name, refusal)
			checked++
		}
	}
	if checked < 2 {
		t.Fatalf("%d golden cases with runAsRoot or allowPrivilegeEscalation and a workload, want at least 2 (one of each)", checked)
	}
}

func hasKind(children map[string]*unstructured.Unstructured, kind string) bool {
	for _, child := range children {
		if child.GetKind() == kind {
			return true
		}
	}
	return false
}

// identityRewrite moves a golden request into the test's namespace and onto a real parent's uid.
type identityRewrite struct {
	fromNS, toNS, fromUID, toUID string
}

func (r identityRewrite) request(d *driver, request map[string]any) map[string]any {
	parent := request["parent"].(map[string]any)
	r.object(parent)
	(&unstructured.Unstructured{Object: parent}).SetUID(types.UID(r.toUID))
	spec, _ := parent["spec"].(map[string]any)
	if ref, ok := spec["definitionRef"].(map[string]any); ok && ref["namespace"] == r.fromNS {
		ref["namespace"] = r.toNS
	}
	for _, field := range []string{"children", "related"} {
		groups, _ := request[field].(map[string]any)
		for typ, group := range groups {
			objs, _ := group.(map[string]any)
			rekeyed := make(map[string]any, len(objs))
			for _, raw := range objs {
				obj := raw.(map[string]any)
				r.object(obj)
				rekeyed[d.cc.objectKey(&unstructured.Unstructured{Object: obj})] = obj
			}
			groups[typ] = rekeyed
		}
	}
	return request
}

// object rewrites an object's namespace, controller-uid label and owner references, and the same
// inside its last-applied annotation.
func (r identityRewrite) object(obj map[string]any) {
	u := &unstructured.Unstructured{Object: obj}
	if u.GetNamespace() == r.fromNS {
		u.SetNamespace(r.toNS)
	}
	if objLabels := u.GetLabels(); objLabels[controllerUIDLabel] == r.fromUID && r.fromUID != "" {
		objLabels[controllerUIDLabel] = r.toUID
		u.SetLabels(objLabels)
	}
	refs := u.GetOwnerReferences()
	for i := range refs {
		if string(refs[i].UID) == r.fromUID {
			refs[i].UID = types.UID(r.toUID)
		}
	}
	if len(refs) > 0 {
		u.SetOwnerReferences(refs)
	}
	annotations := u.GetAnnotations()
	if applied := annotations[lastAppliedAnnotation]; applied != "" {
		var inner map[string]any
		if err := k8sjson.Unmarshal([]byte(applied), &inner); err == nil {
			r.object(inner)
			if data, err := json.Marshal(inner); err == nil {
				annotations[lastAppliedAnnotation] = string(data)
				u.SetAnnotations(annotations)
			}
		}
	}
}

// TestChurnCheckCatchesMissingProtocol proves that the no-churn check can fail, on the very
// mistake Metacontroller v4.17.2 was seen to loop on: a NetworkPolicy ingress port without its
// explicit `protocol: TCP`. The API server defaults the protocol; the ingress list has no merge
// key, so the three-way merge replaces it with the desired one, which lacks the protocol, and the
// child differs from live on every sync. The same NetworkPolicy with its protocol is stable.
func TestChurnCheckCatchesMissingProtocol(t *testing.T) {
	c := newCluster(t)
	ctx := testContext(t)
	hook := startHook(t, c.root, devFlags(t, c.root)...)
	var policy *unstructured.Unstructured
	var g goldenReplay
	for _, gc := range goldenCases(t, c.root) {
		if gc.customize() || !strings.Contains(string(gc.response), `"NetworkPolicy"`) {
			continue
		}
		g = prepareGolden(ctx, t, c, hook, gc, "")
		for _, child := range g.desired {
			if child.GetKind() == "NetworkPolicy" && len(ingressPorts(child)) > 0 {
				policy = child
				t.Logf("using the NetworkPolicy of golden case %s", gc.name)
			}
		}
		if policy != nil {
			break
		}
	}
	if policy == nil {
		t.Fatal("no golden case answers a NetworkPolicy with ingress ports")
	}

	broken := policy.DeepCopy()
	broken.SetName(policy.GetName() + "-no-protocol")
	stripped := 0
	for _, port := range ingressPorts(broken) {
		if _, ok := port["protocol"]; ok {
			delete(port, "protocol")
			stripped++
		}
	}
	if stripped == 0 {
		t.Fatalf("the hook's NetworkPolicy %s has no explicit ingress protocol to strip: %v", policy.GetName(), ingressPorts(policy))
	}

	for _, tc := range []struct {
		desired   *unstructured.Unstructured
		wantChurn bool
	}{{policy, false}, {broken, true}} {
		desired := map[string]*unstructured.Unstructured{childID(tc.desired): tc.desired}
		res := syncResult{updated: map[string][]string{}}
		if err := g.driver.manageChildren(ctx, g.parent, map[string]*unstructured.Unstructured{}, desired, &res); err != nil {
			t.Fatalf("create %s: %v", tc.desired.GetName(), err)
		}
		client, err := c.resourceFor(tc.desired)
		if err != nil {
			t.Fatal(err)
		}
		live, err := client.Get(ctx, tc.desired.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		live.SetGroupVersionKind(tc.desired.GroupVersionKind())
		problems := churn(map[string]*unstructured.Unstructured{childID(live): live}, desired)
		switch {
		case tc.wantChurn && (len(problems) == 0 || !strings.Contains(strings.Join(problems, "\n"), "protocol")):
			t.Errorf("%s without ingress protocol: want an update that restores the protocol, got %v", tc.desired.GetName(), problems)
		case !tc.wantChurn && len(problems) > 0:
			t.Errorf("%s as the hook returns it churns: %v", tc.desired.GetName(), problems)
		default:
			t.Logf("%s: %v", tc.desired.GetName(), problems)
		}
	}
}

// ingressPorts are the port entries of a NetworkPolicy's ingress rules (the objects themselves,
// so that callers may edit them).
func ingressPorts(policy *unstructured.Unstructured) []map[string]any {
	var out []map[string]any
	// NestedSlice would return a copy.
	raw, _, _ := unstructured.NestedFieldNoCopy(policy.Object, "spec", "ingress")
	rules, _ := raw.([]any)
	for _, rule := range rules {
		ports, _ := rule.(map[string]any)["ports"].([]any)
		for _, port := range ports {
			if p, ok := port.(map[string]any); ok {
				out = append(out, p)
			}
		}
	}
	return out
}
