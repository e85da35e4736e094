//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// publicHost is what the hook reports as the host of NodePort endpoints in these tests.
const publicHost = "127.0.0.1"

// unpullableImage is an image kwok's pod-image-pull-backoff stage (hack/kwok-stages.yaml) reports
// as ImagePullBackOff, the way a kubelet would for an image that does not exist.
const unpullableImage = "registry.invalid/ctf/missing:1.0"

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
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// TestLifecycle drives Challenges through their whole life with the hook binary on the real clock,
// the test's driver in Metacontroller's place, and Pods run by kwok on a fake node.
func TestLifecycle(t *testing.T) {
	c := newCluster(t)
	hook := startHook(t, c.root, "--flag-key-file=testdata/flag.key", "--public-host="+publicHost)
	ns := c.createNamespace(testContext(t), t, "life", podSecurityRestricted)

	t.Run("RunningThenExpired", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		d := newDriver(t, c, hook)
		// 20s: long enough to reach Running and check it, short enough to wait for.
		name := createChallenge(ctx, t, d, ns, lifecycleChallenge("expires", "ghcr.io/example/pwn:1.0", "20s"))

		running := d.runUntil(ctx, t, ns, name, 60*time.Second, phaseIs("Running"))
		checkNodePortEndpoint(ctx, t, c, ns, running)
		if running.response.ResyncAfterSeconds <= 0 || running.response.ResyncAfterSeconds > 20 {
			t.Errorf("Running with a 20s timeout: resyncAfterSeconds = %g, want a wake-up at expiry (0 < s <= 20)", running.response.ResyncAfterSeconds)
		}
		steady, err := d.syncOnce(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if steady.wrote() || steady.phase() != "Running" {
			t.Errorf("a Running instance is not a fixed point: the next sync did %s", steady)
		}

		expiresAt := statusTime(t, running.response.Status, "expiresAt")
		// Nothing changes while it runs: only resyncAfterSeconds wakes the driver in time (its
		// resync period is longer than this wait).
		expired := d.runUntil(ctx, t, ns, name, 45*time.Second, phaseIs("Expired"))
		if expired.answeredAt.Before(expiresAt) {
			t.Errorf("Expired at %s, before status.expiresAt %s", expired.answeredAt.Format(time.RFC3339Nano), expiresAt.Format(time.RFC3339))
		}
		if late := expired.answeredAt.Sub(expiresAt); late > 5*time.Second {
			t.Errorf("Expired %s after status.expiresAt: resyncAfterSeconds did not wake the controller at expiry", late)
		}
		if reason := expired.response.Status["reason"]; reason != "Expired" {
			t.Errorf("Expired reason = %v, want Expired", reason)
		}
		d.runUntil(ctx, t, ns, name, 30*time.Second, func(r syncResult) bool { return !r.wrote() })
		children, err := d.observeChildren(ctx, mustGetChallenge(ctx, t, c, ns, name))
		if err != nil {
			t.Fatal(err)
		}
		for id := range children {
			if strings.HasPrefix(id, "Deployment.") {
				t.Errorf("Expired instance still has its workload %s", id)
			}
		}
		if got := mustGetChallenge(ctx, t, c, ns, name); got.Object["status"].(map[string]any)["phase"] != "Expired" {
			t.Errorf("stored phase = %v, want Expired (the record is kept)", got.Object["status"].(map[string]any)["phase"])
		}
	})

	t.Run("FinalizeToDeleted", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		d := newDriver(t, c, hook)
		// This one runs a ChallengeDefinition by reference (a related object found through the
		// customize hook) with a dynamic flag (a Secret child).
		def := lifecycleChallenge("pwn-def", "ghcr.io/example/pwn:1.0", "")
		def.SetKind("ChallengeDefinition")
		def.SetNamespace(ns)
		def.Object["spec"] = template(def)
		template(def)["flag"] = map[string]any{"dynamic": true, "env": "FLAG"}
		if _, err := c.dyn.Resource(defGVR).Namespace(ns).Create(ctx, def, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ChallengeDefinition: %v", err)
		}
		chal := lifecycleChallenge("deleted", "unused", "")
		spec(chal)["definitionRef"] = map[string]any{"name": def.GetName()}
		delete(spec(chal), "template")
		name := createChallenge(ctx, t, d, ns, chal)
		running := d.runUntil(ctx, t, ns, name, 60*time.Second, phaseIs("Running"))
		var kinds, relatedKinds []string
		for _, child := range running.observed.children {
			kinds = append(kinds, child.GetKind())
		}
		for _, obj := range running.observed.related {
			relatedKinds = append(relatedKinds, obj.GetKind())
		}
		if !slices.Contains(kinds, "Secret") || !slices.Contains(relatedKinds, "ChallengeDefinition") {
			t.Errorf("a referenced definition with a dynamic flag: children %v, related %v; want a Secret child and the ChallengeDefinition related", kinds, relatedKinds)
		}
		owner := mustGetChallenge(ctx, t, c, ns, name)

		if err := c.dyn.Resource(chalGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete Challenge: %v", err)
		}
		var phases []string
		final := d.runUntil(ctx, t, ns, name, 60*time.Second, func(r syncResult) bool {
			phases = append(phases, r.phase())
			return r.response.Finalized || r.parentGone
		})
		if !final.response.Finalized || final.phase() != "Deleted" {
			t.Errorf("finalize ended with %s, want finalized and phase Deleted", final)
		}
		if len(phases) == 0 || phases[0] != "Terminating" {
			t.Errorf("phases while finalizing = %v, want Terminating first (children still present)", phases)
		}
		waitFor(ctx, t, 30*time.Second, "the Challenge to be gone", func() (bool, error) {
			_, err := c.dyn.Resource(chalGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if children, err := d.observeChildren(ctx, owner); err != nil || len(children) > 0 {
			t.Errorf("children left after finalize: %v (err %v)", keys(children), err)
		}
	})

	t.Run("BadImageError", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		d := newDriver(t, c, hook)
		name := createChallenge(ctx, t, d, ns, lifecycleChallenge("bad-image", unpullableImage, ""))
		failed := d.runUntil(ctx, t, ns, name, 60*time.Second, phaseIs("Error"))
		reason, _ := failed.response.Status["reason"].(string)
		message, _ := failed.response.Status["message"].(string)
		if reason != "ImagePullBackOff" && reason != "ErrImagePull" {
			t.Errorf("reason = %q, want ImagePullBackOff or ErrImagePull", reason)
		}
		if !strings.Contains(message, unpullableImage) {
			t.Errorf("message %q does not name the image %q", message, unpullableImage)
		}
		steady, err := d.syncOnce(ctx, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		if steady.wrote() {
			t.Errorf("an Error instance is not a fixed point: the next sync did %s", steady)
		}
	})
}

// createChallenge creates a Challenge in ns with Metacontroller's finalizer already in place.
func createChallenge(ctx context.Context, t *testing.T, d *driver, ns string, obj *unstructured.Unstructured) string {
	t.Helper()
	obj = obj.DeepCopy()
	obj.SetNamespace(ns)
	obj.SetFinalizers([]string{d.cc.finalizerName()})
	created, err := d.c.dyn.Resource(chalGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Challenge %s: %v", obj.GetName(), err)
	}
	return created.GetName()
}

func mustGetChallenge(ctx context.Context, t *testing.T, c *cluster, ns, name string) *unstructured.Unstructured {
	t.Helper()
	obj, err := c.dyn.Resource(chalGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Challenge %s/%s: %v", ns, name, err)
	}
	return obj
}

func phaseIs(phase string) func(syncResult) bool {
	return func(r syncResult) bool { return r.phase() == phase }
}

// statusTime parses an RFC 3339 status field.
func statusTime(t *testing.T, status map[string]any, field string) time.Time {
	t.Helper()
	raw, _ := status[field].(string)
	at, err := time.Parse(time.RFC3339, raw)
	if err != nil {
		t.Fatalf("status.%s = %q: %v", field, raw, err)
	}
	return at
}

// checkNodePortEndpoint: a Running instance's endpoint is the public host and the node port the
// API server allocated to the instance's Service.
func checkNodePortEndpoint(ctx context.Context, t *testing.T, c *cluster, ns string, res syncResult) {
	t.Helper()
	endpoints, _ := res.response.Status["endpoints"].([]any)
	if len(endpoints) != 1 {
		t.Fatalf("Running with endpoints %v, want exactly one", endpoints)
	}
	endpoint, _ := endpoints[0].(map[string]any)
	var nodePorts []int64
	for id, child := range res.observed.children {
		if !strings.HasPrefix(id, "Service.") {
			continue
		}
		ports, _, _ := unstructured.NestedSlice(child.Object, "spec", "ports")
		for _, raw := range ports {
			if port, ok := raw.(map[string]any)["nodePort"].(int64); ok {
				nodePorts = append(nodePorts, port)
			}
		}
	}
	if len(nodePorts) != 1 {
		t.Fatalf("want one allocated node port among the observed Services, got %v", nodePorts)
	}
	if endpoint["host"] != publicHost || endpoint["port"] != nodePorts[0] || endpoint["protocol"] != "TCP" {
		t.Errorf("endpoint = %v, want host %s, port %d (the allocated nodePort), protocol TCP", endpoint, publicHost, nodePorts[0])
	}
}

func keys(m map[string]*unstructured.Unstructured) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
