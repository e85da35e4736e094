// Command platform-load is the platform component's load run (make bench-platform): rCTF's
// polling of every team's instance, answered from the component's informer cache, against a
// floor measured in the same run.
//
// It builds the component as `challenge-hook platform` does, in this process: a fake dynamic
// client (k8s.io/client-go/dynamic/fake) holding -challenges ChallengeDefinitions marked for rCTF
// and one Challenge per team (the component's own start of it, with the hook's status: Running with
// a TCP gateway endpoint and its token and an HTTPS endpoint, or Creating for the teams whose
// instance starts), then platform.NewKube and its watches, platform.NewInstancer and
// platform.NewHandler behind net/http on 127.0.0.1. The floor is a net/http server on 127.0.0.1
// that reads the body and answers a fixed JSON body the size of a running team's answer, with the
// same headers: what any HTTP JSON service costs on this machine.
//
// Each team is a goroutine that POSTs rCTF's get of its instance at rCTF's pace (every 2 s for
// the -starting share of teams, every 10 s for the others; -rate-multiplier divides both), the
// teams' polls spread uniformly over their period so that the load is steady, over one keep-alive
// connection pool as one rCTF process holds (-conns idle connections per host). The run alternates
// between the component and the floor in phases of -phase, after a warm-up phase of each, then
// -duration of load each, so that both see the machine's same load. Every latency is kept: count, errors (a non-200 or an
// instancerError), p50, p99 and max of each, the component's p99 above the floor's, and the
// target, PASS or FAIL. Then -creates starts (PUT) of new teams' instances, each timed, and the
// time until a get answers the new instance from the cache.
//
// A report, not a test: it exits non-zero only when a request failed.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/challenge-hook/challenge-hook/internal/platform"
)

// targetP99 is the component's target: rCTF's gets answered from the cache, p99 at most this.
const targetP99 = 5 * time.Millisecond

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "platform-load: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	teams, challenges, creates, conns int
	starting, multiplier              float64
	duration, phase                   time.Duration
	cpuProfile                        string
}

func run() error {
	o, err := parseOptions()
	if err != nil {
		return err
	}
	fmt.Printf("%d CPUs (%s), GOMAXPROCS %d, %s, load average %s\n", runtime.NumCPU(), cpuModel(), runtime.GOMAXPROCS(0), runtime.Version(), loadAverage())

	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	token := newToken()
	now := time.Now()
	starting := int(math.Round(o.starting * float64(o.teams)))
	fx, err := newFixture(newChallenges(o.challenges, now), o.teams, starting, token, now, logger)
	if err != nil {
		return err
	}
	client := newFakeClient(fx.objects)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	componentURL, stop, err := startComponent(ctx, client, o, starting, token, logger)
	if err != nil {
		return err
	}
	defer stop()

	transport := &http.Transport{MaxIdleConns: 2 * o.conns, MaxIdleConnsPerHost: o.conns, IdleConnTimeout: 90 * time.Second}
	p := &poster{client: &http.Client{Transport: transport, Timeout: 10 * time.Second}, urls: [2]string{componentURL}}
	answer, err := checkAnswers(p, fx.teams)
	if err != nil {
		return err
	}
	fmt.Printf("every team's get answered as its instance stands; a running team's answer, %d bytes: %s\n", len(answer), bytes.TrimSpace(answer))
	floorURL, stopFloor, err := serve(floorHandler(answer))
	if err != nil {
		return err
	}
	defer stopFloor()
	p.urls[floor] = floorURL

	failed, err := measure(p, fx, o, starting)
	if err != nil {
		return err
	}

	if o.creates > 0 {
		if err := timeCreates(p, client, fx, token, o.creates); err != nil {
			return err
		}
	}
	fmt.Printf("\nend, load average %s\n", loadAverage())
	if failed > 0 {
		return fmt.Errorf("%d requests failed", failed)
	}
	return nil
}

// startComponent builds the component over client as `challenge-hook platform` does, once its
// watches listed, and serves it on 127.0.0.1.
func startComponent(ctx context.Context, client *dynamicfake.FakeDynamicClient, o options, starting int, token string, logger *slog.Logger) (string, func(), error) {
	kube, err := platform.NewKube(client, []string{namespace})
	if err != nil {
		return "", nil, err
	}
	listing := time.Now()
	if !kube.Start(ctx) {
		return "", nil, errors.New("the watches never listed")
	}
	fmt.Printf("the component's watches listed %d ChallengeDefinitions and %d Challenges (%d starting, %d running) from the fake client in %s\n",
		o.challenges, o.teams, starting, o.teams-starting, time.Since(listing).Round(time.Millisecond))
	instancer := platform.NewInstancer(kube, time.Now, logger, platform.RateLimit{Burst: 5, Every: 12 * time.Second})
	return serve(platform.NewHandler(instancer, []byte(token), newMetrics(), logger))
}

// parseOptions reads the run's flags.
func parseOptions() (options, error) {
	var o options
	flag.IntVar(&o.teams, "teams", 1000, "teams polling, one instance each")
	flag.IntVar(&o.challenges, "challenges", 20, "rCTF challenges, each marked on a ChallengeDefinition; team i plays challenge i mod this")
	flag.Float64Var(&o.starting, "starting", 0.1, "share of the teams whose instance is starting (Creating: polled every 2 s); the others run (polled every 10 s)")
	flag.Float64Var(&o.multiplier, "rate-multiplier", 1, "rCTF's polling rate times this")
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "load against each of the component and the floor (rounded up to whole phases)")
	flag.DurationVar(&o.phase, "phase", 3*time.Second, "length of each phase, alternating between the component and the floor")
	flag.IntVar(&o.conns, "conns", 64, "idle keep-alive connections per host of the load's one connection pool (as one rCTF process)")
	flag.IntVar(&o.creates, "creates", 10, "starts of new teams' instances timed after the load")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the load to `file`")
	flag.Parse()
	switch {
	case o.teams < 1 || o.challenges < 1 || o.creates < 0 || o.conns < 1:
		return o, errors.New("-teams, -challenges and -conns must be positive, -creates not negative")
	case o.starting < 0 || o.starting > 1:
		return o, errors.New("-starting is a share, from 0 to 1")
	case o.multiplier <= 0 || o.duration <= 0 || o.phase <= 0:
		return o, errors.New("-rate-multiplier, -duration and -phase must be positive")
	}
	return o, nil
}

// measure runs the load on the component and the floor, alternating, and reports it; it returns
// the number of requests that failed.
func measure(p *poster, fx *fixture, o options, starting int) (int, error) {
	runtime.GC() // the fixture's garbage, not the first phase's
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	fmt.Printf("live heap before the load: %.0f MiB (the fake client's objects and the component's cache; in a cluster the first are the API server's)\n",
		float64(mem.HeapAlloc)/(1<<20))
	phases := int(math.Ceil(float64(o.duration) / float64(o.phase)))
	start := time.Now().Add(200 * time.Millisecond)
	const warm = 2 // one phase of each, not measured
	s := schedule{start: start, end: start.Add(time.Duration(2*phases+warm) * o.phase), phase: o.phase, warm: warm}
	perSecond := (float64(starting)/startingEvery.Seconds() + float64(o.teams-starting)/runningEvery.Seconds()) * o.multiplier
	fmt.Printf("\nload: %d teams, %d starting (a get every %s) and %d running (every %s), %.0f gets/s; %d phases of %s each way, alternating, component first, after a warm-up phase of each\n",
		o.teams, starting, time.Duration(float64(startingEvery)/o.multiplier), o.teams-starting, time.Duration(float64(runningEvery)/o.multiplier),
		perSecond, phases, o.phase)
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return 0, err
		}
	}
	records := runLoad(p, fx.teams, s, o.multiplier)
	pprof.StopCPUProfile()
	return report(records, o, perSecond, time.Duration(phases)*o.phase), nil
}

func newMetrics() *platform.Metrics { return platform.NewMetrics(prometheus.NewRegistry()) }

// serve serves h on 127.0.0.1 with the component's server settings (cmd/challenge-hook's
// servePlatform), and returns the URL of /v1/instances/ and how to stop it.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	server := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	go server.Serve(ln)
	return "http://" + ln.Addr().String() + "/v1/instances/", func() { server.Close() }, nil
}

// report prints each target's figures and the target, and returns the failed requests.
func report(r [2]*record, o options, perSecond float64, each time.Duration) int {
	st := [2]stats{statsOf(r[component].latencies), statsOf(r[floor].latencies)}
	late := [2]stats{statsOf(r[component].late), statsOf(r[floor].late)}
	fmt.Printf("\n| figure | component | floor |\n|---|---|---|\n")
	row := func(name string, cell func(i int) string) {
		fmt.Printf("| %s | %s | %s |\n", name, cell(component), cell(floor))
	}
	row("gets", func(i int) string {
		return fmt.Sprintf("%d in %s (%.0f/s)", st[i].n, each, float64(st[i].n)/each.Seconds())
	})
	row("errors", func(i int) string { return fmt.Sprint(r[i].errors) })
	row("p50", func(i int) string { return ms(st[i].p50) })
	row("p99", func(i int) string { return ms(st[i].p99) })
	row("max", func(i int) string { return ms(st[i].max) })
	row("CPU per get (this process: the load's client and both servers)", func(i int) string {
		return fmt.Sprintf("%.0f µs", float64(r[i].cpu.Microseconds())/float64(max(st[i].n, 1)))
	})
	row("client's delay p99 (a poll's scheduled time to its send)", func(i int) string { return ms(late[i].p99) })
	for i, name := range targetNames {
		var p99s []string
		over := 0
		for phase := range len(r[i].byPhase) {
			p99 := statsOf(r[i].byPhase[phase]).p99
			p99s = append(p99s, fmt.Sprintf("%.1f", float64(p99.Microseconds())/1000))
			if p99 > targetP99 {
				over++
			}
		}
		fmt.Printf("  %s, p99 of each %s phase in ms, %d over %s: %s\n", name, o.phase, over, ms(targetP99), strings.Join(p99s, " "))
	}
	if slow := max(late[component].p99, late[floor].p99); slow > targetP99 {
		fmt.Printf("  the load's goroutines woke up to %s late (p99): the machine's other work held the CPU, and the latencies carry it too\n", ms(slow))
	}
	failed := r[component].errors + r[floor].errors
	for i, name := range targetNames {
		for _, e := range r[i].firstErrs {
			fmt.Printf("  %s error: %s\n", name, e)
		}
	}
	verdict := "PASS"
	if st[component].p99 > targetP99 {
		verdict = "FAIL"
	}
	fmt.Printf("\nthe component's p99 above the floor's: %s (p50: %s)\n", ms(st[component].p99-st[floor].p99), ms(st[component].p50-st[floor].p50))
	fmt.Printf("target: gets answered from the cache, p99 <= %s with %d teams polling at rCTF's rate x%g (%.0f gets/s): %s: %s\n",
		ms(targetP99), o.teams, o.multiplier, perSecond, ms(st[component].p99), verdict)
	return failed
}

// cpuModel is /proc/cpuinfo's first model name.
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
		}
	}
	return "unknown model"
}

// loadAverage is /proc/loadavg's 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
