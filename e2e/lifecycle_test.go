//go:build e2e

package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// unpullableImage is an image kwok's pod-image-pull-backoff stage (hack/kwok-stages.yaml) reports
// as ImagePullBackOff, the way a kubelet would for an image that does not exist.
const unpullableImage = "registry.invalid/ctf/missing:1.0"

var eventGVR = schema.GroupVersionResource{Version: "v1", Resource: "events"}

// lifecycleChallenge is a one-container Challenge with an inline template, exposed on a NodePort.
func lifecycleChallenge(name, image, timeout string) *unstructured.Unstructured {
	spec := map[string]any{
		"owner": "team-" + name,
		"template": map[string]any{
			"containers": []any{map[string]any{
				"name":  "app",
				"image": image,
				"ports": []any{map[string]any{"name": "pwn", "containerPort": int64(1337), "protocol": "TCP"}},
			}},
			"expose":      []any{map[string]any{"port": int64(1337), "type": "NodePort"}},
			"timeout":     "30m",
			"maxLifetime": "2h",
		},
	}
	if timeout != "" {
		spec["timeout"] = timeout
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ctf.challenge-hook.dev/v1alpha1",
		"kind":       "Challenge",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{ownerLabel: spec["owner"]}},
		"spec":       spec,
	}}
}

// TestLifecycle drives Challenges through their life under Metacontroller, with the hook binary
// on the real clock and Pods run by kwok on a fake node.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ns := c.createNamespace(e2eutil.TestContext(t), t, "life", podSecurityRestricted)

	t.Run("ExpiredAtExpiresAt", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		// 12s: long enough to reach Running first, short enough to wait for.
		w, chal := startChallenge(ctx, t, c, ns, lifecycleChallenge("expires", "ghcr.io/example/pwn:1.0", "12s"))
		running := w.phase(t, 30*time.Second, "Running")
		expiresAt := statusTime(t, running.obj, "expiresAt")
		if len(workloadsOf(childrenOf(ctx, t, c, ns, chal.GetUID()))) != 1 {
			t.Fatalf("a Running instance without exactly one %s", workloadResource.Resource)
		}
		expired := w.phase(t, time.Until(expiresAt)+30*time.Second, "Expired")
		if expired.reason != "Expired" {
			t.Errorf("Expired with reason %q, want Expired", expired.reason)
		}
		// The hook decided at the Expired condition's transition (whole seconds, like expiresAt).
		if decided := conditionTime(t, expired.obj, "Expired"); decided.Before(expiresAt) {
			t.Errorf("Expired at %s, before status.expiresAt %s", decided.Format(time.RFC3339), expiresAt.Format(time.RFC3339))
		}
		// Metacontroller's resync period (shared.resync) would catch it too; the hook's
		// resyncAfterSeconds is what makes it this prompt.
		late := expired.at.Sub(expiresAt)
		t.Logf("expiresAt %s, Expired seen %s later", expiresAt.Format(time.RFC3339), late.Round(time.Millisecond))
		if late > 3*time.Second {
			t.Errorf("Expired %s after status.expiresAt, want within 3s", late.Round(time.Millisecond))
		}
		e2eutil.WaitFor(ctx, t, 15*time.Second, "the expired instance's children to be deleted", func() (bool, error) {
			return len(childrenOf(ctx, t, c, ns, chal.GetUID())) == 0, nil
		})
		// The record stays, and stays Expired, over more than a resync period.
		time.Sleep(shared.resync + time.Second)
		got := mustGetChallenge(ctx, t, c, ns, chal.GetName())
		if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Expired" {
			t.Errorf("stored phase %q a resync later, want Expired (the record is kept)", phase)
		}
		if left := childrenOf(ctx, t, c, ns, chal.GetUID()); len(left) > 0 {
			t.Errorf("children came back after expiry: %v", keys(left))
		}
	})

	t.Run("ImagePullBackOff", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		w, _ := startChallenge(ctx, t, c, ns, lifecycleChallenge("bad-image", unpullableImage, ""))
		failed := w.phase(t, 60*time.Second, "Error")
		if failed.reason != "ImagePullBackOff" {
			t.Errorf("reason = %q, want ImagePullBackOff", failed.reason)
		}
		for _, want := range []string{`"app"`, unpullableImage} {
			if !strings.Contains(failed.message, want) {
				t.Errorf("message %q does not name %s", failed.message, want)
			}
		}
	})

	t.Run("DefinitionDeletedAndRestored", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		// A ChallengeDefinition by reference (related through the customize hook) with a dynamic
		// flag (a Secret child).
		def := lifecycleChallenge("pwn-def", "ghcr.io/example/pwn:1.0", "")
		def.SetKind("ChallengeDefinition")
		def.Object["spec"] = template(def)
		template(def)["flag"] = map[string]any{"dynamic": true, "env": "FLAG"}
		createObject(ctx, t, c, ns, def)
		chal := lifecycleChallenge("by-ref", "unused", "")
		spec(chal)["definitionRef"] = map[string]any{"name": def.GetName()}
		delete(spec(chal), "template")
		w, created := startChallenge(ctx, t, c, ns, chal)
		w.phase(t, 60*time.Second, "Running")
		before := childrenOf(ctx, t, c, ns, created.GetUID())
		if len(ofResource(before, "secrets")) == 0 {
			t.Errorf("a definition with a dynamic flag: children %v, want a Secret", keys(before))
		}

		defs := c.dyn.Resource(defGVR).Namespace(ns)
		if err := defs.Delete(ctx, def.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete ChallengeDefinition: %v", err)
		}
		failed := w.phase(t, 30*time.Second, "Error")
		if failed.reason != "DefinitionNotFound" {
			t.Errorf("reason = %q, want DefinitionNotFound", failed.reason)
		}
		// Metacontroller keeps syncing it (resyncs): still nothing is deleted or rewritten.
		time.Sleep(2*shared.resync + time.Second)
		if problems := sameChildren(versions(before), versions(childrenOf(ctx, t, c, ns, created.GetUID())), false); len(problems) > 0 {
			t.Errorf("children changed while the definition was missing:\n  %s", strings.Join(problems, "\n  "))
		}

		createObject(ctx, t, c, ns, def)
		w.phase(t, 30*time.Second, "Running")
		if problems := sameChildren(versions(before), versions(childrenOf(ctx, t, c, ns, created.GetUID())), false); len(problems) > 0 {
			t.Errorf("children changed when the definition came back:\n  %s", strings.Join(problems, "\n  "))
		}
	})

	t.Run("DeleteFinalizes", func(t *testing.T) {
		t.Parallel()
		ctx := e2eutil.TestContext(t)
		w, created := startChallenge(ctx, t, c, ns, lifecycleChallenge("deleted", "ghcr.io/example/pwn:1.0", ""))
		w.phase(t, 60*time.Second, "Running")
		if finalizers := mustGetChallenge(ctx, t, c, ns, created.GetName()).GetFinalizers(); len(finalizers) != 1 || finalizers[0] != shared.finalizer() {
			t.Errorf("finalizers %v, want Metacontroller's %s", finalizers, shared.finalizer())
		}
		if err := c.dyn.Resource(chalGVR).Namespace(ns).Delete(ctx, created.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete Challenge: %v", err)
		}
		w.phase(t, 30*time.Second, "Terminating")
		w.gone(t, 60*time.Second)
		e2eutil.WaitFor(ctx, t, 15*time.Second, "every child to be gone", func() (bool, error) {
			return len(childrenOf(ctx, t, c, ns, created.GetUID())) == 0, nil
		})
	})
}

// TestHookDown kills the hook under a Running instance: Metacontroller's failed syncs change
// nothing, a Challenge created meanwhile waits, and both are served once the hook is back.
// It stops the hook every test shares, so it is not parallel: Go runs it before the parallel tests.
func TestHookDown(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "hook-down", podSecurityRestricted)
	w, running := startChallenge(ctx, t, c, ns, lifecycleChallenge("survivor", "ghcr.io/example/pwn:1.0", ""))
	w.phase(t, 60*time.Second, "Running")
	before := versions(childrenOf(ctx, t, c, ns, running.GetUID()))

	shared.hook.stop(syscall.SIGKILL)
	t.Cleanup(func() {
		if shared.hook.proc == nil { // the test failed before restarting it: the next tests need it
			if err := shared.hook.start(); err != nil {
				t.Errorf("restart the hook: %v", err)
			}
		}
	})
	downAt := time.Now()
	wNew, created := startChallenge(ctx, t, c, ns, lifecycleChallenge("newcomer", "ghcr.io/example/pwn:1.0", ""))
	// Metacontroller tried: its failed sync is a SyncError event on the new Challenge.
	e2eutil.WaitFor(ctx, t, 30*time.Second, "a SyncError event on the Challenge created while the hook is down", func() (bool, error) {
		events, err := c.dyn.Resource(eventGVR).Namespace(ns).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + created.GetName() + ",reason=SyncError",
		})
		return err == nil && len(events.Items) > 0, err
	})
	// Down long enough for the running instance to be resynced (and fail) at least twice.
	time.Sleep(time.Until(downAt.Add(2*shared.resync + time.Second)))
	if problems := sameChildren(before, versions(childrenOf(ctx, t, c, ns, running.GetUID())), false); len(problems) > 0 {
		t.Errorf("children of the Running instance changed while the hook was down:\n  %s", strings.Join(problems, "\n  "))
	}
	if got := childrenOf(ctx, t, c, ns, created.GetUID()); len(got) > 0 {
		t.Errorf("children created without the hook: %v", keys(got))
	}
	if phases := wNew.phases(); len(phases) > 0 {
		t.Errorf("status written without the hook: phases %v", phases)
	}

	if err := shared.hook.start(); err != nil {
		t.Fatalf("restart the hook: %v", err)
	}
	backAt := time.Now()
	// Metacontroller's retry backs off exponentially; its resync period bounds the wait.
	served := wNew.phase(t, shared.resync+30*time.Second, "Running")
	t.Logf("hook down for %s; the newcomer was Running %s after it came back", backAt.Sub(downAt).Round(time.Millisecond), served.at.Sub(backAt).Round(time.Millisecond))
	if problems := sameChildren(before, versions(childrenOf(ctx, t, c, ns, running.GetUID())), false); len(problems) > 0 {
		t.Errorf("children of the Running instance changed after the hook came back:\n  %s", strings.Join(problems, "\n  "))
	}
	if phase, _, _ := unstructured.NestedString(mustGetChallenge(ctx, t, c, ns, running.GetName()).Object, "status", "phase"); phase != "Running" {
		t.Errorf("the instance that ran through the outage is %q, want Running", phase)
	}
}

func mustGetChallenge(ctx context.Context, t *testing.T, c *cluster, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := c.dyn.Resource(chalGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Challenge %s/%s: %v", ns, name, err)
	}
	return obj
}

// statusTime parses an RFC 3339 status field.
func statusTime(t *testing.T, obj *unstructured.Unstructured, field string) time.Time {
	t.Helper()
	raw, _, _ := unstructured.NestedString(obj.Object, "status", field)
	at, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		t.Fatalf("status.%s = %q: %v", field, raw, err)
	}
	return at
}

// conditionTime is the lastTransitionTime of a status condition.
func conditionTime(t *testing.T, obj *unstructured.Unstructured, condType string) time.Time {
	t.Helper()
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, raw := range conditions {
		cond, _ := raw.(map[string]any)
		if cond["type"] == condType {
			at, err := time.Parse(time.RFC3339, cond["lastTransitionTime"].(string))
			if err != nil {
				t.Fatalf("condition %s lastTransitionTime: %v", condType, err)
			}
			return at
		}
	}
	t.Fatalf("no condition %s in %v", condType, obj.Object["status"])
	return time.Time{}
}

func keys(m map[string]*unstructured.Unstructured) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
