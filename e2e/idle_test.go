//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// lastActivityAnnotation is where whoever sees an instance's traffic stamps its last use.
const lastActivityAnnotation = "ctf.challenge-hook.dev/last-activity"

// idleTimeoutAnnotation is where the hook tells the writers of stamps on an instance's Services its
// idleTimeout.
const idleTimeoutAnnotation = "ctf.challenge-hook.dev/idle-timeout"

// idleTimeout is the definition's idleTimeout in TestIdleInstances.
const idleTimeout = 30 * time.Second

// TestIdleInstances: under the real Metacontroller, with --max-instances-per-owner=1 and a
// definition whose idleTimeout is 30s. "used" is stamped every 10 s for two minutes and stays
// Running all along; "idle" is never stamped and stops (Stopped, Idle, its Pod gone) within the
// idle timeout of its last activity plus a sync, with nothing but the hook's own wake-up to wake
// it; "waiting", queued behind "idle" (same owner), then starts, and is stamped from then on. A new
// stamp on "idle" brings it back, Queued behind "waiting", which holds its owner's one place. Once
// nobody stamps "used" and "waiting", they stop, and "idle" starts with a whole idle timeout ahead
// of it: the half minute it waited in the queue did not count as idleness.
func TestIdleInstances(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	restartSuiteHook(t, "--max-instances-per-owner=1")
	ns := c.createNamespace(ctx, t, "idle", podSecurityRestricted)
	def := validDefinition("web")
	spec(def)["idleTimeout"] = idleTimeout.String()
	createObject(ctx, t, c, ns, def)
	chals := c.dyn.Resource(chalGVR).Namespace(ns)
	get := func(name string) *unstructured.Unstructured {
		u, err := chals.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	state := func(name string) (phase, reason string) {
		u := get(name)
		phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
		reason, _, _ = unstructured.NestedString(u.Object, "status", "reason")
		return phase, reason
	}
	stamp := func(name string, at time.Time) {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, lastActivityAnnotation, at.UTC().Format(time.RFC3339))
		if _, err := chals.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podCount := func(name string) int {
		pods, err := c.dyn.Resource(podGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "ctf.challenge-hook.dev/challenge=" + name})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.GetDeletionTimestamp() == nil {
				n++
			}
		}
		return n
	}

	createObject(ctx, t, c, ns, platformChallenge("used", "web", "team-used", ""))
	createObject(ctx, t, c, ns, platformChallenge("idle", "web", "team-idle", ""))
	time.Sleep(1100 * time.Millisecond) // "waiting" is younger: behind "idle" in its owner's queue
	createObject(ctx, t, c, ns, platformChallenge("waiting", "web", "team-idle", ""))
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "used and idle Running, waiting Queued", func() (bool, error) {
		u, _ := state("used")
		i, _ := state("idle")
		w, _ := state("waiting")
		return u == "Running" && i == "Running" && w == "Queued", nil
	})
	readyAt, _, _ := unstructured.NestedString(get("idle").Object, "status", "readyAt")
	idleReady, err := time.Parse(time.RFC3339, readyAt)
	if err != nil {
		t.Fatalf("idle's readyAt %q: %v", readyAt, err)
	}

	// Two minutes: "used" stamped every 10 s, sampled every second; "idle" left alone.
	var idleStoppedAt, waitingRunningAt, idleRestampedAt time.Time
	begin := time.Now()
	nextStamp := begin
	for time.Since(begin) < 2*time.Minute {
		if !time.Now().Before(nextStamp) {
			stamp("used", time.Now())
			if !waitingRunningAt.IsZero() {
				stamp("waiting", time.Now())
			}
			nextStamp = nextStamp.Add(10 * time.Second)
		}
		if phase, reason := state("used"); phase != "Running" {
			t.Fatalf("%s after the stamps began, used (stamped every 10 s, idleTimeout %s) is %s/%s", time.Since(begin).Round(time.Second), idleTimeout, phase, reason)
		}
		if idleStoppedAt.IsZero() {
			if phase, reason := state("idle"); phase == "Stopped" && reason == "Idle" {
				idleStoppedAt = time.Now()
			}
		}
		if waitingRunningAt.IsZero() {
			if phase, _ := state("waiting"); phase == "Running" {
				waitingRunningAt = time.Now()
				// A new stamp brings idle back, behind waiting, which now holds its owner's one
				// place: it waits in the queue longer than its idle timeout.
				stamp("idle", time.Now())
				idleRestampedAt = time.Now()
			}
		}
		time.Sleep(time.Second)
	}
	if idleStoppedAt.IsZero() {
		phase, reason := state("idle")
		t.Fatalf("idle (never stamped, Ready at %s, idleTimeout %s) is still %s/%s two minutes later", readyAt, idleTimeout, phase, reason)
	}
	// Ready at idleReady, so idle from idleReady+idleTimeout; a sync (Metacontroller's wake-up on
	// resyncAfterSeconds, whole seconds) and the sampling add a few seconds.
	late := idleStoppedAt.Sub(idleReady.Add(idleTimeout))
	t.Logf("idle: Ready at %s, Stopped/Idle %.1fs after its idle deadline; used: Running for %s with a stamp every 10 s", readyAt, late.Seconds(), time.Since(begin).Round(time.Second))
	if late > 5*time.Second {
		t.Errorf("idle stopped %.1fs after its idle deadline: want within a sync (5 s)", late.Seconds())
	}
	if n := podCount("idle"); n != 0 {
		t.Errorf("idle is Stopped/Idle but has %d Pods", n)
	}
	if waitingRunningAt.IsZero() {
		t.Fatal("waiting, queued behind idle, did not start once idle stopped")
	}
	t.Logf("waiting: Running %.1fs after idle stopped", waitingRunningAt.Sub(idleStoppedAt).Seconds())
	e2eutil.WaitFor(ctx, t, time.Minute, "idle, stamped again, Queued behind waiting", func() (bool, error) {
		status, _, _ := unstructured.NestedMap(get("idle").Object, "status")
		if status["phase"] == "Queued" && status["queuePosition"] == int64(1) {
			return true, nil
		}
		return false, fmt.Errorf("idle is %v/%v: %v", status["phase"], status["reason"], status["message"])
	})

	// Nobody stamps used and waiting any more: they stop within their idle timeout and a sync, and
	// idle leaves the queue with its idle clock started again.
	stoppedStamping := time.Now()
	for _, name := range []string{"used", "waiting"} {
		e2eutil.WaitFor(ctx, t, idleTimeout+20*time.Second, name+" Stopped/Idle once nobody stamps it", func() (bool, error) {
			phase, reason := state(name)
			return phase == "Stopped" && reason == "Idle", nil
		})
		t.Logf("%s: Stopped/Idle %.1fs after the stamps stopped", name, time.Since(stoppedStamping).Seconds())
		if n := podCount(name); n != 0 {
			t.Errorf("%s is Stopped/Idle but has %d Pods", name, n)
		}
	}
	var admitted time.Time
	e2eutil.WaitFor(ctx, t, 30*time.Second, "idle Running again once waiting stopped", func() (bool, error) {
		phase, reason := state("idle")
		if phase == "Stopped" {
			return false, fmt.Errorf("idle is Stopped/%s: the time it waited in the queue counted as idleness", reason)
		}
		admitted = time.Now()
		return phase == "Running", nil
	})
	last, _, _ := unstructured.NestedString(get("idle").Object, "status", "lastActivityAt")
	lastActivity, err := time.Parse(time.RFC3339, last)
	if err != nil {
		t.Fatalf("idle's lastActivityAt %q: %v", last, err)
	}
	t.Logf("idle: Queued for %s (idleTimeout %s) after its new stamp, then Running with its last activity at %s, when it left the queue", admitted.Sub(idleRestampedAt).Round(time.Second), idleTimeout, last)
	if lastActivity.Before(stoppedStamping) {
		t.Errorf("idle's lastActivityAt %s is before it left the queue (after %s): its idle clock did not start again", last, stoppedStamping.UTC().Format(time.RFC3339))
	}
}
