//go:build e2enode

package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// probeResult is one line of ctfbox probe: one new connection to one target.
type probeResult struct {
	T      time.Time `json:"t"`
	Target string    `json:"target"`
	OK     bool      `json:"ok"`
	Ms     float64   `json:"ms"`
	Err    string    `json:"err"`
}

func (p probeResult) end() time.Time { return p.T.Add(time.Duration(p.Ms * float64(time.Millisecond))) }

// timeline names the phases of a run: a probe belongs to the last phase begun before it.
type timeline struct {
	mu    sync.Mutex
	names []string
	at    []time.Time
}

func (tl *timeline) mark(t *testing.T, name string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.names = append(tl.names, name)
	tl.at = append(tl.at, time.Now())
	t.Logf("phase %s", name)
}

func (tl *timeline) phaseAt(at time.Time) (string, time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	i := sort.Search(len(tl.at), func(i int) bool { return tl.at[i].After(at) }) - 1
	if i < 0 {
		return "before", time.Time{}
	}
	return tl.names[i], tl.at[i]
}

// spans are the [start, end) of every occurrence of phase (the last one ends at the zero time: now).
func (tl *timeline) spans(phase string) [][2]time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out [][2]time.Time
	for i, n := range tl.names {
		if n != phase {
			continue
		}
		end := time.Now().Add(time.Hour)
		if i+1 < len(tl.at) {
			end = tl.at[i+1]
		}
		out = append(out, [2]time.Time{tl.at[i], end})
	}
	return out
}

// phaseOrder is the order phases are printed in (a phase may recur: victim-running thrice).
func (tl *timeline) phaseOrder() []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var out []string
	for _, n := range tl.names {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// collector tallies probe results by phase and target, and keeps the answered ones.
type collector struct {
	tl    *timeline
	mu    sync.Mutex
	count map[string]map[string]*[2]int // phase -> target -> [answered, not answered]
	all   []probeResult
}

func newCollector(tl *timeline) *collector {
	return &collector{tl: tl, count: map[string]map[string]*[2]int{}}
}

// read consumes ctfbox probe output until EOF. A probe counts in the phase in which it ended: a
// connection dropped at first may get through with a retransmission after a policy is gone.
func (c *collector) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var p probeResult
		if json.Unmarshal(sc.Bytes(), &p) != nil || p.Target == "" {
			continue
		}
		phase, _ := c.tl.phaseAt(p.end())
		c.mu.Lock()
		if c.count[phase] == nil {
			c.count[phase] = map[string]*[2]int{}
		}
		if c.count[phase][p.Target] == nil {
			c.count[phase][p.Target] = &[2]int{}
		}
		if p.OK {
			c.count[phase][p.Target][0]++
		} else {
			c.count[phase][p.Target][1]++
		}
		c.all = append(c.all, p)
		c.mu.Unlock()
	}
}

// results are the probes of target that ended in [from, to), by end time.
func (c *collector) results(target string, from, to time.Time) []probeResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []probeResult
	for _, p := range c.all {
		if p.Target == target && !p.end().Before(from) && p.end().Before(to) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].end().Before(out[j].end()) })
	return out
}

func (c *collector) get(phase, target string) (answered, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.count[phase][target]; n != nil {
		return n[0], n[0] + n[1]
	}
	return 0, 0
}

// table prints answered/total per target and phase.
func (c *collector) table(t *testing.T, title string, targets []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: answered/attempts per phase and target\n", title)
	fmt.Fprintf(&b, "%-20s", "phase")
	for _, tg := range targets {
		fmt.Fprintf(&b, " %16s", tg)
	}
	b.WriteString("\n")
	for _, ph := range append([]string{"before"}, c.tl.phaseOrder()...) {
		row := fmt.Sprintf("%-20s", ph)
		any := false
		for _, tg := range targets {
			ok, n := c.get(ph, tg)
			any = any || n > 0
			row += fmt.Sprintf(" %16s", fmt.Sprintf("%d/%d", ok, n))
		}
		if any {
			b.WriteString(row + "\n")
		}
	}
	t.Log("\n" + b.String())
	return b.String()
}

// Attacker targets. Every one of them is denied by the threat model, except the controls: self (its
// own loopback: proves the prober runs) and node-kubelet (the kubelet's port on the node IP:
// kube-network-policies polices forwarded traffic only, so a Pod reaching its own node's address
// is not judged by NetworkPolicy here; reported, not asserted).
var (
	deniedTargets  = []string{"victim-pod-tcp", "victim-pod-http", "victim-pod-udp", "victim-svc", "victim-nodeport", "db", "db-udp", "neighbour"}
	controlTargets = []string{"self", "node-kubelet"}
	hostTargets    = []string{"player-nodeport", "control-db", "control-neighbour"}
)

// TestIsolation proves the isolation of instances with real packets across the whole life of an
// instance: an attacker instance (its own Challenge, its process ignoring SIGTERM) opens a new
// connection every 200 ms to the victim instance's Pod IP, Service and NodePort, to a Pod outside
// any instance (the stand-in for the API server, kubelets, metadata service and platform
// database) and to a Pod in another namespace, while the victim is created, runs, is stopped,
// started, restarted, expires and is deleted, and then while the attacker itself is torn down
// (expiry without egress, deletion with egress). Meanwhile the player, on the host as an
// unprivileged user, reaches the victim's NodePort. It prints the counts per target and phase.
func TestIsolation(t *testing.T) {
	for _, egress := range []bool{false, true} {
		t.Run(fmt.Sprintf("egress=%v", egress), func(t *testing.T) { isolation(t, egress) })
	}
}

func isolation(t *testing.T, egress bool) {
	ctx := e2eutil.TestContext(t)
	apply(ctx, t, webDefinition)
	suffix, teardown := "e0", "expire"
	if egress {
		suffix, teardown = "e1", "delete"
	}
	attacker, victim := "attacker-"+suffix, "victim-"+suffix
	tl := &timeline{}
	atk := newCollector(tl)
	host := newCollector(tl)

	// ---- the attacker: its first probes start with its container
	tl.mark(t, "attacker-start")
	apply(ctx, t, inlineChallenge(attacker, attacker, fmt.Sprintf(`
    containers:
      - name: attacker
        image: local/attacker:v1
        args: [-listen=:8080, self=tcp://127.0.0.1:8080, db=tcp://%s:8080, db-udp=udp://%s:1337, neighbour=tcp://%s:8080, node-kubelet=tcp://%s:%s]
        ports: [{name: ctl, containerPort: 8080}]
    terminationGracePeriodSeconds: 30
    egress: %v
    timeout: 30m
    maxLifetime: 2h
`, targets["db"], targets["db"], targets["neighbour"], cfg.nodeIP, cfg.kubeletPort, egress)))
	t.Cleanup(func() {
		_ = dyn.Resource(chalGVR).Namespace(nsCTF).Delete(context.Background(), attacker, metav1.DeleteOptions{})
	})
	t.Cleanup(func() {
		_ = dyn.Resource(chalGVR).Namespace(nsCTF).Delete(context.Background(), victim, metav1.DeleteOptions{})
	})
	var atkIP string
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "the attacker's container running", func() (bool, error) {
		p, err := kube.CoreV1().Pods(nsCTF).Get(ctx, attacker, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		atkIP = p.Status.PodIP
		return atkIP != "" && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil, nil
	})
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		stream, err := kube.CoreV1().Pods(nsCTF).GetLogs(attacker, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			t.Errorf("follow the attacker's log: %v", err)
			return
		}
		defer stream.Close()
		atk.read(stream)
	}()
	waitPhase(ctx, t, attacker, "Running", "Ready", 2*time.Minute)
	tl.mark(t, "attacker-running")
	time.Sleep(2 * time.Second)

	push := func(lines ...string) {
		t.Helper()
		resp, err := http.Post("http://"+hostPort(atkIP, 8080)+"/targets", "text/plain", strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Fatalf("push targets to the attacker: %v", err)
		}
		resp.Body.Close()
	}

	// ---- the victim's life
	tl.mark(t, "victim-creating")
	apply(ctx, t, challengeOf(victim, victim, "web"))
	var svc *corev1.Service
	e2eutil.WaitFor(ctx, t, time.Minute, "the victim's Service with node ports", func() (bool, error) {
		s, err := kube.CoreV1().Services(nsCTF).Get(ctx, victim, metav1.GetOptions{})
		if err != nil || len(s.Spec.Ports) == 0 || s.Spec.Ports[0].NodePort == 0 {
			return false, nil
		}
		svc = s
		return true, nil
	})
	var httpNodePort int32
	for _, p := range svc.Spec.Ports {
		if p.Port == 8080 {
			httpNodePort = p.NodePort
		}
	}
	push("victim-svc=tcp://"+hostPort(svc.Spec.ClusterIP, 8080), fmt.Sprintf("victim-nodeport=tcp://%s:%d", cfg.nodeIP, httpNodePort))
	stopPlayer := startHostProber(t, host, fmt.Sprintf("player-nodeport=tcp://%s:%d", cfg.nodeIP, httpNodePort),
		"control-db=tcp://"+hostPort(targets["db"], 8080), "control-neighbour=tcp://"+hostPort(targets["neighbour"], 8080))
	defer stopPlayer()
	// Every new Pod of the victim gets a new IP: aim at it as soon as it is known.
	victimIP := ""
	aimAtVictimPod := func() {
		t.Helper()
		e2eutil.WaitFor(ctx, t, time.Minute, "the victim's new Pod IP", func() (bool, error) {
			p, err := kube.CoreV1().Pods(nsCTF).Get(ctx, victim, metav1.GetOptions{})
			if err != nil || p.Status.PodIP == "" || p.Status.PodIP == victimIP || p.DeletionTimestamp != nil {
				return false, nil
			}
			victimIP = p.Status.PodIP
			return true, nil
		})
		push("victim-pod-tcp=tcp://"+hostPort(victimIP, 1337), "victim-pod-http=tcp://"+hostPort(victimIP, 8080), "victim-pod-udp=udp://"+hostPort(victimIP, 1337))
	}
	aimAtVictimPod()
	waitPhase(ctx, t, victim, "Running", "Ready", 2*time.Minute)
	tl.mark(t, "victim-running")
	time.Sleep(3 * time.Second)

	tl.mark(t, "victim-stopping")
	patchChallenge(ctx, t, victim, `{"stopped":true}`)
	waitPhase(ctx, t, victim, "Stopped", "", time.Minute)
	waitPodGone(ctx, t, victim)
	tl.mark(t, "victim-stopped")
	time.Sleep(2 * time.Second)

	tl.mark(t, "victim-starting")
	patchChallenge(ctx, t, victim, `{"stopped":false}`)
	aimAtVictimPod()
	waitPhase(ctx, t, victim, "Running", "Ready", 2*time.Minute)
	tl.mark(t, "victim-running")
	time.Sleep(2 * time.Second)

	tl.mark(t, "victim-restarting")
	patchChallenge(ctx, t, victim, fmt.Sprintf(`{"restartedAt":%q}`, time.Now().UTC().Format(time.RFC3339)))
	aimAtVictimPod()
	waitPhase(ctx, t, victim, "Running", "Ready", 2*time.Minute)
	tl.mark(t, "victim-running")
	time.Sleep(2 * time.Second)

	tl.mark(t, "victim-expiring")
	patchChallenge(ctx, t, victim, `{"expiresAt":"2001-01-01T00:00:00Z"}`)
	waitPhase(ctx, t, victim, "Expired", "", time.Minute)
	waitPodGone(ctx, t, victim)
	tl.mark(t, "victim-expired")
	time.Sleep(2 * time.Second)

	tl.mark(t, "victim-deleting")
	deleteChallenge(ctx, t, victim, time.Minute)
	tl.mark(t, "attacker-alone")
	time.Sleep(2 * time.Second)

	// ---- the attacker's own teardown: its process ignores SIGTERM and lives until SIGKILL at the
	// end of the grace period; its log ends with it.
	tl.mark(t, "attacker-teardown")
	teardownAt := time.Now()
	if teardown == "expire" {
		patchChallenge(ctx, t, attacker, `{"expiresAt":"2001-01-01T00:00:00Z"}`)
	} else if err := dyn.Resource(chalGVR).Namespace(nsCTF).Delete(ctx, attacker, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-logsDone:
	case <-time.After(2 * time.Minute):
		t.Errorf("the attacker's log did not end within 2 minutes of its %s", teardown)
	}
	waitPodGone(ctx, t, attacker)
	t.Logf("attacker's Pod gone %.1fs after its %s", time.Since(teardownAt).Seconds(), teardown)
	stopPlayer()

	// ---- verdicts
	title := fmt.Sprintf("attacker (egress: %v, teardown by %s)", egress, teardown)
	atk.table(t, title, append(append([]string{}, deniedTargets...), controlTargets...))
	host.table(t, "player on the host (uid 65534)", hostTargets)
	report(t, atk, tl, teardownAt)

	if ok, _ := atk.get("attacker-running", "self"); ok == 0 {
		t.Errorf("the attacker's control probe (its own port) never answered: the prober does not work")
	}
	for _, ph := range tl.phaseOrder() {
		if ph == "attacker-start" && gateState() != "on" {
			continue // reported above: without the policy gate, the window before the agent knows the new Pod
		}
		for _, tg := range deniedTargets {
			if ok, n := atk.get(ph, tg); ok > 0 {
				t.Errorf("phase %s: the attacker reached %s %d times out of %d", ph, tg, ok, n)
			}
		}
		// The controls: the Pods outside any instance were up (else a denied count proves nothing).
		for _, tg := range []string{"control-db", "control-neighbour"} {
			if ok, n := host.get(ph, tg); n > 0 && ok == 0 {
				t.Errorf("phase %s: the host never reached %s (%d attempts): the target was not up", ph, tg, n)
			}
		}
	}
	for _, tg := range []string{"control-db", "control-neighbour"} {
		for _, p := range host.results(tg, time.Time{}, time.Now().Add(time.Hour)) {
			if !p.OK {
				t.Logf("control %s failed once at %s: %s", tg, p.T.Format("15:04:05.000"), p.Err)
			}
		}
	}
	// The player reaches the victim's NodePort whenever it runs: from the first answer after the
	// status says Running (kube-proxy programs the node port from the EndpointSlice, a moment after
	// the Pod is ready), every attempt.
	for i, span := range tl.spans("victim-running") {
		rs := host.results("player-nodeport", span[0], span[1])
		first := slices.IndexFunc(rs, func(p probeResult) bool { return p.OK })
		if first < 0 {
			t.Errorf("victim running (%d): the player never reached the NodePort in %d attempts", i+1, len(rs))
			continue
		}
		t.Logf("victim running (%d): the player's first answer from the NodePort %.2fs after Running; %d attempts before it",
			i+1, rs[first].end().Sub(span[0]).Seconds(), first)
		for _, p := range rs[first+1:] {
			if !p.OK {
				t.Errorf("victim running (%d): the player's attempt at %s failed after it had answered: %s", i+1, p.T.Format("15:04:05.000"), p.Err)
			}
		}
	}
}

// report prints when denied targets answered at the attacker's start and at its teardown.
func report(t *testing.T, atk *collector, tl *timeline, teardownAt time.Time) {
	atk.mu.Lock()
	defer atk.mu.Unlock()
	var firstProbe time.Time
	var startOK, teardownOK []probeResult
	for _, p := range atk.all {
		if firstProbe.IsZero() || p.T.Before(firstProbe) {
			firstProbe = p.T
		}
		if !p.OK || !slices.Contains(deniedTargets, p.Target) {
			continue
		}
		switch ph, _ := tl.phaseAt(p.end()); ph {
		case "attacker-start":
			startOK = append(startOK, p)
		case "attacker-teardown":
			teardownOK = append(teardownOK, p)
		}
	}
	window := func(ps []probeResult, since time.Time) (map[string]int, float64, float64) {
		per := map[string]int{}
		first, last := ps[0].end(), ps[0].end()
		for _, p := range ps {
			first, last = minTime(first, p.end()), maxTime(last, p.end())
			per[p.Target]++
		}
		return per, first.Sub(since).Seconds(), last.Sub(since).Seconds()
	}
	if len(startOK) > 0 {
		per, first, last := window(startOK, firstProbe)
		t.Logf("WINDOW at the attacker's start: %d answers from denied targets %v, %.2fs to %.2fs after its first probe", len(startOK), per, first, last)
	} else {
		t.Logf("WINDOW at the attacker's start: none")
	}
	if len(teardownOK) > 0 {
		per, first, last := window(teardownOK, teardownAt)
		t.Logf("WINDOW at the attacker's teardown: %d answers from denied targets %v, %.2fs to %.2fs after the trigger", len(teardownOK), per, first, last)
	} else {
		t.Logf("WINDOW at the attacker's teardown: none")
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func waitPodGone(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "Pod "+name+" gone", func() (bool, error) {
		_, err := kube.CoreV1().Pods(nsCTF).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// ctfboxForPlayers is a copy of the test server and prober that uid 65534 may run: t.TempDir's
// directories are 0700, so each one up to the system's temporary directory is opened to all.
func ctfboxForPlayers(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ctfbox")
	data, err := os.ReadFile(cfg.ctfbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(bin); d != "/"; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755) // t.TempDir's directories are 0700
		if d == os.TempDir() {
			break
		}
	}
	return bin
}

// startHostProber runs ctfbox probe on the host as uid/gid 65534: the player outside the cluster.
// Not root, so that the policy agent judges its packets (it lets root's own sockets through, as
// the kubelet's probes need). The returned func stops it and waits for its output to be read.
func startHostProber(t *testing.T, c *collector, targets ...string) func() {
	t.Helper()
	bin := ctfboxForPlayers(t)
	cmd := exec.Command(bin, append([]string{"probe", "-listen="}, targets...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.read(out); close(done) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-done
			_ = cmd.Wait()
		})
	}
}
