//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

var networkPolicyGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}

// holdFinalizer is the tests' own finalizer: on a Pod it keeps the Pod Terminating for as long as
// a test needs, the way a PID 1 that ignores SIGTERM keeps a real Pod for its grace period. kwok's
// pod-delete stage (hack/kwok-stages.yaml) deletes a Pod with a deletionTimestamp at once (grace
// period 0) and leaves its finalizers alone, so the API server keeps the Pod until the test
// removes the finalizer, and deletes it then.
const holdFinalizer = "e2e.challenge-hook.dev/hold"

// Sampling of an instance whose Pod is held Terminating: every sampleEvery, for at least
// isolationWindow after the Pod is first seen with a deletionTimestamp.
const sampleEvery = 100 * time.Millisecond

// isolationWindow spans at least one resync period (Metacontroller syncs the parent again then,
// with the same observed Pod) and never less than 8 s.
func isolationWindow() time.Duration {
	return max(8*time.Second, shared.resync+3*time.Second)
}

// TestIsolation: no moment without isolation, under the real Metacontroller. At expiry, at deletion
// (kubectl's default, background) and at spec.stopped, the instance's NetworkPolicy stays, the
// same object, selecting the Pod, in every sample taken while the Pod is held Terminating by a
// finalizer of the test's (every 100 ms for 8 s or more, over a resync period), and the watch sees
// the Pod deleted before the policy (the Challenge after both when deleted; the policy never when
// stopped). A new instance's Pod is created after its NetworkPolicy: by resourceVersion, by
// creationTimestamp, and in a later sync of Metacontroller's than the policy.
func TestIsolation(t *testing.T) {
	t.Parallel()
	c := newCluster(t)

	t.Run("Expiry", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		in := startIsolated(ctx, t, c, "iso-expiry")
		in.holdPod(ctx, t)
		// The platform's "end now": spec.expiresAt in the past (whole seconds, as the CRD takes it).
		patchSpec(ctx, t, c, in.ns, in.chal.GetName(), fmt.Sprintf(`{"expiresAt":%q}`, time.Now().UTC().Format(time.RFC3339)))
		in.sampleWhileHeld(ctx, t, "expiry", nil)
		in.w.phase(t, 30*time.Second, "Expired")

		in.releasePod(ctx, t)
		in.waitPodGone(ctx, t)
		in.waitPolicyGone(ctx, t)
		in.checkDeletedInOrder(ctx, t, "pods", "networkpolicies.networking.k8s.io")
		e2eutil.WaitFor(ctx, t, 15*time.Second, "the expired instance's children to be gone", func() (bool, error) {
			return len(childrenOf(ctx, t, c, in.ns, in.chal.GetUID())) == 0, nil
		})
		if phase := statusString(mustGetChallenge(ctx, t, c, in.ns, in.chal.GetName()), "phase"); phase != "Expired" {
			t.Errorf("phase %q once everything is gone, want Expired (phases %v)", phase, in.w.phases())
		}
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		in := startIsolated(ctx, t, c, "iso-delete")
		in.holdPod(ctx, t)
		// kubectl's default: background propagation. --wait=false: the Challenge stays
		// Terminating as long as its Pod is held.
		kubectl(ctx, t, "delete", "--wait=false", "-n", in.ns, "challenges."+ctfGroup, in.chal.GetName())
		in.sampleWhileHeld(ctx, t, "deletion", func() string {
			got, err := c.dyn.Resource(chalGVR).Namespace(in.ns).Get(ctx, in.chal.GetName(), metav1.GetOptions{})
			switch {
			case err != nil:
				return fmt.Sprintf("the Challenge: %v, want it Terminating while its Pod exists", err)
			case got.GetDeletionTimestamp() == nil:
				return "the Challenge has no deletionTimestamp"
			}
			return ""
		})
		in.w.phase(t, 30*time.Second, "Terminating")

		in.releasePod(ctx, t)
		in.waitPodGone(ctx, t)
		in.waitPolicyGone(ctx, t)
		in.w.gone(t, 30*time.Second)
		in.checkDeletedInOrder(ctx, t, "pods", "networkpolicies.networking.k8s.io", "challenges."+ctfGroup)
		e2eutil.WaitFor(ctx, t, 15*time.Second, "every child of the deleted instance to be gone", func() (bool, error) {
			return len(childrenOf(ctx, t, c, in.ns, in.chal.GetUID())) == 0, nil
		})
	})

	t.Run("Stop", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		in := startIsolated(ctx, t, c, "iso-stop")
		in.holdPod(ctx, t)
		patchSpec(ctx, t, c, in.ns, in.chal.GetName(), `{"stopped":true}`)
		in.sampleWhileHeld(ctx, t, "stop", nil)
		in.w.phase(t, 30*time.Second, "Stopped")

		in.releasePod(ctx, t)
		in.waitPodGone(ctx, t)
		// Stopped keeps everything but the Pod: the policy stays, the same object, over a resync.
		goneAt := time.Now()
		samples := 0
		e2eutil.WaitFor(ctx, t, shared.resync+10*time.Second, "a resync period with the stopped instance's NetworkPolicy in place", func() (bool, error) {
			samples++
			policy, err := c.dyn.Resource(networkPolicyGVR).Namespace(in.ns).Get(ctx, in.policy.GetName(), metav1.GetOptions{})
			if err != nil || policy.GetUID() != in.policy.GetUID() || policy.GetDeletionTimestamp() != nil {
				t.Fatalf("sample %d, %s after the Pod went: the stopped instance's NetworkPolicy: %v (uid %s, want %s)",
					samples, time.Since(goneAt).Round(time.Millisecond), err, uidOf(policy), in.policy.GetUID())
			}
			return time.Since(goneAt) > shared.resync+time.Second, nil
		})
		t.Logf("stop: after the Pod went, %d of %d samples over %s showed the same NetworkPolicy", samples, samples, time.Since(goneAt).Round(time.Millisecond))
		if phase := statusString(mustGetChallenge(ctx, t, c, in.ns, in.chal.GetName()), "phase"); phase != "Stopped" {
			t.Errorf("phase %q, want Stopped", phase)
		}
		if deleted := in.events.find("networkpolicies.networking.k8s.io", watch.Deleted, ""); deleted != nil {
			t.Errorf("the stopped instance's NetworkPolicy was deleted: %s", deleted)
		}
	})

	t.Run("CreationOrder", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		ns := c.createNamespace(ctx, t, "iso-order", podSecurityRestricted)
		events := watchObjects(t, c, ns, podGVR, networkPolicyGVR)
		log := metacontrollerLog{path: shared.metacontrollerLog}
		offset := log.offset(t)
		// Several instances at once: Metacontroller syncs them on different workers.
		const instances = 3
		var mu sync.Mutex
		uids := map[types.UID]string{}
		t.Run("start", func(t *testing.T) {
			for i := range instances {
				name := fmt.Sprintf("order-%d", i)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					w, chal := startChallenge(ctx, t, c, ns, lifecycleChallenge(name, "ghcr.io/example/pwn:1.0", ""))
					w.phase(t, 60*time.Second, "Running")
					mu.Lock()
					uids[chal.GetUID()] = name
					mu.Unlock()
				})
			}
		})
		if t.Failed() {
			return
		}
		creates := log.childCreates(t, offset, ns)
		for uid, name := range uids {
			policy := events.find("networkpolicies.networking.k8s.io", watch.Added, uid)
			pod := events.find("pods", watch.Added, uid)
			if policy == nil || pod == nil {
				t.Errorf("%s: ADDED events: NetworkPolicy %v, Pod %v; want both\n%s", name, policy, pod, events)
				continue
			}
			t.Logf("%s: NetworkPolicy ADDED rv %d (created %s), Pod ADDED rv %d (created %s); Metacontroller's log: %v",
				name, policy.rv, policy.created.Format(time.RFC3339), pod.rv, pod.created.Format(time.RFC3339), creates[name])
			// Both come from the one etcd behind the API server: resourceVersions order its writes.
			if pod.rv <= policy.rv {
				t.Errorf("%s: the Pod was created (rv %d) before its NetworkPolicy (rv %d)", name, pod.rv, policy.rv)
			}
			if pod.created.Before(policy.created) {
				t.Errorf("%s: the Pod's creationTimestamp %s is before its NetworkPolicy's %s", name, pod.created.Format(time.RFC3339), policy.created.Format(time.RFC3339))
			}
			// The Pod comes from a later answer than the policy: Metacontroller started another
			// sync of the parent in between.
			seq := creates[name]
			p, q := slices.Index(seq, "NetworkPolicy"), slices.Index(seq, "Pod")
			if p < 0 || q < 0 || q < p || !slices.Contains(seq[p:q], "sync") {
				t.Errorf("%s: Metacontroller's log %v, want the NetworkPolicy created, then a sync, then the Pod", name, seq)
			}
		}
	})
}

// isolatedInstance is a Running Challenge alone in its namespace, with a watch on the namespace's
// Pods, NetworkPolicies and Challenges from before its creation on.
type isolatedInstance struct {
	c      *cluster
	ns     string
	w      *challengeWatch
	chal   *unstructured.Unstructured
	pod    *unstructured.Unstructured
	policy *unstructured.Unstructured
	events *objectEvents
}

// startIsolated starts a NodePort instance in a fresh namespace, waits until it is Running, and
// checks that its one NetworkPolicy selects its one Pod.
func startIsolated(ctx context.Context, t *testing.T, c *cluster, prefix string) *isolatedInstance {
	t.Helper()
	ns := c.createNamespace(ctx, t, prefix, podSecurityRestricted)
	in := &isolatedInstance{c: c, ns: ns, events: watchObjects(t, c, ns, podGVR, networkPolicyGVR, chalGVR)}
	in.w, in.chal = startChallenge(ctx, t, c, ns, lifecycleChallenge(prefix, "ghcr.io/example/pwn:1.0", ""))
	in.w.phase(t, 60*time.Second, "Running")
	in.pod = onePod(ctx, t, c, ns, in.chal.GetUID())
	in.policy = oneChild(ctx, t, c, ns, in.chal.GetUID(), "networkpolicies.networking.k8s.io")
	if ok, why := selects(in.policy, in.pod); !ok {
		t.Fatalf("the Running instance's NetworkPolicy %s does not select its Pod %s: %s", in.policy.GetName(), in.pod.GetName(), why)
	}
	return in
}

// holdPod adds the test's finalizer to the instance's Pod, and removes it when the test ends
// (the namespace could not go otherwise).
func (in *isolatedInstance) holdPod(ctx context.Context, t *testing.T) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"finalizers":[%q]}}`, holdFinalizer)
	if _, err := in.c.dyn.Resource(podGVR).Namespace(in.ns).Patch(ctx, in.pod.GetName(), types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("hold Pod %s with finalizer %s: %v", in.pod.GetName(), holdFinalizer, err)
	}
	t.Cleanup(func() { in.releasePod(context.Background(), t) })
}

// releasePod removes the test's finalizer from the instance's Pod, if the Pod is still there.
func (in *isolatedInstance) releasePod(ctx context.Context, t *testing.T) {
	t.Helper()
	pods := in.c.dyn.Resource(podGVR).Namespace(in.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, in.pod.GetName(), metav1.GetOptions{})
		if err != nil || pod.GetUID() != in.pod.GetUID() || !slices.Contains(pod.GetFinalizers(), holdFinalizer) {
			return err
		}
		pod.SetFinalizers(slices.DeleteFunc(pod.GetFinalizers(), func(f string) bool { return f == holdFinalizer }))
		_, err = pods.Update(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("release Pod %s: %v", in.pod.GetName(), err)
	}
}

// sampleWhileHeld samples the held Pod and the instance's NetworkPolicy every sampleEvery, from
// now until the Pod has been Terminating for isolationWindow. Each sample needs the Pod (the
// same one) and the same NetworkPolicy selecting it; extra, when given, checks more per sample
// (an empty answer is a pass). Failures are counted, not fatal, so that the report says how many.
func (in *isolatedInstance) sampleWhileHeld(ctx context.Context, t *testing.T, what string, extra func() string) {
	t.Helper()
	var samples, terminating, isolated int
	var firstTerminating time.Time
	var failures []string
	fail := func(format string, args ...any) {
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf("sample %d: ", samples)+fmt.Sprintf(format, args...))
		}
	}
	deadline := time.Now().Add(30*time.Second + isolationWindow())
	ticker := time.NewTicker(sampleEvery)
	defer ticker.Stop()
	for {
		samples++
		pod, err := in.c.dyn.Resource(podGVR).Namespace(in.ns).Get(ctx, in.pod.GetName(), metav1.GetOptions{})
		if err != nil || pod.GetUID() != in.pod.GetUID() {
			t.Fatalf("%s, sample %d: the held Pod %s (uid %s): %v, uid %s: the test's finalizer did not hold it (see hack/kwok-stages.yaml)",
				what, samples, in.pod.GetName(), in.pod.GetUID(), err, uidOf(pod))
		}
		if pod.GetDeletionTimestamp() != nil {
			terminating++
			if firstTerminating.IsZero() {
				firstTerminating = time.Now()
			}
		}
		policy, err := in.c.dyn.Resource(networkPolicyGVR).Namespace(in.ns).Get(ctx, in.policy.GetName(), metav1.GetOptions{})
		switch {
		case err != nil:
			fail("no NetworkPolicy %s: %v", in.policy.GetName(), err)
		case policy.GetUID() != in.policy.GetUID():
			fail("NetworkPolicy %s replaced (uid %s, was %s)", policy.GetName(), policy.GetUID(), in.policy.GetUID())
		default:
			if ok, why := selects(policy, pod); ok {
				isolated++
			} else {
				fail("NetworkPolicy %s does not select the Pod: %s", policy.GetName(), why)
			}
		}
		if extra != nil {
			if problem := extra(); problem != "" {
				fail("%s", problem)
			}
		}
		if !firstTerminating.IsZero() && time.Since(firstTerminating) >= isolationWindow() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the Pod was never Terminating in %d samples over %s (phases %v)", what, samples, 30*time.Second+isolationWindow(), in.w.phases())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-ticker.C:
		}
	}
	span := time.Since(firstTerminating).Round(time.Millisecond)
	t.Logf("%s: %d samples, %d with the Pod Terminating (over %s), %d with the Pod selected by the instance's NetworkPolicy",
		what, samples, terminating, span, isolated)
	if isolated != samples || len(failures) > 0 {
		t.Errorf("%s: only %d of %d samples (%d with the Pod Terminating, over %s) had the Pod selected by its NetworkPolicy; first failures:\n  %s",
			what, isolated, samples, terminating, span, strings.Join(failures, "\n  "))
	}
	// Between samples: the watch sees a NetworkPolicy deleted and created again.
	if deleted := in.events.find("networkpolicies.networking.k8s.io", watch.Deleted, ""); deleted != nil {
		t.Errorf("%s: the NetworkPolicy was deleted while the Pod was held: %s", what, deleted)
	}
}

func (in *isolatedInstance) waitPodGone(ctx context.Context, t *testing.T) {
	t.Helper()
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the released Pod to be gone", func() (bool, error) {
		_, err := in.c.dyn.Resource(podGVR).Namespace(in.ns).Get(ctx, in.pod.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func (in *isolatedInstance) waitPolicyGone(ctx context.Context, t *testing.T) {
	t.Helper()
	podGone := time.Now()
	e2eutil.WaitFor(ctx, t, shared.resync+15*time.Second, "the NetworkPolicy to go after the Pod", func() (bool, error) {
		_, err := in.c.dyn.Resource(networkPolicyGVR).Namespace(in.ns).Get(ctx, in.policy.GetName(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("the NetworkPolicy went %s after the Pod was seen gone", time.Since(podGone).Round(time.Millisecond))
}

// checkDeletedInOrder: the watch delivers a DELETED event of each resource, and their
// resourceVersions are in this order.
func (in *isolatedInstance) checkDeletedInOrder(ctx context.Context, t *testing.T, resources ...string) {
	t.Helper()
	var prev *objectEvent
	for _, resource := range resources {
		var e *objectEvent
		// A GET can see the object gone before the watch delivers its DELETED event.
		e2eutil.WaitFor(ctx, t, 10*time.Second, "the watch to deliver the DELETED event of "+resource, func() (bool, error) {
			e = in.events.find(resource, watch.Deleted, "")
			return e != nil, nil
		})
		if prev != nil && e.rv <= prev.rv {
			t.Errorf("%s deleted (rv %d) before %s (rv %d); events:\n%s", e.resource, e.rv, prev.resource, prev.rv, in.events)
		}
		prev = e
	}
}

// selects reports whether a NetworkPolicy selects a Pod: same namespace, and its podSelector
// matches the Pod's labels.
func selects(policy, pod *unstructured.Unstructured) (bool, string) {
	if policy.GetNamespace() != pod.GetNamespace() {
		return false, fmt.Sprintf("namespace %s, the Pod's %s", policy.GetNamespace(), pod.GetNamespace())
	}
	raw, found, err := unstructured.NestedMap(policy.Object, "spec", "podSelector")
	if err != nil || !found {
		return false, fmt.Sprintf("no spec.podSelector (%v)", err)
	}
	var selector metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &selector); err != nil {
		return false, err.Error()
	}
	s, err := metav1.LabelSelectorAsSelector(&selector)
	if err != nil {
		return false, err.Error()
	}
	if !s.Matches(labels.Set(pod.GetLabels())) {
		return false, fmt.Sprintf("podSelector %q does not match the Pod's labels %v", s, pod.GetLabels())
	}
	return true, ""
}

func uidOf(obj *unstructured.Unstructured) types.UID {
	if obj == nil {
		return ""
	}
	return obj.GetUID()
}

// patchSpec merge-patches a Challenge's spec.
func patchSpec(ctx context.Context, t *testing.T, c *cluster, ns, name, spec string) {
	t.Helper()
	if _, err := c.dyn.Resource(chalGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":`+spec+`}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch Challenge %s/%s spec %s: %v", ns, name, spec, err)
	}
}

// kubectl runs $E2E_KUBECTL against the test cluster and returns its output; it fails the test
// when kubectl fails.
func kubectl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlResult(ctx, t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlResult runs $E2E_KUBECTL and returns its combined output and error.
func kubectlResult(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("E2E_KUBECTL")
	if bin == "" {
		t.Fatal("E2E_KUBECTL is not set: run the e2e tests with `make e2e`")
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// objectEvent is one watch event of a Pod, NetworkPolicy or Challenge.
type objectEvent struct {
	at       time.Time
	resource string // group resource: "pods", "networkpolicies.networking.k8s.io"
	typ      watch.EventType
	name     string
	uid      types.UID
	// owner is the uid of the object's controller (empty for a Challenge).
	owner   types.UID
	rv      int64
	created time.Time
}

func (e *objectEvent) String() string {
	if e == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s %s %s rv=%d uid=%s", e.at.Format("15:04:05.000"), e.typ, e.resource, e.name, e.rv, e.uid)
}

// objectEvents records every ADDED, MODIFIED and DELETED event of some resources in a namespace,
// from before the test creates anything on.
type objectEvents struct {
	mu     sync.Mutex
	events []objectEvent
}

// watchObjects watches the resources in ns until the test ends.
func watchObjects(t *testing.T, c *cluster, ns string, gvrs ...schema.GroupVersionResource) *objectEvents {
	t.Helper()
	ctx := e2eutil.TestContext(t)
	rec := &objectEvents{}
	for _, gvr := range gvrs {
		client := c.dyn.Resource(gvr).Namespace(ns)
		list, err := client.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list %s in %s: %v", gvr.Resource, ns, err)
		}
		for i := range list.Items {
			rec.record(gvr, watch.Added, &list.Items[i])
		}
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), &cache.ListWatch{
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return client.Watch(ctx, opts)
			},
		})
		if err != nil {
			t.Fatalf("watch %s in %s: %v", gvr.Resource, ns, err)
		}
		t.Cleanup(rw.Stop)
		go func() {
			for ev := range rw.ResultChan() {
				if obj, ok := ev.Object.(*unstructured.Unstructured); ok {
					rec.record(gvr, ev.Type, obj)
				}
			}
		}()
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("events in %s:\n%s", ns, rec)
		}
	})
	return rec
}

func (r *objectEvents) record(gvr schema.GroupVersionResource, typ watch.EventType, obj *unstructured.Unstructured) {
	rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	e := objectEvent{at: time.Now(), resource: gvr.GroupResource().String(), typ: typ, name: obj.GetName(), uid: obj.GetUID(),
		rv: rv, created: obj.GetCreationTimestamp().Time}
	if ref := metav1.GetControllerOf(obj); ref != nil {
		e.owner = ref.UID
	}
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// find returns the first event of a resource and type (of a child of owner, unless empty).
func (r *objectEvents) find(resource string, typ watch.EventType, owner types.UID) *objectEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.events {
		if e := r.events[i]; e.resource == resource && e.typ == typ && (owner == "" || e.owner == owner) {
			return &e
		}
	}
	return nil
}

func (r *objectEvents) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	lines := make([]string, len(r.events))
	for i := range r.events {
		lines[i] = "  " + r.events[i].String()
	}
	return strings.Join(lines, "\n")
}

// childCreates lists, by parent name, what Metacontroller logged since offset for parents in
// namespace ns, in log order: "sync" where it starts syncing the parent (its workqueue syncs one
// parent on one worker at a time), and the kind of each child it creates ("Creating"; with
// controller-runtime's zap encoder both objects are logged as kind, namespace and name).
func (l metacontrollerLog) childCreates(t *testing.T, offset int64, ns string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	l.scan(t, offset, func(line []byte) {
		type ref struct{ Namespace, Name, Kind string }
		var entry struct {
			Msg    string `json:"msg"`
			Object ref    `json:"object"`
			Parent ref    `json:"parent"`
			Child  ref    `json:"child"`
		}
		if json.Unmarshal(line, &entry) != nil {
			return
		}
		switch {
		case entry.Msg == "Sync" && entry.Object.Namespace == ns:
			out[entry.Object.Name] = append(out[entry.Object.Name], "sync")
		case entry.Msg == "Creating" && entry.Parent.Namespace == ns:
			out[entry.Parent.Name] = append(out[entry.Parent.Name], entry.Child.Kind)
		}
	})
	return out
}
