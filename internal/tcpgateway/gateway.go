// Package tcpgateway is the TCP gateway: players connect with plain `nc <gateway> <port>`, type
// their instance's token at the prompt, and are spliced to the instance's ClusterIP Service. The
// token (internal/tcptoken) is the whole routing state: the gateway holds no table and no
// Kubernetes credential, only the key that opens tokens. Every connection is bounded for a hostile
// internet: a deadline and a line cap to present the token, caps per instance and in total, a
// per-source limit on bad tokens and on connections still presenting one, and an idle timeout.
// A bad token costs no connection to any instance; no token appears in any log.
package tcpgateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// Prompt is what the gateway writes first, on every connection.
const Prompt = "token: "

// Config is the gateway's key and limits. Defaults returns the defaults of the flags.
type Config struct {
	// Key opens tokens: the hook's gateway key, at least tcptoken.MinKeyBytes.
	Key []byte
	// TokenTimeout is the time from accept to a whole token line.
	TokenTimeout time.Duration
	// MaxLineBytes caps the token line and the proof-of-work answer, without the line's end.
	MaxLineBytes int
	// MaxConnections caps the connections open at once, however far they got.
	MaxConnections int
	// MaxConnectionsPerToken caps the connections open at once to one instance port.
	MaxConnectionsPerToken int
	// MaxBadTokensPerMinute is how many bad tokens (or proofs of work, or lines missing at the
	// deadline) a source may present in a minute; past it, its connections are refused at once.
	MaxBadTokensPerMinute int
	// MaxPendingPerSource caps a source's connections still presenting a token or a proof of work.
	MaxPendingPerSource int
	// MaxSources bounds the memory of the per-source limits (entries of about 100 bytes).
	MaxSources int
	// ProofOfWorkTimeout is the time to answer the puzzle, once posed.
	ProofOfWorkTimeout time.Duration
	// DialTimeout is the time the instance has to accept the connection.
	DialTimeout time.Duration
	// IdleTimeout closes a spliced connection that moved no byte either way for this long; it
	// closes between IdleTimeout and 1.25 times it after the last byte. The default, 15 minutes,
	// lets a player read a disassembly between two inputs of an interactive session, and still
	// frees what abandoned sessions hold (a player holds at most MaxConnectionsPerToken).
	IdleTimeout time.Duration
	// DrainTimeout is how long spliced connections may go on after the listener closed.
	DrainTimeout time.Duration
}

// Defaults returns the default limits, with no key.
func Defaults() Config {
	return Config{
		TokenTimeout:           30 * time.Second,
		MaxLineBytes:           128,
		MaxConnections:         10000,
		MaxConnectionsPerToken: 16,
		MaxBadTokensPerMinute:  10,
		MaxPendingPerSource:    32,
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
	now     func() time.Time // the clock of the per-source window (tests set it); deadlines are the system's

	open    atomic.Int64
	sources *sourceTable
	targets *targetCounter

	mu         sync.Mutex
	conns      map[*net.TCPConn]struct{} // every open connection, player's and instance's, closed when the drain ends
	wg         sync.WaitGroup
	drainEnded atomic.Bool
}

// New checks cfg and returns a gateway; its metrics are registered on reg.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Gateway, error) {
	if len(cfg.Key) < tcptoken.MinKeyBytes {
		return nil, fmt.Errorf("gateway key of %d bytes: at least %d; create one with: head -c 32 /dev/urandom | base64", len(cfg.Key), tcptoken.MinKeyBytes)
	}
	for name, v := range map[string]time.Duration{"token timeout": cfg.TokenTimeout, "proof-of-work timeout": cfg.ProofOfWorkTimeout, "dial timeout": cfg.DialTimeout, "idle timeout": cfg.IdleTimeout} {
		if v <= 0 {
			return nil, fmt.Errorf("%s %s: must be positive", name, v)
		}
	}
	for name, v := range map[string]int{"max line bytes": cfg.MaxLineBytes, "max connections": cfg.MaxConnections, "max connections per token": cfg.MaxConnectionsPerToken,
		"max bad tokens per minute": cfg.MaxBadTokensPerMinute, "max pending per source": cfg.MaxPendingPerSource, "max sources": cfg.MaxSources} {
		if v < 1 {
			return nil, fmt.Errorf("%s %d: must be at least 1", name, v)
		}
	}
	if cfg.MaxLineBytes < tcptoken.Length {
		return nil, fmt.Errorf("max line bytes %d: a token is %d", cfg.MaxLineBytes, tcptoken.Length)
	}
	g := &Gateway{
		cfg:     cfg,
		logger:  logger,
		dialer:  net.Dialer{Timeout: cfg.DialTimeout},
		now:     time.Now,
		sources: newSourceTable(cfg.MaxBadTokensPerMinute, cfg.MaxPendingPerSource, cfg.MaxSources),
		targets: newTargetCounter(cfg.MaxConnectionsPerToken),
		conns:   map[*net.TCPConn]struct{}{},
	}
	g.metrics = newMetrics(reg, func() float64 { return float64(g.sources.size()) })
	return g, nil
}

// Serve accepts connections on ln until ctx ends, then closes ln, lets the spliced connections go
// on for the drain timeout, closes those left and returns.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				// Out of file descriptors, or a connection reset before accept: wait, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				g.logger.Warn("accept failed; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", backoff))
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 0
		tcp, ok := conn.(*net.TCPConn)
		if !ok {
			conn.Close()
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.handle(tcp)
		}()
	}
	drained := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(g.cfg.DrainTimeout):
		g.drainEnded.Store(true)
		g.mu.Lock()
		n := len(g.conns)
		for c := range g.conns {
			c.Close()
		}
		g.mu.Unlock()
		g.logger.Info("drain timeout: closing the connections left", slog.Int("connections", n))
		<-drained
	}
	return nil
}

// isTemporary says whether an accept error is one that passes (EMFILE, ECONNABORTED...).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// track records c as open until the returned function is called.
func (g *Gateway) track(c *net.TCPConn) func() {
	g.mu.Lock()
	g.conns[c] = struct{}{}
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		delete(g.conns, c)
		g.mu.Unlock()
	}
}

// refusal is why a connection went no further: its metric reason, and the line the player reads
// (empty: nothing is written).
type refusal struct {
	reason string
	line   string
	bad    bool // counts against the source's bad tokens
}

// handle serves one player's connection to its end.
func (g *Gateway) handle(player *net.TCPConn) {
	defer player.Close()
	defer g.track(player)()
	g.metrics.open.Inc()
	defer g.metrics.open.Dec()
	start := time.Now()
	player.SetDeadline(start.Add(g.cfg.TokenTimeout))
	playerAddr := addrPort(player.RemoteAddr())
	log := g.logger.With(slog.String("player", playerAddr.String()))

	if g.open.Add(1) > int64(g.cfg.MaxConnections) {
		g.open.Add(-1)
		g.metrics.accepted.WithLabelValues("tracked").Inc()
		g.refuse(player, log, refusal{reason: reasonTooManyConnections, line: "gateway full, try again later\n"})
		return
	}
	defer g.open.Add(-1)

	source := sourceOf(playerAddr.Addr())
	verdict, ref := g.admitSource(source)
	if ref != nil {
		g.refuse(player, log, *ref)
		return
	}
	target, lines, ref := g.present(player)
	if verdict == sourceAdmitted {
		g.sources.done(source, ref != nil && ref.bad, g.now())
	}
	if ref != nil {
		g.refuse(player, log, *ref)
		return
	}
	defer g.targets.release(target.Service)
	log = log.With(slog.String("instance", target.Service.String()))

	instance, ref := g.connect(player, playerAddr, target, lines, log)
	if ref != nil {
		g.refuse(player, log, *ref)
		return
	}
	defer instance.Close()
	defer g.track(instance)()
	player.SetDeadline(time.Time{})
	g.metrics.spliced.Inc()
	g.metrics.splicing.Inc()
	defer g.metrics.splicing.Dec()
	s := g.splice(player, instance)
	g.metrics.closed.WithLabelValues(s.reason).Inc()
	log.Info("connection closed", slog.String("reason", s.reason),
		slog.Float64("duration_s", time.Since(start).Seconds()),
		slog.Int64("bytes_to_instance", s.toInstance), slog.Int64("bytes_to_player", s.toPlayer))
}

// admitSource counts a new connection against its source's limits (and in the metrics, as tracked
// or not), or says why it is refused.
func (g *Gateway) admitSource(source netip.Addr) (sourceVerdict, *refusal) {
	verdict := g.sources.admit(source, g.now())
	tracked := "tracked"
	switch verdict {
	case sourceRateLimited:
		g.metrics.accepted.WithLabelValues(tracked).Inc()
		return verdict, &refusal{reason: reasonRateLimited, line: "too many invalid tokens from your address, try again in a minute\n"}
	case sourceTooManyPending:
		g.metrics.accepted.WithLabelValues(tracked).Inc()
		return verdict, &refusal{reason: reasonTooManyPending, line: "too many connections waiting for a token from your address\n"}
	case sourceUntracked:
		tracked = "untracked"
	}
	g.metrics.accepted.WithLabelValues(tracked).Inc()
	return verdict, nil
}

// present asks for the token and, when it asks for one, the proof of work. It returns the target
// (counted against its cap) and the line reader holding what the player sent beyond its lines, or
// why the connection goes no further.
func (g *Gateway) present(player *net.TCPConn) (tcptoken.Target, *lineReader, *refusal) {
	if _, err := io.WriteString(player, Prompt); err != nil {
		return tcptoken.Target{}, nil, &refusal{reason: reasonClosedEarly}
	}
	lines := newLineReader(player, g.cfg.MaxLineBytes)
	line, err := lines.readLine()
	if err != nil {
		return tcptoken.Target{}, nil, g.lineError(err, reasonTokenTimeout, fmt.Sprintf("no token within %s\n", g.cfg.TokenTimeout))
	}
	target, err := tcptoken.Open(g.cfg.Key, string(line))
	if err != nil {
		return tcptoken.Target{}, nil, &refusal{reason: reasonInvalidToken, line: "invalid token\n", bad: true}
	}
	if !g.targets.acquire(target.Service) {
		return tcptoken.Target{}, nil, &refusal{reason: reasonTooManyForToken,
			line: fmt.Sprintf("too many connections with this token (at most %d at once), try again later\n", g.cfg.MaxConnectionsPerToken)}
	}
	if target.ProofOfWorkBits > 0 {
		if ref := g.proofOfWork(player, lines, target.ProofOfWorkBits); ref != nil {
			g.targets.release(target.Service)
			return tcptoken.Target{}, nil, ref
		}
	}
	return target, lines, nil
}

// proofOfWork poses the puzzle and checks the answer.
func (g *Gateway) proofOfWork(player *net.TCPConn, lines *lineReader, zeroBits uint8) *refusal {
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
		return &refusal{reason: reasonWrongProofOfWork, line: "wrong proof of work\n", bad: true}
	}
	return nil
}

// lineError is the refusal of a line that could not be read.
func (g *Gateway) lineError(err error, timeoutReason, timeoutLine string) *refusal {
	switch {
	case errors.Is(err, errLineTooLong):
		return &refusal{reason: reasonLineTooLong, line: "line too long\n", bad: true}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &refusal{reason: timeoutReason, line: timeoutLine, bad: true}
	default:
		return &refusal{reason: reasonClosedEarly}
	}
}

// refuse counts the refusal, writes its line (bounded by a short deadline) and logs it at debug
// level, without anything the player sent.
func (g *Gateway) refuse(player *net.TCPConn, log *slog.Logger, r refusal) {
	g.metrics.refused.WithLabelValues(r.reason).Inc()
	log.Debug("connection refused", slog.String("reason", r.reason))
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
