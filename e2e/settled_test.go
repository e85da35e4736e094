//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// instanceLabel is the label the hook puts on every child (sync.LabelInstance).
const instanceLabel = "ctf.challenge-hook.dev/instance"

// runningInstance is a Challenge a subtest brought to Running, for the settled check after.
type runningInstance struct {
	name, ns string
	parent   *unstructured.Unstructured
}

// TestInstancesRunAndSettle runs, under Metacontroller, the README's example, the inline NodePort
// example and every golden case whose recorded answer is Running (one namespace each, enforcing
// Pod Security "restricted", or "baseline" for the runAsRoot opt-out): each reaches Running with
// its endpoints, and every child has the Challenge as its controller. Then, with all of them
// settled, nothing is written for three resync periods: no child and no Challenge changes its
// resourceVersion, and Metacontroller logs no child create, update or delete for them. Last, a
// hand-edited child is written back, which shows that the same check sees a write.
func TestInstancesRunAndSettle(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	var mu sync.Mutex
	var instances []runningInstance
	ran := func(t *testing.T, ns string, parent *unstructured.Unstructured) {
		mu.Lock()
		defer mu.Unlock()
		instances = append(instances, runningInstance{name: parent.GetName(), ns: ns, parent: parent})
		checkControllerOwner(t, parent, childrenOf(ctx, t, c, ns, parent.GetUID()))
	}

	// The namespaces belong to this test, not to the subtests: the instances must outlive them.
	readmeNS := c.createNamespace(ctx, t, "readme", podSecurityRestricted)
	inlineNS := c.createNamespace(ctx, t, "inline", podSecurityRestricted)
	type goldenRun struct {
		gc goldenCase
		g  goldenInstance
		ns string
	}
	var goldens []goldenRun
	for _, gc := range goldenCases(t, c.root) {
		if gc.customize() {
			continue
		}
		if phase, _, _ := unstructured.NestedString(decodeJSONObject(t, gc.response, gc.name), "status", "phase"); phase != "Running" {
			continue
		}
		if len(gc.flags) > 0 {
			// The suite's hook runs without them: e.g. a Gateway case would answer
			// GatewayAPINotEnabled here. The Gateway API e2e (its own hook, CRDs and Gateway) runs them.
			t.Logf("%s: skipped, it needs hook flags %v the suite's hook does not have", gc.name, gc.flags)
			continue
		}
		if tokens := tcpGatewayTokens(t, gc); tokens > 0 {
			// The suite's hook is not told about the TCP gateway (testdata/dev.flags is):
			// TestTCPExposureUnderMetacontroller runs a TCP instance with and without it.
			t.Logf("%s: skipped, its %d TCP endpoint(s) need the TCP gateway the suite's hook does not have", gc.name, tokens)
			continue
		}
		g := goldenInstanceOf(t, gc)
		if g.hasSpecExpiresAt {
			t.Logf("%s: skipped, its spec.expiresAt (platform extension) is in the past now", gc.name)
			continue
		}
		goldens = append(goldens, goldenRun{gc: gc, g: g, ns: c.createNamespace(ctx, t, "g-"+gc.name, g.podSecurity)})
	}
	if len(goldens) == 0 {
		t.Fatal("no golden case answers Running")
	}

	t.Run("start", func(t *testing.T) {
		t.Run("README example", func(t *testing.T) {
			t.Parallel()
			var def, chal *unstructured.Unstructured
			for _, s := range readmeSamples(t, c.root) {
				switch s.obj.GetKind() {
				case "ChallengeDefinition":
					def = cleanForCreate(s.obj, "")
				case "Challenge":
					chal = cleanForCreate(s.obj, "")
				}
			}
			if def == nil || chal == nil {
				t.Fatal("README.md has no ChallengeDefinition and Challenge example")
			}
			createObject(ctx, t, c, readmeNS, def)
			w, created := startChallenge(ctx, t, c, readmeNS, chal)
			running := w.phase(t, 60*time.Second, "Running")
			// kwok makes a Pod Ready 1 s after it is bound (hack/kwok-stages.yaml), as a kubelet
			// starting containers would: the syncs Metacontroller runs meanwhile show Creating.
			if phases := w.phases(); !slices.Equal(phases, []string{"None", "Creating", "Running"}) {
				t.Errorf("phases %v, want None, Creating, Running", phases)
			}
			checkHTTPEndpoint(ctx, t, c, running.obj)
			ran(t, readmeNS, created)
		})
		t.Run("inline NodePort example", func(t *testing.T) {
			t.Parallel()
			objs, err := readYAMLObjects(filepath.Join(c.root, "examples", "inline.yaml"))
			if err != nil || len(objs) != 1 {
				t.Fatalf("examples/inline.yaml: %d objects, err %v", len(objs), err)
			}
			w, created := startChallenge(ctx, t, c, inlineNS, cleanForCreate(objs[0], ""))
			running := w.phase(t, 60*time.Second, "Running")
			checkNodePortEndpoints(ctx, t, c, running.obj)
			ran(t, inlineNS, created)
		})
		for _, run := range goldens {
			t.Run(run.gc.name, func(t *testing.T) {
				t.Parallel()
				w, created := run.g.create(ctx, t, c, run.ns)
				provideLoadBalancers(ctx, t, c, run.ns, created.GetUID())
				w.phase(t, 60*time.Second, "Running")
				ran(t, run.ns, created)
			})
		}
	})
	if t.Failed() {
		return
	}

	// Settled: a moment for the last events of reaching Running to pass through Metacontroller.
	time.Sleep(2 * time.Second)
	log := metacontrollerLog{path: shared.metacontrollerLog}
	offset := log.offset(t)
	before := snapshot(ctx, t, c, instances)
	window := 3*shared.resync + time.Second
	t.Logf("%d instances settled; watching %s (3 resync periods)", len(instances), window)
	time.Sleep(window)
	after := snapshot(ctx, t, c, instances)
	for _, in := range instances {
		key := in.ns + "/" + in.name
		if problems := sameChildren(before[key], after[key], true); len(problems) > 0 {
			t.Errorf("%s wrote while settled:\n  %s", key, strings.Join(problems, "\n  "))
		}
		if writes := log.childWrites(t, offset, in.ns); len(writes) > 0 {
			t.Errorf("%s: Metacontroller logged child writes while settled: %v", key, writes)
		}
	}

	// The check can fail: a child edited by hand is written back by Metacontroller, and both the
	// resourceVersion and the log say so.
	tampered := instances[0]
	services := ofResource(childrenOf(ctx, t, c, tampered.ns, tampered.parent.GetUID()), "services")
	if len(services) == 0 {
		t.Fatalf("%s has no Service child to edit", tampered.name)
	}
	service := services[0]
	want := service.GetLabels()[instanceLabel]
	if want == "" {
		t.Fatalf("Service %s has no %s label", service.GetName(), instanceLabel)
	}
	offset = log.offset(t)
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:"tampered"}}}`, instanceLabel)
	if _, err := c.dyn.Resource(serviceGVR).Namespace(tampered.ns).Patch(ctx, service.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("edit Service: %v", err)
	}
	e2eutil.WaitFor(ctx, t, shared.resync+10*time.Second, "Metacontroller to restore the edited Service's label", func() (bool, error) {
		svc, err := c.dyn.Resource(serviceGVR).Namespace(tampered.ns).Get(ctx, service.GetName(), metav1.GetOptions{})
		return err == nil && svc.GetLabels()[instanceLabel] == want, err
	})
	if writes := log.childWrites(t, offset, tampered.ns); writes["Updating"] == 0 {
		t.Errorf("Metacontroller restored the Service without logging an update (%v): the log check cannot see writes", writes)
	}
}

// snapshot records, for every instance ("ns/name"), its children's versions and, as the child
// "Challenge", the Challenge's own.
func snapshot(ctx context.Context, t *testing.T, c *cluster, instances []runningInstance) map[string]map[string]childVersion {
	t.Helper()
	out := map[string]map[string]childVersion{}
	for _, in := range instances {
		v := versions(childrenOf(ctx, t, c, in.ns, in.parent.GetUID()))
		parent := mustGetChallenge(ctx, t, c, in.ns, in.name)
		v["Challenge"] = childVersion{uid: parent.GetUID(), generation: parent.GetGeneration(), resourceVersion: parent.GetResourceVersion()}
		out[in.ns+"/"+in.name] = v
	}
	return out
}

// provideLoadBalancers plays the cloud's load-balancer controller, which this cluster lacks:
// once the instance has a LoadBalancer Service, its status gets an address.
func provideLoadBalancers(ctx context.Context, t *testing.T, c *cluster, ns string, parentUID types.UID) {
	t.Helper()
	var names []string
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the instance's Service", func() (bool, error) {
		names = nil
		services := ofResource(childrenOf(ctx, t, c, ns, parentUID), "services")
		for _, svc := range services {
			if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ == "LoadBalancer" {
				names = append(names, svc.GetName())
			}
		}
		return len(services) > 0, nil
	})
	for _, name := range names {
		patch := []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"198.51.100.23","ipMode":"VIP"}]}}}`)
		if _, err := c.dyn.Resource(serviceGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("give Service %s a load balancer address: %v", name, err)
		}
	}
}

// checkHTTPEndpoint: the endpoint of an HTTP exposure is the instance's own host under the hook's
// ingress domain, and that host is the one the Ingress child routes.
func checkHTTPEndpoint(ctx context.Context, t *testing.T, c *cluster, chal *unstructured.Unstructured) {
	t.Helper()
	endpoints, _, _ := unstructured.NestedSlice(chal.Object, "status", "endpoints")
	instanceID, _, _ := unstructured.NestedString(chal.Object, "status", "instanceId")
	if len(endpoints) != 1 || instanceID == "" {
		t.Fatalf("Running with endpoints %v and instanceId %q, want one endpoint and an id", endpoints, instanceID)
	}
	endpoint, _ := endpoints[0].(map[string]any)
	host := instanceID + ".challenges.localhost"
	if endpoint["url"] != "http://"+host+"/" || endpoint["host"] != host {
		t.Errorf("endpoint %v, want url http://%s/", endpoint, host)
	}
	var routed []string
	for _, ingress := range ofResource(childrenOf(ctx, t, c, chal.GetNamespace(), chal.GetUID()), "ingresses.networking.k8s.io") {
		rules, _, _ := unstructured.NestedSlice(ingress.Object, "spec", "rules")
		for _, rule := range rules {
			if h, ok := rule.(map[string]any)["host"].(string); ok {
				routed = append(routed, h)
			}
		}
	}
	if !slices.Equal(routed, []string{host}) {
		t.Errorf("the Ingress children route %v, want exactly %s", routed, host)
	}
}

// checkNodePortEndpoints: every NodePort endpoint is the public host and the node port the API
// server allocated to the instance's Service.
func checkNodePortEndpoints(ctx context.Context, t *testing.T, c *cluster, chal *unstructured.Unstructured) {
	t.Helper()
	endpoints, _, _ := unstructured.NestedSlice(chal.Object, "status", "endpoints")
	var allocated []int64
	for _, svc := range ofResource(childrenOf(ctx, t, c, chal.GetNamespace(), chal.GetUID()), "services") {
		ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
		for _, raw := range ports {
			if port, ok := raw.(map[string]any)["nodePort"].(int64); ok {
				allocated = append(allocated, port)
			}
		}
	}
	if len(endpoints) == 0 || len(endpoints) != len(allocated) {
		t.Fatalf("endpoints %v for allocated node ports %v, want one each", endpoints, allocated)
	}
	for i, raw := range endpoints {
		endpoint, _ := raw.(map[string]any)
		want := fmt.Sprintf("%s:%d", publicHost, allocated[i])
		if got := fmt.Sprintf("%v:%v", endpoint["host"], endpoint["port"]); got != want {
			t.Errorf("endpoint %d is %s, want %s (host:nodePort)", i, got, want)
		}
	}
}

// tcpGatewayTokens counts the endpoints of a case's answer that carry a TCP gateway token.
func tcpGatewayTokens(t *testing.T, gc goldenCase) int {
	endpoints, _, _ := unstructured.NestedSlice(decodeJSONObject(t, gc.response, gc.name), "status", "endpoints")
	n := 0
	for _, e := range endpoints {
		if token, _ := e.(map[string]any)["token"].(string); token != "" {
			n++
		}
	}
	return n
}
