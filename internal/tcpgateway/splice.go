package tcpgateway

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// idleChecks is how many times per idle timeout a spliced connection looks at its activity: it
// closes between IdleTimeout and (1 + 1/idleChecks) times it after its last byte.
const idleChecks = 8

// roundBytes is the most a copy moves before it counts them as activity: a transfer whose source
// never runs dry (a consumer slower than the sender) is still active for the idle watchdog.
const roundBytes = 4 << 20

// spliced is how a spliced connection ended.
type spliced struct {
	reason               string
	toInstance, toPlayer int64
}

// splice copies bytes both ways until both sides closed (each half-close passed on), either side
// reset, the connection was idle for the idle timeout, or the drain ended; then the last of the
// two directions to end tells the session how it ended.
//
// A direction runs in a goroutine only while its source has bytes: it moves what the source has
// (with splice(2) through a pipe lent by the gateway's bounded pool, no copy in user space, or
// through a pooled buffer when every pipe is lent), and once the source runs dry it is armed in
// the gateway's poller and its goroutine ends; the poller starts one again when the source is
// readable. So an idle connection costs no goroutine and no pipe, only its two sockets and a few
// hundred bytes, and the pipes in use never pass the pool's bound.
func (g *Gateway) splice(c *session) {
	s := &c.spliced
	*s = splicing{g: g, player: c.player, instance: c.instance, conn: c, usage: usage{target: c.target}}
	player, instance := c.player, c.instance
	s.started = time.Now().UnixNano()
	s.left.Store(2)
	tick := g.cfg.IdleTimeout / idleChecks
	s.mu.Lock()
	s.watchdog = time.AfterFunc(tick, func() {
		if time.Now().UnixNano()-max(s.started, s.lastByte.Load()) >= int64(g.cfg.IdleTimeout) {
			s.idle.Store(true)
			s.closeBoth()
			return
		}
		s.mu.Lock()
		if !s.stopped {
			s.watchdog.Reset(tick)
		}
		s.mu.Unlock()
	})
	s.mu.Unlock()
	g.activity.started(&s.usage)
	s.toInstance.init(s, player, instance)
	s.toPlayer.init(s, instance, player)
	s.toInstance.start()
	s.toPlayer.start()
}

// splicing is one connection's two directions.
type splicing struct {
	g                    *Gateway
	player, instance     *net.TCPConn
	conn                 *session
	usage                      // its instance and last byte: the instance's activity; with started, the idle watchdog's
	started              int64 // Unix ns of the splice's start, set before its watchdog and directions
	idle                 atomic.Bool
	left                 atomic.Int32 // directions still running
	toPlayer, toInstance direction

	mu       sync.Mutex // guards watchdog: set before it first fires, never reset once stopped
	watchdog *time.Timer
	stopped  bool
}

// closeBoth closes both sides and wakes both directions, so that each ends at once: one may be
// parked waiting for a side that has nothing more to say.
func (s *splicing) closeBoth() {
	s.player.Close()
	s.instance.Close()
	s.toInstance.notify()
	s.toPlayer.notify()
}

// ended is called by each direction as it ends; the last stops the watchdog and reports.
func (s *splicing) ended() {
	if s.left.Add(-1) > 0 {
		return
	}
	s.mu.Lock()
	s.stopped = true
	s.watchdog.Stop()
	s.mu.Unlock()
	s.g.activity.finished(&s.usage)
	s.g.metrics.bytesToInstance.Add(float64(s.toInstance.moved))
	s.g.metrics.bytesToPlayer.Add(float64(s.toPlayer.moved))
	reason := closedByPeers
	switch {
	case s.idle.Load():
		reason = closedIdle
	case s.g.drainEnded.Load():
		reason = closedShutdown
	}
	s.conn.closed(spliced{reason: reason, toInstance: s.toInstance.moved, toPlayer: s.toPlayer.moved})
}

// The states of a direction. Exactly one goroutine runs a direction in the running and notified
// states, none in the others.
const (
	directionRunning  int32 = iota // a goroutine moves its bytes
	directionNotified              // running, and told to look again before it parks
	directionParked                // armed in the poller, no goroutine
	directionEnded
)

// direction copies one side's bytes to the other.
type direction struct {
	s              *splicing
	dst            *net.TCPConn
	rawSrc, rawDst syscall.RawConn
	moved          int64 // written by the goroutine running it, read by the last to end
	state          atomic.Int32
	id             uint64       // the poller's key, 0 until first armed
	registered     bool         // its source is in the poller, for good (touched by the goroutine running it)
	carried        carried      // what the poller's move left (touched by the goroutine running it)
	ws             *wsDirection // a WebSocket's direction, which runs its own job; nil for a TCP splice's
}

func (d *direction) init(s *splicing, src, dst *net.TCPConn) {
	d.s, d.dst = s, dst
	var err error
	if d.rawSrc, err = src.SyscallConn(); err == nil {
		d.rawDst, err = dst.SyscallConn()
	}
	if err != nil {
		// Only a closed connection has no raw connection: a raw connection that reports it.
		d.rawSrc, d.rawDst = closedRawConn{err}, closedRawConn{err}
	}
}

// start parks the direction, or runs it in a goroutine when it cannot be parked.
func (d *direction) start() {
	if err := d.s.g.poller.arm(d); err == nil && d.state.CompareAndSwap(directionRunning, directionParked) {
		return
	}
	d.state.Store(directionRunning)
	d.s.g.work(d)
}

// run moves the source's bytes until it runs dry, then parks; or until the source's end (passed
// on as the destination's half-close) or an error (which closes both sides), then ends. It starts
// where the poller's move stopped (carried).
func (d *direction) run() {
	end, err := d.resume()
	for err == nil && !end {
		var n int64
		var dry bool
		n, end, dry, err = d.s.g.moveNow(d.dst, d.rawDst, d.rawSrc)
		d.count(n)
		if err == nil && dry {
			var parked bool
			if parked, err = d.park(); parked {
				return
			}
		}
	}
	if err == nil && d.s.left.Load() > 1 {
		// The other direction goes on: it may still have bytes for this one's source. The last to
		// end passes its end on with the close that follows at once (a FIN: the other source,
		// read to its end, holds no byte unread), one shutdown(2) fewer per connection.
		err = closeWrite(d.dst, d.rawDst)
	}
	if err != nil {
		// A reset (or the watchdog) on one side ends both at once: the other direction may be
		// waiting for a player who has nothing more to say.
		d.s.closeBoth()
	}
	d.end()
}

// carried is what the poller's move of a direction left to the worker that goes on with it.
type carried struct {
	pipe *pipe // holding n bytes for the destination
	n    int
	end  bool  // the source ended
	err  error // the source's error (read once: the kernel forgets it)
}

// resume takes over what the poller's move left: it pumps the bytes left in a pipe, and returns
// the source's end or error.
func (d *direction) resume() (end bool, err error) {
	c := d.carried
	d.carried = carried{}
	if c.pipe != nil {
		if err := d.s.g.pipes.pumpCarried(d.rawDst, c.pipe, c.n); err != nil {
			return false, err
		}
		d.count(int64(c.n))
	}
	return c.end, c.err
}

// count counts n bytes moved, and the connection active when there are any.
func (d *direction) count(n int64) {
	if n > 0 {
		d.moved += n
		d.s.lastByte.Store(time.Now().UnixNano())
	}
}

// park arms the direction in the poller and ends its goroutine's part (parked true), unless it
// was notified meanwhile (false: move again). Without the poller (another system, or out of
// epoll watches) it waits here until the source is readable.
func (d *direction) park() (parked bool, err error) {
	parked, armErr := d.tryPark()
	if armErr != nil {
		return false, waitReadable(d.rawSrc)
	}
	return parked, nil
}

// tryPark arms the direction in the poller: parked, unless it was notified meanwhile; an error
// when it could not be armed.
func (d *direction) tryPark() (parked bool, err error) {
	if err := d.s.g.poller.arm(d); err != nil {
		return false, err
	}
	if d.state.CompareAndSwap(directionRunning, directionParked) {
		return true, nil
	}
	d.state.Store(directionRunning)
	return false, nil
}

// notify runs a parked direction in a worker, or tells a running one to look again before it
// parks: its source is readable, or closed.
func (d *direction) notify() {
	if d.claim() {
		d.schedule()
	}
}

// schedule runs a claimed direction in a worker: a WebSocket's runs its own job, which frames the
// bytes it moves.
func (d *direction) schedule() {
	if d.ws != nil {
		d.ws.c.g.work(d.ws)
		return
	}
	d.s.g.work(d)
}

// claim makes a parked direction the caller's to run (true), or tells a running one to look again
// before it parks (false).
func (d *direction) claim() bool {
	for {
		switch d.state.Load() {
		case directionParked:
			if d.state.CompareAndSwap(directionParked, directionRunning) {
				return true
			}
		case directionRunning:
			if d.state.CompareAndSwap(directionRunning, directionNotified) {
				return false
			}
		default:
			return false
		}
	}
}

// end ends the direction for good.
func (d *direction) end() {
	d.state.Store(directionEnded)
	d.s.g.poller.forget(d)
	d.s.ended()
}

// endFirst passes the source's end on (the destination's half-close) and ends the direction when
// the other one still runs, so that this one reports nothing: false, having done nothing, when the
// other one ended, or the half-close failed.
func (d *direction) endFirst() bool {
	if d.s.left.Load() < 2 || closeWrite(d.dst, d.rawDst) != nil {
		return false
	}
	if !d.s.left.CompareAndSwap(2, 1) {
		// The other one ended meanwhile: the worker reports (its end passed on already).
		return false
	}
	d.state.Store(directionEnded)
	d.s.g.poller.forget(d)
	return true
}

// moveNow moves what src has now to dst, without waiting for more: the bytes moved, whether src
// ended, whether it ran dry (nothing more for now), or an error.
func (g *Gateway) moveNow(dst *net.TCPConn, rawDst, rawSrc syscall.RawConn) (n int64, end, dry bool, err error) {
	n, end, dry, noPipe, err := g.pipes.move(rawDst, rawSrc)
	if noPipe {
		return copyBuffered(dst, rawSrc)
	}
	return n, end, dry, err
}

// closedRawConn is the raw connection of a connection closed before its splice began.
type closedRawConn struct{ err error }

func (c closedRawConn) Control(func(fd uintptr)) error    { return c.err }
func (c closedRawConn) Read(func(fd uintptr) bool) error  { return c.err }
func (c closedRawConn) Write(func(fd uintptr) bool) error { return c.err }

// waitReadable returns once the socket has bytes, its end or an error to read, without reading:
// MSG_PEEK asks the kernel, and only an EAGAIN waits (for the poller's next edge). An error is
// returned, not left to the copy: the peek consumed it (a reset would read as an end).
func waitReadable(raw syscall.RawConn) error {
	var b [1]byte
	var peekErr error
	err := raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN || err == syscall.EINTR {
			return false
		}
		peekErr = err
		return true
	})
	if err != nil {
		return err
	}
	if peekErr != nil {
		return os.NewSyscallError("recvfrom", peekErr)
	}
	return nil
}

// splicePipes bounds the pipes the gateway lends to copies at once (two descriptors each): past
// it a copy goes through a buffer. A copy holds a pipe only while its source has bytes, so on two
// cores a few are busy at a time; the bound is for the descriptor budget (Descriptors).
const splicePipes = 64

// copyBuffers are the buffers of copies that found no pipe free.
var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// copyBuffered moves what src has now to dst through a pooled buffer: the bytes moved, whether
// src ended, whether it ran dry, or an error.
func copyBuffered(dst *net.TCPConn, src syscall.RawConn) (total int64, end, dry bool, err error) {
	buf := copyBuffers.Get().(*[32 << 10]byte)
	defer copyBuffers.Put(buf)
	for {
		var n int
		var readErr error
		if err := src.Read(func(fd uintptr) bool {
			for {
				n, readErr = syscall.Read(int(fd), buf[:])
				if readErr != syscall.EINTR {
					return true
				}
			}
		}); err != nil {
			return total, false, false, err
		}
		switch {
		case readErr == syscall.EAGAIN:
			return total, false, true, nil
		case readErr != nil:
			return total, false, false, os.NewSyscallError("read", readErr)
		case n == 0:
			return total, true, false, nil
		}
		written, err := dst.Write(buf[:n])
		total += int64(written)
		if err != nil || total >= roundBytes {
			return total, false, false, err
		}
	}
}

// errNoDescriptor says whether err is the system's refusal of a new descriptor.
func errNoDescriptor(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS)
}
