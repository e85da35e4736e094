//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// componentLabel names the pod of an instance of several pods that a child belongs to
// (sync.LabelComponent).
const componentLabel = "ctf.challenge-hook.dev/component"

// podsTemplate is what this test reads of a definition of several pods: enough to say what the
// hook must build, without the hook's own types (the e2e tests are a client of the API).
type podsTemplate struct {
	Pods []struct {
		Name       string `json:"name"`
		Containers []struct {
			Name string `json:"name"`
			Flag bool   `json:"flag"`
		} `json:"containers"`
		Expose []struct {
			Port int64  `json:"port"`
			Type string `json:"type"`
		} `json:"expose"`
		Internal []struct {
			Port int64    `json:"port"`
			From []string `json:"from"`
		} `json:"internal"`
	} `json:"pods"`
}

// reaches lists, by pod, the sibling pods it may connect to (sorted), from the internal ports'
// from lists.
func (p podsTemplate) reaches() map[string][]string {
	out := map[string][]string{}
	for _, pod := range p.Pods {
		out[pod.Name] = nil
	}
	for _, target := range p.Pods {
		for _, in := range target.Internal {
			for _, from := range in.From {
				if !slices.Contains(out[from], target.Name) {
					out[from] = append(out[from], target.Name)
				}
			}
		}
	}
	for _, peers := range out {
		sort.Strings(peers)
	}
	return out
}

// ingressPeers and egressPeers are the "<pod>:<port>" pairs a pod's NetworkPolicy must admit from
// and to its siblings.
func (p podsTemplate) ingressPeers(name string) []string {
	var out []string
	for _, pod := range p.Pods {
		if pod.Name != name {
			continue
		}
		for _, in := range pod.Internal {
			for _, from := range in.From {
				out = append(out, fmt.Sprintf("%s:%d", from, in.Port))
			}
		}
	}
	sort.Strings(out)
	return out
}

func (p podsTemplate) egressPeers(name string) []string {
	var out []string
	for _, target := range p.Pods {
		for _, in := range target.Internal {
			if slices.Contains(in.From, name) {
				out = append(out, fmt.Sprintf("%s:%d", target.Name, in.Port))
			}
		}
	}
	sort.Strings(out)
	return out
}

// componentsExample is one of the examples of several pods, and what its author meant: the test
// checks the example says so (reaches) before checking that the hook built it.
type componentsExample struct {
	file string
	// reaches is, by pod, the siblings it may connect to.
	reaches map[string][]string
	// exposed are the pods that have an exposure Service, internal those that have a Service of
	// their internal ports.
	exposed, internal []string
	// flagged are the pods that mount the flag Secret.
	flagged []string
	// endpointComponent is the pod every status endpoint reaches.
	endpointComponent string
	// hold is the pod the test keeps Terminating (a finalizer of its own) at deletion, so that the
	// other Pods go first and every NetworkPolicy must stay until it goes too.
	hold string
}

var componentsExamples = []componentsExample{
	{
		file:              "xss-admin-bot.yaml",
		reaches:           map[string][]string{"web": {"db"}, "db": nil, "bot": {"web"}},
		exposed:           []string{"web"},
		internal:          []string{"db", "web"},
		flagged:           []string{"bot"},
		endpointComponent: "web",
		hold:              "db",
	},
	{
		file:              "pivot-two-hosts.yaml",
		reaches:           map[string][]string{"entry": {"target"}, "target": nil},
		exposed:           []string{"entry"},
		internal:          []string{"target"},
		flagged:           []string{"target"},
		endpointComponent: "entry",
		hold:              "entry",
	},
}

// TestComponents runs the examples of several pods (examples/xss-admin-bot.yaml,
// examples/pivot-two-hosts.yaml) as written, under the real Metacontroller: each instance reaches
// Running with, per pod P of challenge C, a Pod, a NetworkPolicy and (when P exposes a port) a
// Service of its exposed ports named C--P, and (when P has internal ports) a ClusterIP Service of
// those named C--P--internal, each labelled with P's name; the policy selects P's Pod only and
// admits exactly the sibling ports of the template; each Pod's hostAliases map exactly the
// siblings it may reach to their internal Services' ClusterIPs; only the Pods with a flag container mount the flag; the status endpoints
// name their pod. Deleted, with one Pod held Terminating past a resync period, the instance goes
// in order: in every state the watches show, from the first child's creation to the last one's
// deletion, every Pod has its same-named NetworkPolicy and no policy is deleted while any Pod of
// the instance exists; the Challenge goes last.
func TestComponents(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, ex := range componentsExamples {
		t.Run(strings.TrimSuffix(ex.file, ".yaml"), func(t *testing.T) {
			t.Parallel()
			runComponentsExample(t, c, ex)
		})
	}
}

func runComponentsExample(t *testing.T, c *cluster, ex componentsExample) {
	ctx := e2eutil.TestContext(t)
	objs, err := readYAMLObjects(filepath.Join(c.root, "examples", ex.file))
	if err != nil {
		t.Fatal(err)
	}
	var def, chal *unstructured.Unstructured
	for _, obj := range objs {
		switch obj.GetKind() {
		case "ChallengeDefinition":
			def = cleanForCreate(obj, "")
		case "Challenge":
			chal = cleanForCreate(obj, "")
		}
	}
	if def == nil || chal == nil || len(objs) != 2 {
		t.Fatalf("examples/%s: %d objects, want a ChallengeDefinition and a Challenge", ex.file, len(objs))
	}
	var tpl podsTemplate
	raw, err := json.Marshal(def.Object["spec"])
	if err == nil {
		err = json.Unmarshal(raw, &tpl)
	}
	if err != nil || len(tpl.Pods) == 0 {
		t.Fatalf("examples/%s: no spec.pods (err %v)", ex.file, err)
	}
	// The example says what its comments say.
	if got := tpl.reaches(); !equalReaches(got, ex.reaches) {
		t.Fatalf("examples/%s: pods reach %v, want %v", ex.file, got, ex.reaches)
	}

	ns := c.createNamespace(ctx, t, "components-"+strings.TrimSuffix(ex.file, ".yaml"), podSecurityRestricted)
	events := watchObjects(t, c, ns, podGVR, networkPolicyGVR, chalGVR)
	createObject(ctx, t, c, ns, def)
	w, created := startChallenge(ctx, t, c, ns, chal)
	running := w.phase(t, 90*time.Second, "Running")
	name, uid := created.GetName(), created.GetUID()
	instanceID := statusString(running.obj, "instanceId")
	if instanceID == "" {
		t.Fatalf("Running without status.instanceId: %v", running.obj.Object["status"])
	}
	for _, e := range w.eventsWith("Creating", "Error") {
		if e.message != "" && !strings.HasPrefix(e.message, "pod ") {
			t.Errorf("status %s with message %q, want it to start with `pod <name>: `", e.phase, e.message)
		}
	}

	children := childrenOf(ctx, t, c, ns, uid)
	checkControllerOwner(t, running.obj, children)
	pods := byName(ofResource(children, "pods"))
	policies := byName(ofResource(children, "networkpolicies.networking.k8s.io"))
	services := byName(ofResource(children, "services"))
	var wantPods, wantServices []string
	for _, p := range tpl.Pods {
		wantPods = append(wantPods, name+"--"+p.Name)
	}
	for _, p := range ex.exposed {
		wantServices = append(wantServices, name+"--"+p)
	}
	for _, p := range ex.internal {
		wantServices = append(wantServices, name+"--"+p+"--internal")
	}
	sort.Strings(wantPods)
	sort.Strings(wantServices)
	if got := sortedKeys(pods); !slices.Equal(got, wantPods) {
		t.Errorf("Pods %v, want %v", got, wantPods)
	}
	if got := sortedKeys(policies); !slices.Equal(got, wantPods) {
		t.Errorf("NetworkPolicies %v, want one per Pod, same names: %v", got, wantPods)
	}
	if got := sortedKeys(services); !slices.Equal(got, wantServices) {
		t.Errorf("Services %v, want %v", got, wantServices)
	}
	if t.Failed() {
		t.FailNow()
	}

	for _, p := range tpl.Pods {
		child := name + "--" + p.Name
		pod, policy := pods[child], policies[child]
		for _, obj := range []*unstructured.Unstructured{pod, policy, services[child]} {
			if obj != nil && obj.GetLabels()[componentLabel] != p.Name {
				t.Errorf("%s %s: label %s=%q, want %q", obj.GetKind(), obj.GetName(), componentLabel, obj.GetLabels()[componentLabel], p.Name)
			}
		}
		if got := pod.GetLabels()[instanceLabel]; got != instanceID {
			t.Errorf("Pod %s: label %s=%q, want the instance id %q", child, instanceLabel, got, instanceID)
		}
		// The policy selects its own Pod and no sibling's.
		for podName, other := range pods {
			ok, why := selects(policy, other)
			switch {
			case podName == child && !ok:
				t.Errorf("NetworkPolicy %s does not select its Pod: %s", child, why)
			case podName != child && ok:
				t.Errorf("NetworkPolicy %s selects the sibling Pod %s", child, podName)
			}
		}
		if got, want := policyPeers(policy, "ingress", "from", instanceID), tpl.ingressPeers(p.Name); !slices.Equal(got, want) {
			t.Errorf("NetworkPolicy %s admits from siblings %v, want %v", child, got, want)
		}
		if got, want := policyPeers(policy, "egress", "to", instanceID), tpl.egressPeers(p.Name); !slices.Equal(got, want) {
			t.Errorf("NetworkPolicy %s admits to siblings %v, want %v", child, got, want)
		}
		// Names: exactly the siblings it may reach, at the ClusterIPs of their internal Services,
		// sorted by name.
		var want []string
		for _, peer := range ex.reaches[p.Name] {
			svc := services[name+"--"+peer+"--internal"]
			if svc == nil {
				t.Errorf("Pod %s reaches %s, which has no Service %s--%s--internal", child, peer, name, peer)
				continue
			}
			ip, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP")
			want = append(want, ip+" "+peer)
		}
		if got := hostAliases(pod); !slices.Equal(got, want) {
			t.Errorf("Pod %s: hostAliases %v, want %v", child, got, want)
		}
		if got, want := mountsSecret(pod, name+"-flag"), slices.Contains(ex.flagged, p.Name); got != want {
			t.Errorf("Pod %s refers to the flag Secret %s-flag: %v, want %v", child, name, got, want)
		}
		// The exposure Service has the pod's exposed ports only; its internal ports are on a
		// ClusterIP Service of their own, which no node port or load balancer publishes.
		if svc := services[child]; svc != nil {
			var want []int64
			for _, e := range p.Expose {
				want = append(want, e.Port)
			}
			slices.Sort(want)
			if got := servicePorts(svc); !slices.Equal(got, want) {
				t.Errorf("Service %s: ports %v, want %v", child, got, want)
			}
		}
		if svc := services[child+"--internal"]; svc != nil {
			var want []int64
			for _, in := range p.Internal {
				want = append(want, in.Port)
			}
			slices.Sort(want)
			if got := servicePorts(svc); !slices.Equal(got, want) {
				t.Errorf("Service %s: ports %v, want %v", svc.GetName(), got, want)
			}
			if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "ClusterIP" {
				t.Errorf("Service %s: type %s, want ClusterIP", svc.GetName(), typ)
			}
		}
	}
	if secrets := ofResource(children, "secrets"); len(secrets) != 1 || secrets[0].GetName() != name+"-flag" {
		t.Errorf("Secrets %v, want one, %s-flag", names(secrets), name)
	}
	checkComponentEndpoints(t, running.obj, ex.endpointComponent, services[name+"--"+ex.endpointComponent], children)

	// ---- deletion, one Pod held Terminating
	held := pods[name+"--"+ex.hold]
	holdWithFinalizer(ctx, t, c, held)
	if err := c.dyn.Resource(chalGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Challenge: %v", err)
	}
	w.phase(t, 30*time.Second, "Terminating")
	e2eutil.WaitFor(ctx, t, 30*time.Second, "every Pod but the held one to go", func() (bool, error) {
		left := ofResource(childrenOf(ctx, t, c, ns, uid), "pods")
		return len(left) == 1 && left[0].GetUID() == held.GetUID() && left[0].GetDeletionTimestamp() != nil, nil
	})
	// Over a resync period with the held Pod the only one left: every policy stays.
	time.Sleep(shared.resync + 2*time.Second)
	if got := sortedKeys(byName(ofResource(childrenOf(ctx, t, c, ns, uid), "networkpolicies.networking.k8s.io"))); !slices.Equal(got, wantPods) {
		t.Errorf("with Pod %s held Terminating, NetworkPolicies %v, want all of %v", held.GetName(), got, wantPods)
	}
	releaseFinalizer(ctx, t, c, held)
	w.gone(t, 60*time.Second)
	e2eutil.WaitFor(ctx, t, 15*time.Second, "every child of the deleted instance to be gone", func() (bool, error) {
		return len(childrenOf(ctx, t, c, ns, uid)) == 0, nil
	})
	// The watches deliver the last DELETED events a moment after a GET sees the objects gone.
	e2eutil.WaitFor(ctx, t, 10*time.Second, "the watch to deliver every Pod's and policy's DELETED event", func() (bool, error) {
		return len(events.deletedNames("pods", uid)) == len(wantPods) && len(events.deletedNames("networkpolicies.networking.k8s.io", uid)) == len(wantPods), nil
	})
	checkIsolatedThroughout(t, events, uid, name)
}

// checkIsolatedThroughout replays the watched Pods, NetworkPolicies and the Challenge of one
// instance in resourceVersion order (one etcd behind them: its writes' order) and checks every
// state: each Pod of the instance has its same-named NetworkPolicy, and no NetworkPolicy is deleted
// while a Pod of the instance exists; the Challenge is deleted after both.
func checkIsolatedThroughout(t *testing.T, events *objectEvents, uid types.UID, name string) {
	t.Helper()
	events.mu.Lock()
	all := slices.Clone(events.events)
	events.mu.Unlock()
	sort.SliceStable(all, func(i, j int) bool { return all[i].rv < all[j].rv })
	pods, policies := map[string]bool{}, map[string]bool{}
	var states, problems int
	var lastChildDeleted, challengeDeleted int64
	for _, e := range all {
		if e.resource == "challenges."+ctfGroup {
			if e.typ == watch.Deleted && e.name == name {
				challengeDeleted = e.rv
			}
			continue
		}
		if e.owner != uid {
			continue
		}
		set := pods
		if e.resource == "networkpolicies.networking.k8s.io" {
			set = policies
		}
		switch e.typ {
		case watch.Added, watch.Modified:
			set[e.name] = true
		case watch.Deleted:
			delete(set, e.name)
			lastChildDeleted = max(lastChildDeleted, e.rv)
			if e.resource == "networkpolicies.networking.k8s.io" && len(pods) > 0 {
				problems++
				t.Errorf("rv %d: NetworkPolicy %s deleted while Pods %v exist", e.rv, e.name, sortedKeys(pods))
			}
		default:
			continue
		}
		states++
		for pod := range pods {
			if !policies[pod] {
				problems++
				t.Errorf("rv %d (%s %s %s): Pod %s exists without its NetworkPolicy (policies %v)", e.rv, e.typ, e.resource, e.name, pod, sortedKeys(policies))
			}
		}
	}
	t.Logf("%d states of the instance's Pods and NetworkPolicies replayed by resourceVersion, %d problems", states, problems)
	if states == 0 {
		t.Errorf("the watches saw none of the instance's Pods and NetworkPolicies")
	}
	if len(pods)+len(policies) > 0 {
		t.Errorf("after the replay, left: Pods %v, NetworkPolicies %v", sortedKeys(pods), sortedKeys(policies))
	}
	if challengeDeleted == 0 || challengeDeleted < lastChildDeleted {
		t.Errorf("the Challenge deleted at rv %d, its last Pod or policy at rv %d: want the Challenge last", challengeDeleted, lastChildDeleted)
	}
	if t.Failed() {
		t.Logf("events:\n%s", events)
	}
}

// checkComponentEndpoints: every status endpoint names the pod that publishes it; an HTTP one is
// routed by the instance's Ingress to that pod's Service, a NodePort one is that Service's node port.
func checkComponentEndpoints(t *testing.T, chal *unstructured.Unstructured, component string, svc *unstructured.Unstructured, children map[string]*unstructured.Unstructured) {
	t.Helper()
	endpoints, _, _ := unstructured.NestedSlice(chal.Object, "status", "endpoints")
	if len(endpoints) == 0 || svc == nil {
		t.Fatalf("endpoints %v, Service of %s %v: want both", endpoints, component, svc != nil)
	}
	for _, raw := range endpoints {
		ep, _ := raw.(map[string]any)
		if ep["component"] != component {
			t.Errorf("endpoint %v: component %v, want %s", ep, ep["component"], component)
		}
		url, _ := ep["url"].(string)
		switch {
		case strings.HasPrefix(url, "http://"):
			ingresses := ofResource(children, "ingresses.networking.k8s.io")
			if len(ingresses) != 1 || ingresses[0].GetName() != chal.GetName() {
				t.Errorf("Ingresses %v, want one named %s", names(ingresses), chal.GetName())
				continue
			}
			if backends := ingressBackends(ingresses[0]); !slices.Equal(backends, []string{svc.GetName()}) {
				t.Errorf("Ingress %s routes to Services %v, want %s", ingresses[0].GetName(), backends, svc.GetName())
			}
		default:
			nodePorts := map[int64]bool{}
			ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
			for _, p := range ports {
				if np, ok := p.(map[string]any)["nodePort"].(int64); ok {
					nodePorts[np] = true
				}
			}
			if port, _ := ep["port"].(int64); !nodePorts[port] || ep["host"] != publicHost {
				t.Errorf("endpoint %v: want %s and a node port of Service %s (%v)", ep, publicHost, svc.GetName(), nodePorts)
			}
		}
	}
}

// policyPeers lists "<component>:<port>" for every peer of a NetworkPolicy's rules (ingress/from or
// egress/to) that selects Pods of this instance by component.
func policyPeers(policy *unstructured.Unstructured, direction, peersField, instanceID string) []string {
	var out []string
	rules, _, _ := unstructured.NestedSlice(policy.Object, "spec", direction)
	for _, raw := range rules {
		rule, _ := raw.(map[string]any)
		peers, _ := rule[peersField].([]any)
		ports, _ := rule["ports"].([]any)
		for _, rawPeer := range peers {
			labels, _, _ := unstructured.NestedStringMap(rawPeer.(map[string]any), "podSelector", "matchLabels")
			component, ok := labels[componentLabel]
			if !ok {
				continue
			}
			if labels[instanceLabel] != instanceID {
				out = append(out, fmt.Sprintf("%s:<instance %q>", component, labels[instanceLabel]))
				continue
			}
			if len(ports) == 0 {
				out = append(out, component+":<every port>")
			}
			for _, rawPort := range ports {
				out = append(out, fmt.Sprintf("%s:%v", component, rawPort.(map[string]any)["port"]))
			}
		}
	}
	sort.Strings(out)
	return out
}

// hostAliases lists a Pod's spec.hostAliases as "<ip> <hostname>", one per hostname.
func hostAliases(pod *unstructured.Unstructured) []string {
	var out []string
	aliases, _, _ := unstructured.NestedSlice(pod.Object, "spec", "hostAliases")
	for _, raw := range aliases {
		alias, _ := raw.(map[string]any)
		hostnames, _ := alias["hostnames"].([]any)
		for _, h := range hostnames {
			out = append(out, fmt.Sprintf("%v %v", alias["ip"], h))
		}
	}
	return out
}

// mountsSecret says whether a Pod refers to a Secret: as a volume, or in a container's env or
// envFrom.
func mountsSecret(pod *unstructured.Unstructured, secret string) bool {
	volumes, _, _ := unstructured.NestedSlice(pod.Object, "spec", "volumes")
	for _, raw := range volumes {
		if name, _, _ := unstructured.NestedString(raw.(map[string]any), "secret", "secretName"); name == secret {
			return true
		}
		sources, _, _ := unstructured.NestedSlice(raw.(map[string]any), "projected", "sources")
		for _, s := range sources {
			if name, _, _ := unstructured.NestedString(s.(map[string]any), "secret", "name"); name == secret {
				return true
			}
		}
	}
	for _, field := range []string{"initContainers", "containers"} {
		containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", field)
		for _, rawContainer := range containers {
			container := rawContainer.(map[string]any)
			env, _ := container["env"].([]any)
			for _, e := range env {
				if name, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "secretKeyRef", "name"); name == secret {
					return true
				}
			}
			envFrom, _ := container["envFrom"].([]any)
			for _, e := range envFrom {
				if name, _, _ := unstructured.NestedString(e.(map[string]any), "secretRef", "name"); name == secret {
					return true
				}
			}
		}
	}
	return false
}

// servicePorts are a Service's port numbers, sorted.
func servicePorts(svc *unstructured.Unstructured) []int64 {
	var out []int64
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	for _, raw := range ports {
		if p, ok := raw.(map[string]any)["port"].(int64); ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// ingressBackends are the Service names an Ingress's rules route to, sorted and without repeats.
func ingressBackends(ingress *unstructured.Unstructured) []string {
	var out []string
	rules, _, _ := unstructured.NestedSlice(ingress.Object, "spec", "rules")
	for _, rule := range rules {
		paths, _, _ := unstructured.NestedSlice(rule.(map[string]any), "http", "paths")
		for _, p := range paths {
			if name, _, _ := unstructured.NestedString(p.(map[string]any), "backend", "service", "name"); name != "" {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// holdWithFinalizer keeps a Pod Terminating once deleted, until releaseFinalizer (see
// holdFinalizer); released when the test ends in any case, so that the namespace can go.
func holdWithFinalizer(ctx context.Context, t *testing.T, c *cluster, pod *unstructured.Unstructured) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"finalizers":[%q]}}`, holdFinalizer)
	if _, err := c.dyn.Resource(podGVR).Namespace(pod.GetNamespace()).Patch(ctx, pod.GetName(), types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("hold Pod %s with finalizer %s: %v", pod.GetName(), holdFinalizer, err)
	}
	t.Cleanup(func() { releaseFinalizer(context.Background(), t, c, pod) })
}

func releaseFinalizer(ctx context.Context, t *testing.T, c *cluster, held *unstructured.Unstructured) {
	t.Helper()
	pods := c.dyn.Resource(podGVR).Namespace(held.GetNamespace())
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, held.GetName(), metav1.GetOptions{})
		if err != nil || pod.GetUID() != held.GetUID() || !slices.Contains(pod.GetFinalizers(), holdFinalizer) {
			return err
		}
		pod.SetFinalizers(slices.DeleteFunc(pod.GetFinalizers(), func(f string) bool { return f == holdFinalizer }))
		_, err = pods.Update(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("release Pod %s: %v", held.GetName(), err)
	}
}

// deletedNames are the names of a resource's objects owned by owner that the watch saw deleted.
func (r *objectEvents) deletedNames(resource string, owner types.UID) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		if e.resource == resource && e.typ == watch.Deleted && e.owner == owner && !slices.Contains(out, e.name) {
			out = append(out, e.name)
		}
	}
	return out
}

// eventsWith are the watched states of the Challenge in one of phases.
func (w *challengeWatch) eventsWith(phases ...string) []statusEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []statusEvent
	for _, e := range w.events {
		if slices.Contains(phases, e.phase) {
			out = append(out, e)
		}
	}
	return out
}

func byName(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := make(map[string]*unstructured.Unstructured, len(objs))
	for _, obj := range objs {
		out[obj.GetName()] = obj
	}
	return out
}

func names(objs []*unstructured.Unstructured) []string {
	out := make([]string, len(objs))
	for i, obj := range objs {
		out[i] = obj.GetName()
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func equalReaches(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}
