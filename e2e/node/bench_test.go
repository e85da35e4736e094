//go:build e2enode && benchnode

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
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// benchDefinition is a small TCP challenge: the test challenge server with a dynamic flag, its raw
// TCP port (the flag, then close) on a NodePort, the hook's default readiness probe (a TCP connect
// to the first port, every 5 s). It requests 1m CPU and 8Mi of memory: at the defaults (50m, 64Mi)
// the scheduler admits 40 instances on a 2-CPU node, and this run is about the node's machinery, not
// about requests (docs/operating-an-event.md sizes nodes from requests).
const benchDefinition = `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: ChallengeDefinition
metadata: {name: bench}
spec:
  containers:
    - name: app
      image: local/ctfbox:v1
      ports:
        - {name: flag, containerPort: 1337}
        - {name: http, containerPort: 8080}
      resources:
        requests: {cpu: 1m, memory: 8Mi, ephemeral-storage: 1Mi}
  expose:
    - {port: 1337, type: NodePort}
  timeout: 2h
  maxLifetime: 4h
  flag: {dynamic: true, prefix: CTF, env: FLAG}
`

// benchConfig is what hack/bench-node.sh passes (BENCH_*).
type benchConfig struct {
	instances   int
	rate        float64 // instances a second in the steady mode
	modes       []string
	idle        time.Duration
	sample      int // instances the attacker probes per wave
	runTimeout  time.Duration
	proxyMetric string
	knpMetric   string
	mcMetric    string
}

func benchEnv(t *testing.T) benchConfig {
	t.Helper()
	intEnv := func(name string, def int) int {
		v, err := strconv.Atoi(os.Getenv(name))
		if err != nil || v <= 0 {
			return def
		}
		return v
	}
	c := benchConfig{
		instances: intEnv("BENCH_INSTANCES", 300), rate: 5, modes: []string{"burst", "rate"},
		idle: time.Duration(intEnv("BENCH_IDLE_SECONDS", 60)) * time.Second, sample: intEnv("BENCH_SAMPLE", 20),
		runTimeout:  time.Duration(intEnv("BENCH_RUNNING_TIMEOUT_SECONDS", 1200)) * time.Second,
		proxyMetric: "127.0.0.1:" + envOr("PROXY_METRICS_PORT", "25249"), knpMetric: "127.0.0.1:" + envOr("KNP_METRICS_PORT", "25980"),
		mcMetric: "127.0.0.1:" + envOr("MC_METRICS_PORT", "25999"),
	}
	if r, err := strconv.ParseFloat(os.Getenv("BENCH_RATE"), 64); err == nil && r > 0 {
		c.rate = r
	}
	if m := os.Getenv("BENCH_MODES"); m != "" {
		c.modes = strings.Split(m, ",")
	}
	return c
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// TestBenchNode is make bench-node: an event's peak on the real node. An attacker instance starts
// first and probes, for the whole run, a sample of the other instances (Pod IP and NodePort, from
// the moment each is known) and the Pods outside any instance (db: the stand-in for the API
// server and metadata service, TCP and UDP; neighbour: another namespace). Then, per mode, N
// instances of benchDefinition are created at once (burst) or at BENCH_RATE a second (rate), and
// the test reports, as distributions: creation to Running (as the platform sees the status),
// Running to the first byte of the flag through the instance's endpoint from the host (an
// unprivileged process: the player), creation to the policy enforced (the policy gate's verdict
// from inside the new Pod, timestamped by the container log), and deletion to everything gone
// (the Challenge and every child). After the first wave, the memory per instance of the node's
// processes and their CPU at idle; for every wave, the CPU of each process while it ran and the
// components' own metrics. Every attacker probe of a denied target must go unanswered.
func TestBenchNode(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	bc := benchEnv(t)
	nodeRoot := filepath.Dir(cfg.logDir)
	t.Logf("bench: %d instances per wave, modes %v, rate %.1f/s, idle window %s, attacker sample %d; %d CPUs, load %s",
		bc.instances, bc.modes, bc.rate, bc.idle, bc.sample, runtime.NumCPU(), loadAvg())
	apply(ctx, t, benchDefinition)
	rec := startRecorder(ctx, t)

	tl := &timeline{}
	atk := newCollector(tl)
	tl.mark(t, "attacker-start")
	atkIP := startBenchAttacker(ctx, t, atk)
	tl.mark(t, "attacker-running")
	push := func(lines ...string) {
		resp, err := http.Post("http://"+hostPort(atkIP, 8080)+"/targets", "text/plain", strings.NewReader(strings.Join(lines, "\n")))
		if err != nil {
			t.Errorf("push targets to the attacker: %v", err)
			return
		}
		resp.Body.Close()
	}
	player := startPlayer(t)
	time.Sleep(5 * time.Second)
	base := sampleProcs(nodeRoot)
	t.Logf("baseline (attacker and the two outside Pods running):\n%s", base.memTable(nil, 0))

	for i, mode := range bc.modes {
		tl.mark(t, mode)
		runWave(ctx, t, bc, rec, mode, i == 0, base, nodeRoot, push, player)
		tl.mark(t, mode+"-deleted")
	}

	// The attacker's verdict.
	tl.mark(t, "end")
	time.Sleep(2 * time.Second)
	_ = dyn.Resource(chalGVR).Namespace(nsCTF).Delete(ctx, "bench-attacker", metav1.DeleteOptions{})
	atk.mu.Lock()
	per := map[string][2]int{} // target class -> answered, attempts
	for _, p := range atk.all {
		class := p.Target
		if i := strings.Index(class, ":"); i >= 0 {
			class = class[:i] // inst-pod:<name>, inst-nodeport:<name>
		}
		n := per[class]
		if p.OK {
			n[0]++
		}
		n[1]++
		per[class] = n
	}
	atk.mu.Unlock()
	classes := make([]string, 0, len(per))
	for c := range per {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var b strings.Builder
	for _, c := range classes {
		fmt.Fprintf(&b, "  %-14s answered %d of %d attempts\n", c, per[c][0], per[c][1])
	}
	t.Logf("ISOLATION at scale: the attacker's probes over the whole run\n%s", b.String())
	if per["self"][0] == 0 {
		t.Errorf("the attacker's control (its own port) never answered: the prober does not work")
	}
	for _, c := range classes {
		if c != "self" && per[c][0] > 0 {
			t.Errorf("the attacker reached %s %d times out of %d", c, per[c][0], per[c][1])
		}
	}
	for _, c := range []string{"db", "db-udp", "neighbour", "inst-pod", "inst-nodeport"} {
		if per[c][1] == 0 {
			t.Errorf("no attempt on %s: the isolation count proves nothing", c)
		}
	}
}

// runWave creates the wave's instances, measures them, and deletes them.
func runWave(ctx context.Context, t *testing.T, bc benchConfig, rec *recorder, mode string, first bool, base procSnapshot, nodeRoot string, push func(...string), player *playerProber) {
	n := bc.instances
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%03d", mode, i)
	}
	every := max(1, n/bc.sample)
	sampled := map[string]bool{}
	for i := 0; i < n; i += every {
		sampled[names[i]] = true
	}
	rec.expect(names, sampled, push, player)
	metricsBefore := scrapeAll(ctx, bc)
	procsBefore := sampleProcs(nodeRoot)
	start := time.Now()

	var wg sync.WaitGroup
	create := func(name string) {
		defer wg.Done()
		obj, err := decode(fmt.Sprintf(`
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: %s, namespace: %s}
spec: {owner: %s, definitionRef: {name: bench}}
`, name, nsCTF, name))
		if err != nil {
			t.Error(err)
			return
		}
		rec.created(name)
		if _, err := dyn.Resource(chalGVR).Namespace(nsCTF).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Errorf("create %s: %v", name, err)
		}
	}
	switch mode {
	case "burst":
		sem := make(chan struct{}, 50)
		for _, name := range names {
			wg.Add(1)
			sem <- struct{}{}
			go func() { defer func() { <-sem }(); create(name) }()
		}
	case "rate":
		tick := time.NewTicker(time.Duration(float64(time.Second) / bc.rate))
		for i, name := range names {
			if i > 0 {
				<-tick.C
			}
			wg.Add(1)
			go create(name)
		}
		tick.Stop()
	default:
		t.Fatalf("BENCH_MODES: unknown mode %q (burst, rate)", mode)
	}
	wg.Wait()
	createdIn := time.Since(start)
	t.Logf("%s: %d Challenges created in %.1fs", mode, n, createdIn.Seconds())

	// Until every instance is Running; the scheduler's verdict does not change while no Pod goes,
	// so an instance Unschedulable for 30 s ends the wave now rather than at the timeout.
	for deadline := time.Now().Add(bc.runTimeout); rec.countRunning(names) < n; time.Sleep(200 * time.Millisecond) {
		stuck := rec.unschedulableFor(names, 30*time.Second)
		if stuck == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
			continue
		}
		t.Logf("%s: %d of %d Running; last status of the others: %s", mode, rec.countRunning(names), n, rec.notRunning(ctx, names, 5))
		if stuck > 0 {
			t.Fatalf("%s: %d instances Unschedulable for 30 s: the node's allocatable CPU and memory do not hold %d instances' requests (each at least the policy gate's 5m CPU)", mode, stuck, n)
		}
		t.Fatalf("%s: not every instance Running after %s", mode, bc.runTimeout)
	}
	allRunning := time.Since(start)
	procsRunning := sampleProcs(nodeRoot)
	metricsAfter := scrapeAll(ctx, bc)
	if err := e2eutil.WaitUntil(ctx, 2*time.Minute, "the player's first byte from every instance", func() (bool, error) {
		return player.count(names) == n, nil
	}); err != nil {
		t.Errorf("%s: %v (%d of %d)", mode, err, player.count(names), n)
	}

	var toRunning, toByte, toEnforced, gateWait, toPod, podToEnforced, enforcedToReady, readyToRunning []float64
	enforced, waits := gateTimes(ctx, t, names)
	for _, name := range names {
		r := rec.get(name)
		toRunning = append(toRunning, r.running.Sub(r.created).Seconds())
		toPod = append(toPod, r.podSeen.Sub(r.created).Seconds())
		readyToRunning = append(readyToRunning, r.running.Sub(r.podReady).Seconds())
		if at, ok := enforced[name]; ok {
			podToEnforced = append(podToEnforced, at.Sub(r.podSeen).Seconds())
			enforcedToReady = append(enforcedToReady, r.podReady.Sub(at).Seconds())
		}
		if at, ok := player.firstByte(name); ok {
			toByte = append(toByte, at.Sub(r.running).Seconds())
		}
	}
	for name, at := range enforced {
		toEnforced = append(toEnforced, at.Sub(rec.get(name).created).Seconds())
		gateWait = append(gateWait, waits[name])
	}
	t.Logf("WAVE %s: %d instances, created in %.1fs, all Running %.1fs after the first creation; load %s", mode, n, createdIn.Seconds(), allRunning.Seconds(), loadAvg())
	t.Logf("  %-34s %s", "created -> Running", dist(toRunning))
	t.Logf("  %-34s %s", "Running -> first byte (host)", dist(toByte))
	t.Logf("  %-34s %s", "created -> policy enforced (gate)", dist(toEnforced))
	t.Logf("  %-34s %s", "the gate's own wait", dist(gateWait))
	t.Logf("  where created -> Running goes:")
	t.Logf("  %-34s %s", "created -> Pod (Metacontroller, hook)", dist(toPod))
	t.Logf("  %-34s %s", "Pod -> policy enforced (node)", dist(podToEnforced))
	t.Logf("  %-34s %s", "enforced -> Pod Ready (node)", dist(enforcedToReady))
	t.Logf("  %-34s %s", "Pod Ready -> Running (MC, hook)", dist(readyToRunning))
	t.Logf("CPU seconds while the %s wave started (%.1fs):\n%s", mode, allRunning.Seconds(), procsRunning.cpuTable(procsBefore, allRunning))
	t.Logf("components' metrics over the %s wave (count, mean):\n%s", mode, metricDelta(metricsBefore, metricsAfter))

	if first {
		time.Sleep(10 * time.Second)
		idleFrom := sampleProcs(nodeRoot)
		time.Sleep(bc.idle)
		idleTo := sampleProcs(nodeRoot)
		t.Logf("IDLE with %d instances running, over %s: CPU per process\n%s", n, bc.idle, idleTo.cpuTable(idleFrom, bc.idle))
		t.Logf("IDLE CPU per instance: %s", idleTo.cpuPerInstance(idleFrom, bc.idle, n))
		t.Logf("MEMORY (PSS) with %d instances running, and per instance over the baseline:\n%s", n, idleTo.memTable(&base, n))
	}

	// Delete every instance at once; everything gone = the Challenge and each child observed.
	delStart := time.Now()
	sem := make(chan struct{}, 50)
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rec.deleting(name)
			if err := dyn.Resource(chalGVR).Namespace(nsCTF).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	if err := e2eutil.WaitUntil(ctx, 10*time.Minute, fmt.Sprintf("%d instances gone", n), func() (bool, error) {
		return rec.countGone(names) == n, nil
	}); err != nil {
		t.Fatalf("%s: %v (%d of %d gone)", mode, err, rec.countGone(names), n)
	}
	var toGone []float64
	for _, name := range names {
		r := rec.get(name)
		toGone = append(toGone, r.gone().Sub(r.deleteAt).Seconds())
	}
	t.Logf("WAVE %s: all %d deleted and gone %.1fs after the first delete", mode, n, time.Since(delStart).Seconds())
	t.Logf("  %-34s %s", "delete -> everything gone", dist(toGone))
	shims := sampleProcs(nodeRoot).groups["containerd-shim"]
	t.Logf("containerd shims left on the node: %d (the attacker's and the two outside Pods': 3)", shims.count)
}

// dist formats p50, p95, p99 and max in seconds.
func dist(v []float64) string {
	if len(v) == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %6.2fs  p95 %6.2fs  p99 %6.2fs  max %6.2fs  (n=%d)", percentile(v, 50), percentile(v, 95), percentile(v, 99), percentile(v, 100), len(v))
}

// ---------------------------------------------------------------- the attacker

func startBenchAttacker(ctx context.Context, t *testing.T, c *collector) string {
	t.Helper()
	apply(ctx, t, fmt.Sprintf(`
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: bench-attacker}
spec:
  owner: bench-attacker
  template:
    containers:
      - name: attacker
        image: local/attacker:v1
        args: [-listen=:8080, -interval=500ms, self=tcp://127.0.0.1:8080, db=tcp://%s, db-udp=udp://%s, neighbour=tcp://%s]
        ports: [{name: ctl, containerPort: 8080}]
    terminationGracePeriodSeconds: 1
    egress: true
    timeout: 2h
    maxLifetime: 4h
`, hostPort(targets["db"], 8080), hostPort(targets["db"], 1337), hostPort(targets["neighbour"], 8080)))
	t.Cleanup(func() {
		_ = dyn.Resource(chalGVR).Namespace(nsCTF).Delete(context.Background(), "bench-attacker", metav1.DeleteOptions{})
	})
	waitPhase(ctx, t, "bench-attacker", "Running", "", 3*time.Minute)
	p, err := kube.CoreV1().Pods(nsCTF).Get(ctx, "bench-attacker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		stream, err := kube.CoreV1().Pods(nsCTF).GetLogs("bench-attacker", &corev1.PodLogOptions{Follow: true}).Stream(ctx)
		if err != nil {
			t.Logf("follow the attacker's log: %v", err)
			return
		}
		defer stream.Close()
		c.read(stream)
	}()
	return p.Status.PodIP
}

// ---------------------------------------------------------------- the player on the host

// playerProber is ctfbox probe -until-ok on the host as uid 65534 (not root, so that the policy
// agent judges its packets as it would a player's): each target is tried every 100 ms until the
// first byte of the challenge arrives.
type playerProber struct {
	ctl   string
	mu    sync.Mutex
	first map[string]time.Time
}

func startPlayer(t *testing.T) *playerProber {
	t.Helper()
	p := &playerProber{ctl: "127.0.0.1:25083", first: map[string]time.Time{}}
	bin := ctfboxForPlayers(t)
	cmd := exec.Command(bin, "probe", "-until-ok", "-interval=100ms", "-listen="+p.ctl)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(out)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := e2eutil.WaitUntil(context.Background(), 10*time.Second, "the player's control port", func() (bool, error) {
		resp, err := http.Get("http://" + p.ctl + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *playerProber) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var pr probeResult
		if json.Unmarshal(sc.Bytes(), &pr) != nil || !pr.OK {
			continue
		}
		p.mu.Lock()
		if at, ok := p.first[pr.Target]; !ok || pr.end().Before(at) {
			p.first[pr.Target] = pr.end()
		}
		p.mu.Unlock()
	}
}

func (p *playerProber) add(name, hostport string) error {
	resp, err := http.Post("http://"+p.ctl+"/targets", "text/plain", strings.NewReader(name+"=tcpread://"+hostport))
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func (p *playerProber) firstByte(name string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.first[name]
	return at, ok
}

func (p *playerProber) count(names []string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, name := range names {
		if _, ok := p.first[name]; ok {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------- what the API server says, when

// instanceRecord is one instance's moments, as this process observed them.
type instanceRecord struct {
	created, running, deleteAt, challengeGone time.Time
	podSeen, podReady                         time.Time       // the first Pod of the instance
	children                                  map[string]bool // kind/name -> still there
	lastChildGone                             time.Time
	unschedulableSince                        time.Time // reason Unschedulable since (zero: not now)
}

func (r instanceRecord) gone() time.Time {
	if r.lastChildGone.After(r.challengeGone) {
		return r.lastChildGone
	}
	return r.challengeGone
}

// recorder watches the Challenges and their children in the ctf namespace (informers: one list,
// then a watch, so that hundreds of instances cost the API server no polling).
type recorder struct {
	mu      sync.Mutex
	records map[string]*instanceRecord
	sampled map[string]bool
	push    func(...string)
	player  *playerProber
	pushed  map[string]bool
	t       *testing.T
}

var childGVRs = []schema.GroupVersionResource{
	{Version: "v1", Resource: "pods"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "secrets"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
}

func startRecorder(ctx context.Context, t *testing.T) *recorder {
	r := &recorder{records: map[string]*instanceRecord{}, sampled: map[string]bool{}, pushed: map[string]bool{}, t: t}
	challenges := ctfInformer(chalGVR)
	_, _ = challenges.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.challenge(obj) },
		UpdateFunc: func(_, obj any) { r.challenge(obj) },
		DeleteFunc: func(obj any) { r.challengeDeleted(obj) },
	})
	informers := map[schema.GroupVersionResource]cache.SharedIndexInformer{chalGVR: challenges}
	for _, gvr := range childGVRs {
		kind := gvr.Resource
		informers[gvr] = ctfInformer(gvr)
		_, _ = informers[gvr].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { r.child(kind, obj, false) },
			UpdateFunc: func(_, obj any) { r.child(kind, obj, false) },
			DeleteFunc: func(obj any) { r.child(kind, obj, true) },
		})
	}
	for _, informer := range informers {
		go informer.RunWithContext(ctx)
	}
	for gvr, informer := range informers {
		if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			t.Fatalf("informer of %s did not sync", gvr)
		}
	}
	return r
}

// ctfInformer is an informer of gvr's objects in the ctf namespace, built as client-go's dynamic
// informer builds one (the package dynamicinformer would bring every typed informer and lister of
// client-go, some 120 packages, into what make test compiles and lints).
func ctfInformer(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
	client := dyn.Resource(gvr).Namespace(nsCTF)
	return cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (k8sruntime.Object, error) {
				return client.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return client.Watch(ctx, opts)
			},
		}, dyn),
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ObjectDescription: gvr.String()},
	)
}

func asUnstructured(obj any) *unstructured.Unstructured {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

func (r *recorder) expect(names []string, sampled map[string]bool, push func(...string), player *playerProber) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		r.records[n] = &instanceRecord{children: map[string]bool{}}
	}
	for n := range sampled {
		r.sampled[n] = true
	}
	r.push, r.player = push, player
}

func (r *recorder) created(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records[name].created = time.Now()
}

func (r *recorder) deleting(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records[name].deleteAt = time.Now()
}

func (r *recorder) challenge(obj any) {
	now := time.Now()
	u := asUnstructured(obj)
	if u == nil {
		return
	}
	r.mu.Lock()
	rec := r.records[u.GetName()]
	if rec != nil {
		switch unschedulable := status(u, "reason") == "Unschedulable"; {
		case unschedulable && rec.unschedulableSince.IsZero():
			rec.unschedulableSince = now
		case !unschedulable:
			rec.unschedulableSince = time.Time{}
		}
	}
	if rec == nil || !rec.running.IsZero() || status(u, "phase") != "Running" {
		r.mu.Unlock()
		return
	}
	rec.running = now
	sampled := r.sampled[u.GetName()]
	push, player := r.push, r.player
	r.mu.Unlock()
	// The player connects to the endpoint the status gives, as a platform would show it.
	eps, _, _ := unstructured.NestedSlice(u.Object, "status", "endpoints")
	for _, raw := range eps {
		ep, _ := raw.(map[string]any)
		host, _ := ep["host"].(string)
		port, _ := ep["port"].(int64)
		if ep["name"] != "flag" || host == "" || port == 0 {
			continue
		}
		addr := hostPort(host, port)
		go func() {
			if err := player.add(u.GetName(), addr); err != nil {
				r.t.Errorf("player target %s: %v", u.GetName(), err)
			}
			if sampled {
				push("inst-nodeport:" + u.GetName() + "=tcp://" + addr)
			}
		}()
	}
}

func (r *recorder) challengeDeleted(obj any) {
	now := time.Now()
	u := asUnstructured(obj)
	if u == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.records[u.GetName()]; rec != nil {
		rec.challengeGone = now
	}
}

func (r *recorder) child(kind string, obj any, deleted bool) {
	now := time.Now()
	u := asUnstructured(obj)
	if u == nil {
		return
	}
	name := u.GetLabels()["ctf.challenge-hook.dev/challenge"]
	r.mu.Lock()
	rec := r.records[name]
	if rec == nil {
		r.mu.Unlock()
		return
	}
	key := kind + "/" + u.GetName()
	if deleted {
		rec.children[key] = false
		if now.After(rec.lastChildGone) {
			rec.lastChildGone = now
		}
		r.mu.Unlock()
		return
	}
	if _, seen := rec.children[key]; !seen {
		rec.children[key] = true
	}
	if kind == "pods" {
		if rec.podSeen.IsZero() {
			rec.podSeen = now
		}
		if rec.podReady.IsZero() && unstructuredPodReady(u) {
			rec.podReady = now
		}
	}
	// The attacker aims at a sampled instance's Pod as soon as its IP is known: before its
	// containers start, so that its first moment is probed too.
	ip, _, _ := unstructured.NestedString(u.Object, "status", "podIP")
	push := kind == "pods" && ip != "" && r.sampled[name] && !r.pushed[key+ip]
	if push {
		r.pushed[key+ip] = true
	}
	pushFn := r.push
	r.mu.Unlock()
	if push {
		go pushFn("inst-pod:"+name+"=tcp://"+hostPort(ip, 1337), "inst-pod:"+name+"-http=tcp://"+hostPort(ip, 8080))
	}
}

func unstructuredPodReady(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["type"] == "Ready" {
			return m["status"] == "True"
		}
	}
	return false
}

func (r *recorder) get(name string) instanceRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.records[name]
}

func (r *recorder) countRunning(names []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, name := range names {
		if !r.records[name].running.IsZero() {
			n++
		}
	}
	return n
}

// unschedulableFor counts the instances whose status has said Unschedulable for at least d.
func (r *recorder) unschedulableFor(names []string, d time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, name := range names {
		if since := r.records[name].unschedulableSince; !since.IsZero() && time.Since(since) >= d {
			n++
		}
	}
	return n
}

func (r *recorder) countGone(names []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, name := range names {
		rec := r.records[name]
		if rec.challengeGone.IsZero() {
			continue
		}
		left := false
		for _, there := range rec.children {
			left = left || there
		}
		if !left {
			n++
		}
	}
	return n
}

// notRunning describes up to limit instances that are not Running.
func (r *recorder) notRunning(ctx context.Context, names []string, limit int) string {
	var out []string
	for _, name := range names {
		if len(out) == limit {
			break
		}
		if !r.get(name).running.IsZero() {
			continue
		}
		got, err := getChallenge(ctx, name)
		if err != nil {
			out = append(out, name+": "+err.Error())
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s %s %q", name, status(got, "phase"), status(got, "reason"), status(got, "message")))
	}
	return strings.Join(out, "; ")
}

// gateTimes reads each instance's policy gate log with the container runtime's timestamps: when
// the gate saw the policy enforced, and its own wait ("policy enforced after Ns: ...").
func gateTimes(ctx context.Context, t *testing.T, names []string) (map[string]time.Time, map[string]float64) {
	at, waits := map[string]time.Time{}, map[string]float64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	missing := 0
	for _, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			raw, err := kube.CoreV1().Pods(nsCTF).GetLogs(name, &corev1.PodLogOptions{Container: "policy-gate", Timestamps: true}).DoRaw(ctx)
			ts, rest, _ := strings.Cut(strings.TrimSpace(string(raw)), " ")
			when, perr := time.Parse(time.RFC3339Nano, ts)
			var wait float64
			if _, serr := fmt.Sscanf(rest, "policy enforced after %fs", &wait); err != nil || perr != nil || serr != nil {
				mu.Lock()
				missing++
				mu.Unlock()
				return
			}
			mu.Lock()
			at[name], waits[name] = when, wait
			mu.Unlock()
		}()
	}
	wg.Wait()
	if missing > 0 {
		t.Logf("no policy gate verdict in the log of %d of %d instances (gate: %s)", missing, len(names), gateState())
	}
	return at, waits
}

// ---------------------------------------------------------------- the node's processes

// procGroup is the processes of one component: CPU (their own, and their reaped children's:
// runc under the shims, iptables-restore under kube-proxy) and proportional memory (PSS).
type procGroup struct {
	count    int
	cpuTicks uint64
	pssKiB   uint64
}

type procSnapshot struct {
	groups   map[string]procGroup
	busy     uint64 // the whole machine's busy ticks (/proc/stat)
	takenAtT time.Time
}

// groupOrder is the order of the tables.
var groupOrder = []string{"kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "metacontroller", "challenge-hook",
	"containerd", "containerd-shim", "containers", "kubelet", "kube-proxy", "kube-network-policies"}

// sampleProcs reads /proc: the processes hack/node.sh and hack/cluster.sh started (their PID
// files), the hook (its listen address), the containerd shims of this node (their -address) and the
// containers' processes (the shims' descendants).
func sampleProcs(nodeRoot string) procSnapshot {
	s := procSnapshot{groups: map[string]procGroup{}, takenAtT: time.Now()}
	named := map[int]string{}
	for _, dir := range []string{filepath.Join(nodeRoot, "pids"), filepath.Join(nodeRoot, "cluster", "pids")} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && perr == nil {
				named[pid] = strings.TrimSuffix(filepath.Base(f), ".pid")
			}
		}
	}
	sock := filepath.Join(nodeRoot, "run", "containerd", "containerd.sock")
	type proc struct {
		ppid  int
		ticks uint64
		group string
	}
	procs := map[int]*proc{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces): state ppid ... utime(14) stime cutime cstime.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks uint64
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseUint(f[k], 10, 64)
			ticks += v
		}
		p := &proc{ppid: ppid, ticks: ticks, group: named[pid]}
		if p.group == "" {
			cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			c := string(cmdline)
			switch {
			case strings.Contains(c, "containerd-shim") && strings.Contains(c, sock):
				p.group = "containerd-shim"
			case strings.Contains(c, "--listen="+cfg.hookAddr):
				p.group = "challenge-hook"
			}
		}
		procs[pid] = p
	}
	// The containers: descendants of this node's shims.
	for _, p := range procs {
		if p.group != "" {
			continue
		}
		for q, hops := procs[p.ppid], 0; q != nil && hops < 10; q, hops = procs[q.ppid], hops+1 {
			if q.group == "containerd-shim" {
				p.group = "containers"
				break
			}
		}
	}
	for pid, p := range procs {
		if p.group == "" {
			continue
		}
		g := s.groups[p.group]
		g.count++
		g.cpuTicks += p.ticks
		g.pssKiB += pss(pid)
		s.groups[p.group] = g
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, _ := strconv.ParseUint(v, 10, 64)
			s.busy += n
		}
	}
	return s
}

func pss(pid int) uint64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "Pss:") {
			f := strings.Fields(line)
			v, _ := strconv.ParseUint(f[1], 10, 64)
			return v
		}
	}
	return 0
}

const clockTicks = 100 // USER_HZ

// cpuTable is the CPU seconds of each group since before, and the share of one core over d.
func (s procSnapshot) cpuTable(before procSnapshot, d time.Duration) string {
	var b strings.Builder
	var ours float64
	for _, g := range groupOrder {
		sec := float64(s.groups[g].cpuTicks-min(before.groups[g].cpuTicks, s.groups[g].cpuTicks)) / clockTicks
		ours += sec
		fmt.Fprintf(&b, "  %-22s %8.1f CPU s  %5.1f%% of a core  (%d processes)\n", g, sec, 100*sec/d.Seconds(), s.groups[g].count)
	}
	machine := float64(s.busy-before.busy) / clockTicks
	fmt.Fprintf(&b, "  %-22s %8.1f CPU s; the whole machine %.1f CPU s of %.1f (%d CPUs): others used %.1f\n", "ours", ours, machine, d.Seconds()*float64(runtime.NumCPU()), runtime.NumCPU(), machine-ours)
	return b.String()
}

func (s procSnapshot) cpuPerInstance(before procSnapshot, d time.Duration, n int) string {
	var parts []string
	for _, g := range groupOrder {
		sec := float64(s.groups[g].cpuTicks-min(before.groups[g].cpuTicks, s.groups[g].cpuTicks)) / clockTicks
		if sec > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", g, 1000*sec/d.Seconds()/float64(n)))
		}
	}
	return "millicores per instance: " + strings.Join(parts, ", ")
}

// memTable is each group's PSS, and with base, the growth per instance over it.
func (s procSnapshot) memTable(base *procSnapshot, n int) string {
	var b strings.Builder
	var total, grown int64
	for _, g := range groupOrder {
		kib := int64(s.groups[g].pssKiB)
		total += kib
		line := fmt.Sprintf("  %-22s %8.1f MiB  (%d processes)", g, float64(kib)/1024, s.groups[g].count)
		if base != nil && n > 0 {
			d := kib - int64(base.groups[g].pssKiB)
			grown += d
			line += fmt.Sprintf("  %+8.1f MiB over the baseline: %7.2f MiB per instance", float64(d)/1024, float64(d)/1024/float64(n))
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "  %-22s %8.1f MiB", "all", float64(total)/1024)
	if base != nil && n > 0 {
		fmt.Fprintf(&b, "  %+8.1f MiB over the baseline: %7.2f MiB per instance", float64(grown)/1024, float64(grown)/1024/float64(n))
	}
	return b.String() + "\n"
}

func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// ---------------------------------------------------------------- the components' own metrics

// metricFamilies are the histograms (their _sum and _count) that say where a start waits.
var metricFamilies = map[string][]string{
	"kubelet": {"kubelet_pod_start_sli_duration_seconds", "kubelet_pod_start_duration_seconds", "kubelet_pod_worker_duration_seconds",
		"kubelet_runtime_operations_duration_seconds", "kubelet_pleg_relist_duration_seconds", "kubelet_cgroup_manager_duration_seconds"},
	"kube-proxy":            {"kubeproxy_sync_proxy_rules_duration_seconds", "kubeproxy_network_programming_duration_seconds"},
	"kube-network-policies": {""}, // all of its own (not Go's or the client's)
	"metacontroller":        {"workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"},
}

type metricSet map[string]float64 // source + " " + series -> value

func scrapeAll(ctx context.Context, bc benchConfig) metricSet {
	out := metricSet{}
	add := func(source, text string) {
		for _, line := range strings.Split(text, "\n") {
			if line == "" || line[0] == '#' {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				continue
			}
			series, value := line[:i], line[i+1:]
			name, _, _ := strings.Cut(series, "{")
			if !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") {
				continue
			}
			keep := false
			for _, prefix := range metricFamilies[source] {
				if prefix == "" {
					keep = !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "rest_client_") &&
						!strings.HasPrefix(name, "workqueue_") && !strings.HasPrefix(name, "apiserver_") && !strings.HasPrefix(name, "certwatcher_")
				} else if strings.HasPrefix(name, prefix) {
					keep = true
				}
			}
			if v, err := strconv.ParseFloat(value, 64); keep && err == nil {
				out[source+" "+series] = v
			}
		}
	}
	if nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil && len(nodes.Items) > 0 {
		if raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + nodes.Items[0].Name + "/proxy/metrics").DoRaw(ctx); err == nil {
			add("kubelet", string(raw))
		}
		// The probes' results: a counter (prober_probe_total), kept as if it were a histogram's count.
		if raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + nodes.Items[0].Name + "/proxy/metrics/probes").DoRaw(ctx); err == nil {
			for _, line := range strings.Split(string(raw), "\n") {
				if strings.HasPrefix(line, "prober_probe_total{") && strings.Contains(line, `namespace="ctf"`) {
					series, value, _ := strings.Cut(line, "} ")
					if v, err := strconv.ParseFloat(value, 64); err == nil {
						out[probeSeries(series)] += v
					}
				}
			}
		}
	}
	for source, addr := range map[string]string{"kube-proxy": bc.proxyMetric, "kube-network-policies": bc.knpMetric, "metacontroller": bc.mcMetric} {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		add(source, string(data))
	}
	return out
}

// probeSeries is a prober_probe_total series summed over Pods and containers: by probe type and result.
func probeSeries(series string) string {
	label := func(name string) string {
		_, rest, _ := strings.Cut(series, name+`="`)
		v, _, _ := strings.Cut(rest, `"`)
		return v
	}
	return fmt.Sprintf("kubelet prober_probe_count{probe_type=%q,result=%q}", label("probe_type"), label("result"))
}

// metricDelta pairs each histogram's _sum and _count over the wave: count and mean.
func metricDelta(before, after metricSet) string {
	var lines []string
	for key, count := range after {
		if !strings.Contains(key, "_count") {
			continue
		}
		sumKey := strings.Replace(key, "_count", "_sum", 1)
		dc := count - before[key]
		if dc <= 0 {
			continue
		}
		sum, histogram := after[sumKey]
		if !histogram { // a counter named _count
			lines = append(lines, fmt.Sprintf("  %s: %.0f", key, dc))
			continue
		}
		lines = append(lines, fmt.Sprintf("  %s: %.0f, mean %.4f", strings.Replace(key, "_count", "", 1), dc, (sum-before[sumKey])/dc))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
