// Command tcpgateway-load is the TCP gateway's loopback load run (make bench-gateway): it runs
// `challenge-hook tcp-gateway` as a child process in front of an echo instance served here, and
// HAProxy (plain TCP mode, the usual proxy; skipped when it is not installed) as another child in
// front of the same instance, and measures each figure directly to the instance, through the
// gateway and through HAProxy, in the same run, alternating the three; and through the same
// gateway process's WebSocket listener (--websocket-listen, GET /ws/<token>, the bytes in binary
// messages of at most 64 KiB, as wsrx and websocat send them), a way of its own (websocket.go):
//
//   - connect: dial until the first byte echoed by the instance (through the gateway: the prompt
//     and the token on the way; through the WebSocket, the upgrade), p50 and p99;
//   - echo: a 1-byte round trip, over -open connections held open each way at once, p50 and p99;
//   - bulk: MiB/s of -bulk-mib each way through the echo instance on one connection, and the
//     proxy's CPU time per GiB it carried (utime+stime from /proc), and this process's (the
//     client's and the echo instance's: a WebSocket client masks what it sends);
//   - new connections per second (connect, 1-byte echo, close, from -workers goroutines), the
//     median of -rate-rounds alternating runs, and the proxy's connections per CPU-second;
//   - memory per idle connection: the proxy's RSS (/proc/<pid>/status VmRSS, a fresh child)
//     before and after opening each count of -idle connections, divided by the count; for the
//     gateway, what its Go runtime holds of it too (stacks, heap and goroutines per connection, from
//     its /metrics), which says where a figure past its target goes.
//
// It ends with the gateway's targets against HAProxy and the direct connection of the same run,
// and the WebSocket path's against the TCP path's of the same run and process.
// With -attack it runs the attack classes instead (attack.go).
//
// Everything listens on 127.0.0.1; the children are stopped by their PIDs.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "tcpgateway-load: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	binary     string
	haproxy    string
	ceiling    string
	procs      int
	connects   int
	open       int
	rounds     int
	bulkMiB    int
	workers    int
	rateFor    time.Duration
	rateRounds int
	idle       []int
	attack     attackOptions
}

// The gateway's targets against the usual proxy and the direct connection.
const (
	targetHandshakeRatio = 1.2 // handshake p50 at most this times HAProxy's
	targetIdleKiB        = 8   // RSS per idle connection at most this
	targetBulkRatio      = 0.9 // bulk MiB/s at least this of direct
	// The WebSocket path's, against the TCP path's through the same gateway in the same run: an
	// HTTP request, its answer and framing cost something, not a different order of magnitude.
	targetWSHandshakeRatio = 1.5 // WebSocket handshake p50 at most this times the TCP path's
	targetWSBulkRatio      = 0.8 // WebSocket bulk MiB/s at least this of the TCP path's
	targetWSIdleKiB        = 8   // RSS per idle WebSocket connection at most this
)

func run() error {
	var o options
	var idle string
	flag.StringVar(&o.binary, "binary", "bin/challenge-hook", "the challenge-hook `binary` to run as the gateway")
	flag.StringVar(&o.haproxy, "haproxy", "haproxy", "the HAProxy `binary` compared with (looked up in PATH; none: no HAProxy column)")
	flag.StringVar(&o.ceiling, "ceiling", "", "the hack/tcpgateway-ceiling `binary`, run as a gateway: the least a gateway that asks for a token does, a column of its own (none: no column)")
	flag.IntVar(&o.procs, "procs", runtime.GOMAXPROCS(0), "GOMAXPROCS of the gateway and nbthread of HAProxy")
	flag.IntVar(&o.connects, "connects", 2000, "connections timed for the connect latency, each way")
	flag.IntVar(&o.open, "open", 1000, "connections held open each way while echo latency is measured")
	flag.IntVar(&o.rounds, "rounds", 5, "1-byte echoes per open connection")
	flag.IntVar(&o.bulkMiB, "bulk-mib", 512, "MiB sent (and echoed) per bulk transfer")
	flag.IntVar(&o.workers, "workers", 8, "goroutines opening connections for the connection rate")
	flag.DurationVar(&o.rateFor, "rate-for", 3*time.Second, "duration of each connection-rate run")
	flag.IntVar(&o.rateRounds, "rate-rounds", 3, "connection-rate runs each way, alternating")
	attackFlags(&o.attack)
	var childClass, childGateway, childWS, childToken string
	flag.StringVar(&childClass, "attack-child-class", "", "internal: run this attack class's attackers only, against -attack-child-gateway (the attack run's own child process)")
	flag.StringVar(&childGateway, "attack-child-gateway", "", "internal: the gateway the attackers' process attacks")
	flag.StringVar(&childWS, "attack-child-websocket", "", "internal: the gateway's WebSocket listener, for the attackers' process")
	flag.StringVar(&childToken, "attack-child-token", "", "internal: the attacker's own token, for the attackers' process")
	flag.StringVar(&idle, "idle", "1000,10000", "comma-separated counts of idle connections for the memory figure (lowered to what RLIMIT_NOFILE allows)")
	flag.Parse()
	for _, s := range strings.Split(idle, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("-idle %q: counts above 0", idle)
		}
		o.idle = append(o.idle, n)
	}

	hard, err := raiseNoFile()
	if err != nil {
		return fmt.Errorf("RLIMIT_NOFILE: %w", err)
	}
	if childClass != "" {
		return attackChild(o.attack, childClass, childGateway, childWS, childToken)
	}
	fmt.Printf("%s UTC, load average %s, %d CPUs, GOMAXPROCS/nbthread %d, RLIMIT_NOFILE %d (soft raised to hard, for this process and its children)\n",
		time.Now().UTC().Format("2006-01-02 15:04"), loadAverage(), runtime.NumCPU(), o.procs, hard)
	dir, err := os.MkdirTemp("", "tcpgateway-load")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	key := make([]byte, 32)
	rand.Read(key)
	keyText := base64.StdEncoding.EncodeToString(key)
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(keyText+"\n"), 0o600); err != nil {
		return err
	}
	if o.attack.on {
		err = runAttack(o, []byte(keyText), keyFile)
	} else {
		err = runLoad(o, hard, []byte(keyText), keyFile, dir)
	}
	fmt.Printf("\nend %s UTC, load average %s\n", time.Now().UTC().Format("2006-01-02 15:04"), loadAverage())
	return err
}

// way is one way to the echo instance: direct, through the gateway, through HAProxy or through
// the ceiling.
type way struct {
	name string
	dial func() (net.Conn, error)
	pid  int // the process in between; 0 for direct
}

func runLoad(o options, hard uint64, key []byte, keyFile, dir string) error {
	// A proxied connection holds two descriptors in the proxy, and two here (the client's and the
	// echo instance's); leave a thousand for everything else, the splice pipes the gateway's Go
	// runtime keeps in its pool among them (two descriptors each; see idleMemory).
	maxIdle := int(min(hard, 1<<30)-1000) / 2
	haproxyBin, err := exec.LookPath(o.haproxy)
	if err != nil || o.haproxy == "" {
		fmt.Printf("no HAProxy (%s): the HAProxy column is skipped; install it with: %s\n", o.haproxy, haproxyInstall)
		haproxyBin = ""
	} else if out, err := exec.Command(haproxyBin, "-v").Output(); err == nil {
		fmt.Printf("%s\n", strings.SplitN(string(out), "\n", 2)[0])
	}
	instance, token, err := startInstance(key, true, "")
	if err != nil {
		return err
	}
	defer instance.Close()
	quietInstance, quietToken, err := startInstance(key, false, "")
	if err != nil {
		return err
	}
	defer quietInstance.Close()
	// Limits that let one source and one token hold every connection of the run.
	gatewayLimits := []string{"--max-connections=100000", "--max-connections-per-token=100000", "--max-pending-per-source=100000",
		"--service-cidrs=127.0.0.0/8"}
	g, err := startGateway(o.binary, keyFile, o.procs, append(gatewayLimits, websocketListenFlag)...)
	if err != nil {
		return err
	}
	defer func() { g.stop() }()
	ways := []way{
		{name: "direct", dial: func() (net.Conn, error) { return net.Dial("tcp4", instance.Addr().String()) }},
		{name: "gateway", dial: func() (net.Conn, error) { return dialGateway(g.addr, token) }, pid: g.pid()},
	}
	wsD := wsDialer(netip.Addr{}, 10*time.Second)
	if g.wsAddr != "" {
		// The same process as the TCP path's: the WebSocket figures are read against that one.
		ways = append(ways, way{name: "websocket", dial: func() (net.Conn, error) {
			return dialWebSocket(context.Background(), wsD, g.wsAddr, token)
		}, pid: g.pid()})
	} else {
		fmt.Printf("this gateway binary has no WebSocket listener: the websocket column is skipped\n")
	}
	var h *child
	if haproxyBin != "" {
		if h, err = startHAProxy(haproxyBin, dir, instance.Addr().String(), maxIdle+10, o.procs); err != nil {
			return err
		}
		defer func() { h.stop() }()
		ways = append(ways, way{name: "haproxy", dial: func() (net.Conn, error) { return net.Dial("tcp4", h.addr) }, pid: h.pid()})
	}
	var ceiling *child
	if o.ceiling != "" {
		if ceiling, err = startGateway(o.ceiling, keyFile, o.procs, gatewayLimits...); err != nil {
			return err
		}
		defer func() { ceiling.stop() }()
		ways = append(ways, way{name: "ceiling", dial: func() (net.Conn, error) { return dialGateway(ceiling.addr, token) }, pid: ceiling.pid()})
	}
	r := results{ways: ways}

	fmt.Printf("\nconnect (dial to first echoed byte), %d connections each way, alternating\n", o.connects)
	conn := make([][]time.Duration, len(ways))
	for range o.connects {
		for i, w := range ways {
			start := time.Now()
			c, err := w.dial()
			if err == nil {
				err = echoByte(c)
				c.Close()
			}
			if err != nil {
				return fmt.Errorf("connect %s: %w", w.name, err)
			}
			conn[i] = append(conn[i], time.Since(start))
		}
	}
	r.connect = conn
	printLatency("connect", ways, conn)

	fmt.Printf("\necho (1 byte), %d connections open each way, %d rounds over all\n", o.open, o.rounds)
	open := make([][]net.Conn, len(ways))
	closeOpen := func() {
		for _, cs := range open {
			for _, c := range cs {
				c.Close()
			}
		}
	}
	for range o.open {
		for i, w := range ways {
			c, err := w.dial()
			if err != nil {
				closeOpen()
				return fmt.Errorf("open %s: %w", w.name, err)
			}
			open[i] = append(open[i], c)
		}
	}
	echo := make([][]time.Duration, len(ways))
	for range o.rounds {
		for j := range o.open {
			for i := range ways {
				start := time.Now()
				if err := echoByte(open[i][j]); err != nil {
					closeOpen()
					return fmt.Errorf("echo %s: %w", ways[i].name, err)
				}
				echo[i] = append(echo[i], time.Since(start))
			}
		}
	}
	closeOpen()
	printLatency("echo", ways, echo)

	fmt.Printf("\nbulk, %d MiB each way on one connection, best of 3 alternating\n", o.bulkMiB)
	r.bulk = make([]float64, len(ways))
	cpu := make([]time.Duration, len(ways))
	// This process's CPU time too: the client's share of the machine (a WebSocket client masks
	// every byte it sends), which the proxy does not get while the two share its cores.
	clientCPU := make([]time.Duration, len(ways))
	for range 3 {
		for i, w := range ways {
			var before time.Duration
			if w.pid != 0 {
				if before, err = cpuTime(w.pid); err != nil {
					return err
				}
			}
			clientBefore, _ := cpuTime(os.Getpid())
			rate, err := bulk(w.dial, o.bulkMiB)
			if err != nil {
				return fmt.Errorf("bulk %s: %w", w.name, err)
			}
			clientAfter, _ := cpuTime(os.Getpid())
			clientCPU[i] += clientAfter - clientBefore
			r.bulk[i] = max(r.bulk[i], rate)
			if w.pid != 0 {
				after, err := cpuTime(w.pid)
				if err != nil {
					return err
				}
				cpu[i] += after - before
			}
		}
	}
	for i, w := range ways {
		fmt.Printf("  %-8s %5.0f MiB/s, %.2f of direct", w.name, r.bulk[i], r.bulk[i]/r.bulk[0])
		if w.pid != 0 {
			// Each transfer crosses the proxy twice (there and echoed back): 2 × 3 × bulk-mib.
			fmt.Printf("; the process: %.0f ms of CPU per GiB carried", cpu[i].Seconds()*1000/(float64(2*3*o.bulkMiB)/1024))
		}
		fmt.Printf("; this process (client and echo instance): %.0f ms per GiB\n", clientCPU[i].Seconds()*1000/(float64(2*3*o.bulkMiB)/1024))
	}

	fmt.Printf("\nnew connections (connect, 1-byte echo, close), %d workers, %d runs of %s each way, alternating; the median\n", o.workers, o.rateRounds, o.rateFor)
	rates := make([][]float64, len(ways))
	perCPU := make([][]float64, len(ways))
	for range o.rateRounds {
		for i, w := range ways {
			rate, cpuRate, err := connectionRate(w.dial, o.workers, o.rateFor, w.pid)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			rates[i] = append(rates[i], rate)
			perCPU[i] = append(perCPU[i], cpuRate)
		}
	}
	r.rate = make([]float64, len(ways))
	for i, w := range ways {
		r.rate[i] = median(rates[i])
		fmt.Printf("  %-8s %6.0f/s (runs: %s)", w.name, r.rate[i], formatRates(rates[i]))
		if w.pid != 0 {
			fmt.Printf("; the process: %.0f connections per CPU-second", median(perCPU[i]))
		}
		fmt.Println()
	}
	g.stop()
	if h != nil {
		h.stop()
	}
	if ceiling != nil {
		ceiling.stop()
	}

	counts := make([]int, len(o.idle))
	for i, n := range o.idle {
		counts[i] = min(n, maxIdle)
		if counts[i] < n {
			fmt.Printf("\n%d idle connections lowered to %d: RLIMIT_NOFILE's hard limit %d holds two descriptors per connection in the proxy and two here (client and instance), and a thousand more (the gateway's pooled splice pipes)\n",
				n, counts[i], hard)
		}
	}
	fmt.Printf("\nmemory per idle connection: RSS of a fresh proxy process after 100 warm-up connections, then above it\n")
	r.idle = make([][]float64, len(ways))
	for i, w := range ways {
		if w.pid == 0 {
			continue
		}
		var p *child
		var dial func() (net.Conn, error)
		switch w.name {
		case "websocket":
			// A fresh gateway of its own, as the TCP path's figure: the two never share a baseline.
			p, err = startGateway(o.binary, keyFile, o.procs, append(gatewayLimits, websocketListenFlag)...)
			if err == nil {
				dial = func() (net.Conn, error) { return dialWebSocket(context.Background(), wsD, p.wsAddr, quietToken) }
			}
		case "gateway", "ceiling":
			binary := o.binary
			if w.name == "ceiling" {
				binary = o.ceiling
			}
			p, err = startGateway(binary, keyFile, o.procs, gatewayLimits...)
			if err == nil {
				dial = func() (net.Conn, error) { return dialGateway(p.addr, quietToken) }
			}
		default:
			p, err = startHAProxy(haproxyBin, dir, quietInstance.Addr().String(), maxIdle+10, o.procs)
			if err == nil {
				dial = func() (net.Conn, error) { return net.Dial("tcp4", p.addr) }
			}
		}
		if err != nil {
			return err
		}
		r.idle[i], err = idleMemory(w.name, p, dial, counts)
		p.stop()
		if err != nil {
			return err
		}
	}
	r.idleCounts = counts
	r.print()
	return nil
}

// idleMemory opens each count of idle connections through p (one echoed byte each) and returns
// the RSS above the baseline per connection, in KiB.
func idleMemory(name string, p *child, dial func() (net.Conn, error), counts []int) ([]float64, error) {
	// Warm up: the first connections allocate what every later one reuses.
	for range 100 {
		c, err := dial()
		if err != nil {
			return nil, err
		}
		echoByte(c)
		c.Close()
	}
	time.Sleep(time.Second)
	base, err := rss(p.pid())
	if err != nil {
		return nil, err
	}
	fmt.Printf("  %s: baseline %.1f MiB\n", name, mib(base))
	baseGo := goRuntime(p.metrics)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var perConn []float64
	for _, n := range counts {
		for len(held) < n {
			c, err := dial()
			if err == nil {
				err = echoByte(c)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: idle connection %d: %w", name, len(held)+1, err)
			}
			held = append(held, c)
			if len(held)%100 == 0 {
				// Paced: a copy holds a splice pipe (two descriptors) for up to 100 ms after its
				// last byte, and Go keeps the pipes in a pool: opened at full speed, hundreds of
				// them would count against RLIMIT_NOFILE.
				time.Sleep(150 * time.Millisecond)
			}
		}
		time.Sleep(2 * time.Second)
		now, err := rss(p.pid())
		if err != nil {
			return nil, err
		}
		perConn = append(perConn, float64(now-base)/float64(n)/1024)
		fmt.Printf("  %s: %d idle connections: RSS %.1f MiB, %.1f KiB per connection above the baseline%s\n", name, n, mib(now), perConn[len(perConn)-1],
			goRuntimePerConn(baseGo, goRuntime(p.metrics), n))
	}
	return perConn, nil
}

// results are the figures the targets are read from, one per way (ways[0] is direct).
type results struct {
	ways       []way
	connect    [][]time.Duration
	bulk       []float64
	rate       []float64
	idle       [][]float64 // per way, per count
	idleCounts []int
}

// print writes the table of the run and the gateway's targets, read against HAProxy and the
// direct connection measured in the same run.
func (r results) print() {
	fmt.Printf("\n| figure |")
	for _, w := range r.ways {
		fmt.Printf(" %s |", w.name)
	}
	fmt.Printf("\n|---|%s\n", strings.Repeat("---|", len(r.ways)))
	row := func(name string, cell func(i int) string) {
		fmt.Printf("| %s |", name)
		for i := range r.ways {
			fmt.Printf(" %s |", cell(i))
		}
		fmt.Println()
	}
	row("new connections/s", func(i int) string { return fmt.Sprintf("%.0f", r.rate[i]) })
	row("handshake p50", func(i int) string { return percentile(r.connect[i], 50).Round(time.Microsecond).String() })
	row("handshake p99", func(i int) string { return percentile(r.connect[i], 99).Round(time.Microsecond).String() })
	for j, n := range r.idleCounts {
		row(fmt.Sprintf("RSS per idle connection, %d", n), func(i int) string {
			if r.idle[i] == nil {
				return "-"
			}
			return fmt.Sprintf("%.1f KiB", r.idle[i][j])
		})
	}
	row("bulk MiB/s", func(i int) string { return fmt.Sprintf("%.0f", r.bulk[i]) })

	fmt.Printf("\ntargets of the gateway, against this run's figures:\n")
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "FAIL"
	}
	const gw = 1
	hp, ceiling := r.index("haproxy"), r.index("ceiling")
	if hp > 0 {
		fmt.Printf("  new connections/s >= HAProxy's: %.0f vs %.0f, ratio %.2f: %s\n", r.rate[gw], r.rate[hp], r.rate[gw]/r.rate[hp], verdict(r.rate[gw] >= r.rate[hp]))
		g50, h50 := percentile(r.connect[gw], 50), percentile(r.connect[hp], 50)
		ratio := float64(g50) / float64(h50)
		fmt.Printf("  handshake p50 <= %.1fx HAProxy's: %s vs %s, ratio %.2f: %s\n", targetHandshakeRatio, g50.Round(time.Microsecond), h50.Round(time.Microsecond), ratio, verdict(ratio <= targetHandshakeRatio))
	} else {
		fmt.Printf("  new connections/s and handshake p50 against HAProxy: not measured (no HAProxy: %s)\n", haproxyInstall)
	}
	for j, n := range r.idleCounts {
		kib := r.idle[gw][j]
		fmt.Printf("  idle memory <= %d KiB per connection at %d: %.1f KiB: %s\n", targetIdleKiB, n, kib, verdict(kib <= targetIdleKiB))
	}
	ratio := r.bulk[gw] / r.bulk[0]
	fmt.Printf("  bulk >= %.1f of direct: %.0f vs %.0f MiB/s, ratio %.2f: %s\n", targetBulkRatio, r.bulk[gw], r.bulk[0], ratio, verdict(ratio >= targetBulkRatio))
	r.printWebSocketTargets(verdict)
	if ceiling < 0 {
		return
	}
	// Not targets: what asking for a token costs by itself, and the gateway against the least a
	// gateway that asks for one does.
	fmt.Printf("\nthe ceiling (hack/tcpgateway-ceiling: the least a gateway that asks for a token does), in this run:\n")
	against := func(who, what string, i, j int) {
		fmt.Printf("  %s against %s: new connections/s %.2f, handshake p50 %.2f\n", who, what, r.rate[i]/r.rate[j],
			float64(percentile(r.connect[i], 50))/float64(percentile(r.connect[j], 50)))
	}
	if hp > 0 {
		against("the ceiling", "HAProxy", ceiling, hp)
	}
	against("the gateway", "the ceiling", gw, ceiling)
}

// index is the position of the way named name, or -1.
func (r results) index(name string) int {
	for i, w := range r.ways {
		if w.name == name {
			return i
		}
	}
	return -1
}

// printLatency prints p50 and p99 of every way, and what each proxy adds to direct (ways[0]).
func printLatency(what string, ways []way, d [][]time.Duration) {
	for _, q := range []float64{50, 99} {
		fmt.Printf("  %s p%.0f:", what, q)
		base := percentile(d[0], q)
		for i, w := range ways {
			v := percentile(d[i], q)
			fmt.Printf(" %s %s", w.name, v.Round(time.Microsecond))
			if i > 0 {
				fmt.Printf(" (+%s)", (v - base).Round(time.Microsecond))
			}
			if i < len(ways)-1 {
				fmt.Print(",")
			}
		}
		fmt.Println()
	}
}

func formatRates(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, ", ")
}

// printWebSocketTargets writes the WebSocket path's targets, read against the TCP path through the
// same gateway process in the same run (not against direct or HAProxy: what the WebSocket adds is
// the question, the TCP path's own cost has targets of its own above).
func (r results) printWebSocketTargets(verdict func(bool) string) {
	const gw = 1
	ws := r.index("websocket")
	if ws < 0 {
		fmt.Printf("\nthe WebSocket path: not measured (this gateway binary has no --websocket-listen)\n")
		return
	}
	fmt.Printf("\ntargets of the WebSocket path, against the TCP path through the same gateway in this run:\n")
	w50, t50 := percentile(r.connect[ws], 50), percentile(r.connect[gw], 50)
	ratio := float64(w50) / float64(t50)
	fmt.Printf("  handshake p50 <= %.1fx the TCP path's: %s vs %s, ratio %.2f: %s\n", targetWSHandshakeRatio,
		w50.Round(time.Microsecond), t50.Round(time.Microsecond), ratio, verdict(ratio <= targetWSHandshakeRatio))
	w99, t99 := percentile(r.connect[ws], 99), percentile(r.connect[gw], 99)
	fmt.Printf("  (handshake p99, no target: %s vs %s, ratio %.2f)\n", w99.Round(time.Microsecond), t99.Round(time.Microsecond), float64(w99)/float64(t99))
	ratio = r.bulk[ws] / r.bulk[gw]
	fmt.Printf("  bulk >= %.1f of the TCP path's: %.0f vs %.0f MiB/s, ratio %.2f: %s\n", targetWSBulkRatio, r.bulk[ws], r.bulk[gw], ratio, verdict(ratio >= targetWSBulkRatio))
	for j, n := range r.idleCounts {
		kib := r.idle[ws][j]
		fmt.Printf("  idle memory <= %d KiB per WebSocket connection at %d: %.1f KiB (the TCP path's: %.1f KiB): %s\n", targetWSIdleKiB, n, kib, r.idle[gw][j], verdict(kib <= targetWSIdleKiB))
	}
}
