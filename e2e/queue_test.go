//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

const ownerLabel = "ctf.challenge-hook.dev/owner"

// podSample is how many Pods (not being deleted) each owner had at one moment.
type podSample struct {
	at     time.Time
	owners map[string]int
}

// samplePods lists the namespace's Pods every interval until ctx ends.
func samplePods(ctx context.Context, c *cluster, ns string, interval time.Duration) func() []podSample {
	var mu sync.Mutex
	var samples []podSample
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, err := c.dyn.Resource(podGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				s := podSample{at: time.Now(), owners: map[string]int{}}
				for _, p := range pods.Items {
					if p.GetDeletionTimestamp() == nil {
						s.owners[p.GetLabels()[ownerLabel]]++
					}
				}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	return func() []podSample {
		<-done
		return samples
	}
}

// TestOwnerQueue: with --max-instances-per-owner=2 under the real Metacontroller, owners create
// five Challenges each at once. Pods are sampled all along: once every Challenge has been synced
// (the first sync settled), no owner ever has more than 2 Pods; before that, the test measures how
// long any owner had more (a cache lag) and shows that it ended by itself. Each owner has two
// Running, the others Queued at positions 1..3 in creation order (time, then name). Then one
// owner's running instances end (one deleted, one stopped): its queued ones start in order, and
// no Pod of another owner changes. E2E_QUEUE_OWNERS sets how many owners (default 20).
func TestOwnerQueue(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	restartSuiteHook(t, "--max-instances-per-owner=2")
	ns := c.createNamespace(ctx, t, "queue", podSecurityRestricted)
	createObject(ctx, t, c, ns, validDefinition("web"))
	owners := 20
	if n, err := strconv.Atoi(os.Getenv("E2E_QUEUE_OWNERS")); err == nil && n > 0 {
		owners = n
	}
	const perOwner, limit = 5, 2

	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := samplePods(sampleCtx, c, ns, 200*time.Millisecond)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, owners*perOwner)
	for o := range owners {
		for i := range perOwner {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := fmt.Sprintf("team-%02d", o)
				chal := platformChallenge(fmt.Sprintf("%s-%d", owner, i), "web", owner, "")
				chal.SetLabels(map[string]string{ownerLabel: owner})
				chal.SetNamespace(ns)
				if _, err := c.dyn.Resource(chalGVR).Namespace(ns).Create(ctx, chal, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create: %v", err)
	}
	t.Logf("%d Challenges of %d owners created in %s", owners*perOwner, owners, time.Since(start).Round(time.Millisecond))

	list := func() []unstructured.Unstructured {
		l, err := c.dyn.Resource(chalGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	phase := func(u unstructured.Unstructured) string {
		p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return p
	}
	var settled time.Time
	e2eutil.WaitFor(ctx, t, 3*time.Minute, "every Challenge synced once", func() (bool, error) {
		for _, u := range list() {
			if phase(u) == "" {
				return false, nil
			}
		}
		settled = time.Now()
		return true, nil
	})
	// byOwner is each owner's Challenges in queue order: creation time, then name.
	byOwner := func(items []unstructured.Unstructured) map[string][]unstructured.Unstructured {
		out := map[string][]unstructured.Unstructured{}
		for _, u := range items {
			owner, _, _ := unstructured.NestedString(u.Object, "spec", "owner")
			out[owner] = append(out[owner], u)
		}
		for _, l := range out {
			slices.SortFunc(l, func(a, b unstructured.Unstructured) int {
				if c := a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time); c != 0 {
					return c
				}
				return strings.Compare(a.GetName(), b.GetName())
			})
		}
		return out
	}
	// splitOf is an owner's Running Challenges and its Queued ones by position, when it has
	// exactly limit Running and the others Queued at 1, 2, ... in creation order.
	splitOf := func(l []unstructured.Unstructured) (running, queued []unstructured.Unstructured, ok bool) {
		for _, u := range l {
			switch phase(u) {
			case "Running":
				running = append(running, u)
			case "Queued":
				queued = append(queued, u)
			default:
				return nil, nil, false
			}
		}
		for i, u := range queued { // l is in creation order, so queued is too
			if pos, _, _ := unstructured.NestedInt64(u.Object, "status", "queuePosition"); pos != int64(i+1) {
				return nil, nil, false
			}
		}
		return running, queued, len(running) == limit
	}
	e2eutil.WaitFor(ctx, t, 5*time.Minute, "each owner 2 Running, the others Queued at 1..3 in creation order", func() (bool, error) {
		for _, l := range byOwner(list()) {
			if _, _, ok := splitOf(l); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	notFirst := 0
	for _, l := range byOwner(list()) {
		if phase(l[0]) != "Running" || phase(l[1]) != "Running" {
			notFirst++
		}
	}
	t.Logf("owners whose two oldest Challenges are not the two running (one admitted before Metacontroller's cache held an older one keeps its place): %d of %d", notFirst, owners)
	allRunning := time.Now()
	// What one related Challenge adds to each sync request of its owner's Challenges: the object as
	// the API server serves it (managedFields included), as Metacontroller sends it.
	largest := 0
	for _, u := range list() {
		body, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, len(body))
	}
	t.Logf("largest Challenge %d bytes: an owner's Challenges of one namespace fit the hook's default --max-request-bytes (%d bytes) up to about %d", largest, hookMaxRequestBytes, hookMaxRequestBytes/largest)
	t.Logf("first sync of every Challenge settled %s after the creates began; the expected Running/Queued split %s after",
		settled.Sub(start).Round(time.Millisecond), allRunning.Sub(start).Round(time.Millisecond))

	// One owner's instances end: one running is deleted, the other stopped.
	running, queued, _ := splitOf(byOwner(list())["team-00"])
	drained := append(running, queued...)
	others := map[types.UID]string{}
	pods, err := c.dyn.Resource(podGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.GetLabels()[ownerLabel] != "team-00" {
			others[p.GetUID()] = p.GetName()
		}
	}
	endAt := time.Now()
	if err := c.dyn.Resource(chalGVR).Namespace(ns).Delete(ctx, drained[0].GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.dyn.Resource(chalGVR).Namespace(ns).Patch(ctx, drained[1].GetName(), types.MergePatchType, []byte(`{"spec":{"stopped":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var startedAt map[string]time.Time
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "team-00's queue drained in order: 2 and 3 Running, 4 Queued at 1", func() (bool, error) {
		got := map[string]unstructured.Unstructured{}
		for _, u := range list() {
			got[u.GetName()] = u
		}
		pos, _, _ := unstructured.NestedInt64(got[drained[4].GetName()].Object, "status", "queuePosition")
		if phase(got[drained[2].GetName()]) != "Running" || phase(got[drained[3].GetName()]) != "Running" || phase(got[drained[4].GetName()]) != "Queued" || pos != 1 {
			return false, nil
		}
		startedAt = map[string]time.Time{}
		for _, i := range []int{2, 3} {
			readyAt, _, _ := unstructured.NestedString(got[drained[i].GetName()].Object, "status", "readyAt")
			ready, _ := time.Parse(time.RFC3339, readyAt)
			startedAt[drained[i].GetName()] = ready
		}
		return true, nil
	})
	t.Logf("team-00: %s deleted and %s stopped; %s and %s Running %s after (readyAt %v), %s still Queued at 1",
		drained[0].GetName(), drained[1].GetName(), drained[2].GetName(), drained[3].GetName(), time.Since(endAt).Round(time.Millisecond), startedAt, drained[4].GetName())
	stopSampling()
	got := samples()

	pods, err = c.dyn.Resource(podGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	still := map[types.UID]bool{}
	for _, p := range pods.Items {
		still[p.GetUID()] = true
	}
	for uid, name := range others {
		if !still[uid] {
			t.Errorf("Pod %s of another owner was replaced or removed while team-00's queue drained", name)
		}
	}

	var overFirst, overLast time.Time
	maxAfter := 0
	for _, s := range got {
		for owner, n := range s.owners {
			if n > limit {
				if overFirst.IsZero() {
					overFirst = s.at
				}
				overLast = s.at
				if s.at.After(settled) {
					t.Errorf("%s: owner %s has %d Pods after the first sync settled", s.at.Format(time.RFC3339Nano), owner, n)
				}
			}
			if s.at.After(settled) && n > maxAfter {
				maxAfter = n
			}
		}
	}
	if overFirst.IsZero() {
		t.Logf("%d samples: no owner ever had more than %d Pods (most after settling: %d)", len(got), limit, maxAfter)
	} else {
		t.Logf("%d samples: an owner had more than %d Pods from %s to %s after the creates began (%s), then never again; most after settling: %d",
			len(got), limit, overFirst.Sub(start).Round(time.Millisecond), overLast.Sub(start).Round(time.Millisecond), overLast.Sub(overFirst).Round(time.Millisecond), maxAfter)
	}
}
