//go:build e2enode

package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// The flood of TestPolicyGateUnderFlood: from this many Pods that no policy selects, this many new
// connections a second to each target from each Pod; and this many instances started under it.
const (
	flooders       = 3
	floodRate      = 500
	floodStarts    = 8
	saturatedPort  = 8080
	saturatedQueue = 8
)

// TestPolicyGateUnderFlood: nobody else's load opens the gate. Pods that no policy selects (the
// platform's namespace) flood two targets with new connections, holding those accepted: the gate's
// target (the policy-gate-target component, where nothing listens) and a saturated server (a
// listener that never accepts, with a queue of 8). While the flood runs:
//   - from a Pod no policy selects, wait-for-policy against the saturated server hears nothing
//     and reports "enforced" with no policy anywhere: the flood silences a target with a queue,
//     which is how it would open every gate that probed one;
//   - the same against the gate's target still hears its refusals ("still answers");
//   - new instances start (startGated: their only container probes denied targets from its first
//     moment): no denied target answers any of their attempts, and the gate waits about as long
//     as without the flood.
func TestPolicyGateUnderFlood(t *testing.T) {
	if gateState() != "on" {
		t.Skip("the policy gate is off (CHALLENGE_HOOK_POLICY_GATE=false)")
	}
	ctx := e2eutil.TestContext(t)
	saturated := hostPort(startSaturatedServer(ctx, t), saturatedPort)
	dropsBefore, dropsKnown := nfqueueDrops()
	backlogBefore, backlogKnown := softnetDrops()
	floodStarted := time.Now()
	names := startFlood(ctx, t, gateTarget, saturated)
	time.Sleep(3 * time.Second)

	if done := waitForPolicyUnpoliced(ctx, t, "flood-control-saturated", saturated, 5*time.Second); done.ExitCode != 0 {
		t.Fatalf("under the flood, the saturated server still answered a Pod no policy selects (%q): the flood silences no queue, and this test proves nothing", done.Message)
	}
	if done := waitForPolicyUnpoliced(ctx, t, "flood-control-target", gateTarget, 10*time.Second); done.ExitCode == 0 || !strings.Contains(done.Message, "still answers") {
		t.Errorf("under the flood, the gate's target went silent for a Pod no policy selects (exit %d, %q): the flood would open every gate", done.ExitCode, done.Message)
	}

	starts := startGatedInBatches(ctx, t, "flood", floodStarts)
	floodTime := time.Since(floodStarted)

	leaked := 0
	var gates []float64
	for _, s := range starts {
		total := s.deniedAnswers()
		if total > 0 {
			leaked++
		}
		if s.self == 0 || s.attempts == 0 {
			t.Errorf("%s: the prober did not work (control answered %d, %d attempts on denied targets)", s.name, s.self, s.attempts)
		}
		gates = append(gates, s.gate)
		t.Logf("%s: denied targets answered %d of %d attempts %v; gate %.3fs (its target answered %d probes first); Running after %.2fs",
			s.name, total, s.attempts, s.answered, s.gate, s.answers, s.running.Seconds())
	}

	counts := floodTotals(ctx, t, names)
	for _, target := range []string{gateTarget, saturated} {
		c := counts[target]
		t.Logf("FLOOD %s: %d attempts in %.0fs from %d Pods (%.0f a second): %d connected, %d refused (%d of them after more than 0.5s), %d timed out (1s), %d other",
			target, c.Attempts, floodTime.Seconds(), flooders, float64(c.Attempts)/floodTime.Seconds(), c.Connected, c.Refused, c.Slow, c.Timeouts, c.Others)
	}
	if c := counts[gateTarget]; c.Attempts < int64(flooders*floodRate*10) {
		t.Errorf("the flood of the gate's target: %+v: want at least %d attempts (10 s of it)", c, flooders*floodRate*10)
	}
	if dropsAfter, ok := nfqueueDrops(); dropsKnown && ok {
		t.Logf("the policy agent's queue dropped %d packets during the flood", dropsAfter-dropsBefore)
	}
	if backlogAfter, ok := softnetDrops(); backlogKnown && ok {
		t.Logf("the node's input backlog (net.core.netdev_max_backlog) dropped %d packets during the flood", backlogAfter-backlogBefore)
	}
	t.Logf("UNDER FLOOD: a denied target answered in %d of %d starts; gate p50 %.3fs, max %.3fs", leaked, len(starts), percentile(gates, 50), percentile(gates, 100))
	if leaked > 0 {
		t.Errorf("under the flood, a denied target answered the first moment of %d of %d new instances: their gate opened before their NetworkPolicy was enforced", leaked, len(starts))
	}
}

// startSaturatedServer runs a Pod in the platform's namespace whose listener never accepts, with
// a queue of saturatedQueue connections, and returns its address.
func startSaturatedServer(ctx context.Context, t *testing.T) string {
	t.Helper()
	const name = "saturated"
	pod := testPod(name, []string{"/ctfbox", "backlog", "-port=" + strconv.Itoa(saturatedPort), "-backlog=" + strconv.Itoa(saturatedQueue)})
	if _, err := kube.CoreV1().Pods(nsPlatform).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deletePodNow(nsPlatform, name) })
	var ip string
	e2eutil.WaitFor(ctx, t, time.Minute, "the saturated server running", func() (bool, error) {
		p, err := kube.CoreV1().Pods(nsPlatform).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ip = p.Status.PodIP
		return p.Status.Phase == corev1.PodRunning && ip != "", nil
	})
	return ip
}

// startFlood runs the flooders in the platform's namespace and returns their names once each runs.
func startFlood(ctx context.Context, t *testing.T, targets ...string) []string {
	t.Helper()
	var names []string
	for i := range flooders {
		name := fmt.Sprintf("flood-%d", i)
		args := append([]string{"/ctfbox", "flood", "-rate=" + strconv.Itoa(floodRate), "-inflight=1024", "-hold=60s"}, targets...)
		if _, err := kube.CoreV1().Pods(nsPlatform).Create(ctx, testPod(name, args), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { deletePodNow(nsPlatform, name) })
		names = append(names, name)
	}
	for _, name := range names {
		e2eutil.WaitFor(ctx, t, time.Minute, name+" running", func() (bool, error) {
			p, err := kube.CoreV1().Pods(nsPlatform).Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, err
		})
	}
	return names
}

// floodCounts is one target's tally, as ctfbox flood prints it every second.
type floodCounts struct {
	T                                                    time.Time
	Target                                               string
	Attempts, Connected, Refused, Timeouts, Others, Slow int64
}

// floodTotals sums the flooders' logs by target.
func floodTotals(ctx context.Context, t *testing.T, names []string) map[string]floodCounts {
	t.Helper()
	totals := map[string]floodCounts{}
	for _, name := range names {
		logs, err := kube.CoreV1().Pods(nsPlatform).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("%s's log: %v", name, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(logs))
		for sc.Scan() {
			var c floodCounts
			if json.Unmarshal(sc.Bytes(), &c) != nil || c.Target == "" {
				continue
			}
			if (c.Timeouts > 0 || c.Slow > 0) && c.Target == gateTarget {
				t.Logf("%s at %s: of %d attempts on the gate's target, %d answered after more than 0.5s, %d timed out (1s)", name, c.T.Format("15:04:05"), c.Attempts, c.Slow, c.Timeouts)
			}
			sum := totals[c.Target]
			sum.Target = c.Target
			sum.Attempts += c.Attempts
			sum.Connected += c.Connected
			sum.Refused += c.Refused
			sum.Timeouts += c.Timeouts
			sum.Others += c.Others
			sum.Slow += c.Slow
			totals[c.Target] = sum
		}
	}
	return totals
}

// testPod is a Pod of the test image (ctfbox) running command, restricted as Pod Security asks.
func testPod(name string, command []string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsPlatform},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(0)),
			SecurityContext:               restrictedPod(),
			Containers: []corev1.Container{{
				Name: "main", Image: "local/ctfbox:v1", ImagePullPolicy: corev1.PullNever,
				Command: command, SecurityContext: restrictedContainer(),
			}},
		},
	}
}

func deletePodNow(ns, name string) {
	_ = kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
}

// nfqueueDrops is how many packets the kernel dropped because the policy agent's queues were full
// (the queue_dropped column of /proc/net/netfilter/nfnetlink_queue, summed), when readable.
func nfqueueDrops() (int64, bool) { return columnSum("/proc/net/netfilter/nfnetlink_queue", 5, 10) }

// softnetDrops is how many packets the node's CPUs dropped because their input backlog was full
// (the second column of /proc/net/softnet_stat, in hex, summed), when readable.
func softnetDrops() (int64, bool) { return columnSum("/proc/net/softnet_stat", 1, 16) }

// columnSum sums one column (0-based, numbers in base) of a /proc table, a line per row; false
// when the file or a row is unreadable.
func columnSum(path string, column, base int) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	var total int64
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue // no rows (no queue bound)
		}
		if len(fields) <= column {
			return 0, false
		}
		n, err := strconv.ParseInt(fields[column], base, 64)
		if err != nil {
			return 0, false
		}
		total += n
	}
	return total, true
}
