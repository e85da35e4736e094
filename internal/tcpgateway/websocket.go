package tcpgateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// The WebSocket listener speaks the convention of wsrx, websocat and websockify: one WebSocket
// carries one TCP stream, its bytes in binary messages to the player, binary or text messages (both
// their bytes) from it; the URL names the instance by its token (GET /ws/<token> or
// GET /ws?token=<token>); OPTIONS or a GET without upgrade on the same URL answers 204 when the
// token opens an instance and 404 when it does not, dialling nothing. Everything else is the TCP
// path's: the same slots (a connection reading its request is pending, and evictable, as a TCP
// connection presenting its token), the same per-token cap, debts, proof of work (asked in binary
// messages, the same lines), dial and PROXY header, idle timeout and drain.
//
// The listener runs its own accept loop on the gateway's workers, not an http.Server: the slot is
// taken at accept, before a byte is read, exactly as on the TCP path, and an eviction ends the
// request's read by a read deadline that no server's own deadline handling overwrites; a
// connection reads one request and ends (no idle keep-alive connection holds a slot); and it holds
// no server goroutine nor its two 4 KiB buffers once upgraded.
const (
	// maxRequestBytes bounds the request line and headers (http.Server's MaxHeaderBytes): past it,
	// 431. Browsers send cookies of the gateway's domain too.
	maxRequestBytes = 16 << 10
	// requestBufferBytes is the buffer the request is read through, dropped once it is read.
	requestBufferBytes = 4 << 10
	// wsReadBufferBytes is the WebSocket library's read buffer (see wsResponse.Hijack), held for
	// the connection's life: the proof of work's messages; once spliced, the frames are read
	// from the socket into the splice's buffer (wsFrames).
	wsReadBufferBytes = 512
	// wsWriteBufferBytes is the frame buffer a message is written through, from a pool, held only
	// while a message is written (bytes beyond it go out with it in one writev).
	wsWriteBufferBytes = 4 << 10
	// wsBufferBytes are the splice's buffers, held only while bytes move: a read (and the write
	// after it) moves up to 1 MiB, several of the player's frames (wsrx and websocat send 64 KiB
	// messages) or several messages to it. In make bench-gateway's bulk run, against 256 KiB, the
	// gateway took 17% less CPU per GiB: the bytes are copied either way, and each read and write
	// costs TCP's work per call besides.
	wsBufferBytes = 1 << 20
	// wsLargeBuffers bounds the buffers of wsBufferBytes lent at once (16 MiB); past it, a
	// direction moves its bytes through one of wsSmallBufferBytes. A player who does not read
	// holds the buffer its direction waits to write: no more than a small one once the large are
	// lent, so that players who stop reading cannot pin the gateway's memory a MiB at a time.
	wsLargeBuffers     = 16
	wsSmallBufferBytes = 256 << 10
	// wsMessageBytes bounds the messages to the player: websocat's default buffer (-B) is 64 KiB.
	wsMessageBytes = 64 << 10
	// maxMessageBytes bounds a message from the player: past it, close 1009 (message too big).
	// Bytes are streamed, never held whole: the bound is for clients that send nonsense; wsrx and
	// websocat send at most 64 KiB a message, a browser's paste is far below.
	maxMessageBytes = 1 << 20
	// pingInterval is how often a spliced WebSocket is pinged: load balancers drop sockets idle
	// for a minute (AWS's default 60 s, nginx's proxy_read_timeout 60 s).
	pingInterval = 30 * time.Second
	// controlTimeout bounds writing a control frame (ping, close) and the HTTP answers.
	controlTimeout = 5 * time.Second
	// closeGrace is how long the player has to answer the close frame sent on the instance's end.
	closeGrace = 5 * time.Second
)

// ServeWebSocket accepts the WebSocket listener's connections on ln until ctx ends and the shutdown
// delay passed, then closes ln, lets its connections go on for the drain timeout, tells those left
// to reconnect (close 1012), closes them and returns. It may run beside Serve, on the same gateway:
// both count in the same slots, caps, debts, metrics and activity.
func (g *Gateway) ServeWebSocket(ctx context.Context, ln net.Listener) error {
	defer g.closeAfterShutdownDelay(ctx, ln)()
	acceptEnded := make(chan error, 1)
	g.work(&acceptor{g: g, ctx: ctx, ln: ln, ended: acceptEnded, handle: g.handleWebSocket, wg: &g.wsWG})
	if err := <-acceptEnded; err != nil {
		return err
	}
	g.drain(&g.wsWG)
	return nil
}

// newUpgrader is the gateway's WebSocket handshake: the subprotocol "binary" when the client
// offers it (websockify, noVNC), else none; no compression (challenge bytes, and a cost per
// connection); any Origin, for the token in the URL is the only credential (no cookie is read, so
// another site's page gains nothing by connecting).
func (g *Gateway) newUpgrader() websocket.Upgrader {
	return websocket.Upgrader{
		HandshakeTimeout: controlTimeout,
		WriteBufferSize:  wsWriteBufferBytes,
		WriteBufferPool:  &g.wsWriteBuffers,
		Subprotocols:     []string{"binary"},
		Error:            g.badUpgrade,
		CheckOrigin:      func(*http.Request) bool { return true },
	}
}

// wsSession is one connection of the WebSocket listener and what it holds, given back by end.
type wsSession struct {
	g        *Gateway
	player   *net.TCPConn
	start    time.Time
	deadline time.Time // for the request, as the token's on the TCP path
	log      connLog
	slot     *pendingConn // its admission slot, once admitted
	target   netip.AddrPort
	ws       *websocket.Conn // once upgraded
	br       *bufio.Reader   // the library's reader, once upgraded (see wsResponse.Hijack)
	stream   wsStream
	instance *net.TCPConn // once connected
	splicing bool

	// The splice, once splicing (see splice).
	usage
	started      int64 // Unix ns
	lastPing     int64 // Unix ns, touched by the watchdog only
	idle         atomic.Bool
	left         atomic.Int32
	toInstance   int64    // written by fromPlayer, read by the last to end
	toPlayer     int64    // written by fromInstance, read by the last to end
	frames       wsFrames // the player's frames, read by fromPlayer
	fromPlayer   wsDirection
	fromInstance wsDirection
	mu           sync.Mutex
	watchdog     *time.Timer
	stopped      bool
	// turn is the right to write to the player once spliced, held for a whole write: the
	// instance's messages, and the control frames of the watchdog, of the player's frames and of
	// the ends and drain, each whole between two writes.
	turn      chan struct{}
	closeSent bool // in the turn
}

// handleWebSocket serves one connection of the WebSocket listener on a worker, as handle does a
// TCP one: a slot, the request, then a probe's answer, or the upgrade, the proof of work, the
// instance's connection and the splice, which goes on without this worker. It serves every
// connection itself (later is nil): the source it admits a connection as may be a trusted proxy's.
func (g *Gateway) handleWebSocket(player *net.TCPConn, admitted func()) (later job) {
	c := &wsSession{g: g, player: player, start: time.Now()}
	// Tracked as no TCP player's: at the drain's end a WebSocket reads a close frame, not a line.
	g.track(player, false)
	g.metrics.open.Inc()
	c.deadline = c.start.Add(g.cfg.TokenTimeout)
	player.SetDeadline(c.deadline)
	c.log = connLog{logger: g.logger, player: addrPort(player.RemoteAddr()), websocket: true}
	c.slot = g.admission.admit(player, sourceOf(c.log.player.Addr()), c.start)
	admitted()
	if c.slot == nil {
		g.metrics.acceptedTracked.Inc()
		c.refuseRequest(httpRefusal{refusalFull, http.StatusServiceUnavailable})
		c.end()
		return nil
	}
	if c.slot.entry == nil {
		g.metrics.acceptedUntracked.Inc()
	} else {
		g.metrics.acceptedTracked.Inc()
	}
	req, br, ref := c.readRequest()
	if ref != nil {
		c.refuseRequest(*ref)
		c.end()
		return nil
	}
	if !c.serve(req, br) {
		c.end()
	}
	return nil
}

// serve answers a request whose slot is still pending: it returns true once the connection is
// spliced (it ends on its own then), false when it is to end.
func (c *wsSession) serve(req *http.Request, br *bufio.Reader) bool {
	g := c.g
	c.log.player = g.playerOf(c.log.player, req.Header)
	g.admission.move(c.slot, sourceOf(c.log.player.Addr()), time.Now())
	token, alias, ok := tokenOf(req.URL)
	if !ok {
		c.presented(noToken)
		c.refuseRequest(httpRefusal{refusal{reason: reasonBadRequest, line: "not found: the URLs are /ws/<token> and /ws?token=<token>\n"}, http.StatusNotFound})
		return false
	}
	if !isUpgrade(req) {
		c.probe(req, token, alias)
		return false
	}
	if alias {
		// wsrx's probe URL (see tokenOf) is for probes only.
		c.presented(noToken)
		c.refuseRequest(httpRefusal{refusal{reason: reasonBadRequest, line: "not found: the URLs are /ws/<token> and /ws?token=<token>\n"}, http.StatusNotFound})
		return false
	}
	target, ok := c.upgrade(req, br, token)
	if !ok {
		return false
	}
	lines, ref := c.proofOfWork(target.ProofOfWorkBits)
	if ref == nil {
		c.instance, ref = g.connect(c.player, target, lines, c.log)
	}
	if ref != nil {
		c.refuseUpgraded(*ref)
		return false
	}
	c.splice()
	return true
}

// probe answers OPTIONS, GET or HEAD without upgrade: 204 when the token opens an instance, 404
// when it does not, without dialling. wsrx's desktop client asks each of its mappings every 5 s
// and drops one answered otherwise than 2xx.
func (c *wsSession) probe(req *http.Request, token string, alias bool) {
	g := c.g
	switch req.Method {
	case http.MethodOptions, http.MethodGet, http.MethodHead:
	default:
		c.presented(noToken)
		c.refuseRequest(httpRefusal{refusal{reason: reasonBadRequest, line: "method not allowed: GET (an upgrade, or a probe), HEAD or OPTIONS\n"}, http.StatusMethodNotAllowed})
		return
	}
	target, ref := g.openToken(token, alias)
	if ref != nil {
		c.delayBadToken()
		c.presented(noToken)
		c.answer(http.StatusNotFound, ref.line, req.Method == http.MethodHead)
		g.metrics.requests.WithLabelValues(answerProbeNotFound).Inc()
		return
	}
	// A token that opens is a valid token, as on the TCP path: its source reached its instance.
	c.presented(target.Service)
	c.answer(http.StatusNoContent, "", false)
	g.metrics.requests.WithLabelValues(answerProbeFound).Inc()
}

// upgrade opens the token, counts it against its instance's cap and answers the upgrade: the
// token's target, or false once the player was answered otherwise (and its slot charged).
func (c *wsSession) upgrade(req *http.Request, br *bufio.Reader, token string) (tcptoken.Target, bool) {
	g := c.g
	target, ref := g.openToken(token, false)
	if ref != nil {
		c.delayBadToken()
		c.presented(noToken)
		c.refuseRequest(httpRefusal{*ref, http.StatusNotFound})
		return tcptoken.Target{}, false
	}
	if br.Buffered() > 0 {
		c.presented(noToken)
		c.refuseRequest(httpRefusal{refusal{reason: reasonBadRequest, line: "bad WebSocket upgrade: bytes sent before the upgrade's answer\n"}, http.StatusBadRequest})
		return tcptoken.Target{}, false
	}
	if !g.targets.acquire(target.Service) {
		c.presented(noToken)
		c.refuseRequest(httpRefusal{tooManyForToken(g.cfg.MaxConnectionsPerToken), http.StatusTooManyRequests})
		return tcptoken.Target{}, false
	}
	c.target = target.Service
	c.log.instance = target.Service
	ws, err := g.upgrader.Upgrade(&wsResponse{c: c, br: br}, req, nil)
	if err != nil {
		// Answered 400 by badUpgrade.
		c.presented(noToken)
		return tcptoken.Target{}, false
	}
	c.ws = ws
	c.stream.ws = ws
	ws.SetReadLimit(maxMessageBytes)
	// The player's close frame is the end of its input, passed on as the instance's (see
	// playerEnded); the close frame back follows the instance's end.
	ws.SetCloseHandler(func(int, string) error { return nil })
	c.presented(target.Service)
	g.metrics.requests.WithLabelValues(answerUpgraded).Inc()
	return target, true
}

// proofOfWork asks for the proof of work in binary messages when the token asks for one: the
// lines read, holding the bytes the player sent after its answer, or why the connection ends.
func (c *wsSession) proofOfWork(zeroBits uint8) (*lineReader, *refusal) {
	if zeroBits == 0 {
		return &lineReader{}, nil
	}
	lines := newLineReader(&c.stream, c.g.cfg.MaxLineBytes)
	if ref := c.g.proofOfWork(&c.stream, lines, zeroBits); ref != nil {
		c.g.targets.release(c.target)
		c.target = netip.AddrPort{}
		c.g.admission.charge(c.slot.source, time.Now())
		return nil, ref
	}
	c.stream.SetDeadline(time.Time{})
	return lines, nil
}

// presented ends the slot's pending state (see admission.presented).
func (c *wsSession) presented(instance netip.AddrPort) {
	c.g.admission.presented(c.slot, instance, time.Now())
}

// delayBadToken makes a source in debt wait for the answer to its bad token, as on the TCP path,
// within the request's deadline.
func (c *wsSession) delayBadToken() {
	if !c.g.admission.inDebt(c.slot.source, time.Now()) {
		return
	}
	until := time.Now().Add(badTokenDelay)
	if c.deadline.Before(until) {
		until = c.deadline
	}
	c.g.wait(c.player, until)
}

// openToken opens a token of a URL: its target when the gateway's key minted it for an address
// inside the Service CIDRs, else the refusal. alias: the URL was wsrx's probe's, whose "ws" became
// "http" everywhere, the token's letters too (see tokenOf).
func (g *Gateway) openToken(token string, alias bool) (tcptoken.Target, *refusal) {
	invalid := &refusal{reason: reasonInvalidToken, line: "invalid token\n"}
	if len(token) > g.cfg.MaxLineBytes {
		return tcptoken.Target{}, invalid
	}
	target, err := tcptoken.Open(g.cfg.Key, token)
	if err != nil && alias {
		target, err = tcptoken.Open(g.cfg.Key, unaliasToken(token))
	}
	if err != nil {
		return tcptoken.Target{}, invalid
	}
	if !g.dialable(target.Service.Addr()) {
		g.logger.Warn("a token signed with the gateway key names an address outside --service-cidrs; refused",
			"address", target.Service.Addr().String())
		return tcptoken.Target{}, &refusal{reason: reasonNotAnInstance, line: "this token leads to no instance\n"}
	}
	return target, nil
}

// tooManyForToken is the refusal of a valid token whose instance has max connections open.
func tooManyForToken(max int) refusal {
	return refusal{reason: reasonTooManyForToken, line: fmt.Sprintf("too many connections with this token (at most %d at once), try again later\n", max)}
}

// wsStream reads a WebSocket's messages, binary or text, as one stream of bytes, and writes
// binary messages: the player's side of the proof of work.
type wsStream struct {
	ws  *websocket.Conn
	cur io.Reader // the message being read, nil between two
}

func (s *wsStream) Read(p []byte) (int, error) {
	for {
		if s.cur == nil {
			_, r, err := s.ws.NextReader()
			if err != nil {
				return 0, streamError(err)
			}
			s.cur = r
		}
		n, err := s.cur.Read(p)
		if err == io.EOF {
			s.cur = nil
			err = nil
		}
		if n > 0 || err != nil {
			return n, streamError(err)
		}
	}
}

func (s *wsStream) Write(p []byte) (int, error) {
	if err := s.ws.WriteMessage(websocket.BinaryMessage, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *wsStream) SetDeadline(t time.Time) error {
	return errors.Join(s.ws.SetReadDeadline(t), s.ws.SetWriteDeadline(t))
}

// streamError restores the deadline's error, which the WebSocket library hides behind its own
// (lineError tells a timeout by os.ErrDeadlineExceeded); a close frame is the player's end.
func streamError(err error) error {
	var ne net.Error
	var ce *websocket.CloseError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ne) && ne.Timeout():
		return os.ErrDeadlineExceeded
	case errors.As(err, &ce):
		return io.EOF
	}
	return err
}
