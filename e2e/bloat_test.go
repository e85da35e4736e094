//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// hookMaxRequestBytes is the hook's default --max-request-bytes (cmd/challenge-hook/config.go).
const hookMaxRequestBytes = 4 << 20

// bloatedBytes is how large the test makes a Challenge as the API server stores it: most of etcd's
// default object size limit (1.5 MiB), which the API server enforces on every write.
const bloatedBytes = 1_300_000

// TestBloatedChallengeStaysWithinReach: whoever may patch a Challenge (the platform) can make it
// as large as the API server stores (labels by the thousand, an annotation; the activity stamper
// may not: it reads and writes no Challenge, and its admission policy bounds what it adds to a
// Service, TestActivityStamper). With --max-instances-per-owner, every sync request of the owner's
// Challenges carries the bloated one (its own twice: as the parent and among the related): the
// bloated instance still stops, its owner's queued Challenge then starts, and the deletion of the
// bloated one finishes with its children gone. Under the simulator, or the real Metacontroller
// when given.
func TestBloatedChallengeStaysWithinReach(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	restartSuiteHook(t, "--max-instances-per-owner=1")
	ns := c.createNamespace(ctx, t, "bloat", podSecurityRestricted)
	createObject(ctx, t, c, ns, validDefinition("web"))
	const owner = "team-bloat"
	bloatedWatch, bloated := startChallenge(ctx, t, c, ns, platformChallenge("bloated", "web", owner, ""))
	bloatedWatch.phase(t, 60*time.Second, "Running")
	queuedWatch, queued := startChallenge(ctx, t, c, ns, platformChallenge("queued", "web", owner, ""))
	queuedWatch.phase(t, 60*time.Second, "Queued")

	platform := platformCluster(ctx, t, c, ns)
	challenges := platform.dyn.Resource(chalGVR).Namespace(ns)
	size := bloat(ctx, t, challenges, bloated.GetName(), bloatedBytes)
	t.Logf("the platform made Challenge %s %d bytes as stored", bloated.GetName(), size)

	// Stopping it is its own sync, and the queued one's start a sync of the other, which relates it.
	if _, err := challenges.Patch(ctx, bloated.GetName(), types.MergePatchType, []byte(`{"spec":{"stopped":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("stop the bloated Challenge: %v", err)
	}
	bloatedWatch.phase(t, 60*time.Second, "Stopped")
	queuedWatch.phase(t, 60*time.Second, "Running")

	if err := challenges.Delete(ctx, bloated.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the bloated Challenge: %v", err)
	}
	bloatedWatch.gone(t, 60*time.Second)
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the bloated instance's children gone", func() (bool, error) {
		return len(childrenOf(ctx, t, c, ns, bloated.GetUID())) == 0, nil
	})
	if err := challenges.Delete(ctx, queued.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	queuedWatch.gone(t, 60*time.Second)
	t.Logf("phases of the bloated instance: %v; of the queued one: %v", bloatedWatch.phases(), queuedWatch.phases())
}

// bloat grows the object to about size bytes as stored, with merge patches any holder of `patch`
// may send: an annotation of 200 KiB (within the API server's 256 KiB for all of them), then labels
// by the thousand (each key of its own, each value 63 bytes, each also owned in the writer's
// metadata.managedFields entry), until the object each patch answers (managedFields included, as
// Metacontroller sends it to the hook) is that large. (Hand-written managedFields entries are no
// way to it: the API server keeps one at first, and drops every entry, its own included, once its
// field manager fails to merge them.) It returns that size.
func bloat(ctx context.Context, t *testing.T, client dynamic.ResourceInterface, name string, size int) int {
	t.Helper()
	// patch sends a merge patch of metadata and returns the size of the object it answers, as stored.
	patch := func(what string, metadata map[string]any) int {
		t.Helper()
		body, err := json.Marshal(map[string]any{"metadata": metadata})
		if err != nil {
			t.Fatal(err)
		}
		stored, err := client.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("bloat %s with %s: %v", name, what, err)
		}
		raw, err := json.Marshal(stored.Object)
		if err != nil {
			t.Fatal(err)
		}
		return len(raw)
	}
	current := patch("an annotation", map[string]any{"annotations": map[string]string{"bloat.example/padding": strings.Repeat("x", 200<<10)}})
	const labelsPerPatch = 2000
	value := strings.Repeat("x", 63)
	for round := 0; current < size; round++ {
		labels := map[string]string{}
		for i := range labelsPerPatch {
			labels[fmt.Sprintf("bloat.example/l-%d-%04d", round, i)] = value
		}
		grown := patch(fmt.Sprintf("labels (%d bytes already)", current), map[string]any{"labels": labels})
		if grown <= current {
			t.Fatalf("bloat %s: the API server kept %d bytes of it after adding labels, %d before", name, grown, current)
		}
		current = grown
	}
	return current
}
