package tcpgateway

import (
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// splice copies the player's messages to the instance and the instance's bytes to the player in
// binary messages; a watchdog closes an idle connection and pings the player every pingInterval.
//
// As the TCP splice's, a direction runs in a worker only while its source has bytes, and holds a
// buffer only then: once its source is dry it parks in the gateway's poller, no goroutine. The
// player's frames are read by wsFrames, which keeps its state between two reads, not by the
// library's NextReader, which waits for a frame inside (a goroutine per idle connection). An idle
// WebSocket costs its sockets, the library's connection and this session (see
// TestWebSocketIdleConnectionMemory).
func (c *wsSession) splice() {
	g := c.g
	g.track(c.instance, false)
	c.player.SetDeadline(time.Time{})
	g.metrics.spliced.Inc()
	g.metrics.splicing.Inc()
	c.splicing = true
	c.usage.target = c.target
	c.started = time.Now().UnixNano()
	c.lastPing = c.started
	c.left.Store(2)
	c.turn = make(chan struct{}, 1)
	g.wsWG.Add(1)
	g.mu.Lock()
	g.wsPlayers[c] = struct{}{}
	g.mu.Unlock()
	c.mu.Lock()
	c.watchdog = time.AfterFunc(c.tick(), c.watch)
	c.mu.Unlock()
	g.activity.started(&c.usage)
	c.frames.writeControl = func(messageType int, data []byte) {
		c.writeControl(messageType, data, time.Now().Add(controlTimeout))
	}
	c.fromPlayer.init(c, c.player, c.movePlayer, c.playerEnded)
	c.fromInstance.init(c, c.instance, c.moveInstance, c.instanceEnded)
	c.fromInstance.start()
	if c.br.Buffered() > 0 || c.stream.cur != nil {
		// Bytes the poller knows nothing of: what the library's reader holds.
		g.work(&c.fromPlayer)
	} else {
		c.fromPlayer.start()
	}
}

// tick is the watchdog's period: often enough for the idle timeout (as the TCP splice's) and for
// the pings.
func (c *wsSession) tick() time.Duration {
	return min(c.g.cfg.IdleTimeout/idleChecks, pingInterval)
}

// watch closes the connection once idle for the idle timeout (pings and pongs are no bytes of the
// player's), else pings the player when pingInterval passed since the last ping.
func (c *wsSession) watch() {
	now := time.Now().UnixNano()
	if now-max(c.started, c.lastByte.Load()) >= int64(c.g.cfg.IdleTimeout) {
		c.idle.Store(true)
		c.closeBoth()
		return
	}
	if now-c.lastPing >= int64(pingInterval) {
		c.lastPing = now
		c.writeControl(websocket.PingMessage, nil, time.Now().Add(controlTimeout))
	}
	c.mu.Lock()
	if !c.stopped {
		c.watchdog.Reset(c.tick())
	}
	c.mu.Unlock()
}

// closeBoth closes both sides and wakes both directions: each ends at once, parked or not.
func (c *wsSession) closeBoth() {
	c.player.Close()
	c.instance.Close()
	c.fromPlayer.notify()
	c.fromInstance.notify()
}

// wsDirection is one direction of a spliced WebSocket: the poller's direction (its state and
// registration), and what moves its bytes and ends it.
type wsDirection struct {
	direction
	c *wsSession
	// move moves what the source has now: end at its end, dry once it has nothing more for now.
	move func(buf []byte) (end, dry bool, err error)
	// finish passes the end (nil) or the error on, before the direction reports its end.
	finish func(err error)
}

func (w *wsDirection) init(c *wsSession, src *net.TCPConn, move func([]byte) (bool, bool, error), finish func(error)) {
	w.c, w.move, w.finish, w.ws = c, move, finish, w
	var err error
	if w.rawSrc, err = src.SyscallConn(); err != nil {
		w.rawSrc = closedRawConn{err}
	}
}

// start parks the direction (the poller runs it at once when its source is readable now), or runs
// it in a worker when it cannot be parked: a splice's start costs no goroutine.
func (w *wsDirection) start() {
	if err := w.c.g.poller.arm(&w.direction); err == nil && w.state.CompareAndSwap(directionRunning, directionParked) {
		return
	}
	w.state.Store(directionRunning)
	w.c.g.work(w)
}

// run moves the source's bytes until it is dry, then parks; or until its end or an error.
func (w *wsDirection) run() {
	for {
		buf := w.c.g.wsBuffers.get()
		end, dry, err := w.move(buf)
		w.c.g.wsBuffers.put(buf)
		if err == nil && dry {
			var parked bool
			if parked, err = w.park(); parked {
				return
			}
		}
		if err != nil || end {
			w.state.Store(directionEnded)
			w.c.g.poller.forget(&w.direction)
			w.finish(err)
			w.c.ended()
			return
		}
	}
}

// park arms the direction in the poller (parked), unless it was notified meanwhile (move again).
// Without the poller it waits here until the source is readable.
func (w *wsDirection) park() (parked bool, err error) {
	if err := w.c.g.poller.arm(&w.direction); err != nil {
		return false, waitReadable(w.rawSrc)
	}
	if w.state.CompareAndSwap(directionRunning, directionParked) {
		return true, nil
	}
	w.state.Store(directionRunning)
	return false, nil
}

// movePlayer moves the player's frames to the instance, starting with what the proof of work's
// read left of the current message, then what the library's reader holds, then the socket's.
func (c *wsSession) movePlayer(buf []byte) (end, dry bool, err error) {
	if c.stream.cur != nil {
		// No io.ReaderFrom: io.CopyBuffer then copies through the pooled buffer.
		n, err := io.CopyBuffer(struct{ io.Writer }{c.instance}, c.stream.cur, buf)
		c.stream.cur = nil
		c.count(&c.toInstance, n)
		if err != nil {
			return false, false, err
		}
	}
	for {
		var n int
		if c.br.Buffered() > 0 {
			n, _ = c.br.Read(buf)
		} else if n, err = readNow(c.fromPlayer.rawSrc, buf); err == syscall.EAGAIN {
			return false, true, nil
		} else if err == nil && n == 0 {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return false, false, err
		}
		data, end, err := c.frames.feed(buf[:n])
		if err == nil && data > 0 {
			_, err = c.instance.Write(buf[:data])
			c.count(&c.toInstance, int64(data))
		}
		if end || err != nil {
			return end, false, err
		}
	}
}

// playerEnded passes the player's close frame on as the instance's end of input (its answer still
// comes back); an error ends both sides (past maxMessageBytes the player was told 1009).
func (c *wsSession) playerEnded(err error) {
	if err == nil && c.left.Load() > 1 {
		err = c.instance.CloseWrite()
	}
	if err != nil {
		c.closeBoth()
	}
}

// moveInstance sends what the instance has now, in binary messages of at most wsMessageBytes.
func (c *wsSession) moveInstance(buf []byte) (end, dry bool, err error) {
	for {
		n, err := readNow(c.fromInstance.rawSrc, buf)
		switch {
		case err == syscall.EAGAIN:
			return false, true, nil
		case err != nil:
			return false, false, err
		case n == 0:
			return true, false, nil
		}
		if err := c.writeMessages(buf[:n]); err != nil {
			return false, false, err
		}
		c.count(&c.toPlayer, int64(n))
	}
}

// writeMessages sends b to the player in binary messages of at most wsMessageBytes, all in one
// writev, in its turn: a write per message (the library's WriteMessage) costs a system call and
// TCP's work per 64 KiB (in make bench-gateway's WebSocket bulk, 470 to 580 ms of the gateway's
// CPU per GiB against 400 to 440). It waits while the player's socket is full, without deadline:
// the idle watchdog ends a player who stops reading.
func (c *wsSession) writeMessages(b []byte) error {
	var headers [wsBufferBytes / wsMessageBytes * maxServerHeaderBytes]byte
	out := make(net.Buffers, 0, 2*((len(b)+wsMessageBytes-1)/wsMessageBytes))
	h := headers[:0]
	for len(b) > 0 {
		k := min(len(b), wsMessageBytes)
		start := len(h)
		h = appendServerHeader(h, websocket.BinaryMessage, k)
		out = append(out, h[start:], b[:k])
		b = b[k:]
	}
	c.turn <- struct{}{}
	defer func() { <-c.turn }()
	if c.closeSent {
		return websocket.ErrCloseSent
	}
	_, err := out.WriteTo(c.player)
	return err
}

// writeControl sends the player a control frame in its turn, both by deadline: a frame whose
// turn did not come by then is dropped (the player is not reading: a ping or pong more changes
// nothing); one cut part-way would break every frame after it, and ends the connection. Nothing
// follows a close frame (RFC 6455, 5.5.1).
func (c *wsSession) writeControl(messageType int, data []byte, deadline time.Time) error {
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	select {
	case c.turn <- struct{}{}:
	case <-wait.C:
		return os.ErrDeadlineExceeded
	}
	defer func() { <-c.turn }()
	if c.closeSent {
		return websocket.ErrCloseSent
	}
	c.closeSent = messageType == websocket.CloseMessage
	frame := append(appendServerHeader(make([]byte, 0, maxServerHeaderBytes+len(data)), messageType, len(data)), data...)
	c.player.SetWriteDeadline(deadline)
	n, err := c.player.Write(frame)
	c.player.SetWriteDeadline(time.Time{})
	if err != nil && n > 0 {
		c.closeBoth()
	}
	return err
}

// instanceEnded answers the instance's end with a close frame (normal closure), which the player
// has closeGrace to answer; an error ends both sides.
func (c *wsSession) instanceEnded(err error) {
	if err == nil {
		err = c.writeControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(controlTimeout))
	}
	if err != nil {
		c.closeBoth()
		return
	}
	// The player's direction may be parked: a timer, not a read deadline, ends it.
	time.AfterFunc(closeGrace, c.closeBoth)
}

// readNow reads what the socket has now, without waiting: syscall.EAGAIN when it has nothing, 0 at
// its end.
func readNow(raw syscall.RawConn, p []byte) (n int, err error) {
	var readErr error
	if err := raw.Read(func(fd uintptr) bool {
		for {
			n, readErr = syscall.Read(int(fd), p)
			if readErr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	switch {
	case readErr == syscall.EAGAIN:
		return 0, readErr
	case readErr != nil:
		return 0, os.NewSyscallError("read", readErr)
	}
	return n, nil
}

// count counts n bytes moved one way, and the connection active when there are any.
func (c *wsSession) count(moved *int64, n int64) {
	if n > 0 {
		*moved += n
		c.lastByte.Store(time.Now().UnixNano())
	}
}

// ended is called by each direction as it ends; the last stops the watchdog, reports and gives
// back what the connection holds.
func (c *wsSession) ended() {
	if c.left.Add(-1) > 0 {
		return
	}
	g := c.g
	c.mu.Lock()
	c.stopped = true
	c.watchdog.Stop()
	c.mu.Unlock()
	g.mu.Lock()
	delete(g.wsPlayers, c)
	g.mu.Unlock()
	g.activity.finished(&c.usage)
	g.metrics.bytesToInstance.Add(float64(c.toInstance))
	g.metrics.bytesToPlayer.Add(float64(c.toPlayer))
	reason := closedByPeers
	switch {
	case c.idle.Load():
		reason = closedIdle
	case g.drainEnded.Load():
		reason = closedShutdown
	}
	g.metrics.closed.WithLabelValues(reason).Inc()
	c.log.log(slog.LevelInfo, "connection closed", slog.String("reason", reason),
		slog.Float64("duration_s", time.Since(c.start).Seconds()),
		slog.Int64("bytes_to_instance", c.toInstance), slog.Int64("bytes_to_player", c.toPlayer))
	c.end()
	g.wsWG.Done()
}

// refuseUpgraded refuses an upgraded connection: the line in a binary message (a terminal shows
// it), then a close frame naming the reason (try again later for what passes, policy violation
// for a player's fault).
func (c *wsSession) refuseUpgraded(r refusal) {
	c.g.metrics.refused.WithLabelValues(r.reason).Inc()
	c.log.log(slog.LevelDebug, "connection refused", slog.String("reason", r.reason))
	deadline := time.Now().Add(time.Second)
	c.ws.SetWriteDeadline(deadline)
	if r.line != "" {
		c.ws.WriteMessage(websocket.BinaryMessage, []byte(r.line))
	}
	code := websocket.ClosePolicyViolation
	switch r.reason {
	case reasonUnreachable, reasonTooManyConnections:
		code = websocket.CloseTryAgainLater
	case reasonInternal:
		code = websocket.CloseInternalServerErr
	}
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, r.reason), deadline)
}

// end gives back what the connection holds.
func (c *wsSession) end() {
	c.g.release(c.splicing, c.instance, c.target, c.slot, c.player)
}

// tellWebSocketPlayers sends every spliced WebSocket player a close frame saying that the gateway
// restarts (1012, service restart), each concurrently and by the deadline, counted in told; it
// returns how many it tells.
func (g *Gateway) tellWebSocketPlayers(told *sync.WaitGroup, deadline time.Time) int {
	g.mu.Lock()
	players := slices.Collect(maps.Keys(g.wsPlayers))
	g.mu.Unlock()
	for _, c := range players {
		told.Add(1)
		go func() {
			defer told.Done()
			c.writeControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseServiceRestart, "gateway restarting, reconnect"), deadline)
		}()
	}
	return len(players)
}

// wsBufferPool lends the WebSocket splice's buffers, held only while bytes move: up to maxLarge
// of wsBufferBytes, then of wsSmallBufferBytes (see wsLargeBuffers). A large buffer is kept once
// made (newLargeBuffer): resident only as far as it was ever written, 16 MiB at most (the small
// ones' pool gives them to the garbage collector).
type wsBufferPool struct {
	large    chan *[wsBufferBytes]byte // made and given back
	made     atomic.Int32
	maxLarge int32 // tests: 0 lends small buffers only
	small    sync.Pool
}

func newWSBufferPool(maxLarge int32) *wsBufferPool {
	return &wsBufferPool{large: make(chan *[wsBufferBytes]byte, maxLarge), maxLarge: maxLarge}
}

func (p *wsBufferPool) get() []byte {
	select {
	case b := <-p.large:
		return b[:]
	default:
	}
	if p.made.Add(1) <= p.maxLarge {
		return newLargeBuffer()[:]
	}
	p.made.Add(-1)
	if b, ok := p.small.Get().(*[wsSmallBufferBytes]byte); ok {
		return b[:]
	}
	return new([wsSmallBufferBytes]byte)[:]
}

func (p *wsBufferPool) put(b []byte) {
	if len(b) == wsBufferBytes {
		p.large <- (*[wsBufferBytes]byte)(b)
		return
	}
	p.small.Put((*[wsSmallBufferBytes]byte)(b))
}

// lent is the number of large buffers lent now.
func (p *wsBufferPool) lent() int {
	return int(p.made.Load()) - len(p.large)
}
