//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// ownerPolicyFile is the ValidatingAdmissionPolicy (and its binding) that keeps a Challenge's owner
// label equal to its spec.owner.
const ownerPolicyFile = "manifests/challenge-owner-policy.yaml"

// TestOwnerLabelRefusedAtAdmission: with manifests/challenge-owner-policy.yaml applied (as
// `kubectl apply -k manifests/` does), the API server refuses a Challenge created without the
// owner label or with another owner's, and a relabel (kubectl label --overwrite, a merge patch)
// or removal of the label of a running one; each refusal says what to do and leaves the
// instance as it was. Another label, and Metacontroller's own updates (its finalizer, as the
// instance runs and is deleted), pass.
func TestOwnerLabelRefusedAtAdmission(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	applyAdmissionPolicy(ctx, t, c, ownerPolicyFile, nil)
	ns := c.createNamespace(ctx, t, "ownerlabel", podSecurityRestricted)
	challenges := c.dyn.Resource(chalGVR).Namespace(ns)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

	unlabelled := lifecycleChallenge("unlabelled", "ghcr.io/example/pwn:1.0", "")
	unlabelled.SetLabels(nil)
	unlabelled.SetNamespace(ns)
	// In force once the API server's admission has loaded the policy.
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the owner policy to refuse a dry-run create without the label", func() (bool, error) {
		_, err := challenges.Create(ctx, unlabelled, dryRun)
		return apierrors.IsInvalid(err), nil
	})
	if _, err := challenges.Create(ctx, unlabelled, metav1.CreateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "add labels: {"+ownerLabel+": team-unlabelled}") {
		t.Errorf("create without the owner label: %v, want refused (Invalid) saying which label to add", err)
	}
	others := lifecycleChallenge("others", "ghcr.io/example/pwn:1.0", "")
	others.SetLabels(map[string]string{ownerLabel: "team-7"})
	others.SetNamespace(ns)
	if _, err := challenges.Create(ctx, others, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "equal to its spec.owner") {
		t.Errorf("create with another owner's label: %v, want refused (Invalid)", err)
	}

	w, chal := startChallenge(ctx, t, c, ns, lifecycleChallenge("owned", "ghcr.io/example/pwn:1.0", ""))
	w.phase(t, 60*time.Second, "Running")
	before := versions(childrenOf(ctx, t, c, ns, chal.GetUID()))
	name := "challenges." + ctfGroup + "/" + chal.GetName()
	refused := func(what string, args ...string) {
		t.Helper()
		out, err := kubectlResult(ctx, t, args...)
		if err == nil || !strings.Contains(out, "denied request") || !strings.Contains(out, "may not be changed or removed") {
			t.Errorf("%s: kubectl %s: err %v, output %q; want refused by the policy", what, strings.Join(args, " "), err, out)
		} else {
			t.Logf("%s: refused: %s", what, strings.TrimSpace(out))
		}
		got := mustGetChallenge(ctx, t, c, ns, chal.GetName())
		if got.GetLabels()[ownerLabel] != "team-owned" {
			t.Errorf("%s: the owner label is now %q", what, got.GetLabels()[ownerLabel])
		}
	}
	refused("kubectl label --overwrite", "label", "--overwrite", "-n", ns, name, ownerLabel+"=someone-else")
	refused("kubectl label (removed)", "label", "-n", ns, name, ownerLabel+"-")
	refused("merge patch", "patch", "-n", ns, name, "--type=merge", `-p={"metadata":{"labels":{"`+ownerLabel+`":"team-7"}}}`)
	if _, err := challenges.Patch(ctx, chal.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"blue"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("another label: %v, want admitted", err)
	}
	if problems := sameChildren(before, versions(childrenOf(ctx, t, c, ns, chal.GetUID())), false); len(problems) > 0 {
		t.Errorf("the refused relabels changed the children:\n  %s", strings.Join(problems, "\n  "))
	}
	// Metacontroller removes its finalizer (an update) once the children are gone.
	kubectl(ctx, t, "delete", "--wait=false", "-n", ns, name)
	w.gone(t, 60*time.Second)
}

// TestOwnerLimitHeldByAnErrorWithItsPod: with --max-instances-per-owner=1 under the real
// Metacontroller, an owner's first instance never becomes Ready (its image cannot be pulled:
// Error ImagePullBackOff, its Pod kept); the second is Queued. The first is then pointed at a
// missing definition: Error DefinitionNotFound, status.workloadKept, its Pod kept as it is, and
// still no readyAt. The second stays Queued over several resyncs; once the first's Pod is deleted,
// its status drops workloadKept and the second starts. Pods are sampled every 200 ms throughout:
// the owner never has more than one.
func TestOwnerLimitHeldByAnErrorWithItsPod(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	restartSuiteHook(t, "--max-instances-per-owner=1")
	ns := c.createNamespace(ctx, t, "keptpod", podSecurityRestricted)
	stuck := validDefinition("stuck")
	containers, _, _ := unstructured.NestedSlice(stuck.Object, "spec", "containers")
	containers[0].(map[string]any)["image"] = "registry.invalid/never-pulled:1.0"
	if err := unstructured.SetNestedSlice(stuck.Object, containers, "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	createObject(ctx, t, c, ns, stuck)
	createObject(ctx, t, c, ns, validDefinition("web"))
	const owner = "team-kept"

	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := samplePods(sampleCtx, c, ns, 200*time.Millisecond)
	first, firstChal := startChallenge(ctx, t, c, ns, platformChallenge("first", "stuck", owner, ""))
	first.next(t, 90*time.Second, "Error with its Pod", func(e statusEvent) bool { return e.phase == "Error" && e.reason != "" })
	podsOf := func(uid types.UID) []*unstructured.Unstructured {
		return ofResource(childrenOf(ctx, t, c, ns, uid), "pods")
	}
	if len(podsOf(firstChal.GetUID())) != 1 {
		t.Fatalf("the first instance, in Error, has Pods %v, want its one", keys(childrenOf(ctx, t, c, ns, firstChal.GetUID())))
	}
	second, _ := startChallenge(ctx, t, c, ns, platformChallenge("second", "web", owner, ""))
	second.phase(t, 60*time.Second, "Queued")

	// Pointed at a missing definition: the hook keeps the Pod, and says so.
	kubectl(ctx, t, "patch", "-n", ns, "challenges."+ctfGroup+"/first", "--type=merge", `-p={"spec":{"definitionRef":{"name":"missing"}}}`)
	e := first.next(t, 60*time.Second, "Error DefinitionNotFound", func(e statusEvent) bool { return e.reason == "DefinitionNotFound" })
	if kept, _, _ := unstructured.NestedBool(e.obj.Object, "status", "workloadKept"); !kept {
		t.Errorf("Error DefinitionNotFound with its Pod: status.workloadKept is not true: %v", e.obj.Object["status"])
	}
	if readyAt, _, _ := unstructured.NestedString(e.obj.Object, "status", "readyAt"); readyAt != "" {
		t.Fatalf("the first instance was Ready once (readyAt %s): the scenario needs one that never was", readyAt)
	}
	pods := podsOf(firstChal.GetUID())
	if len(pods) != 1 {
		t.Fatalf("the first instance's Pod was not kept: %v", pods)
	}
	// Three resyncs later the second still waits.
	time.Sleep(3 * shared.resync)
	if got := mustGetChallenge(ctx, t, c, ns, "second"); phaseOf(got) != "Queued" {
		t.Errorf("the second instance is %s while the first keeps its Pod, want Queued", phaseOf(got))
	}

	// The first's Pod gone, its place is free.
	kubectl(ctx, t, "delete", "pod", "--wait=false", "-n", ns, pods[0].GetName())
	first.next(t, 60*time.Second, "workloadKept dropped", func(e statusEvent) bool {
		if e.obj == nil {
			return false
		}
		kept, _, _ := unstructured.NestedBool(e.obj.Object, "status", "workloadKept")
		return e.reason == "DefinitionNotFound" && !kept
	})
	second.phase(t, 60*time.Second, "Running")
	stopSampling()
	most := 0
	for _, s := range samples() {
		most = max(most, s.owners[owner])
	}
	if most > 1 {
		t.Errorf("owner %s had %d Pods at once, with --max-instances-per-owner=1", owner, most)
	}
	t.Logf("at most %d Pod of %s at once; phases: first %v, second %v", most, owner, first.phases(), second.phases())
}

func phaseOf(u *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return p
}

// TestDeletionPastTheRequestSizeCliff: with --max-instances-per-owner under the real
// Metacontroller, an owner's Running instance and many more of its Challenges (queued); then the
// hook's --max-request-bytes is lowered until every sync request of that owner, which carries
// all of its Challenges, is refused (413): Metacontroller's SyncError event on the Challenge
// quotes the hook's answer, which names the owner's Challenges and what to do. `kubectl delete`
// of the Running one still finishes, its children deleted: the customize answer for the deleting
// generation relates nothing, so its finalize requests fit. The owner's other Challenges are
// deleted too, every one finishing.
func TestDeletionPastTheRequestSizeCliff(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	restartSuiteHook(t, "--max-instances-per-owner=1")
	ns := c.createNamespace(ctx, t, "cliff", podSecurityRestricted)
	createObject(ctx, t, c, ns, validDefinition("web"))
	const owner, others = "team-cliff", 40
	w, running := startChallenge(ctx, t, c, ns, platformChallenge("cliff-running", "web", owner, ""))
	w.phase(t, 60*time.Second, "Running")
	for i := range others {
		createObject(ctx, t, c, ns, platformChallenge(fmt.Sprintf("cliff-%02d", i), "web", owner, ""))
	}
	challenges := c.dyn.Resource(chalGVR).Namespace(ns)
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "the owner's other Challenges Queued", func() (bool, error) {
		list, err := challenges.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		queued := 0
		for i := range list.Items {
			if phaseOf(&list.Items[i]) == "Queued" {
				queued++
			}
		}
		return queued == others, nil
	})

	// Past the cliff: a sync request carries the owner's 41 Challenges (about 2 KB each), more
	// than 48 KiB; a finalize request carries the instance and its children only.
	restartSuiteHook(t, "--max-instances-per-owner=1", "--max-request-bytes=48Ki")
	e2eutil.WaitFor(ctx, t, 60*time.Second, "a SyncError event quoting the hook's 413 on the Running Challenge", func() (bool, error) {
		events, err := c.dyn.Resource(eventGVR).Namespace(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + running.GetName() + ",reason=SyncError",
		})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			message, _, _ := unstructured.NestedString(e.Object, "message")
			// Only the lowered limit answers 413 (the owner's requests fit the default).
			if strings.Contains(message, "413") && strings.Contains(message, "carries every Challenge of the parent's owner") {
				t.Logf("SyncError: %s", message)
				return true, nil
			}
		}
		return false, nil
	})

	kubectl(ctx, t, "delete", "--wait=false", "-n", ns, "challenges."+ctfGroup+"/"+running.GetName())
	w.gone(t, 60*time.Second)
	if got := childrenOf(ctx, t, c, ns, running.GetUID()); len(got) > 0 {
		t.Errorf("the deleted instance's children remain: %v", keys(got))
	}
	// The owner's others, deleted at once, are all gone too.
	if err := challenges.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "every Challenge of the owner deleted", func() (bool, error) {
		list, err := challenges.List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, err
	})
}
