package main

// The attack run (-attack, make bench-gateway-attack): honest players against the gateway while
// each attack class runs from many source addresses, all on 127.0.0.0/8 (every address of it is
// loopback on Linux; a client socket is bound to its source address before it connects).
//
// Each class gets a fresh gateway (its defaults, --service-cidrs=127.0.0.0/8 and
// -attack-max-connections) and runs in three phases: honest players alone for -attack-warm (the
// gateway's RSS before), honest players and the attack for -attack-for (the honest figures: every
// attempt started in this phase; the gateway's peak RSS), then honest players alone again until
// the gateway's RSS is back near its baseline or -attack-settle passed (its RSS after).
//
// An honest player connects from its address, reads the prompt, waits a paste delay (uniform in
// -paste-min..-paste-max), sends its own instance's token and expects its instance's banner, then
// a 1-byte echo; then it thinks up to 500 ms and connects again. Its handshake is the time from
// dial to the prompt plus the time from the token sent to the banner read: the gateway's part,
// without the player's paste delay. Players from their own addresses (127.0.1.x) and from one
// shared address (127.0.2.1, a NAT) are counted apart. With -honest-fresh, each attempt of the
// former comes from an address not used before (127.2.x.y): a player's first connection, which has
// no credit at the gateway (the players who come back have some, as an attacker presenting its own
// token has: silent-credited shows the difference only with it). Players over WebSocket
// (-honest-ws, each from an address of its own, 127.0.3.x) are counted apart too: they open
// GET /ws/<token> on the gateway's WebSocket listener and expect the banner and the echo there
// (attack_websocket.go, which has the attack classes of the upgrade too).

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// attackOptions are the attack run's flags.
type attackOptions struct {
	on                 bool
	classes            string
	classFor, warm     time.Duration
	settle             time.Duration
	addrs              int
	rate, inflight     int
	perAddr            int
	retry              time.Duration
	honestOwn          int
	honestFresh        bool
	honestShared       int
	honestWS           int
	pasteMin, pasteMax time.Duration
	maxConnections     int
	honestTimeout      time.Duration
	nice               int
}

// The honest players' targets in every class.
const (
	targetHonestSuccess = 0.999
	targetHonestP99     = 100 * time.Millisecond
)

func attackFlags(a *attackOptions) {
	flag.BoolVar(&a.on, "attack", false, "run the attack classes (make bench-gateway-attack) instead of the load run")
	var names []string
	for _, c := range attackClasses {
		names = append(names, c.name)
	}
	flag.StringVar(&a.classes, "attack-classes", strings.Join(names, ","), "comma-separated attack `classes` to run, in the order given")
	flag.DurationVar(&a.classFor, "attack-for", 20*time.Second, "duration of each class's attack")
	flag.DurationVar(&a.warm, "attack-warm", 5*time.Second, "honest players alone before each attack (the gateway's RSS before)")
	flag.DurationVar(&a.settle, "attack-settle", 20*time.Second, "longest wait after each attack for the gateway's RSS to come back")
	flag.IntVar(&a.addrs, "attack-addrs", 250, "source addresses of each attack (127.1.x.y)")
	flag.IntVar(&a.rate, "attack-rate", 1000, "connections per second of the attacks that connect again and again (bad tokens, churn, oversized lines, own-token flood), over all addresses")
	flag.IntVar(&a.inflight, "attack-inflight", 8, "connections in flight per address for those attacks")
	flag.IntVar(&a.perAddr, "attack-per-addr", 16, "connections per address of the attacks that hold them (silent, one byte a second)")
	flag.DurationVar(&a.retry, "attack-retry", time.Second, "wait before a held attack connection that ended is opened again")
	flag.IntVar(&a.nice, "attack-nice", 19, "the attackers' process's nice value: on the machine's cores it yields to the gateway and the players, as attackers on machines of their own take none of the gateway's (0: it takes its share)")
	flag.IntVar(&a.honestOwn, "honest-own", 60, "honest players, each from an address of its own (127.0.1.x)")
	flag.BoolVar(&a.honestFresh, "honest-fresh", false, "each attempt of the players of their own addresses from an address not used before (127.2.x.y, 62,500 of them, then again), which has presented no valid token: a player's first connection (silent-credited tells credit from holdings only with it)")
	flag.IntVar(&a.honestShared, "honest-shared", 20, "honest players from one shared address (127.0.2.1)")
	flag.IntVar(&a.honestWS, "honest-ws", 20, "honest players over WebSocket (the gateway's --websocket-listen, GET /ws/<token>), each from an address of its own (127.0.3.x); 0, or a gateway binary without the flag: none")
	flag.DurationVar(&a.pasteMin, "paste-min", 500*time.Millisecond, "shortest paste delay of an honest player (prompt to token)")
	flag.DurationVar(&a.pasteMax, "paste-max", 2*time.Second, "longest paste delay of an honest player")
	flag.IntVar(&a.maxConnections, "attack-max-connections", 2000, "the gateway's --max-connections in the attack run, to reach its cap with fewer sockets (0: the gateway's default)")
	flag.DurationVar(&a.honestTimeout, "honest-timeout", 5*time.Second, "an honest player's wait for the prompt and for its banner")
}

// attackClass is one attack: what each of its addresses does.
type attackClass struct {
	name  string
	about string
	// paced is an attempt, made -attack-rate times a second over all addresses; held is a
	// connection held by each of -attack-per-addr slots per address.
	paced, held func(ctx context.Context, a *attackRun, src netip.Addr)
	// websocket: the class attacks the WebSocket listener (it needs one).
	websocket bool
}

var attackClasses = []attackClass{
	{name: "none", about: "no attack: the honest players' baseline"},
	{name: "bad-tokens", about: "random tokens", paced: badToken},
	{name: "silent", about: "connections held open, silent", held: silent},
	{name: "silent-credited", about: "connections held open, silent, from addresses that present their own valid token twice per eviction", held: silentCredited},
	{name: "slow", about: "one byte a second of a token line, never ended", held: slowLine},
	{name: "churn", about: "connect and close at once", paced: churn},
	{name: "oversized", about: "4 KiB lines without an end", paced: oversized},
	{name: "flood", about: "the attacker's own valid token, spliced connections held", paced: ownToken},
	{name: "ws-slow-headers", about: "WebSocket upgrades for the attacker's own instance trickled one byte a second, headers never ended", held: wsSlowHeaders, websocket: true},
	{name: "ws-oversized-headers", about: "WebSocket upgrades with 32 KiB of headers, never ended", paced: wsOversizedHeaders, websocket: true},
	{name: "ws-oversized-frames", about: "WebSocket upgrades for the attacker's own instance, then a frame announcing 1 GiB", paced: wsOversizedFrame, websocket: true},
	{name: "ws-bad-tokens", about: "random tokens by URL: upgrades of /ws/<token> and /ws?token=<token>, OPTIONS probes", paced: wsBadToken, websocket: true},
}

// attackRun is one class's run: where the gateway is and the attack's counters.
type attackRun struct {
	gateway     string
	wsGateway   string // the gateway's WebSocket listener; "" when it has none
	ownToken    string // the attacker's own instance's token
	timeout     time.Duration
	dials       atomic.Int64
	dialErrors  atomic.Int64
	prompts     atomic.Int64
	spliced     atomic.Int64
	skipped     atomic.Int64 // paced attempts not made: the address had -attack-inflight in flight
	mu          sync.Mutex
	answers     map[string]int // the gateway's first line when it was not the prompt, or what it said after
	honest      []*honestResult
	attackStart time.Time
	attackEnd   time.Time
}

// answer counts what the gateway answered an attack connection (a line, or how it ended); once
// the class ended, the attacker's own closing is not counted.
func (a *attackRun) answer(ctx context.Context, s string) {
	if ctx.Err() != nil {
		return
	}
	a.mu.Lock()
	a.answers[s]++
	a.mu.Unlock()
}

// dialFrom connects to addr from the source address src.
func dialFrom(ctx context.Context, src netip.Addr, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: timeout}
	return d.DialContext(ctx, "tcp4", addr)
}

// attackDial connects from src and reads the prompt; a connection refused with a line says so
// in the counters and returns nil. The connection closes when ctx ends.
func (a *attackRun) attackDial(ctx context.Context, src netip.Addr) (net.Conn, *bufio.Reader) {
	a.dials.Add(1)
	c, err := dialFrom(ctx, src, a.gateway, a.timeout)
	if err != nil {
		a.dialErrors.Add(1)
		a.answer(ctx, "connect: "+short(err))
		return nil, nil
	}
	context.AfterFunc(ctx, func() { c.Close() })
	r := bufio.NewReaderSize(c, 256)
	c.SetReadDeadline(time.Now().Add(a.timeout))
	if err := readPrompt(r); err != nil {
		a.answer(ctx, short(err))
		c.Close()
		return nil, nil
	}
	a.prompts.Add(1)
	c.SetReadDeadline(time.Time{})
	return c, r
}

// readPrompt reads the gateway's prompt, or returns what came instead as the error.
func readPrompt(r *bufio.Reader) error {
	b := make([]byte, len("token: "))
	n, err := io.ReadFull(r, b)
	if string(b[:n]) == "token: " {
		return nil
	}
	if err != nil {
		return err
	}
	line, _ := r.ReadString('\n')
	return errors.New(string(b) + line)
}

// short is an error or a gateway's line as a counter's key: its first words.
func short(err error) string {
	s := strings.TrimSpace(err.Error())
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed"
	case strings.Contains(s, "connection reset"):
		return "reset"
	case errors.Is(err, net.ErrClosed):
		return "closed here"
	}
	if i := strings.IndexAny(s, ",("); i > 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}

// afterAnswer reads the gateway's answer to what the attacker sent, up to its end, and counts it.
func (a *attackRun) afterAnswer(ctx context.Context, c net.Conn, r *bufio.Reader) {
	c.SetReadDeadline(time.Now().Add(a.timeout))
	a.readAnswer(ctx, r)
}

// readAnswer reads a line and counts it, or how the connection ended; it returns the line.
func (a *attackRun) readAnswer(ctx context.Context, r *bufio.Reader) string {
	line, err := r.ReadString('\n')
	if line != "" {
		a.answer(ctx, short(errors.New(line)))
	} else {
		a.answer(ctx, short(err))
	}
	return line
}

func randomTokenLine() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, tcptoken.Length)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}

func badToken(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.attackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	if _, err := io.WriteString(c, randomTokenLine()+"\n"); err == nil {
		a.afterAnswer(ctx, c, r)
	}
}

func churn(ctx context.Context, a *attackRun, src netip.Addr) {
	a.dials.Add(1)
	c, err := dialFrom(ctx, src, a.gateway, a.timeout)
	if err != nil {
		a.dialErrors.Add(1)
		a.answer(ctx, "connect: "+short(err))
		return
	}
	c.Close()
}

func oversized(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.attackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(a.timeout))
	if _, err := c.Write([]byte(strings.Repeat("A", 4096))); err == nil {
		a.afterAnswer(ctx, c, r)
	} else {
		a.answer(ctx, short(err))
	}
}

func ownToken(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := spliceOwnToken(ctx, a, src)
	if c == nil {
		return
	}
	defer c.Close()
	// Spliced: held until the class ends (or the gateway closes it).
	c.SetReadDeadline(time.Time{})
	io.Copy(io.Discard, r)
}

// spliceOwnToken presents the attacker's own valid token from src and returns the connection once
// its instance answered (counted as spliced), nil otherwise.
func spliceOwnToken(ctx context.Context, a *attackRun, src netip.Addr) (net.Conn, *bufio.Reader) {
	c, r := a.attackDial(ctx, src)
	if c == nil {
		return nil, nil
	}
	if _, err := io.WriteString(c, a.ownToken+"\n"); err != nil {
		c.Close()
		return nil, nil
	}
	c.SetReadDeadline(time.Now().Add(a.timeout))
	if a.readAnswer(ctx, r) != "attacker\n" {
		c.Close()
		return nil, nil
	}
	a.spliced.Add(1)
	return c, r
}

func silent(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.attackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	// Until the gateway closes it (or answers its deadline), or the class ends.
	a.readAnswer(ctx, r)
}

// silentCredited holds a connection silent as silent does; when the gateway evicts it, its address
// presents the attacker's own valid token twice (each on a connection of its own, closed once the
// instance answered): an address that tries to buy its silent slots with its own token. The
// gateway's --max-connections-per-token refuses most of those presentations while the class
// runs, and a refused one counts as debt, not credit.
func silentCredited(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.attackDial(ctx, src)
	if c == nil {
		return
	}
	line := a.readAnswer(ctx, r)
	c.Close()
	if !strings.HasPrefix(line, "gateway busy") {
		return
	}
	for range 2 {
		if c, _ := spliceOwnToken(ctx, a, src); c != nil {
			c.Close()
		}
	}
}

func slowLine(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.attackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.readAnswer(ctx, r)
	}()
	line := randomTokenLine() + randomTokenLine() + randomTokenLine() + randomTokenLine() + randomTokenLine()
	a.trickle(ctx, c, done, line)
}

// trickle writes payload to c a byte a second, from its start again at its end, until done is
// closed (the gateway answered or closed), ctx ends or a write fails.
func (a *attackRun) trickle(ctx context.Context, c net.Conn, done <-chan struct{}, payload string) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
			c.SetWriteDeadline(time.Now().Add(a.timeout))
			if _, err := c.Write([]byte{payload[i%len(payload)]}); err != nil {
				return
			}
		}
	}
}

// The honest players' groups, counted apart.
const (
	groupOwn    = iota // over TCP, each from an address of its own (or a fresh one: -honest-fresh)
	groupShared        // over TCP, from one shared address
	groupWS            // over WebSocket, each from an address of its own
)

// honestResult is one honest player's attempts, each with its start.
type honestResult struct {
	group    int
	mu       sync.Mutex
	attempts []honestAttempt
}

type honestAttempt struct {
	start     time.Time
	handshake time.Duration
	toPrompt  time.Duration // of the handshake, dial to the prompt read (0: no prompt, a WebSocket)
	failure   string        // empty: the banner and the echo came back
}

// freshAddresses counts the addresses of -honest-fresh.
var freshAddresses atomic.Uint32

// honestPlayer connects again and again until ctx ends.
func honestPlayer(ctx context.Context, gateway string, src netip.Addr, token, banner string, o attackOptions, res *honestResult) {
	for ctx.Err() == nil {
		if o.honestFresh && res.group == groupOwn {
			n := freshAddresses.Add(1) % (250 * 250)
			src = netip.AddrFrom4([4]byte{127, 2, byte(n / 250), byte(n%250 + 1)})
		}
		start := time.Now()
		connect := honestConnect
		if res.group == groupWS {
			connect = honestConnectWS
		}
		handshake, toPrompt, failure := connect(gateway, src, token, banner, o)
		res.mu.Lock()
		res.attempts = append(res.attempts, honestAttempt{start: start, handshake: handshake, toPrompt: toPrompt, failure: failure})
		res.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(rand.N(500 * time.Millisecond)):
		}
	}
}

// honestConnect is one connection of an honest player: its handshake and the part of it to the
// prompt, or why it failed.
func honestConnect(gateway string, src netip.Addr, token, banner string, o attackOptions) (handshake, toPrompt time.Duration, failure string) {
	start := time.Now()
	c, err := dialFrom(context.Background(), src, gateway, o.honestTimeout)
	if err != nil {
		return 0, 0, "dial: " + short(err)
	}
	defer c.Close()
	r := bufio.NewReaderSize(c, 256)
	c.SetDeadline(time.Now().Add(o.honestTimeout))
	if err := readPrompt(r); err != nil {
		return 0, 0, "prompt: " + short(err)
	}
	toPrompt = time.Since(start)
	time.Sleep(o.pasteMin + rand.N(o.pasteMax-o.pasteMin+1))
	sent := time.Now()
	c.SetDeadline(sent.Add(o.honestTimeout))
	if _, err := io.WriteString(c, token+"\n"); err != nil {
		return 0, 0, "token: " + short(err)
	}
	line, err := r.ReadString('\n')
	if line != banner {
		if line == "" {
			return 0, 0, "banner: " + short(err)
		}
		return 0, 0, "banner: " + short(errors.New(line))
	}
	handshake = toPrompt + time.Since(sent)
	if _, err := c.Write([]byte{'x'}); err != nil {
		return 0, 0, "echo: " + short(err)
	}
	if b, err := r.ReadByte(); err != nil || b != 'x' {
		return 0, 0, "echo: no byte"
	}
	return handshake, toPrompt, ""
}

// classResult is what the report prints of a class.
type classResult struct {
	name                    string
	own, shared, ws         groupResult
	rssBefore, rssPeak      int64
	rssAfter                int64
	settled                 time.Duration // time after the attack until RSS came back; -1: it did not
	cpu                     float64       // the gateway's CPU time during the attack, in cores
	dials, dialErrs, prompt int64
	spliced, skipped        int64
	answers                 map[string]int
}

type groupResult struct {
	attempts, ok int
	p50, p99     time.Duration
	promptP99    time.Duration // of the dial to the prompt, where there is one
	failures     map[string]int
}

func (g groupResult) rate() float64 {
	if g.attempts == 0 {
		return 0
	}
	return float64(g.ok) / float64(g.attempts)
}

// player is an honest player: its source address, its own instance's token and banner, its group.
type player struct {
	src           netip.Addr
	token, banner string
	group         int
}

// attackBench is the attack run: what is the same in every class.
type attackBench struct {
	o        options
	keyFile  string
	players  []player
	ownToken string   // the attacker's own instance's token
	flags    []string // the gateway's, beyond its defaults
}

func runAttack(o options, key []byte, keyFile string) error {
	a := o.attack
	classes, err := attackClassesOf(a)
	if err != nil {
		return err
	}
	b := &attackBench{o: o, keyFile: keyFile, flags: attackGatewayFlags(a, classes)}
	instances, err := b.startInstances(key)
	defer func() {
		for _, ln := range slices.Backward(instances) {
			ln.Close()
		}
	}()
	if err != nil {
		return err
	}
	fmt.Printf("attack run: the gateway at its defaults and %s; %d honest players from their own addresses, %d from one shared address, paste delay %s-%s, %d over WebSocket from their own addresses; each attack from %d addresses (127.1.x.y), %s each; paced attacks %d connections/s in all (at most %d in flight per address), held attacks %d connections per address (opened again %s after they end); the attackers' process at nice %d\n",
		strings.Join(b.flags, " "), a.honestOwn, a.honestShared, a.pasteMin, a.pasteMax, a.honestWS, a.addrs, a.classFor, a.rate, a.inflight, a.perAddr, a.retry, a.nice)

	var results []classResult
	for _, class := range classes {
		r, err := b.runClass(class)
		if err != nil {
			return err
		}
		r.print()
		results = append(results, r)
	}
	printAttackTable(results, a)
	return nil
}

// attackClassesOf checks the attack run's flags and returns the classes -attack-classes names, in
// its order.
func attackClassesOf(a attackOptions) ([]attackClass, error) {
	if a.addrs < 1 || a.addrs > 250*250 || a.honestOwn > 250 || a.honestWS > 250 || a.pasteMax < a.pasteMin {
		return nil, errors.New("-attack-addrs 1 to 62500, -honest-own and -honest-ws at most 250, -paste-max at least -paste-min")
	}
	var classes []attackClass
	for _, name := range strings.Split(a.classes, ",") {
		i := slices.IndexFunc(attackClasses, func(c attackClass) bool { return c.name == name })
		if i < 0 {
			return nil, fmt.Errorf("-attack-classes: no class %q", name)
		}
		classes = append(classes, attackClasses[i])
	}
	return classes, nil
}

// attackGatewayFlags are the gateway's flags in every class, beyond its defaults.
func attackGatewayFlags(a attackOptions, classes []attackClass) []string {
	flags := []string{"--service-cidrs=127.0.0.0/8"}
	if a.maxConnections > 0 {
		flags = append(flags, fmt.Sprintf("--max-connections=%d", a.maxConnections))
	}
	if a.honestWS > 0 || slices.ContainsFunc(classes, func(c attackClass) bool { return c.websocket }) {
		flags = append(flags, websocketListenFlag)
	}
	return flags
}

// startInstances starts the instances: each honest player has one of its own (its banner: its
// name) and a token to it, and so has the attacker. It returns the instances it started, with an
// error or not: the caller closes them.
func (b *attackBench) startInstances(key []byte) ([]net.Listener, error) {
	a := b.o.attack
	var instances []net.Listener
	for i := range a.honestOwn + a.honestShared + a.honestWS {
		banner := fmt.Sprintf("instance %d\n", i)
		ln, token, err := startInstance(key, true, banner)
		if err != nil {
			return instances, err
		}
		instances = append(instances, ln)
		p := player{src: netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)}), token: token, banner: banner, group: groupOwn}
		switch {
		case i >= a.honestOwn+a.honestShared:
			p.src, p.group = netip.AddrFrom4([4]byte{127, 0, 3, byte(i - a.honestOwn - a.honestShared + 1)}), groupWS
		case i >= a.honestOwn:
			p.src, p.group = netip.AddrFrom4([4]byte{127, 0, 2, 1}), groupShared
		}
		b.players = append(b.players, p)
	}
	attackerInstance, ownToken, err := startInstance(key, true, "attacker\n")
	if err != nil {
		return instances, err
	}
	b.ownToken = ownToken
	return append(instances, attackerInstance), nil
}

// runClass runs one class against a fresh gateway in its three phases: honest players alone, with
// the attack, then alone again until the gateway's RSS settles.
func (b *attackBench) runClass(class attackClass) (classResult, error) {
	a := b.o.attack
	fmt.Printf("\nclass %s: %s (load average %s)\n", class.name, class.about, loadAverage())
	g, err := startGateway(b.o.binary, b.keyFile, b.o.procs, b.flags...)
	if err != nil {
		return classResult{}, err
	}
	if g.wsAddr == "" && (a.honestWS > 0 || class.websocket) {
		g.stop()
		return classResult{}, fmt.Errorf("class %s: this gateway binary has no WebSocket listener (--websocket-listen): run with -honest-ws 0 and no ws- class", class.name)
	}
	run := &attackRun{gateway: g.addr, wsGateway: g.wsAddr, ownToken: b.ownToken, timeout: 10 * time.Second, answers: map[string]int{}}
	samples := sampleRSS(g.pid())
	honest := b.startHonest(run, g)
	time.Sleep(a.warm)

	before := samples.last()
	var cpuBefore, cpuAfter time.Duration
	if err := runAttackChild(run, class.name, a, func(started bool) {
		// The gateway runs until g.stop: /proc has its CPU time.
		if started {
			run.attackStart = time.Now()
			cpuBefore, _ = cpuTime(g.pid())
		} else {
			run.attackEnd = time.Now()
			cpuAfter, _ = cpuTime(g.pid())
		}
	}); err != nil {
		honest.stop()
		samples.stop()
		g.stop()
		return classResult{}, err
	}

	settled := samples.settle(run.attackEnd, before, a.settle)
	after := samples.last()
	honest.stop()
	honest.done.Wait()
	samples.stop()
	samples.done.Wait()
	g.stop()

	r := summarize(class.name, run)
	r.rssBefore, r.rssAfter, r.settled = before, after, settled
	r.rssPeak = samples.peak(run.attackStart, run.attackEnd.Add(time.Second))
	r.cpu = float64(cpuAfter-cpuBefore) / float64(run.attackEnd.Sub(run.attackStart))
	return r, nil
}

// honestPlayers are one class's honest players, playing until stop.
type honestPlayers struct {
	stop context.CancelFunc
	done sync.WaitGroup
}

// startHonest starts every honest player against g, each with a result of its own in run.
func (b *attackBench) startHonest(run *attackRun, g *child) *honestPlayers {
	ctx, stop := context.WithCancel(context.Background())
	h := &honestPlayers{stop: stop}
	for _, p := range b.players {
		res := &honestResult{group: p.group}
		run.honest = append(run.honest, res)
		addr := g.addr
		if p.group == groupWS {
			addr = g.wsAddr
		}
		h.done.Go(func() { honestPlayer(ctx, addr, p.src, p.token, p.banner, b.o.attack, res) })
	}
	return h
}

// rssSampler samples a process's RSS every 200 ms until stop.
type rssSampler struct {
	mu      sync.Mutex
	samples []rssSample
	stop    context.CancelFunc
	done    sync.WaitGroup
}

type rssSample struct {
	at  time.Time
	rss int64
}

func sampleRSS(pid int) *rssSampler {
	ctx, stop := context.WithCancel(context.Background())
	s := &rssSampler{stop: stop}
	s.done.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, err := rss(pid); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, rssSample{time.Now(), v})
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return s
}

// last is the latest RSS sampled.
func (s *rssSampler) last() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples[len(s.samples)-1].rss
}

// peak is the highest RSS sampled from start to end.
func (s *rssSampler) peak(start, end time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var peak int64
	for _, x := range s.samples {
		if !x.at.Before(start) && !x.at.After(end) {
			peak = max(peak, x.rss)
		}
	}
	return peak
}

// settle waits until the RSS is within 10% (and 1 MiB) of before, for at most d after end, and
// returns when that was, after end; -1: it was not.
func (s *rssSampler) settle(end time.Time, before int64, d time.Duration) time.Duration {
	for time.Since(end) < d {
		time.Sleep(200 * time.Millisecond)
		if s.last() <= before+before/10+1<<20 {
			return time.Since(end)
		}
	}
	return -1
}

// summarize is a class's result from run's counters and the honest attempts made while the attack
// ran; the gateway's figures are the caller's to add.
func summarize(name string, run *attackRun) classResult {
	return classResult{name: name,
		dials: run.dials.Load(), dialErrs: run.dialErrors.Load(), prompt: run.prompts.Load(),
		spliced: run.spliced.Load(), skipped: run.skipped.Load(), answers: run.answers,
		own: group(run, groupOwn), shared: group(run, groupShared), ws: group(run, groupWS)}
}

// The attackers run in a process of their own (this program, with -attack-child-class), as they
// would on machines of their own: in this one, their goroutines (4,000 held connections, and up
// to three connections per eviction under silent-credited) would share one Go scheduler with the
// honest players and their instances, and the players' figures would be the time their goroutines
// wait behind the attackers' in this process's run queue (hundreds to thousands of runnable
// goroutines under silent-credited), not the gateway's. The processes still share the machine's
// cores with the gateway: the attackers' at -attack-nice (19), so that its own work (more CPU than
// the gateway's, most of it the kernel's for its connects and closes) runs on what the gateway
// and the players leave, not in their place; its connections a second, printed, are those of a
// run at nice 0 (make bench-gateway-attack GATEWAY_ATTACK_FLAGS=-attack-nice=0 shows both).

// attackReport is what the attackers' process tells of its attack, as its last line (JSON).
type attackReport struct {
	Dials, DialErrors, Prompts, Spliced, Skipped int64
	Answers                                      map[string]int
}

// runAttackChild runs class's attack in a child process against run's gateway, for -attack-for;
// mark is called when the attack started (true) and ended (false), and run's counters are the
// child's once it returns.
func runAttackChild(run *attackRun, class string, a attackOptions, mark func(started bool)) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// Under nice(1), every thread of the process runs at its nice value (setpriority(2) in the
	// process itself would set its calling thread's only).
	cmd := exec.Command("nice", fmt.Sprintf("-n%d", a.nice), exe, "-attack-child-class="+class, "-attack-child-gateway="+run.gateway, "-attack-child-websocket="+run.wsGateway, "-attack-child-token="+run.ownToken,
		fmt.Sprintf("-attack-for=%s", a.classFor), fmt.Sprintf("-attack-addrs=%d", a.addrs), fmt.Sprintf("-attack-rate=%d", a.rate),
		fmt.Sprintf("-attack-inflight=%d", a.inflight), fmt.Sprintf("-attack-per-addr=%d", a.perAddr), fmt.Sprintf("-attack-retry=%s", a.retry))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var report attackReport
	scanner := bufio.NewScanner(out)
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		switch line := scanner.Text(); line {
		case "started":
			mark(true)
		case "ended":
			mark(false)
		default:
			if err := json.Unmarshal([]byte(line), &report); err != nil {
				fmt.Printf("  attackers: %s\n", line)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("the attackers' process: %w", err)
	}
	run.dials.Store(report.Dials)
	run.dialErrors.Store(report.DialErrors)
	run.prompts.Store(report.Prompts)
	run.spliced.Store(report.Spliced)
	run.skipped.Store(report.Skipped)
	run.answers = report.Answers
	if run.answers == nil {
		run.answers = map[string]int{}
	}
	return nil
}

// attackChild is the attackers' process: it runs class's attack against gateway for -attack-for,
// writes "started" and "ended" when the attack starts and ends, then its report.
func attackChild(a attackOptions, className, gateway, wsGateway, ownToken string) error {
	i := slices.IndexFunc(attackClasses, func(c attackClass) bool { return c.name == className })
	if i < 0 {
		return fmt.Errorf("-attack-child-class: no class %q", className)
	}
	class := attackClasses[i]
	run := &attackRun{gateway: gateway, wsGateway: wsGateway, ownToken: ownToken, timeout: 10 * time.Second, answers: map[string]int{}}
	var attackers []netip.Addr
	for i := range a.addrs {
		attackers = append(attackers, netip.AddrFrom4([4]byte{127, 1, byte(i / 250), byte(i%250 + 1)}))
	}
	fmt.Println("started")
	attackCtx, stopAttack := context.WithTimeout(context.Background(), a.classFor)
	defer stopAttack()
	var attackDone sync.WaitGroup
	for _, src := range attackers {
		if class.paced != nil {
			attackDone.Go(func() { paced(attackCtx, run, src, class.paced, a) })
		}
		if class.held != nil {
			for range a.perAddr {
				attackDone.Go(func() {
					// Spread the first connections over the first second.
					select {
					case <-attackCtx.Done():
						return
					case <-time.After(rand.N(time.Second)):
					}
					for attackCtx.Err() == nil {
						class.held(attackCtx, run, src)
						select {
						case <-attackCtx.Done():
						case <-time.After(a.retry):
						}
					}
				})
			}
		}
	}
	<-attackCtx.Done()
	fmt.Println("ended")
	attackDone.Wait()
	run.mu.Lock()
	defer run.mu.Unlock()
	return json.NewEncoder(os.Stdout).Encode(attackReport{Dials: run.dials.Load(), DialErrors: run.dialErrors.Load(), Prompts: run.prompts.Load(),
		Spliced: run.spliced.Load(), Skipped: run.skipped.Load(), Answers: run.answers})
}

// paced makes attempts from src at -attack-rate / -attack-addrs a second, at most -attack-inflight
// at once, until ctx ends.
func paced(ctx context.Context, run *attackRun, src netip.Addr, attempt func(context.Context, *attackRun, netip.Addr), a attackOptions) {
	interval := time.Duration(float64(time.Second) * float64(a.addrs) / float64(a.rate))
	inflight := make(chan struct{}, a.inflight)
	var wg sync.WaitGroup
	defer wg.Wait()
	select {
	case <-ctx.Done():
		return
	case <-time.After(rand.N(interval)):
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case inflight <- struct{}{}:
			wg.Go(func() {
				defer func() { <-inflight }()
				attempt(ctx, run, src)
			})
		default:
			run.skipped.Add(1)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// group sums the honest attempts started while the attack ran, of the players of one group.
func group(run *attackRun, kind int) groupResult {
	g := groupResult{failures: map[string]int{}}
	var handshakes, toPrompts []time.Duration
	for _, h := range run.honest {
		if h.group != kind {
			continue
		}
		h.mu.Lock()
		for _, at := range h.attempts {
			if at.start.Before(run.attackStart) || !at.start.Before(run.attackEnd) {
				continue
			}
			g.attempts++
			if at.failure != "" {
				g.failures[at.failure]++
				continue
			}
			g.ok++
			handshakes = append(handshakes, at.handshake)
			if at.toPrompt > 0 {
				toPrompts = append(toPrompts, at.toPrompt)
			}
		}
		h.mu.Unlock()
	}
	g.p50, g.p99 = percentile(handshakes, 50), percentile(handshakes, 99)
	if len(toPrompts) > 0 {
		g.promptP99 = percentile(toPrompts, 99)
	}
	return g
}

func (r classResult) print() {
	for _, g := range []struct {
		name string
		g    groupResult
	}{{"own addresses", r.own}, {"shared address", r.shared}, {"WebSocket", r.ws}} {
		if g.name == "WebSocket" && g.g.attempts == 0 {
			continue
		}
		fmt.Printf("  honest, %s: %d of %d (%.2f%%), handshake p50 %s p99 %s", g.name, g.g.ok, g.g.attempts, 100*g.g.rate(),
			g.g.p50.Round(10*time.Microsecond), g.g.p99.Round(10*time.Microsecond))
		if g.g.promptP99 > 0 {
			fmt.Printf(" (dial to prompt p99 %s)", g.g.promptP99.Round(10*time.Microsecond))
		}
		if len(g.g.failures) > 0 {
			fmt.Printf("; failures: %s", formatCounts(g.g.failures))
		}
		fmt.Println()
	}
	fmt.Printf("  gateway RSS: before %.1f MiB, peak %.1f MiB, after %.1f MiB (%s); its CPU during the attack: %.2f cores\n",
		mib(r.rssBefore), mib(r.rssPeak), mib(r.rssAfter), r.settledText(), r.cpu)
	if r.dials > 0 {
		fmt.Printf("  attacker: %d connections (%d failed to connect, %d prompted, %d spliced, %d attempts skipped: in flight); the gateway's answers: %s\n",
			r.dials, r.dialErrs, r.prompt, r.spliced, r.skipped, formatCounts(r.answers))
	}
}

func (r classResult) settledText() string {
	if r.settled < 0 {
		return "not back within 10% of before by the settle deadline"
	}
	return fmt.Sprintf("back within 10%% of before %.1f s after the attack", r.settled.Seconds())
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	slices.SortStableFunc(keys, func(x, y string) int { return m[y] - m[x] })
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%q %d", k, m[k]))
	}
	return strings.Join(s, ", ")
}

// printAttackTable prints every class's figures and its verdicts against the honest targets. Each
// cell holds the groups' figures: own addresses / shared address, then WebSocket when it ran.
func printAttackTable(results []classResult, a attackOptions) {
	groupNames := "own addresses / shared address"
	if a.honestWS > 0 {
		groupNames += " / WebSocket"
	}
	fmt.Printf("\nhonest targets in every class: success >= %.1f%% and handshake p99 < %s (%s)\n\n", 100*targetHonestSuccess, targetHonestP99, groupNames)
	fmt.Println("| class | honest success | handshake p50 | handshake p99 | gateway RSS before / peak / after | success | p99 |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range results {
		groups := []groupResult{r.own, r.shared}
		if a.honestWS > 0 {
			groups = append(groups, r.ws)
		}
		cells := func(f func(g groupResult) string) string {
			var s []string
			for _, g := range groups {
				s = append(s, f(g))
			}
			return strings.Join(s, " / ")
		}
		success, p99 := true, true
		for _, g := range groups {
			success = success && g.rate() >= targetHonestSuccess
			p99 = p99 && g.ok > 0 && g.p99 < targetHonestP99
		}
		settle := fmt.Sprintf("back in %.0f s", r.settled.Seconds())
		if r.settled < 0 {
			settle = fmt.Sprintf("not back in %s", a.settle)
		}
		fmt.Printf("| %s | %s | %s | %s | %.0f / %.0f / %.0f MiB (%s) | %s | %s |\n", r.name,
			cells(successText),
			cells(func(g groupResult) string { return g.p50.Round(100 * time.Microsecond).String() }),
			cells(func(g groupResult) string { return g.p99.Round(100 * time.Microsecond).String() }),
			mib(r.rssBefore), mib(r.rssPeak), mib(r.rssAfter), settle, verdict(success), verdict(p99))
	}
}

func successText(g groupResult) string {
	return fmt.Sprintf("%d/%d (%.1f%%)", g.ok, g.attempts, 100*g.rate())
}
