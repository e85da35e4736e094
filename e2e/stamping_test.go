//go:build e2e && scale

package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// stampQuarter is the activity stamper's coalescing: it writes an instance's stamp at most once
// per quarter of its idleTimeout, however busy the instance is.
const stampQuarter = 4

// measureStamping is make bench-cluster's stamping window (BENCH_IDLE_TIMEOUT set): every
// instance is stamped once, at an even pace over the window, with the merge patch of the
// last-activity annotation of its Service (named after the Challenge: one pod, one exposure) that
// the activity stamper sends; then the window goes on until the stamps' syncs are answered. What
// the control plane spent beyond its idle rate (idleRate, CPU seconds per second in the steady
// window just before) is the cost of the stamps: per stamp, and per instance in use per second at
// the stamper's pace of one stamp per quarter idleTimeout.
func measureStamping(ctx context.Context, t *testing.T, c *cluster, r *report, cpu *cpuMeter, auditLog, ns string, names []string, idleTimeout time.Duration, window time.Duration, idleRate float64) {
	t.Helper()
	syncs0 := hookSyncs(t)
	cpu.sample(t)
	from := time.Now()
	pace := window / time.Duration(len(names))
	stamps := make(chan string)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range stamps {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, lastActivityAnnotation, time.Now().UTC().Format(time.RFC3339))
				if _, err := c.dyn.Resource(serviceGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Errorf("stamp %s: %v", name, err)
				}
			}
		}()
	}
	tick := time.NewTicker(pace)
	for _, name := range names {
		stamps <- name
		<-tick.C
	}
	tick.Stop()
	close(stamps)
	wg.Wait()
	// The last stamps' syncs: Metacontroller answers within a second or two of an event.
	time.Sleep(10 * time.Second)
	to := time.Now()
	spent := cpu.sample(t)
	syncs := hookSyncs(t) - syncs0

	plane := 0.0
	for _, name := range []string{"kube-apiserver", "etcd", "metacontroller", "challenge-hook"} {
		plane += spent.seconds[name]
	}
	elapsed := to.Sub(from).Seconds()
	extra := plane - idleRate*elapsed
	perStamp := extra / float64(len(names))
	audit := readAudit(t, auditLog, ns)
	r.linef("stamping window        %d stamps over %s (+10 s), idleTimeout %s: CPU %s", len(names), window, idleTimeout, spent.format())
	r.linef("  per stamp            %.2f hook syncs; API writes by component (the test's own are the stamps):", float64(syncs)/float64(len(names)))
	for _, comp := range audit.components() {
		if writes := audit.writes(comp, from, to); len(writes) > 0 {
			r.linef("    %-22s %s", comp, formatCounts(writes, len(names)))
		}
	}
	r.linef("  cost                 %.2f ms of control-plane CPU per stamp beyond the idle rate (%.1f s in %.0f s, idle rate %.3f CPU-s/s); at one stamp per %s (a quarter of idleTimeout) %.4f ms per instance in use per second",
		1000*perStamp, plane, elapsed, idleRate, idleTimeout/stampQuarter, 1000*perStamp/(idleTimeout/stampQuarter).Seconds())
}
