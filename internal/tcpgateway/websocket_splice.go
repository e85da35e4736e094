package tcpgateway

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// splice copies the player's messages to the instance and the instance's bytes to the player in
// binary messages, each way in a goroutine of its own, until both ended; a watchdog closes an idle
// connection and pings the player every pingInterval.
//
// A direction holds a buffer only while it moves bytes: the player's waits in the library's frame
// read (its 512-byte reader), the instance's for the socket to be readable (waitReadable), not in
// a read into a buffer. An idle WebSocket costs its two goroutines' stacks, its sockets and the
// library's connection (see TestWebSocketIdleConnectionMemory).
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
	g.wsWG.Add(1)
	g.mu.Lock()
	g.wsPlayers[c] = struct{}{}
	g.mu.Unlock()
	c.mu.Lock()
	c.watchdog = time.AfterFunc(c.tick(), c.watch)
	c.mu.Unlock()
	g.activity.started(&c.usage)
	go c.copyToInstance()
	go c.copyToPlayer()
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
		c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(controlTimeout))
	}
	c.mu.Lock()
	if !c.stopped {
		c.watchdog.Reset(c.tick())
	}
	c.mu.Unlock()
}

// closeBoth closes both sides: each direction ends at once.
func (c *wsSession) closeBoth() {
	c.player.Close()
	c.instance.Close()
}

// copyToInstance copies the player's messages to the instance until the player's close frame,
// passed on as the instance's end of input (its answer still comes back), or an error, which ends
// both sides (past maxMessageBytes the library has sent close 1009).
func (c *wsSession) copyToInstance() {
	err := c.pumpToInstance()
	if err == nil && c.left.Load() > 1 {
		err = c.instance.CloseWrite()
	}
	if err != nil {
		c.closeBoth()
	}
	c.ended()
}

// pumpToInstance copies whole messages, starting with what the proof of work's read left of the
// current one; nil at the player's close frame.
func (c *wsSession) pumpToInstance() error {
	// No io.ReaderFrom: io.CopyBuffer then copies through the pooled buffer, not one of its own.
	dst := struct{ io.Writer }{c.instance}
	for {
		if c.stream.cur == nil {
			_, r, err := c.ws.NextReader()
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return nil
			}
			if err != nil {
				return err
			}
			c.stream.cur = r
		}
		buf := c.g.wsBuffers.Get().(*[wsBufferBytes]byte)
		n, err := io.CopyBuffer(dst, c.stream.cur, buf[:])
		c.g.wsBuffers.Put(buf)
		c.stream.cur = nil
		c.count(&c.toInstance, n)
		if err != nil {
			return err
		}
	}
}

// copyToPlayer copies the instance's bytes to the player until the instance's end, answered with a
// close frame (normal closure) that the player has closeGrace to answer, or an error, which ends
// both sides.
func (c *wsSession) copyToPlayer() {
	err := c.pumpToPlayer()
	if err == nil {
		err = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(controlTimeout))
		c.player.SetReadDeadline(time.Now().Add(closeGrace))
	}
	if err != nil {
		c.closeBoth()
	}
	c.ended()
}

// pumpToPlayer sends what the instance has, a binary message per read, until its end (nil).
func (c *wsSession) pumpToPlayer() error {
	raw, err := c.instance.SyscallConn()
	if err != nil {
		return err
	}
	for {
		if err := waitReadable(raw); err != nil {
			return err
		}
		buf := c.g.wsBuffers.Get().(*[wsBufferBytes]byte)
		n, err := c.instance.Read(buf[:])
		if n > 0 {
			if werr := c.ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
				err = werr
			}
		}
		c.g.wsBuffers.Put(buf)
		c.count(&c.toPlayer, int64(n))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
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

// end gives back what the connection holds, last taken first.
func (c *wsSession) end() {
	g := c.g
	if c.splicing {
		g.metrics.splicing.Dec()
	}
	if c.instance != nil {
		g.untrack(c.instance)
		c.instance.Close()
	}
	if c.target.IsValid() {
		g.targets.release(c.target)
	}
	if c.slot != nil {
		g.admission.release(c.slot)
	}
	g.metrics.open.Dec()
	g.untrack(c.player)
	c.player.Close()
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
			c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseServiceRestart, "gateway restarting, reconnect"), deadline)
		}()
	}
	return len(players)
}
