// Package tcpgateway is the TCP gateway: players connect with plain `nc <gateway> <port>`, type
// their instance's token at the prompt, and are spliced to the instance's ClusterIP Service. The
// token (internal/tcptoken) is the whole routing state: the gateway holds no table and no
// Kubernetes credential, only the key that opens tokens. Every connection is bounded for a hostile
// internet: a deadline and a line cap to present the token, caps per instance and in total (at
// which a newcomer takes the slot of a connection still presenting its token, from the address
// holding the most of them beyond the instances its valid tokens reached first), a delay on the
// bad tokens of an address in debt, and an idle timeout.
// A valid token is never refused for what other connections from its address did; a bad token
// costs no connection to any instance; the gateway dials only the Service CIDRs; no token appears
// in any log.
package tcpgateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// Prompt is what the gateway writes first, on every connection.
const Prompt = "token: "

// Config is the gateway's key and limits. Defaults returns the defaults of the flags.
type Config struct {
	// Key opens tokens: the hook's gateway key, at least tcptoken.MinKeyBytes.
	Key []byte
	// ServiceCIDRs are the cluster's Service networks: the only destinations the gateway dials. A
	// loopback, link-local, unspecified or multicast address is dialled only when a prefix within
	// its special range is listed (a test's 127.0.0.0/8), never through a wider one.
	ServiceCIDRs []netip.Prefix
	// TokenTimeout is the time from accept to a whole token line.
	TokenTimeout time.Duration
	// MaxLineBytes caps the token line and the proof-of-work answer, without the line's end.
	MaxLineBytes int
	// MaxConnections caps the connections open at once, however far they got. At the cap a
	// newcomer takes the slot of a connection still presenting its token (see admission.victim).
	MaxConnections int
	// MaxConnectionsPerToken caps the connections open at once to one instance port.
	MaxConnectionsPerToken int
	// MaxBadTokensPerMinute is how many connections a source may end without a valid token in a
	// minute (bad tokens or proofs of work, silence to the deadline, early closes, evictions), and
	// more than its valid tokens, before it is in debt: then its further bad tokens are answered
	// only after badTokenDelay, and its connections still presenting a token give their slot to a
	// newcomer before those of sources holding as many beyond their instances (see
	// admission.victim).
	// A valid token from a source in debt is served as any other.
	MaxBadTokensPerMinute int
	// MaxSources bounds the memory of the per-source debts and instances reached (entries of about
	// 130 bytes, and 8 bytes per instance reached, at most maxInstancesPerSource: 650 bytes).
	MaxSources int
	// ProofOfWorkTimeout is the time to answer the puzzle, once posed.
	ProofOfWorkTimeout time.Duration
	// DialTimeout is the time the instance has to accept the connection.
	DialTimeout time.Duration
	// IdleTimeout closes a spliced connection that moved no byte either way for this long; it
	// closes between IdleTimeout and 1.125 times it after the last byte. The default, 15 minutes,
	// lets a player read a disassembly between two inputs of an interactive session, and still
	// frees what abandoned sessions hold (a player holds at most MaxConnectionsPerToken).
	IdleTimeout time.Duration
	// ShutdownDelay is how long the gateway goes on accepting once told to stop, so that the load
	// balancer, which sees the readiness probe fail, stops sending new players first.
	ShutdownDelay time.Duration
	// DrainTimeout is how long spliced connections may go on after the listener closed; those
	// left then read restartLine and are closed.
	DrainTimeout time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For the WebSocket listener reads (an Ingress
	// controller's Pods): from them, the player is the rightmost address of the header that is not
	// inside one of these prefixes. From any other peer the header is ignored: the player is the
	// peer. Empty: no header is ever read.
	TrustedProxies []netip.Prefix
}

// Defaults returns the default limits, with no key and no Service CIDRs.
func Defaults() Config {
	return Config{
		TokenTimeout:           30 * time.Second,
		MaxLineBytes:           128,
		MaxConnections:         10000,
		MaxConnectionsPerToken: 16,
		MaxBadTokensPerMinute:  10,
		MaxSources:             100000,
		ProofOfWorkTimeout:     5 * time.Minute,
		DialTimeout:            5 * time.Second,
		IdleTimeout:            15 * time.Minute,
		DrainTimeout:           25 * time.Second,
	}
}

// Gateway serves players' connections.
type Gateway struct {
	cfg     Config
	logger  *slog.Logger
	metrics *Metrics
	dialer  net.Dialer

	admission *admission
	targets   *targetCounter
	pipes     *pipePool
	poller    *poller // nil: every direction of a splice waits as a goroutine
	activity  *activity

	upgrader       websocket.Upgrader // the WebSocket listener's (see newUpgrader)
	wsBuffers      *wsBufferPool      // a WebSocket splice's buffers, held only while bytes move
	wsWriteBuffers sync.Pool          // the WebSocket library's frame buffers, held only while a message is written

	mu         sync.Mutex
	conns      map[*net.TCPConn]bool   // every open connection, true for a TCP player's, closed when the drain ends
	wsPlayers  map[*wsSession]struct{} // the WebSocket players spliced now, told to reconnect when the drain ends
	wg         sync.WaitGroup          // the TCP players' connections, from accept to their end
	wsWG       sync.WaitGroup          // the WebSocket players' connections, from accept to their end
	workerJobs chan job                // to the workers waiting for one (see work)
	stopped    chan struct{}           // closed once Serve returns: the workers waiting end
	drainEnded atomic.Bool
	drainOnce  sync.Once // the drain's end is the gateway's, whichever listener's drain timeout comes first
}

// badTokenDelay is how long a source in debt waits for the answer to each further bad token:
// guessing costs it time, and the slot it holds meanwhile is the first a newcomer takes.
const badTokenDelay = time.Second

// evictedLine is what a connection evicted while presenting its token reads.
const evictedLine = "gateway busy and your connection sent no token: reconnect and send it at once\n"

// restartLine is what players still connected when the drain ends read before the close.
const restartLine = "gateway restarting, reconnect\n"

// New checks cfg and returns a gateway; its metrics are registered on reg.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Gateway, error) {
	if len(cfg.Key) < tcptoken.MinKeyBytes {
		return nil, fmt.Errorf("gateway key of %d bytes: at least %d; create one with: head -c 32 /dev/urandom | base64", len(cfg.Key), tcptoken.MinKeyBytes)
	}
	if len(cfg.ServiceCIDRs) == 0 {
		return nil, errors.New("no Service CIDRs: the gateway dials only the cluster's Service networks (the API server's --service-cluster-ip-range, as the hook's --service-cidrs)")
	}
	for name, v := range map[string]time.Duration{"token timeout": cfg.TokenTimeout, "proof-of-work timeout": cfg.ProofOfWorkTimeout, "dial timeout": cfg.DialTimeout, "idle timeout": cfg.IdleTimeout} {
		if v <= 0 {
			return nil, fmt.Errorf("%s %s: must be positive", name, v)
		}
	}
	for name, v := range map[string]int{"max line bytes": cfg.MaxLineBytes, "max connections": cfg.MaxConnections, "max connections per token": cfg.MaxConnectionsPerToken,
		"max bad tokens per minute": cfg.MaxBadTokensPerMinute, "max sources": cfg.MaxSources} {
		if v < 1 {
			return nil, fmt.Errorf("%s %d: must be at least 1", name, v)
		}
	}
	if cfg.MaxLineBytes < tcptoken.Length {
		return nil, fmt.Errorf("max line bytes %d: a token is %d", cfg.MaxLineBytes, tcptoken.Length)
	}
	g := &Gateway{
		cfg:    cfg,
		logger: logger,
		// No TCP keep-alive towards instances (four setsockopt calls a connection): they are in the
		// cluster, and the idle timeout ends a session that moves nothing.
		dialer:     net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: -1},
		admission:  newAdmission(cfg.MaxConnections, cfg.MaxBadTokensPerMinute, cfg.MaxSources),
		targets:    newTargetCounter(cfg.MaxConnectionsPerToken),
		pipes:      newPipePool(splicePipes),
		wsBuffers:  newWSBufferPool(wsLargeBuffers),
		activity:   newActivity(),
		conns:      map[*net.TCPConn]bool{},
		wsPlayers:  map[*wsSession]struct{}{},
		workerJobs: make(chan job),
		stopped:    make(chan struct{}),
	}
	g.metrics = newMetrics(reg, func() float64 { return float64(g.admission.size()) })
	g.upgrader = g.newUpgrader()
	return g, nil
}

// Serve accepts connections on ln until ctx ends and the shutdown delay passed, then closes ln,
// lets the connections go on for the drain timeout, tells those left to reconnect, closes them and
// returns.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	p, err := startPoller()
	if err != nil && !errors.Is(err, errNoPoller) {
		g.logger.Warn("no poller for idle connections: each spliced connection holds two goroutines", slog.String("error", err.Error()))
	}
	// Under mu: the WebSocket listener's drain may end the drain (endDrain reads it).
	g.mu.Lock()
	g.poller = p
	g.mu.Unlock()
	defer g.closeAfterShutdownDelay(ctx, ln)()
	// An accept loop per core: each hands accepting on to another worker once the connection it
	// took has a slot, before it serves it, so that the player's prompt waits for no hand-off and
	// the next accept for no evicted connection (see acceptor). A flood's wave of connections in
	// the listen queue is taken on every core: what a player queued behind it waits for.
	acceptors := runtime.GOMAXPROCS(0)
	acceptEnded := make(chan error, acceptors)
	for range acceptors {
		g.work(&acceptor{g: g, ctx: ctx, ln: ln, ended: acceptEnded, handle: g.handle, wg: &g.wg})
	}
	for range acceptors {
		if err := <-acceptEnded; err != nil {
			ln.Close() // the other loops end
			return err
		}
	}
	g.drain(&g.wg)
	g.pipes.close()
	g.poller.close()
	close(g.stopped)
	return nil
}

// closeAfterShutdownDelay closes ln once ctx ended and the shutdown delay passed (still accepting
// meanwhile: the load balancer stops sending once it sees the readiness probe fail), or when the
// function it returns is called, whichever comes first.
func (g *Gateway) closeAfterShutdownDelay(ctx context.Context, ln net.Listener) (served func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		select {
		case <-time.After(g.cfg.ShutdownDelay):
		case <-done:
		}
		ln.Close()
	}()
	return func() { close(done) }
}

// drain waits for the connections counted in wg to end, for the drain timeout at most; then ends
// the drain (once for the gateway: see endDrain) and waits for them to close.
func (g *Gateway) drain(wg *sync.WaitGroup) {
	drained := make(chan struct{})
	go func() {
		wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(g.cfg.DrainTimeout):
		g.drainOnce.Do(g.endDrain)
		<-drained
	}
}

// startPoller starts the poller of a gateway's idle directions (a variable: tests run gateways
// without one).
var startPoller = newPoller

// endDrain tells every player still connected to reconnect (one line, within a second for all),
// then closes every connection left.
func (g *Gateway) endDrain() {
	g.drainEnded.Store(true)
	g.mu.Lock()
	conns := maps.Clone(g.conns)
	poller := g.poller
	g.mu.Unlock()
	var told sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	players := 0
	for c, isPlayer := range conns {
		if isPlayer {
			players++
			told.Add(1)
			go func() {
				// Concurrently: a copy blocked on a player who reads nothing holds the socket's
				// write lock, which no deadline ends; the close below does.
				defer told.Done()
				c.SetWriteDeadline(deadline)
				io.WriteString(c, restartLine)
			}()
		}
	}
	players += g.tellWebSocketPlayers(&told, deadline)
	allTold := make(chan struct{})
	go func() {
		told.Wait()
		close(allTold)
	}()
	select {
	case <-allTold:
	case <-time.After(time.Until(deadline)):
	}
	for c := range conns {
		c.Close()
	}
	// The directions parked waiting for bytes see their connections closed, and end.
	poller.notifyAll()
	g.logger.Info("drain timeout: told the players left to reconnect and closed their connections", slog.Int("players", players))
}

// isTemporary says whether an accept error is one that passes (EMFILE, ECONNABORTED...).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// track records c as open until untrack.
func (g *Gateway) track(c *net.TCPConn, isPlayer bool) {
	g.mu.Lock()
	g.conns[c] = isPlayer
	g.mu.Unlock()
}

func (g *Gateway) untrack(c *net.TCPConn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// refusal is why a connection went no further: its metric reason, and the line the player reads
// (empty: nothing is written).
type refusal struct {
	reason string
	line   string
}

// refusalFull is the refusal of a gateway out of slots or descriptors: the player's instance is
// not at fault.
var refusalFull = refusal{reason: reasonTooManyConnections, line: "gateway full, try again later\n"}

// handle serves one player's connection on a worker: its token, then the instance's connection,
// whose splice goes on without this worker (see splice) until the connection ends: the worker is
// free once the splice began. It calls admitted once the connection has a slot (or was refused
// one), before anything that waits. A connection from a source that holds other connections
// waiting beyond the instances it reached (pendingConn.behind) is not served here: handle returns
// it as the job that serves it, for the accept loop to hand to another worker (see acceptor).
func (g *Gateway) handle(player *net.TCPConn, admitted func()) (later job) {
	c := &session{g: g, player: player, start: time.Now()}
	g.track(player, true)
	g.metrics.open.Inc()
	c.tokenDeadline = c.start.Add(g.cfg.TokenTimeout)
	player.SetDeadline(c.tokenDeadline)
	c.log = connLog{logger: g.logger, player: addrPort(player.RemoteAddr())}

	source := sourceOf(c.log.player.Addr())
	c.slot = g.admission.admit(player, source, time.Now())
	if c.slot != nil && c.slot.behind {
		return c
	}
	admitted()
	c.run()
	return nil
}

// run serves an admitted connection: the rest of handle, on the worker that admitted it or, for
// a connection admitted behind others, on a worker of its own.
func (c *session) run() {
	g, player := c.g, c.player
	if c.slot == nil {
		g.metrics.acceptedTracked.Inc()
		c.refuse(refusalFull)
		return
	}
	if c.slot.entry == nil {
		g.metrics.acceptedUntracked.Inc()
	} else {
		g.metrics.acceptedTracked.Inc()
	}

	target, lines, ref := g.present(player, c.slot, c.tokenDeadline)
	if ref != nil {
		c.refuse(*ref)
		return
	}
	c.target = target.Service
	c.log.instance = target.Service

	c.instance, ref = g.connect(player, target, lines, c.log)
	if ref != nil {
		c.refuse(*ref)
		return
	}
	g.track(c.instance, false)
	player.SetDeadline(time.Time{})
	g.metrics.spliced.Inc()
	g.metrics.splicing.Inc()
	c.splicing = true
	g.wg.Add(1)
	g.splice(c)
}

// session is one player's connection and what it holds, given back by end.
type session struct {
	g             *Gateway
	player        *net.TCPConn
	start         time.Time
	tokenDeadline time.Time
	log           connLog
	slot          *pendingConn   // its admission slot, once admitted
	target        netip.AddrPort // counted against its instance's cap, once valid
	instance      *net.TCPConn   // once connected
	splicing      bool
	spliced       splicing // the splice, once splicing
}

// refuse refuses the connection (see Gateway.refuse) and ends it.
func (c *session) refuse(r refusal) {
	c.g.refuse(c.player, c.log, r)
	c.end()
}

// closed counts and logs the end of a spliced connection, and ends it.
func (c *session) closed(s spliced) {
	defer c.g.wg.Done()
	c.g.metrics.closed.WithLabelValues(s.reason).Inc()
	c.log.log(slog.LevelInfo, "connection closed", slog.String("reason", s.reason),
		slog.Float64("duration_s", time.Since(c.start).Seconds()),
		slog.Int64("bytes_to_instance", s.toInstance), slog.Int64("bytes_to_player", s.toPlayer))
	c.end()
}

// end gives back what the connection holds.
func (c *session) end() {
	c.g.release(c.splicing, c.instance, c.target, c.slot, c.player)
}

// release gives back what a player's connection, TCP or WebSocket, holds, last taken first: the
// splice's count, the instance's connection, the token's place, the slot, the player's socket.
func (g *Gateway) release(splicing bool, instance *net.TCPConn, target netip.AddrPort, slot *pendingConn, player *net.TCPConn) {
	if splicing {
		g.metrics.splicing.Dec()
	}
	if instance != nil {
		g.untrack(instance)
		instance.Close()
	}
	if target.IsValid() {
		g.targets.release(target)
	}
	if slot != nil {
		g.admission.release(slot)
	}
	g.metrics.open.Dec()
	g.untrack(player)
	player.Close()
}

// connLog logs about one connection, naming its player and, once known, its instance; the
// attributes are formatted only for a line that is written.
type connLog struct {
	logger    *slog.Logger
	player    netip.AddrPort
	instance  netip.AddrPort
	websocket bool // came through the WebSocket listener
}

func (l connLog) log(level slog.Level, msg string, attrs ...slog.Attr) {
	ctx := context.Background()
	if !l.logger.Enabled(ctx, level) {
		return
	}
	attrs = append(attrs, slog.String("player", l.player.String()))
	if l.instance.IsValid() {
		attrs = append(attrs, slog.String("instance", l.instance.String()))
	}
	if l.websocket {
		attrs = append(attrs, slog.Bool("websocket", true))
	}
	l.logger.LogAttrs(ctx, level, msg, attrs...)
}

// present asks for the token and, when it asks for one, the proof of work. It returns the target
// (counted against its cap) and the line reader holding what the player sent beyond its lines, or
// why the connection goes no further. Every way out but a valid token charges the source.
func (g *Gateway) present(player *net.TCPConn, slot *pendingConn, tokenDeadline time.Time) (tcptoken.Target, *lineReader, *refusal) {
	if _, err := io.WriteString(player, Prompt); err != nil {
		g.admission.presented(slot, noToken, time.Now())
		return tcptoken.Target{}, nil, &refusal{reason: reasonClosedEarly}
	}
	lines := newLineReader(player, g.cfg.MaxLineBytes)
	line, err := lines.readLine()
	if err != nil {
		if g.admission.presented(slot, noToken, time.Now()) {
			return tcptoken.Target{}, nil, &refusal{reason: reasonEvicted, line: evictedLine}
		}
		return tcptoken.Target{}, nil, g.lineError(err, reasonTokenTimeout, fmt.Sprintf("no token within %s\n", g.cfg.TokenTimeout))
	}
	target, err := tcptoken.Open(g.cfg.Key, string(line))
	if err != nil {
		if g.admission.inDebt(slot.source, time.Now()) {
			// Within the token deadline: a slot is never held past it without a valid token.
			until := time.Now().Add(badTokenDelay)
			if tokenDeadline.Before(until) {
				until = tokenDeadline
			}
			g.wait(player, until)
		}
		g.admission.presented(slot, noToken, time.Now())
		return tcptoken.Target{}, nil, &refusal{reason: reasonInvalidToken, line: "invalid token\n"}
	}
	if !g.dialable(target.Service.Addr()) {
		// Signed with the gateway key, yet not an instance's Service: a hook without
		// --service-cidrs, a key that leaked, or a gateway told the wrong ranges.
		g.admission.presented(slot, noToken, time.Now())
		g.logger.Warn("a token signed with the gateway key names an address outside --service-cidrs; refused",
			slog.String("address", target.Service.Addr().String()))
		return tcptoken.Target{}, nil, &refusal{reason: reasonNotAnInstance, line: "this token leads to no instance\n"}
	}
	if !g.targets.acquire(target.Service) {
		// A valid token, yet one connection too many for its instance: no credit, a debt.
		g.admission.presented(slot, noToken, time.Now())
		return tcptoken.Target{}, nil, &refusal{reason: reasonTooManyForToken,
			line: fmt.Sprintf("too many connections with this token (at most %d at once), try again later\n", g.cfg.MaxConnectionsPerToken)}
	}
	g.admission.presented(slot, target.Service, time.Now())
	if target.ProofOfWorkBits > 0 {
		if ref := g.proofOfWork(player, lines, target.ProofOfWorkBits); ref != nil {
			g.targets.release(target.Service)
			g.admission.charge(slot.source, time.Now())
			return tcptoken.Target{}, nil, ref
		}
	}
	return target, lines, nil
}

// wait holds the connection until then, reading and dropping what comes, or less when the player
// closes or an eviction ends its reads.
func (g *Gateway) wait(player *net.TCPConn, until time.Time) {
	player.SetReadDeadline(until)
	io.Copy(io.Discard, io.LimitReader(player, int64(g.cfg.MaxLineBytes)*64))
}

// deadlineWriter is the player's side of a proof of work: its TCP connection, or its WebSocket's
// binary messages (wsStream).
type deadlineWriter interface {
	io.Writer
	SetDeadline(time.Time) error
}

// proofOfWork poses the puzzle and checks the answer.
func (g *Gateway) proofOfWork(player deadlineWriter, lines *lineReader, zeroBits uint8) *refusal {
	challenge, err := newChallenge()
	if err != nil {
		g.logger.Error("cannot pose a proof of work", slog.String("error", err.Error()))
		return &refusal{reason: reasonInternal, line: "internal error, try again\n"}
	}
	player.SetDeadline(time.Now().Add(g.cfg.ProofOfWorkTimeout))
	if _, err := io.WriteString(player, puzzle(challenge, zeroBits)); err != nil {
		return &refusal{reason: reasonClosedEarly}
	}
	answer, err := lines.readLine()
	if err != nil {
		return g.lineError(err, reasonProofOfWorkTimeout, fmt.Sprintf("no proof of work within %s\n", g.cfg.ProofOfWorkTimeout))
	}
	if !solves(challenge, zeroBits, answer) {
		return &refusal{reason: reasonWrongProofOfWork, line: "wrong proof of work\n"}
	}
	return nil
}

// lineError is the refusal of a line that could not be read.
func (g *Gateway) lineError(err error, timeoutReason, timeoutLine string) *refusal {
	switch {
	case errors.Is(err, errLineTooLong):
		return &refusal{reason: reasonLineTooLong, line: "line too long\n"}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &refusal{reason: timeoutReason, line: timeoutLine}
	default:
		return &refusal{reason: reasonClosedEarly}
	}
}

// refuse counts the refusal, writes its line (bounded by a short deadline) and logs it at debug
// level, without anything the player sent.
func (g *Gateway) refuse(player *net.TCPConn, log connLog, r refusal) {
	g.metrics.refused.WithLabelValues(r.reason).Inc()
	log.log(slog.LevelDebug, "connection refused", slog.String("reason", r.reason))
	if r.line != "" {
		player.SetWriteDeadline(time.Now().Add(time.Second))
		io.WriteString(player, r.line)
	}
}

// addrPort is the address of a TCP connection's end.
func addrPort(a net.Addr) netip.AddrPort {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.AddrPort()
	}
	return netip.AddrPort{}
}
