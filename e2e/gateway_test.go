//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// gatewayAPIModule is the Go module whose standard-channel CRDs the tests install: the version is
// the one go.mod requires, the one the hook's route types are built from.
const gatewayAPIModule = "sigs.k8s.io/gateway-api"

// gatewayCRDs are the standard-channel CRDs a cluster routing challenges through a Gateway needs:
// the Gateway's own types and the two route kinds the hook returns.
var gatewayCRDs = []string{"gatewayclasses", "gateways", "httproutes", "tlsroutes"}

// routeKinds are the child kinds the hook returns for a Gateway.
var routeKinds = map[string]bool{"HTTPRoute": true, "TLSRoute": true}

// lastAppliedAnnotation is where Metacontroller keeps the child it last applied, for its
// three-way merge.
const lastAppliedAnnotation = "metacontroller.k8s.io/last-applied-configuration"

// gatewayAPIDir is the gateway-api module's directory in the module cache, downloaded (from the
// Go module proxy) if it is not there yet, at the version go.mod requires.
func gatewayAPIDir(t *testing.T, root string) string {
	t.Helper()
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "mod", "download", "-json", gatewayAPIModule)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if exitErr, ok := err.(*exec.ExitError); ok {
			stderr = string(exitErr.Stderr)
		}
		t.Fatalf("go mod download %s: %v\n%s%s", gatewayAPIModule, err, out, stderr)
	}
	var mod struct{ Version, Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s: no module directory in %s (err %v)", gatewayAPIModule, out, err)
	}
	t.Logf("Gateway API CRDs from %s@%s (%s)", gatewayAPIModule, mod.Version, mod.Dir)
	return mod.Dir
}

// installGatewayCRDs installs the standard-channel Gateway API CRDs and waits until they are
// Established. The ones it created are deleted when the test ends, so that the cluster is left
// as the other tests expect it: without the Gateway API.
func installGatewayCRDs(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	dir := filepath.Join(gatewayAPIDir(t, c.root), "config", "crd", "standard")
	crds := c.dyn.Resource(crdGVR)
	for _, resource := range gatewayCRDs {
		path := filepath.Join(dir, "gateway.networking.k8s.io_"+resource+".yaml")
		objs, err := readYAMLObjects(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) != 1 || objs[0].GetKind() != "CustomResourceDefinition" {
			t.Fatalf("%s: want one CustomResourceDefinition, got %d objects", path, len(objs))
		}
		crd := objs[0]
		name := crd.GetName()
		// A CRD an earlier test deleted may still be terminating (its routes being removed):
		// creating it again waits until it is gone.
		e2eutil.WaitFor(ctx, t, 60*time.Second, "CRD "+name+" not terminating", func() (bool, error) {
			existing, err := crds.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return err == nil && existing.GetDeletionTimestamp() == nil, err
		})
		_, err = crds.Create(ctx, crd, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			t.Logf("CRD %s already installed: kept", name)
		case err != nil:
			t.Fatalf("install CRD %s from %s: %v", name, path, err)
		default:
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := crds.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Errorf("delete CRD %s: %v", name, err)
				}
			})
		}
		var nameConflict error
		e2eutil.WaitFor(ctx, t, 30*time.Second, "CRD "+name+" Established", func() (bool, error) {
			live, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			established, err := crdEstablished(live)
			nameConflict = err
			return established || err != nil, nil
		})
		if nameConflict != nil {
			t.Fatal(nameConflict)
		}
	}
}

// gatewayCase is a golden case whose hook.flags configure a Gateway.
type gatewayCase struct {
	goldenCase
}

// gatewayCases are the golden cases with a hook.flags that names a Gateway.
func gatewayCases(t *testing.T, root string) []gatewayCase {
	t.Helper()
	var out []gatewayCase
	for _, gc := range goldenCases(t, root) {
		if slices.ContainsFunc(gc.flags, func(flag string) bool { return strings.HasPrefix(flag, "--gateway") }) {
			out = append(out, gatewayCase{goldenCase: gc})
		}
	}
	if len(out) == 0 {
		t.Fatal("no golden case has a hook.flags with --gateway")
	}
	return out
}

// routeChildren are the HTTPRoute and TLSRoute children of a hook answer.
func routeChildren(t *testing.T, answer map[string]any) []*unstructured.Unstructured {
	t.Helper()
	children, ok := answer["children"].([]any)
	if !ok {
		t.Fatalf("hook answer has no children list: %s", compactJSON(answer))
	}
	var out []*unstructured.Unstructured
	for _, raw := range children {
		child := &unstructured.Unstructured{Object: raw.(map[string]any)}
		if routeKinds[child.GetKind()] && child.GroupVersionKind().Group == "gateway.networking.k8s.io" {
			out = append(out, child)
		}
	}
	return out
}

// childKey is how Metacontroller keys an observed child in a sync request.
func childKey(obj *unstructured.Unstructured) (group, key string) {
	return obj.GetKind() + "." + obj.GetAPIVersion(), obj.GetNamespace() + "/" + obj.GetName()
}

// TestGatewayRoutesAdmitted: with the standard Gateway API CRDs (of the version go.mod requires)
// installed on the real API server, every route child the hook (serving with dev.flags and the
// case's hook.flags) returns for a Gateway golden case is created as Metacontroller creates it,
// with the case's route status written through the status subresource as a Gateway controller
// would. Fed back as the observed child, the stored route gets the very same answer (response.json),
// and Metacontroller's three-way merge of that answer onto the stored route changes nothing: the API
// server neither refuses nor defaults anything the hook sets, so the hook never fights it.
func TestGatewayRoutesAdmitted(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	installGatewayCRDs(ctx, t, c)
	// A fresh discovery: the REST mapper must know the route kinds now served.
	c = newCluster(t)
	hooks := map[string]*hookServer{}
	created := map[string]int{}
	for _, gc := range gatewayCases(t, c.root) {
		flags := append(devFlags(t, c.root), gc.flags...)
		id := strings.Join(flags, " ")
		if hooks[id] == nil {
			hooks[id] = startHook(t, c.root, flags...)
		}
		hook := hooks[id]
		t.Run(gc.name, func(t *testing.T) {
			request := decodeJSONObject(t, gc.request, gc.name+"/request.json")
			want := decodeJSONObject(t, gc.response, gc.name+"/response.json")
			answer := syncAnswer(ctx, t, hook, gc.request)
			if diff := jsonDiff(want, answer); len(diff) > 0 {
				t.Fatalf("hook with %v answered differently from response.json (want -> got):\n%s", gc.flags, indentLines(diff))
			}
			routes := routeChildren(t, answer)
			if len(routes) == 0 {
				t.Logf("no route child in the answer (%s): nothing to admit", compactJSON(want["status"].(map[string]any)["reason"]))
				return
			}
			parentUID, _, _ := unstructured.NestedString(request, "parent", "metadata", "uid")
			ns := c.createNamespace(ctx, t, "gw-"+gc.name, podSecurityRestricted)
			feedback := runtime.DeepCopyJSON(request)
			for _, desired := range routes {
				live := createLikeMetacontroller(ctx, t, c, ns, parentUID, desired)
				live = writeObservedStatus(ctx, t, c, request, desired, live)
				if diff := setFieldsDiffer(desired.Object, live.Object, ""); len(diff) > 0 {
					t.Errorf("%s %s: the API server changed fields the hook sets (hook -> stored):\n%s", desired.GetKind(), desired.GetName(), indentLines(diff))
				}
				created[desired.GetKind()]++
				// The stored route as the observed child, in the request's namespace: the
				// namespace is the test's choice, everything else is as the API server keeps it.
				observed := live.DeepCopy()
				observed.SetNamespace(desired.GetNamespace())
				group, key := childKey(desired)
				if err := unstructured.SetNestedField(feedback, observed.Object, "children", group, key); err != nil {
					t.Fatal(err)
				}
			}
			again := syncAnswer(ctx, t, hook, mustJSON(t, feedback))
			if diff := jsonDiff(want, again); len(diff) > 0 {
				t.Fatalf("with the stored routes observed, the answer differs from response.json (want -> got):\n%s", indentLines(diff))
			}
			for _, desired := range routeChildren(t, again) {
				client, err := c.resourceFor(asMetacontrollerChild(desired, ns, parentUID))
				if err != nil {
					t.Fatal(err)
				}
				live, err := client.Get(ctx, desired.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("get %s %s/%s: %v", desired.GetKind(), ns, desired.GetName(), err)
				}
				if diff := metacontrollerUpdate(t, live, asMetacontrollerChild(desired, ns, parentUID)); len(diff) > 0 {
					t.Errorf("Metacontroller would update %s %s on every sync (stored -> merged):\n%s", desired.GetKind(), desired.GetName(), indentLines(diff))
				}
			}
		})
	}
	for kind := range routeKinds {
		if created[kind] == 0 {
			t.Errorf("no Gateway golden case returns a %s: its admission is untested", kind)
		}
	}
	t.Logf("routes created and read back: %v", created)
}

// syncAnswer POSTs a request to /sync and decodes the answer as Metacontroller does.
func syncAnswer(ctx context.Context, t *testing.T, hook *hookServer, request []byte) map[string]any {
	t.Helper()
	body, err := hook.post(ctx, "/sync", request)
	if err != nil {
		t.Fatal(err)
	}
	return decodeJSONObject(t, body, "hook answer")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return data
}

// asMetacontrollerChild is a child of the hook's answer as Metacontroller applies it: in the
// parent's namespace (the test's), with the parent's controller-uid selector label.
func asMetacontrollerChild(desired *unstructured.Unstructured, ns, parentUID string) *unstructured.Unstructured {
	child := desired.DeepCopy()
	child.SetNamespace(ns)
	labels := child.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[controllerUIDLabel] = parentUID
	child.SetLabels(labels)
	return child
}

// createLikeMetacontroller creates a child as Metacontroller v4.17 does on its first apply: the
// desired object with the last-applied annotation recording it, created for real. (Metacontroller
// also adds an owner reference to the parent; there is no parent here, and an owner reference to a
// missing one would have the garbage collector delete the route under the test.)
func createLikeMetacontroller(ctx context.Context, t *testing.T, c *cluster, ns, parentUID string, desired *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	child := asMetacontrollerChild(desired, ns, parentUID)
	setLastApplied(t, child, child.Object)
	client, err := c.resourceFor(child)
	if err != nil {
		t.Fatal(err)
	}
	live, err := client.Create(ctx, child, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refused %s %s/%s: %v\n%s", child.GetKind(), ns, child.GetName(), err, compactJSON(desired.Object))
	}
	return live
}

// writeObservedStatus plays the Gateway controller: it writes, through the status subresource,
// the status the golden request's observed route has (if any), and returns the route as stored.
func writeObservedStatus(ctx context.Context, t *testing.T, c *cluster, request map[string]any, desired, live *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	group, key := childKey(desired)
	status, found, err := unstructured.NestedMap(request, "children", group, key, "status")
	if err != nil {
		t.Fatalf("observed %s %s: %v", group, key, err)
	}
	client, err := c.resourceFor(live)
	if err != nil {
		t.Fatal(err)
	}
	if found {
		live = live.DeepCopy()
		live.Object["status"] = status
		if live, err = client.UpdateStatus(ctx, live, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("the API server refused the Gateway's status for %s %s: %v", desired.GetKind(), desired.GetName(), err)
		}
	}
	got, err := client.Get(ctx, live.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read back %s %s: %v", desired.GetKind(), live.GetName(), err)
	}
	if found && !reflect.DeepEqual(got.Object["status"], status) {
		t.Errorf("%s %s: status stored differently (written -> stored):\n%s", desired.GetKind(), desired.GetName(), indentLines(jsonDiff(status, got.Object["status"])))
	}
	return got
}

// setFieldsDiffer lists every field the hook sets (every leaf of desired but metadata.namespace,
// which is the test's) whose stored value differs; lists must have the same length.
func setFieldsDiffer(desired, live any, path string) []string {
	switch d := desired.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %s -> %s", path, compactJSON(desired), compactJSON(live))}
		}
		var out []string
		for key, value := range d {
			if path == ".metadata" && key == "namespace" {
				continue
			}
			stored, present := l[key]
			if !present {
				out = append(out, fmt.Sprintf("%s.%s: %s -> (absent)", path, key, compactJSON(value)))
				continue
			}
			out = append(out, setFieldsDiffer(value, stored, path+"."+key)...)
		}
		return out
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(d) {
			return []string{fmt.Sprintf("%s: %s -> %s", path, compactJSON(desired), compactJSON(live))}
		}
		var out []string
		for i := range d {
			out = append(out, setFieldsDiffer(d[i], l[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if !reflect.DeepEqual(desired, live) {
			return []string{fmt.Sprintf("%s: %s -> %s", path, compactJSON(desired), compactJSON(live))}
		}
		return nil
	}
}

// metacontrollerUpdate is what Metacontroller v4.17's InPlace apply would change on the stored
// child for the hook's desired child: mcsim.Updated, the simulator's three-way merge. No
// difference: no update.
func metacontrollerUpdate(t *testing.T, live, desired *unstructured.Unstructured) []string {
	t.Helper()
	updated, _, err := mcsim.Updated(live.Object, desired.Object)
	if err != nil {
		t.Fatalf("merge %s %s: %v", live.GetKind(), live.GetName(), err)
	}
	return jsonDiff(live.Object, updated)
}

// setLastApplied records applied in obj's last-applied annotation, as Metacontroller does.
func setLastApplied(t *testing.T, obj *unstructured.Unstructured, applied map[string]any) {
	t.Helper()
	data, err := json.Marshal(applied)
	if err != nil {
		t.Fatalf("encode last-applied %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[lastAppliedAnnotation] = string(data)
	obj.SetAnnotations(annotations)
}

// gatewayGVRs are the route resources, as the kustomize component declares them.
var (
	httpRouteGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
	tlsRouteGVR  = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "tlsroutes"}
)

// gatewayComponentChildren are the childResources the kustomize component
// manifests/components/gateway-api appends to the CompositeController (its JSON patch's
// "add /spec/childResources/-" operations, the only kind it has).
func gatewayComponentChildren(t *testing.T, root string) []any {
	t.Helper()
	path := filepath.Join(root, "manifests", "components", "gateway-api", "kustomization.yaml")
	objs, err := readYAMLObjects(path)
	if err != nil || len(objs) != 1 {
		t.Fatalf("%s: want one Component (err %v)", path, err)
	}
	patches, _, _ := unstructured.NestedSlice(objs[0].Object, "patches")
	var children []any
	for _, raw := range patches {
		patch, _ := raw.(map[string]any)
		var ops []map[string]any
		if err := yaml.Unmarshal([]byte(fmt.Sprint(patch["patch"])), &ops); err != nil {
			t.Fatalf("%s: patch: %v", path, err)
		}
		for _, op := range ops {
			if op["op"] != "add" || op["path"] != "/spec/childResources/-" {
				t.Fatalf("%s: operation %v: the test applies only additions to /spec/childResources", path, op)
			}
			children = append(children, runtime.DeepCopyJSONValue(op["value"]))
		}
	}
	if len(children) == 0 {
		t.Fatalf("%s adds no child resources", path)
	}
	return children
}

// swapInGatewayController points the suite's CompositeController, with the component's route
// child types added, at a hook of its own serving with --gateway, until the test ends. The suite's
// controller and hook are what every other test uses, so the test must run while no other does:
// it is not parallel, and the swap back is checked by the suite's probe (a Challenge synced by the
// suite's hook) after the test's hook is stopped.
func swapInGatewayController(ctx context.Context, t *testing.T, c *cluster) *hookProcess {
	t.Helper()
	hook := newHookProcess(c.root, freeLoopbackAddr(t), "--flag-key-file=testdata/flag.key", "--public-host="+publicHost, "--gateway="+gatewayName)
	if err := hook.start(); err != nil {
		t.Fatal(err)
	}
	cc, err := testCompositeController(c.root, "http://"+hook.addr, int(shared.resync/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	children, _, _ := unstructured.NestedSlice(cc.Object, "spec", "childResources")
	if err := unstructured.SetNestedSlice(cc.Object, append(children, gatewayComponentChildren(t, c.root)...), "spec", "childResources"); err != nil {
		t.Fatal(err)
	}
	ccs := c.dyn.Resource(schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"})
	t.Cleanup(func() {
		hook.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("gateway challenge-hook log:\n%s", hook.logs.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e2eutil.CreateOrUpdate(ctx, ccs, shared.controller); err != nil {
			t.Errorf("restore the suite's CompositeController: %v", err)
			return
		}
		if err := shared.probe(ctx, c); err != nil {
			t.Errorf("after restoring the suite's CompositeController: %v", err)
		}
	})
	if err := e2eutil.CreateOrUpdate(ctx, ccs, cc); err != nil {
		t.Fatal(err)
	}
	return hook
}

// syncsLogged counts the /sync requests for the Challenge ns/name in a hook's JSON log.
func syncsLogged(hook *hookProcess, ns, name string) int {
	n := 0
	for _, line := range strings.Split(hook.logs.String(), "\n") {
		if strings.Contains(line, `"path":"/sync"`) && strings.Contains(line, `"parent":"`+ns+"/"+name+`"`) {
			n++
		}
	}
	return n
}

// gatewayName is the Gateway the test's hook attaches routes to (it need not exist: the test plays
// its controller).
const gatewayName = "gateway-system/ctf"

// routeOf waits for the one route of resource gvr that Metacontroller created for the Challenge.
func routeOf(ctx context.Context, t *testing.T, c *cluster, gvr schema.GroupVersionResource, chal *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	var route *unstructured.Unstructured
	e2eutil.WaitFor(ctx, t, 90*time.Second, gvr.Resource+" child of "+chal.GetName(), func() (bool, error) {
		list, err := c.dyn.Resource(gvr).Namespace(chal.GetNamespace()).List(ctx, metav1.ListOptions{
			LabelSelector: controllerUIDLabel + "=" + string(chal.GetUID()),
		})
		if err != nil || len(list.Items) != 1 {
			return false, err
		}
		route = &list.Items[0]
		return true, nil
	})
	return route
}

// acceptRoute plays the Gateway's controller: Accepted=True for the route's current generation.
func acceptRoute(ctx context.Context, t *testing.T, c *cluster, gvr schema.GroupVersionResource, route *unstructured.Unstructured) {
	t.Helper()
	gwNamespace, gwName, _ := strings.Cut(gatewayName, "/")
	now := time.Now().UTC().Format(time.RFC3339)
	route = route.DeepCopy()
	route.Object["status"] = map[string]any{"parents": []any{map[string]any{
		"parentRef":      map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": gwNamespace, "name": gwName},
		"controllerName": "e2e.challenge-hook.dev/gateway-controller",
		"conditions": []any{map[string]any{
			"type": "Accepted", "status": "True", "reason": "Accepted", "message": "accepted by the e2e test",
			"observedGeneration": route.GetGeneration(), "lastTransitionTime": now,
		}},
	}}}
	if _, err := c.dyn.Resource(gvr).Namespace(route.GetNamespace()).UpdateStatus(ctx, route, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("accept %s %s: %v", gvr.Resource, route.GetName(), err)
	}
}

// TestGatewayInstancesUnderMetacontroller: with the Gateway API CRDs installed, the kustomize
// component's route types declared and the hook serving with --gateway, the real Metacontroller
// runs an HTTP instance through an HTTPRoute (no Ingress) and a TLS instance through a TLSRoute:
// each waits in Creating, naming the Gateway, until the test (playing the Gateway's controller)
// accepts its route, then goes Running with the endpoint the route's host serves.
func TestGatewayInstancesUnderMetacontroller(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	installGatewayCRDs(ctx, t, c)
	hook := swapInGatewayController(ctx, t, c)
	ns := c.createNamespace(ctx, t, "gw-mc", podSecurityRestricted)

	// The swap is in effect once a Challenge gets an HTTPRoute: only the new controller makes one.
	probe := validChallenge("swap-probe")
	_, probeObj := startChallenge(ctx, t, c, ns, probe)
	routeOf(ctx, t, c, httpRouteGVR, probeObj)

	tlsChal := validChallenge("tls")
	template(tlsChal)["expose"] = []any{map[string]any{"port": int64(8080), "type": "TLS"}}
	instances := []struct {
		chal      *unstructured.Unstructured
		route     schema.GroupVersionResource
		urlFormat string
	}{
		{validChallenge("web"), httpRouteGVR, "http://%s/"},
		{tlsChal, tlsRouteGVR, "tls://%s:443"},
	}
	settled := map[string]string{} // route resource/name -> resourceVersion once Running
	syncs := map[string]int{}      // Challenge name -> /sync requests logged once Running
	for _, in := range instances {
		w, chal := startChallenge(ctx, t, c, ns, in.chal)
		route := routeOf(ctx, t, c, in.route, chal)
		waiting := w.next(t, 90*time.Second, "Creating, waiting for the Gateway", func(e statusEvent) bool {
			return e.phase == "Creating" && strings.Contains(e.message, "Gateway "+gatewayName)
		})
		t.Logf("%s before acceptance: %s", chal.GetName(), waiting)
		if phases := w.phases(); slices.Contains(phases, "Running") {
			t.Fatalf("%s ran before its route was accepted: %v", chal.GetName(), phases)
		}
		acceptRoute(ctx, t, c, in.route, route)
		running := w.phase(t, 90*time.Second, "Running")
		instanceID, _, _ := unstructured.NestedString(running.obj.Object, "status", "instanceId")
		host := instanceID + ".challenges.localhost"
		endpoints, _, _ := unstructured.NestedSlice(running.obj.Object, "status", "endpoints")
		if instanceID == "" || len(endpoints) != 1 || endpoints[0].(map[string]any)["url"] != fmt.Sprintf(in.urlFormat, host) {
			t.Errorf("%s Running with instanceId %q and endpoints %v, want one endpoint %s", chal.GetName(), instanceID, endpoints, fmt.Sprintf(in.urlFormat, host))
		}
		if hostnames, _, _ := unstructured.NestedStringSlice(route.Object, "spec", "hostnames"); !slices.Equal(hostnames, []string{host}) {
			t.Errorf("%s %s routes hostnames %v, want [%s]", in.route.Resource, route.GetName(), hostnames, host)
		}
		if ingresses := ofResource(childrenOf(ctx, t, c, ns, chal.GetUID()), "ingresses.networking.k8s.io"); len(ingresses) > 0 {
			t.Errorf("%s has an Ingress besides its route", chal.GetName())
		}
		t.Logf("%s: %s", chal.GetName(), running)
		live, err := c.dyn.Resource(in.route).Namespace(ns).Get(ctx, route.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		settled[in.route.Resource+"/"+route.GetName()] = live.GetResourceVersion()
		syncs[chal.GetName()] = syncsLogged(hook, ns, chal.GetName())
	}
	// Settled: over two resync periods Metacontroller syncs each instance again and writes nothing
	// to its accepted route (no field it and the API server disagree on).
	time.Sleep(2*shared.resync + time.Second)
	for name, before := range syncs {
		if after := syncsLogged(hook, ns, name); after < before+2 {
			t.Errorf("Challenge %s: %d syncs logged over two resync periods, want 2 or more: the settle check saw nothing", name, after-before)
		}
	}
	for id, rv := range settled {
		resource, name, _ := strings.Cut(id, "/")
		gvr := map[string]schema.GroupVersionResource{httpRouteGVR.Resource: httpRouteGVR, tlsRouteGVR.Resource: tlsRouteGVR}[resource]
		live, err := c.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if live.GetResourceVersion() != rv {
			t.Errorf("%s was written again after its instance settled: resourceVersion %s -> %s", id, rv, live.GetResourceVersion())
		}
	}
}
