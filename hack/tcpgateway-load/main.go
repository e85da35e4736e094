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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
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

// loadRun is one load run: its flags, what its phases share, and the figures so far.
type loadRun struct {
	o       options
	hard    uint64 // RLIMIT_NOFILE's hard limit
	keyFile string
	dir     string
	// maxIdle is the most idle connections RLIMIT_NOFILE allows through one proxy (see runLoad).
	maxIdle    int
	haproxyBin string // "" when there is no HAProxy
	// gatewayLimits let one source and one token hold every connection of the run.
	gatewayLimits []string
	wsClient      *websocket.Dialer
	// quietInstance is the echo instance of the idle-memory phase (it copies through a buffer, not
	// with splice: see startEcho); quietToken is its token.
	quietInstance net.Listener
	quietToken    string
	r             results // r.ways: direct first, then the gateway, then the other ways it has
}

func runLoad(o options, hard uint64, key []byte, keyFile, dir string) error {
	l := &loadRun{o: o, hard: hard, keyFile: keyFile, dir: dir,
		// A proxied connection holds two descriptors in the proxy, and two here (the client's and the
		// echo instance's); leave a thousand for everything else, the splice pipes the gateway's Go
		// runtime keeps in its pool among them (two descriptors each; see idleMemory).
		maxIdle: int(min(hard, 1<<30)-1000) / 2,
		gatewayLimits: []string{"--max-connections=100000", "--max-connections-per-token=100000", "--max-pending-per-source=100000",
			"--service-cidrs=127.0.0.0/8"},
		wsClient: wsDialer(netip.Addr{}, 10*time.Second),
	}
	l.findHAProxy()
	instance, token, err := startInstance(key, true, "")
	if err != nil {
		return err
	}
	defer instance.Close()
	if l.quietInstance, l.quietToken, err = startInstance(key, false, ""); err != nil {
		return err
	}
	defer l.quietInstance.Close()
	proxies, err := l.startProxies(instance.Addr().String(), token)
	defer func() {
		for _, p := range slices.Backward(proxies) {
			p.stop()
		}
	}()
	if err != nil {
		return err
	}
	for _, measure := range []func() error{l.measureConnect, l.measureEcho, l.measureBulk, l.measureRate} {
		if err := measure(); err != nil {
			return err
		}
	}
	// The idle-memory phase starts a fresh process of each proxy: these are done.
	for _, p := range proxies {
		p.stop()
	}
	if err := l.measureIdle(); err != nil {
		return err
	}
	l.r.print()
	return nil
}

// findHAProxy looks -haproxy up in PATH and prints its version, or that its column is skipped.
func (l *loadRun) findHAProxy() {
	bin, err := exec.LookPath(l.o.haproxy)
	if err != nil || l.o.haproxy == "" {
		fmt.Printf("no HAProxy (%s): the HAProxy column is skipped; install it with: %s\n", l.o.haproxy, haproxyInstall)
		return
	}
	l.haproxyBin = bin
	if out, err := exec.Command(bin, "-v").Output(); err == nil {
		fmt.Printf("%s\n", strings.SplitN(string(out), "\n", 2)[0])
	}
}

// startProxies starts the gateway, HAProxy and the ceiling (those the run has) in front of the
// echo instance at instanceAddr, and sets the run's ways: direct, then through each. It returns
// the children it started, with an error or not: the caller stops them.
func (l *loadRun) startProxies(instanceAddr, token string) ([]*child, error) {
	g, err := startGateway(l.o.binary, l.keyFile, l.o.procs, append(l.gatewayLimits, websocketListenFlag)...)
	if err != nil {
		return nil, err
	}
	started := []*child{g}
	l.r.ways = []way{
		{name: "direct", dial: func() (net.Conn, error) { return net.Dial("tcp4", instanceAddr) }},
		{name: "gateway", dial: func() (net.Conn, error) { return dialGateway(g.addr, token) }, pid: g.pid()},
	}
	if g.wsAddr != "" {
		// The same process as the TCP path's: the WebSocket figures are read against that one.
		l.r.ways = append(l.r.ways, way{name: "websocket", dial: func() (net.Conn, error) {
			return dialWebSocket(context.Background(), l.wsClient, g.wsAddr, token)
		}, pid: g.pid()})
	} else {
		fmt.Printf("this gateway binary has no WebSocket listener: the websocket column is skipped\n")
	}
	if l.haproxyBin != "" {
		h, err := startHAProxy(l.haproxyBin, l.dir, instanceAddr, l.maxIdle+10, l.o.procs)
		if err != nil {
			return started, err
		}
		started = append(started, h)
		l.r.ways = append(l.r.ways, way{name: "haproxy", dial: func() (net.Conn, error) { return net.Dial("tcp4", h.addr) }, pid: h.pid()})
	}
	if l.o.ceiling != "" {
		ceiling, err := startGateway(l.o.ceiling, l.keyFile, l.o.procs, l.gatewayLimits...)
		if err != nil {
			return started, err
		}
		started = append(started, ceiling)
		l.r.ways = append(l.r.ways, way{name: "ceiling", dial: func() (net.Conn, error) { return dialGateway(ceiling.addr, token) }, pid: ceiling.pid()})
	}
	return started, nil
}

// measureConnect times -connects connections each way, dial to the first byte echoed,
// alternating the ways.
func (l *loadRun) measureConnect() error {
	ways := l.r.ways
	fmt.Printf("\nconnect (dial to first echoed byte), %d connections each way, alternating\n", l.o.connects)
	conn := make([][]time.Duration, len(ways))
	for range l.o.connects {
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
	l.r.connect = conn
	printLatency("connect", ways, conn)
	return nil
}

// measureEcho holds -open connections open each way at once and times -rounds 1-byte round trips
// on each, alternating the ways.
func (l *loadRun) measureEcho() error {
	ways := l.r.ways
	fmt.Printf("\necho (1 byte), %d connections open each way, %d rounds over all\n", l.o.open, l.o.rounds)
	open, err := l.openEach(l.o.open)
	if err != nil {
		return err
	}
	echo := make([][]time.Duration, len(ways))
	for range l.o.rounds {
		for j := range l.o.open {
			for i := range ways {
				start := time.Now()
				if err := echoByte(open[i][j]); err != nil {
					closeConns(open)
					return fmt.Errorf("echo %s: %w", ways[i].name, err)
				}
				echo[i] = append(echo[i], time.Since(start))
			}
		}
	}
	closeConns(open)
	printLatency("echo", ways, echo)
	return nil
}

// openEach opens n connections each way, alternating the ways; on an error it closes those it
// opened.
func (l *loadRun) openEach(n int) ([][]net.Conn, error) {
	open := make([][]net.Conn, len(l.r.ways))
	for range n {
		for i, w := range l.r.ways {
			c, err := w.dial()
			if err != nil {
				closeConns(open)
				return nil, fmt.Errorf("open %s: %w", w.name, err)
			}
			open[i] = append(open[i], c)
		}
	}
	return open, nil
}

func closeConns(conns [][]net.Conn) {
	for _, cs := range conns {
		for _, c := range cs {
			c.Close()
		}
	}
}

// measureBulk moves -bulk-mib each way on one connection, three times alternating the ways, and
// keeps each way's best; it prints the CPU time the transfers took per GiB.
func (l *loadRun) measureBulk() error {
	ways := l.r.ways
	fmt.Printf("\nbulk, %d MiB each way on one connection, best of 3 alternating\n", l.o.bulkMiB)
	l.r.bulk = make([]float64, len(ways))
	cpu := make([]time.Duration, len(ways))
	// This process's CPU time too: the client's share of the machine (a WebSocket client masks
	// every byte it sends), which the proxy does not get while the two share its cores.
	clientCPU := make([]time.Duration, len(ways))
	for range 3 {
		for i, w := range ways {
			rate, proxy, client, err := l.bulkOnce(w)
			if err != nil {
				return err
			}
			clientCPU[i] += client
			l.r.bulk[i] = max(l.r.bulk[i], rate)
			cpu[i] += proxy
		}
	}
	// Each transfer crosses the proxy twice (there and echoed back): 2 × 3 × bulk-mib.
	gib := float64(2*3*l.o.bulkMiB) / 1024
	for i, w := range ways {
		fmt.Printf("  %-8s %5.0f MiB/s, %.2f of direct", w.name, l.r.bulk[i], l.r.bulk[i]/l.r.bulk[0])
		if w.pid != 0 {
			fmt.Printf("; the process: %.0f ms of CPU per GiB carried", cpu[i].Seconds()*1000/gib)
		}
		fmt.Printf("; this process (client and echo instance): %.0f ms per GiB\n", clientCPU[i].Seconds()*1000/gib)
	}
	return nil
}

// bulkOnce is one bulk transfer way w: its MiB/s, and the CPU time it took in the process in
// between (none for direct) and in this one.
func (l *loadRun) bulkOnce(w way) (rate float64, proxyCPU, clientCPU time.Duration, err error) {
	var before time.Duration
	if w.pid != 0 {
		if before, err = cpuTime(w.pid); err != nil {
			return 0, 0, 0, err
		}
	}
	clientBefore, _ := cpuTime(os.Getpid())
	if rate, err = bulk(w.dial, l.o.bulkMiB); err != nil {
		return 0, 0, 0, fmt.Errorf("bulk %s: %w", w.name, err)
	}
	clientAfter, _ := cpuTime(os.Getpid())
	if w.pid != 0 {
		after, err := cpuTime(w.pid)
		if err != nil {
			return 0, 0, 0, err
		}
		proxyCPU = after - before
	}
	return rate, proxyCPU, clientAfter - clientBefore, nil
}

// measureRate runs -rate-rounds connection-rate runs each way, alternating the ways, and keeps
// each way's median.
func (l *loadRun) measureRate() error {
	ways := l.r.ways
	fmt.Printf("\nnew connections (connect, 1-byte echo, close), %d workers, %d runs of %s each way, alternating; the median\n", l.o.workers, l.o.rateRounds, l.o.rateFor)
	rates := make([][]float64, len(ways))
	perCPU := make([][]float64, len(ways))
	for range l.o.rateRounds {
		for i, w := range ways {
			rate, cpuRate, err := connectionRate(w.dial, l.o.workers, l.o.rateFor, w.pid)
			if err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
			rates[i] = append(rates[i], rate)
			perCPU[i] = append(perCPU[i], cpuRate)
		}
	}
	l.r.rate = make([]float64, len(ways))
	for i, w := range ways {
		l.r.rate[i] = median(rates[i])
		fmt.Printf("  %-8s %6.0f/s (runs: %s)", w.name, l.r.rate[i], formatRates(rates[i]))
		if w.pid != 0 {
			fmt.Printf("; the process: %.0f connections per CPU-second", median(perCPU[i]))
		}
		fmt.Println()
	}
	return nil
}

// measureIdle measures the memory per idle connection of each proxy, in a fresh process of its
// own, at each count of -idle.
func (l *loadRun) measureIdle() error {
	counts := l.idleCounts()
	fmt.Printf("\nmemory per idle connection: RSS of a fresh proxy process after 100 warm-up connections, then above it\n")
	l.r.idle = make([][]float64, len(l.r.ways))
	for i, w := range l.r.ways {
		if w.pid == 0 {
			continue
		}
		p, dial, err := l.startFresh(w.name)
		if err != nil {
			return err
		}
		l.r.idle[i], err = idleMemory(w.name, p, dial, counts)
		p.stop()
		if err != nil {
			return err
		}
	}
	l.r.idleCounts = counts
	return nil
}

// idleCounts are -idle's counts, each lowered to what RLIMIT_NOFILE allows, saying so.
func (l *loadRun) idleCounts() []int {
	counts := make([]int, len(l.o.idle))
	for i, n := range l.o.idle {
		counts[i] = min(n, l.maxIdle)
		if counts[i] < n {
			fmt.Printf("\n%d idle connections lowered to %d: RLIMIT_NOFILE's hard limit %d holds two descriptors per connection in the proxy and two here (client and instance), and a thousand more (the gateway's pooled splice pipes)\n",
				n, counts[i], l.hard)
		}
	}
	return counts
}

// startFresh starts a fresh process of the way named name in front of the quiet instance, and
// returns it with how to connect through it.
func (l *loadRun) startFresh(name string) (*child, func() (net.Conn, error), error) {
	switch name {
	case "websocket":
		// A fresh gateway of its own, as the TCP path's figure: the two never share a baseline.
		p, err := startGateway(l.o.binary, l.keyFile, l.o.procs, append(l.gatewayLimits, websocketListenFlag)...)
		if err != nil {
			return nil, nil, err
		}
		return p, func() (net.Conn, error) {
			return dialWebSocket(context.Background(), l.wsClient, p.wsAddr, l.quietToken)
		}, nil
	case "gateway", "ceiling":
		binary := l.o.binary
		if name == "ceiling" {
			binary = l.o.ceiling
		}
		p, err := startGateway(binary, l.keyFile, l.o.procs, l.gatewayLimits...)
		if err != nil {
			return nil, nil, err
		}
		return p, func() (net.Conn, error) { return dialGateway(p.addr, l.quietToken) }, nil
	default:
		p, err := startHAProxy(l.haproxyBin, l.dir, l.quietInstance.Addr().String(), l.maxIdle+10, l.o.procs)
		if err != nil {
			return nil, nil, err
		}
		return p, func() (net.Conn, error) { return net.Dial("tcp4", p.addr) }, nil
	}
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
	r.printTable()
	r.printTargets()
	r.printWebSocketTargets()
	r.printCeiling()
}

// printTable writes the run's figures as a Markdown table, a column per way.
func (r results) printTable() {
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
}

// printTargets writes the gateway's targets, against HAProxy and the direct connection.
func (r results) printTargets() {
	fmt.Printf("\ntargets of the gateway, against this run's figures:\n")
	const gw = 1
	if hp := r.index("haproxy"); hp > 0 {
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
}

// printCeiling writes, when the ceiling ran, what asking for a token costs by itself, and the
// gateway against the least a gateway that asks for one does. Not targets.
func (r results) printCeiling() {
	const gw = 1
	hp, ceiling := r.index("haproxy"), r.index("ceiling")
	if ceiling < 0 {
		return
	}
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

// verdict is a target's outcome as the report writes it.
func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
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
func (r results) printWebSocketTargets() {
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
