//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// definitionChallenge creates a ChallengeDefinition running image and a Challenge referring to it,
// both named name, in ns, and waits until the Challenge is Running.
func definitionChallenge(ctx context.Context, t *testing.T, c *cluster, ns, name, image string) (*challengeWatch, *unstructured.Unstructured) {
	t.Helper()
	def := lifecycleChallenge(name, image, "")
	def.SetKind("ChallengeDefinition")
	def.Object["spec"] = template(def)
	createObject(ctx, t, c, ns, def)
	chal := lifecycleChallenge(name, "unused", "")
	spec(chal)["definitionRef"] = map[string]any{"name": name}
	delete(spec(chal), "template")
	w, created := startChallenge(ctx, t, c, ns, chal)
	w.phase(t, 60*time.Second, "Running")
	return w, created
}

// onlyWorkload returns the instance's one workload child, failing the test otherwise.
func onlyWorkload(ctx context.Context, t *testing.T, c *cluster, ns string, parentUID types.UID) *unstructured.Unstructured {
	t.Helper()
	workloads := workloadsOf(childrenOf(ctx, t, c, ns, parentUID))
	if len(workloads) != 1 {
		t.Fatalf("%d %s children, want exactly one", len(workloads), workloadResource.Resource)
	}
	return workloads[0]
}

// containerImage is the image of a Pod's first container.
func containerImage(pod *unstructured.Unstructured) string {
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	if len(containers) == 0 {
		return ""
	}
	image, _ := containers[0].(map[string]any)["image"].(string)
	return image
}

// withoutWorkloads leaves the workload children out of a snapshot.
func withoutWorkloads(children map[string]*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	out := map[string]*unstructured.Unstructured{}
	for id, child := range children {
		if !strings.HasPrefix(id, workloadResource.GroupResource().String()+" ") {
			out[id] = child
		}
	}
	return out
}

// TestPodRecreatedOnlyWhenChanged: the CompositeController's Recreate strategy for Pods under the
// real Metacontroller. A new image in a definition replaces its instance's Pod (new uid, new
// image) and the instance is Running again, its other children untouched; meanwhile the Pod of an
// instance whose definition did not change is never written (same uid and resourceVersion over
// three resync periods, no child write in Metacontroller's log).
func TestPodRecreatedOnlyWhenChanged(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	changedNS := c.createNamespace(ctx, t, "recreate-changed", podSecurityRestricted)
	unchangedNS := c.createNamespace(ctx, t, "recreate-unchanged", podSecurityRestricted)
	wChanged, changed := definitionChallenge(ctx, t, c, changedNS, "changed", "ghcr.io/example/pwn:1.0")
	_, unchanged := definitionChallenge(ctx, t, c, unchangedNS, "unchanged", "ghcr.io/example/pwn:1.0")
	time.Sleep(2 * time.Second) // the last events of reaching Running pass through Metacontroller

	log := metacontrollerLog{path: shared.metacontrollerLog}
	offset := log.offset(t)
	oldPod := onlyWorkload(ctx, t, c, changedNS, changed.GetUID())
	others := versions(withoutWorkloads(childrenOf(ctx, t, c, changedNS, changed.GetUID())))
	untouched := onlyWorkload(ctx, t, c, unchangedNS, unchanged.GetUID())

	const newImage = "ghcr.io/example/pwn:1.1"
	changedAt := time.Now()
	defs := c.dyn.Resource(defGVR).Namespace(changedNS)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		def, err := defs.Get(ctx, "changed", metav1.GetOptions{})
		if err != nil {
			return err
		}
		containers, _, _ := unstructured.NestedSlice(def.Object, "spec", "containers")
		containers[0].(map[string]any)["image"] = newImage
		if err := unstructured.SetNestedSlice(def.Object, containers, "spec", "containers"); err != nil {
			return err
		}
		_, err = defs.Update(ctx, def, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("change the definition's image: %v", err)
	}
	var newPod *unstructured.Unstructured
	e2eutil.WaitFor(ctx, t, 60*time.Second, "a new Pod with the new image", func() (bool, error) {
		workloads := workloadsOf(childrenOf(ctx, t, c, changedNS, changed.GetUID()))
		if len(workloads) == 1 && workloads[0].GetUID() != oldPod.GetUID() && containerImage(workloads[0]) == newImage {
			newPod = workloads[0]
			return true, nil
		}
		return false, nil
	})
	running := wChanged.next(t, 60*time.Second, "Running after the change", func(e statusEvent) bool {
		return e.phase == "Running" && e.at.After(changedAt)
	})
	t.Logf("Pod %s replaced (uid %s -> %s, image %s); Running again %s after the change; phases %v",
		newPod.GetName(), oldPod.GetUID(), newPod.GetUID(), newImage, running.at.Sub(changedAt).Round(time.Millisecond), wChanged.phases())
	if writes := log.childWrites(t, offset, changedNS); writes["Deleting for update"] != 1 || writes["Creating"] != 1 {
		t.Errorf("Metacontroller logged %v for the changed instance, want one Recreate delete and one create", writes)
	}
	if problems := sameChildren(others, versions(withoutWorkloads(childrenOf(ctx, t, c, changedNS, changed.GetUID()))), false); len(problems) > 0 {
		t.Errorf("a new image changed more than the Pod:\n  %s", strings.Join(problems, "\n  "))
	}

	// The unchanged instance over three resync periods from the change on.
	time.Sleep(time.Until(changedAt.Add(3*shared.resync + time.Second)))
	after := onlyWorkload(ctx, t, c, unchangedNS, unchanged.GetUID())
	if after.GetUID() != untouched.GetUID() || after.GetResourceVersion() != untouched.GetResourceVersion() {
		t.Errorf("the unchanged instance's Pod was written: uid %s -> %s, resourceVersion %s -> %s",
			untouched.GetUID(), after.GetUID(), untouched.GetResourceVersion(), after.GetResourceVersion())
	}
	if writes := log.childWrites(t, offset, unchangedNS); len(writes) > 0 {
		t.Errorf("Metacontroller logged child writes for the unchanged instance: %v", writes)
	}
}

// TestFailedPodReplaced: a Pod that will not come back by itself (here failed by hand the way an
// eviction fails it: phase Failed, reason Evicted) is deleted by Metacontroller, a fresh Pod is
// created, and the instance goes Running → Creating → Running again, keeping its other children.
func TestFailedPodReplaced(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "evicted", podSecurityRestricted)
	w, chal := startChallenge(ctx, t, c, ns, lifecycleChallenge("evicted", "ghcr.io/example/pwn:1.0", ""))
	w.phase(t, 60*time.Second, "Running")
	old := onlyWorkload(ctx, t, c, ns, chal.GetUID())
	others := versions(withoutWorkloads(childrenOf(ctx, t, c, ns, chal.GetUID())))

	log := metacontrollerLog{path: shared.metacontrollerLog}
	offset := log.offset(t)
	failedAt := time.Now()
	pods := c.dyn.Resource(podGVR).Namespace(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, old.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		status, _, _ := unstructured.NestedMap(pod.Object, "status")
		status["phase"] = "Failed"
		status["reason"] = "Evicted"
		status["message"] = "The node was low on resource: memory."
		if err := unstructured.SetNestedMap(pod.Object, status, "status"); err != nil {
			return err
		}
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("fail the Pod: %v", err)
	}
	creating := w.next(t, 30*time.Second, "Creating after the Pod failed", func(e statusEvent) bool {
		return e.phase == "Creating" && e.at.After(failedAt)
	})
	t.Logf("after the eviction: %s", creating)
	var fresh *unstructured.Unstructured
	e2eutil.WaitFor(ctx, t, 60*time.Second, "a fresh Pod in place of the failed one", func() (bool, error) {
		workloads := workloadsOf(childrenOf(ctx, t, c, ns, chal.GetUID()))
		if len(workloads) == 1 && workloads[0].GetUID() != old.GetUID() {
			fresh = workloads[0]
			return true, nil
		}
		return false, nil
	})
	running := w.next(t, 60*time.Second, "Running with the fresh Pod", func(e statusEvent) bool {
		return e.phase == "Running" && e.at.After(creating.at)
	})
	t.Logf("Pod %s: uid %s failed, uid %s created; Running again %s after the failure",
		fresh.GetName(), old.GetUID(), fresh.GetUID(), running.at.Sub(failedAt).Round(time.Millisecond))
	if writes := log.childWrites(t, offset, ns); writes["Deleting child"] != 1 || writes["Creating"] != 1 {
		t.Errorf("Metacontroller logged %v, want one delete (of the failed Pod) and one create", writes)
	}
	if phase, _, _ := unstructured.NestedString(fresh.Object, "status", "phase"); phase == "Failed" {
		t.Errorf("the fresh Pod is Failed too")
	}
	if problems := sameChildren(others, versions(withoutWorkloads(childrenOf(ctx, t, c, ns, chal.GetUID()))), false); len(problems) > 0 {
		t.Errorf("the failed Pod changed more than the Pod:\n  %s", strings.Join(problems, "\n  "))
	}
	if phases := w.phases(); len(phases) < 3 || !slices.Equal(phases[len(phases)-3:], []string{"Running", "Creating", "Running"}) {
		t.Errorf("phases %v, want ... Running, Creating, Running", phases)
	}
}
