//go:build e2e && scale

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// TestScale is `make bench-cluster` (hack/bench-cluster.sh), never part of `make e2e`: it creates
// $BENCH_CHALLENGES Challenges at once (the README's example definition, one Challenge per team)
// and reports how the hook, Metacontroller and the control plane get them all Running, then
// watches a steady window in which no child may be written. Figures go to the test log; the
// script prints them and docs/capacity.md records a run.
func TestScale(t *testing.T) {
	n := envInt(t, "BENCH_CHALLENGES", 500)
	steady := time.Duration(envInt(t, "BENCH_STEADY_SECONDS", int(shared.resync/time.Second)+15)) * time.Second
	settle := time.Duration(envInt(t, "BENCH_SETTLE_SECONDS", 125)) * time.Second
	auditLog, pidsDir := os.Getenv("BENCH_AUDIT_LOG"), os.Getenv("BENCH_PIDS_DIR")
	if auditLog == "" || pidsDir == "" {
		t.Fatal("BENCH_AUDIT_LOG and BENCH_PIDS_DIR are not set: run `make bench-cluster`")
	}
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "scale", podSecurityRestricted)

	var def, chal *unstructured.Unstructured
	for _, s := range readmeSamples(t, c.root) {
		switch s.obj.GetKind() {
		case "ChallengeDefinition":
			def = cleanForCreate(s.obj, ns)
		case "Challenge":
			chal = cleanForCreate(s.obj, ns)
		}
	}
	if def == nil || chal == nil {
		t.Fatal("README.md has no ChallengeDefinition and Challenge example")
	}
	var idleTimeout time.Duration
	if v := os.Getenv("BENCH_IDLE_TIMEOUT"); v != "" {
		var err error
		if idleTimeout, err = time.ParseDuration(v); err != nil {
			t.Fatalf("BENCH_IDLE_TIMEOUT=%q: %v", v, err)
		}
		spec(def)["idleTimeout"] = idleTimeout.String()
	}
	createObject(ctx, t, c, ns, def)
	owners := withOwnerLimit(t, n)
	shards := envInt(t, "BENCH_SHARDS", 1)
	if shards == 2 {
		registerShards(ctx, t, c)
	}

	cpu := newCPUMeter(t, pidsDir, shared.hook.proc.Pid())
	hookSyncs0 := hookSyncs(t)
	start := time.Now()
	created := createChallenges(ctx, t, c, ns, chal, n, shards, owners)
	createdIn := time.Since(start)

	// Poll once a second: the first time each Challenge is seen Running.
	runningAt := map[string]time.Time{}
	var readyDelays []float64
	for len(runningAt) < n {
		if time.Since(start) > 15*time.Minute {
			t.Fatalf("after 15 minutes only %d of %d Challenges are Running", len(runningAt), n)
		}
		time.Sleep(time.Second)
		list, err := c.dyn.Resource(chalGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("list Challenges: %v", err)
			continue
		}
		for _, item := range list.Items {
			if _, seen := runningAt[item.GetName()]; seen {
				continue
			}
			if phase, _, _ := unstructured.NestedString(item.Object, "status", "phase"); phase != "Running" {
				continue
			}
			runningAt[item.GetName()] = time.Now()
			readyAt := statusTime(t, &item, "readyAt")
			readyDelays = append(readyDelays, readyAt.Sub(item.GetCreationTimestamp().Time).Seconds())
		}
	}
	allRunning := time.Since(start)
	runCPU := cpu.sample(t)

	// Steady: every Challenge gets at least one resync in the window; nothing may be written. It
	// starts settle after the last Challenge turned Running: a Creating answer asks to be woken at
	// its Pod's progress deadline (120 s), and Metacontroller keeps that wake-up after the instance
	// runs (a delayed enqueue cannot be taken back), so a window that starts earlier counts those
	// one-off wake-ups of the start as idle.
	time.Sleep(settle)
	hookSyncs1 := hookSyncs(t)
	customize1 := hookRequests(t, "/customize")
	cpu.sample(t)
	queue0 := metacontrollerQueue(t)
	steadyFrom := time.Now()
	time.Sleep(steady)
	steadyTo := time.Now()
	hookSyncs2 := hookSyncs(t)
	customize2 := hookRequests(t, "/customize")
	steadyCPU := cpu.sample(t)
	queue1 := metacontrollerQueue(t)
	rss := cpu.rss(t)

	audit := readAudit(t, auditLog, ns)
	steadySyncs := hookSyncs2 - hookSyncs1
	// Every figure is marked with the controller it was measured under: the simulator's are not
	// Metacontroller's.
	r := &report{tag: "[metacontroller] "}
	if e2eutil.UnderSimulator() {
		r.tag = "[simulator] "
	}
	r.linef("controller             %s", e2eutil.Controller())
	r.linef("challenges            %d created at once in %.1fs (%d concurrent creators)", n, createdIn.Seconds(), created)
	r.linef("all Running after     %.1fs (from the first create; polled every 1s)", allRunning.Seconds())
	r.linef("creation -> readyAt   %s (status.readyAt - creationTimestamp, whole seconds)", distribution(readyDelays))
	r.linef("hook syncs/instance   %.1f until all Running and %s after, %.2f in the steady window (%s; %.2f per resync period of %s)",
		float64(hookSyncs1-hookSyncs0)/float64(n), settle, float64(steadySyncs)/float64(n), steady,
		float64(steadySyncs)/float64(n)*shared.resync.Seconds()/steady.Seconds(), shared.resync)
	// Metacontroller caches a customize answer 20 minutes per Challenge generation.
	r.linef("hook customize calls   %.2f per instance in the steady window", float64(customize2-customize1)/float64(n))
	r.linef("API writes/instance until all Running, by component (last write after start):")
	for _, comp := range audit.components() {
		byResource := audit.writes(comp, start, steadyFrom)
		total := 0
		for _, k := range byResource {
			total += k
		}
		if total == 0 {
			continue
		}
		r.linef("  %-24s %6.2f  last create at %6s, last write at %6s  %s", comp, float64(total)/float64(n),
			sinceStart(audit.last(comp, "create", start, steadyFrom), start),
			sinceStart(audit.last(comp, "", start, steadyFrom), start), formatCounts(byResource, n))
	}
	// Metacontroller's client allows --client-go-qps requests a second, reads included (a status
	// write GETs the Challenge first): its requests per instance bound a burst's time.
	mcByResource := audit.requests("metacontroller", start, start.Add(allRunning))
	mcRequests := 0
	for _, count := range mcByResource {
		mcRequests += count
	}
	r.linef("Metacontroller's requests until all Running: %.2f per instance, %.1f a second (its client's --client-go-qps bounds it): %s",
		float64(mcRequests)/float64(n), float64(mcRequests)/allRunning.Seconds(), formatCounts(mcByResource, n))
	r.linef("CPU seconds until all Running (%.0fs):  %s", allRunning.Seconds(), runCPU.format())
	r.linef("CPU seconds in the steady window:       %s", steadyCPU.format())
	plane := 0.0
	for _, name := range []string{"kube-apiserver", "etcd", "metacontroller", "metacontroller-1", "challenge-hook"} {
		plane += steadyCPU.seconds[name]
	}
	r.linef("idle cost              %.3f ms of control-plane CPU (API server, etcd, Metacontroller, hook) per instance per second (target 0.05); hook %.2f ms per sync (%d syncs)",
		1000*plane/float64(n)/steady.Seconds(), 1000*steadyCPU.seconds["challenge-hook"]/float64(max(steadySyncs, 1)), steadySyncs)
	r.linef("memory (RSS) at end    %s", rss)
	d := queue1.minus(queue0)
	r.linef("Metacontroller's queue in the steady window, per instance: %.2f syncs, %.2f enqueued (resync ticks, parent and child events, due wake-ups), %.2f wake-ups asked (AddAfter: resyncAfterSeconds answers, retries); the resync period (%s) fits %.2f times in it",
		d.syncs/float64(n), d.adds/float64(n), d.delayed/float64(n), shared.resync, steady.Seconds()/shared.resync.Seconds())
	r.linef("machine                %d CPUs; busy %.0f%% until all Running, %.0f%% steady; load average at end %s",
		cpu.cpus, 100*runCPU.busy, 100*steadyCPU.busy, loadAverage())
	childWrites, anyWrites := 0, false
	r.linef("steady window writes (%s):", steady)
	for _, comp := range audit.components() {
		byResource := audit.writes(comp, steadyFrom, steadyTo)
		if len(byResource) == 0 {
			continue
		}
		anyWrites = true
		r.linef("  %-24s %s", comp, formatCounts(byResource, 0))
		for _, gvr := range shared.children {
			childWrites += byResource[gvr.Resource]
		}
		childWrites += byResource["challenges/status"]
	}
	if !anyWrites {
		r.linef("  none")
	}
	r.linef("steady window reads and writes, all namespaces, per instance (watch: watches opened):")
	for _, comp := range audit.allComponents() {
		r.linef("  %-24s %s", comp, formatCounts(audit.requests(comp, steadyFrom, steadyTo), n))
	}
	var metacontrollerWrites, statusWrites int
	for resource, count := range audit.writes("metacontroller", start, steadyFrom) {
		metacontrollerWrites += count
		if resource == "challenges/status" {
			statusWrites += count
		}
	}
	run := map[string]float64{
		"challenges":                                float64(n),
		"all_running_seconds":                       allRunning.Seconds(),
		"hook_syncs_per_instance":                   float64(hookSyncs1-hookSyncs0) / float64(n),
		"metacontroller_writes_per_instance":        float64(metacontrollerWrites) / float64(n),
		"metacontroller_status_writes_per_instance": float64(statusWrites) / float64(n),
		"metacontroller_requests_per_instance":      float64(mcRequests) / float64(n),
		"cpu_hook_seconds":                          runCPU.seconds["challenge-hook"],
		"cpu_metacontroller_seconds":                runCPU.seconds["metacontroller"],
	}
	if idleTimeout > 0 {
		if window := time.Duration(envInt(t, "BENCH_STAMP_SECONDS", 60)) * time.Second; window > 0 {
			measureStamping(ctx, t, c, r, cpu, auditLog, ns, slices.Sorted(maps.Keys(runningAt)), idleTimeout, window, plane/steady.Seconds())
		}
	}
	compareWithBaseline(t, r, c.root, run, owners == n && shards == 1 && idleTimeout == 0)
	t.Log("\n" + r.String())

	// A Metacontroller restart (a rollout, a lost leader) forgets every wake-up it was asked for:
	// each Challenge must be synced again at once, not at its next resync.
	// (With two shards, restarting shard 0's Metacontroller resyncs only its half: not checked.)
	if os.Getenv("BENCH_RESTART") != "0" && shards == 1 {
		restarted := restartMetacontroller(t, pidsDir, cpu.pids["metacontroller"])
		syncs0 := hookSyncs(t)
		deadline := restarted.Add(time.Duration(n/5+120) * time.Second)
		// Every sync reads its Challenge (Metacontroller's status update): the audit log names
		// each one. It is read once the hook answered n syncs, and again until all are named.
		var synced map[string]bool
		for len(synced) < n && time.Now().Before(deadline) {
			time.Sleep(2 * time.Second)
			if hookSyncs(t)-syncs0 >= n {
				synced = readAudit(t, auditLog, ns).getters("metacontroller", "challenges", restarted)
			}
		}
		resynced := time.Since(restarted)
		if len(synced) < n {
			t.Errorf("after a Metacontroller restart, %d of %d Challenges were synced again within %s", len(synced), n, resynced.Round(time.Second))
		} else {
			t.Logf("Metacontroller restarted: every Challenge synced again within %s (the hook's count of syncs, then the audit log's reads by name)", resynced.Round(time.Second))
		}
	}

	if childWrites > 0 {
		t.Errorf("%d child or Challenge status writes in the steady window, want none", childWrites)
	}
}

// restartMetacontroller stops Metacontroller (SIGTERM, as a rollout does) and starts it again with
// the same command line, environment, directory and log, the way hack/cluster.sh started it, and
// rewrites its PID file so that hack/cluster.sh stops the new one. It returns when the new process
// started.
func restartMetacontroller(t *testing.T, pidsDir string, pid int) time.Time {
	t.Helper()
	read := func(what string) []string {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, what))
		if err != nil {
			t.Fatalf("Metacontroller's %s: %v", what, err)
		}
		return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
	}
	args, env := read("cmdline"), read("environ")
	dir, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.OpenFile(os.Getenv("E2E_METACONTROLLER_LOG"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("Metacontroller's log: %v", err)
	}
	defer logFile.Close()
	proc, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stop Metacontroller: %v", err)
	}
	for i := 0; ; i++ {
		if err := proc.Signal(syscall.Signal(0)); err != nil {
			break
		}
		if i == 300 {
			t.Fatal("Metacontroller did not stop within 30s of SIGTERM")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Metacontroller again: %v", err)
	}
	started := time.Now()
	if err := os.WriteFile(filepath.Join(pidsDir, "metacontroller.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }() // reaped when hack/cluster.sh stops it
	return started
}

// sinceStart is at - start in seconds, or "-" when there is no at.
func sinceStart(at, start time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%.1fs", at.Sub(start).Seconds())
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	raw := os.Getenv(name)
	if raw == "" {
		return def
	}
	v, err := strconv.Atoi(raw)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, raw)
	}
	return v
}

// withOwnerLimit restarts the hook with --max-instances-per-owner=$BENCH_MAX_INSTANCES_PER_OWNER
// when it is set (the cost of relating each Challenge to its owner's), and returns how many owners
// share the n Challenges: $BENCH_OWNERS, default n (one Challenge each).
func withOwnerLimit(t *testing.T, n int) int {
	owners := envInt(t, "BENCH_OWNERS", n)
	if limit := envInt(t, "BENCH_MAX_INSTANCES_PER_OWNER", 0); limit > 0 {
		restartSuiteHook(t, fmt.Sprintf("--max-instances-per-owner=%d", limit))
		t.Logf("hook restarted with --max-instances-per-owner=%d; %d Challenges of %d owners", limit, n, owners)
	}
	return owners
}

// createChallenges creates n copies of chal (name-<i>, owner team-<i mod owners>, labelled with its
// owner) from up to 20 goroutines at once, and returns how many goroutines it used.
func createChallenges(ctx context.Context, t *testing.T, c *cluster, ns string, chal *unstructured.Unstructured, n, shards, owners int) int {
	t.Helper()
	creators := min(20, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				obj := chal.DeepCopy()
				obj.SetName(fmt.Sprintf("%s-%04d", chal.GetName(), i))
				owner := fmt.Sprintf("team-%04d", i%owners)
				_ = unstructured.SetNestedField(obj.Object, owner, "spec", "owner")
				labels := map[string]string{ownerLabel: owner}
				if shards == 2 && i%2 == 1 {
					labels[shardLabel] = "1"
				}
				obj.SetLabels(labels)
				if _, err := c.dyn.Resource(chalGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
					t.Errorf("create Challenge %d: %v", i, err)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return creators
}

// hookSyncs is the hook's count of answered sync and finalize requests (its /metrics).
func hookSyncs(t *testing.T) int {
	t.Helper()
	return hookRequests(t, "/sync", "/finalize")
}

// hookRequests is the hook's count of answered requests on routes (its /metrics).
func hookRequests(t *testing.T, routes ...string) int {
	t.Helper()
	resp, err := http.Get("http://" + shared.hook.metricsAddr() + "/metrics")
	if err != nil {
		t.Fatalf("hook metrics: %v", err)
	}
	defer resp.Body.Close()
	total := 0
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "challenge_hook_http_requests_total{") ||
			!slices.ContainsFunc(routes, func(r string) bool { return strings.Contains(line, `route="`+r+`"`) }) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("hook metrics line %q: %v", line, err)
		}
		total += int(v)
	}
	return total
}

// queueCounts are Metacontroller's workqueue counters for the CompositeController challenge-hook
// (client-go's workqueue metrics, served by Metacontroller's --metrics-address).
type queueCounts struct {
	adds    float64 // keys enqueued while not already queued: resync ticks, events, due wake-ups
	delayed float64 // AddAfter calls: a resyncAfterSeconds answer (or a retry after an error)
	syncs   float64 // keys processed: syncs
}

func (q queueCounts) minus(o queueCounts) queueCounts {
	return queueCounts{q.adds - o.adds, q.delayed - o.delayed, q.syncs - o.syncs}
}

func metacontrollerQueue(t *testing.T) queueCounts {
	t.Helper()
	addr := os.Getenv("BENCH_MC_METRICS")
	if addr == "" {
		t.Fatal("BENCH_MC_METRICS is not set: run `make bench-cluster`")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("Metacontroller metrics: %v", err)
	}
	defer resp.Body.Close()
	var q queueCounts
	found := false
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		// The queue is named CompositeController-<name> (Metacontroller's composite controller).
		if !strings.Contains(line, `name="CompositeController-challenge-hook"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "workqueue_adds_total{"):
			q.adds, found = v, true
		case strings.HasPrefix(line, "workqueue_retries_total{"):
			q.delayed = v
		case strings.HasPrefix(line, "workqueue_work_duration_seconds_count{"):
			q.syncs = v
		}
	}
	if !found {
		// A report without these counts is still worth having: say so, do not fail.
		t.Logf("Metacontroller's metrics at %s have no workqueue_adds_total of the CompositeController challenge-hook", addr)
	}
	return q
}

// rss is every metered process's resident memory now, largest first.
func (m *cpuMeter) rss(t *testing.T) string {
	t.Helper()
	kb := map[string]float64{}
	for name, pid := range m.pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatalf("memory of %s: %v", name, err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "VmRSS:" {
				kb[name], _ = strconv.ParseFloat(fields[1], 64)
			}
		}
	}
	names := make([]string, 0, len(kb))
	for name := range kb {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return kb[names[i]] > kb[names[j]] })
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %.0f MiB", name, kb[name]/1024)
	}
	return strings.Join(parts, ", ")
}

// cpuMeter reads the CPU time of the hook and of every process hack/cluster.sh started
// (/proc/<pid>/stat utime + stime), and how busy the whole machine was (/proc/stat).
type cpuMeter struct {
	pids    map[string]int
	last    map[string]float64
	lastCPU [2]float64 // busy, total jiffies of the machine
	cpus    int
}

type cpuSample struct {
	seconds map[string]float64
	busy    float64
}

func newCPUMeter(t *testing.T, pidsDir string, hookPid int) *cpuMeter {
	t.Helper()
	m := &cpuMeter{pids: map[string]int{"challenge-hook": hookPid}, last: map[string]float64{}}
	files, err := filepath.Glob(filepath.Join(pidsDir, "*.pid"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no PID files in %s (err %v)", pidsDir, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		m.pids[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	m.sample(t)
	return m
}

func (m *cpuMeter) sample(t *testing.T) cpuSample {
	t.Helper()
	const ticks = 100 // USER_HZ on Linux
	s := cpuSample{seconds: map[string]float64{}}
	for name, pid := range m.pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("CPU of %s: %v", name, err)
		}
		// Fields after the ")" that ends the command name: utime and stime are the 12th and 13th.
		fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		utime, _ := strconv.ParseFloat(fields[11], 64)
		stime, _ := strconv.ParseFloat(fields[12], 64)
		now := (utime + stime) / ticks
		s.seconds[name] = now - m.last[name]
		m.last[name] = now
	}
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	cpus, total, idle := 0, 0.0, 0.0
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 5 && fields[0] == "cpu" {
			for i, f := range fields[1:] {
				v, _ := strconv.ParseFloat(f, 64)
				total += v
				if i == 3 || i == 4 { // idle, iowait
					idle += v
				}
			}
		} else if len(fields) > 0 && strings.HasPrefix(fields[0], "cpu") {
			cpus++
		}
	}
	if dt := total - m.lastCPU[1]; dt > 0 && m.lastCPU[1] > 0 {
		s.busy = ((total - idle) - m.lastCPU[0]) / dt
	}
	m.lastCPU = [2]float64{total - idle, total}
	m.cpus = cpus
	return s
}

func (s cpuSample) format() string {
	names := make([]string, 0, len(s.seconds))
	for name := range s.seconds {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return s.seconds[names[i]] > s.seconds[names[j]] })
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %.1f", name, s.seconds[name])
	}
	return strings.Join(parts, ", ")
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(data))[:3], " ")
}

// auditEvent is the part of an API server audit event (level Metadata) the report needs.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef struct {
		Name        string `json:"name"`
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received metav1.MicroTime `json:"requestReceivedTimestamp"`
}

// component names the client of a write by its user agent: "metacontroller/v0.0.0 (linux/amd64)
// kubernetes/$Format" -> metacontroller.
func (e auditEvent) component() string {
	return strings.SplitN(e.UserAgent, "/", 2)[0]
}

// auditLog holds the successful writes in one namespace (events) and every request in any namespace
// (all; reads too, when hack/bench-cluster.sh's policy records them).
type auditLog struct {
	ns          string
	events, all []auditEvent
}

// readAudit reads the audit log: the successful writes in namespace ns, and every request.
func readAudit(t *testing.T, path, ns string) auditLog {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	defer f.Close()
	log := auditLog{ns: ns}
	dec := json.NewDecoder(f)
	for {
		var e auditEvent
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("audit log %s: %v", path, err)
		}
		// A watch is counted once, when it starts (its ResponseComplete comes when it ends); every
		// other request once, complete.
		if (e.Verb == "watch") != (e.Stage == "ResponseStarted") {
			continue
		}
		log.all = append(log.all, e)
		if e.ObjectRef.Namespace == ns && e.ResponseStatus.Code < 300 && isWrite(e.Verb) {
			log.events = append(log.events, e)
		}
	}
	return log
}

func (l auditLog) components() []string {
	var out []string
	for _, e := range l.events {
		if !slices.Contains(out, e.component()) {
			out = append(out, e.component())
		}
	}
	sort.Strings(out)
	return out
}

func isWrite(verb string) bool {
	return verb != "get" && verb != "list" && verb != "watch"
}

// getters are the names of the objects of resource in namespace ns that comp read (get) since from.
func (l auditLog) getters(comp, resource string, from time.Time) map[string]bool {
	out := map[string]bool{}
	for _, e := range l.all {
		if e.component() == comp && e.Verb == "get" && e.ObjectRef.Resource == resource && e.ObjectRef.Subresource == "" &&
			e.ObjectRef.Namespace == l.ns && !e.Received.Time.Before(from) {
			out[e.ObjectRef.Name] = true
		}
	}
	return out
}

// allComponents are the clients of any request in the log.
func (l auditLog) allComponents() []string {
	var out []string
	for _, e := range l.all {
		if !slices.Contains(out, e.component()) {
			out = append(out, e.component())
		}
	}
	sort.Strings(out)
	return out
}

// requests counts comp's requests in [from, to), any namespace and outcome, by "verb resource".
func (l auditLog) requests(comp string, from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, e := range l.all {
		if e.component() != comp || e.Received.Time.Before(from) || !e.Received.Time.Before(to) {
			continue
		}
		key := e.Verb + " " + e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}
		if e.ObjectRef.Resource == "" {
			key = e.Verb + " (non-resource)"
		}
		out[key]++
	}
	return out
}

// writes counts comp's writes received in [from, to) by resource (resource/subresource).
func (l auditLog) writes(comp string, from, to time.Time) map[string]int {
	out := map[string]int{}
	for _, e := range l.events {
		if e.component() != comp || e.Received.Time.Before(from) || !e.Received.Time.Before(to) {
			continue
		}
		key := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			key += "/" + e.ObjectRef.Subresource
		}
		out[key]++
	}
	return out
}

// last is when comp's last write (of verb, or any) in [from, to) was received.
func (l auditLog) last(comp, verb string, from, to time.Time) time.Time {
	var last time.Time
	for _, e := range l.events {
		if e.component() == comp && (verb == "" || e.Verb == verb) &&
			!e.Received.Time.Before(from) && e.Received.Time.Before(to) && e.Received.Time.After(last) {
			last = e.Received.Time
		}
	}
	return last
}

// formatCounts lists counts by key, divided by n (per instance) unless n is 0.
func formatCounts(counts map[string]int, n int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		if n > 0 {
			parts[i] = fmt.Sprintf("%s %.2f", k, float64(counts[k])/float64(n))
		} else {
			parts[i] = fmt.Sprintf("%s %d", k, counts[k])
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func distribution(values []float64) string {
	if len(values) == 0 {
		return "none"
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	at := func(q float64) float64 { return sorted[int(q*float64(len(sorted)-1))] }
	return fmt.Sprintf("min %.0fs p50 %.0fs p90 %.0fs p99 %.0fs max %.0fs", sorted[0], at(0.5), at(0.9), at(0.99), sorted[len(sorted)-1])
}

// report is bench-cluster's report: each line starts with tag, the controller it was measured under.
type report struct {
	strings.Builder
	tag string
}

func (r *report) linef(format string, args ...any) {
	fmt.Fprintf(r, r.tag+format+"\n", args...)
}

// registerShards makes the suite's CompositeController shard 0 (labelled, and selecting the
// Challenges not labelled shard 1) and registers shard 1's, as manifests/components/sharding does;
// hack/bench-cluster.sh runs a Metacontroller for each.
func registerShards(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	ccGVR := schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"}
	patch := `{"metadata":{"labels":{"` + shardLabel + `":"0"}},"spec":{"parentResource":{"labelSelector":{"matchExpressions":[{"key":"` + shardLabel + `","operator":"NotIn","values":["1"]}]}}}}`
	if _, err := c.dyn.Resource(ccGVR).Patch(ctx, shared.controller.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("make %s shard 0: %v", shared.controller.GetName(), err)
	}
	shard1, err := testCompositeControllerFrom(filepath.Join(c.root, "manifests/components/sharding/compositecontroller-shard-1.yaml"), "http://"+os.Getenv("E2E_HOOK_ADDR"), int(shared.resync/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := e2eutil.CreateOrUpdate(ctx, c.dyn.Resource(ccGVR), shard1); err != nil {
		t.Fatal(err)
	}
	t.Logf("two shards: %s (shard 0) and %s (shard 1)", shared.controller.GetName(), shard1.GetName())
}

// baselineFile records a bench-cluster run that the next ones are compared with, in a block
// ```text bench-cluster-baseline ... ``` of "name value" lines (the first, run, names it).
const baselineFile = "docs/capacity.md"

// compareWithBaseline adds to the report, for each figure of the recorded run, this run's and
// the difference, so that a change that adds a sync or a write per instance shows in the figures
// a developer reads; only for a run of the same shape (the same number of Challenges, one per
// owner, one Metacontroller), else it says why not. Not a test: nothing fails.
func compareWithBaseline(t *testing.T, r *report, root string, run map[string]float64, comparable bool) {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(root, baselineFile))
	if err != nil {
		r.linef("baseline               none: %v", err)
		return
	}
	_, block, found := strings.Cut(string(content), "```text bench-cluster-baseline\n")
	block, _, closed := strings.Cut(block, "```")
	if !found || !closed {
		r.linef("baseline               none: %s has no bench-cluster-baseline block", baselineFile)
		return
	}
	recorded := map[string]float64{}
	var names []string
	name := ""
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		key, value, _ := strings.Cut(strings.TrimSpace(line), " ")
		value = strings.TrimSpace(value)
		if key == "run" {
			name = value
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			r.linef("baseline               unreadable line %q in %s", line, baselineFile)
			return
		}
		recorded[key] = v
		names = append(names, key)
	}
	if e2eutil.UnderSimulator() {
		r.linef("baseline               not compared: %s was under a real Metacontroller, this run under the simulator", name)
		return
	}
	if !comparable || recorded["challenges"] != run["challenges"] {
		r.linef("baseline               not compared: %s records %v Challenges, one per owner, one Metacontroller (this run: %v Challenges)", name, recorded["challenges"], run["challenges"])
		return
	}
	r.linef("against the baseline   %s (%s; better is lower for each):", name, baselineFile)
	for _, key := range names {
		now, ok := run[key]
		if !ok || key == "challenges" {
			continue
		}
		was := recorded[key]
		verdict := "same"
		if change := now - was; was != 0 && math.Abs(change)/was >= 0.02 {
			verdict = fmt.Sprintf("%s by %.2f (%+.0f%%)", map[bool]string{true: "worse", false: "better"}[change > 0], math.Abs(change), 100*change/was)
		}
		r.linef("  %-42s %8.2f  was %8.2f  %s", key, now, was, verdict)
	}
}
