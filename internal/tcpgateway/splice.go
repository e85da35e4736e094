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

// splice copies bytes both ways, each in a goroutine of its own, until both sides closed (each
// half-close passed on), either side reset, the connection was idle for the idle timeout, or the
// drain ended; then the last of the two calls done with how it ended.
//
// Each direction waits until its source is readable without holding anything, then moves what
// the source has: with splice(2) through a pipe lent by the gateway's bounded pool (no copy in
// user space), or through a pooled buffer when every pipe is lent. So an idle connection costs
// two goroutines, its two sockets and no pipe, and the pipes in use never pass the pool's bound.
func (g *Gateway) splice(player, instance *net.TCPConn, done func(spliced)) {
	s := &splicing{g: g, player: player, instance: instance, done: done}
	s.lastActive.Store(time.Now().UnixNano())
	s.left.Store(2)
	tick := g.cfg.IdleTimeout / idleChecks
	s.mu.Lock()
	s.watchdog = time.AfterFunc(tick, func() {
		if time.Now().UnixNano()-s.lastActive.Load() >= int64(g.cfg.IdleTimeout) {
			s.idle.Store(true)
			player.Close()
			instance.Close()
			return
		}
		s.mu.Lock()
		if !s.stopped {
			s.watchdog.Reset(tick)
		}
		s.mu.Unlock()
	})
	s.mu.Unlock()
	go s.copy(player, instance, &s.toPlayer)
	go s.copy(instance, player, &s.toInstance)
}

// splicing is one connection's two copies.
type splicing struct {
	g                    *Gateway
	player, instance     *net.TCPConn
	done                 func(spliced)
	lastActive           atomic.Int64
	idle                 atomic.Bool
	left                 atomic.Int32 // copies still running
	toPlayer, toInstance int64        // each written by its copy only, read by the last

	mu       sync.Mutex // guards watchdog: set before it first fires, never reset once stopped
	watchdog *time.Timer
	stopped  bool
}

// copy runs one direction; the last copy to end stops the watchdog and reports.
func (s *splicing) copy(dst, src *net.TCPConn, total *int64) {
	n, err := s.g.copyHalf(dst, src, &s.lastActive)
	*total = n
	if err != nil {
		// A reset (or the watchdog) on one side ends both at once: the other copy may be
		// waiting for a player who has nothing more to say.
		s.player.Close()
		s.instance.Close()
	}
	if s.left.Add(-1) > 0 {
		return
	}
	s.mu.Lock()
	s.stopped = true
	s.watchdog.Stop()
	s.mu.Unlock()
	s.g.metrics.bytes.WithLabelValues(directionToInstance).Add(float64(s.toInstance))
	s.g.metrics.bytes.WithLabelValues(directionToPlayer).Add(float64(s.toPlayer))
	reason := closedByPeers
	switch {
	case s.idle.Load():
		reason = closedIdle
	case s.g.drainEnded.Load():
		reason = closedShutdown
	}
	s.done(spliced{reason: reason, toInstance: s.toInstance, toPlayer: s.toPlayer})
}

// copyHalf copies src to dst until src's end, which it passes on as dst's half-close, or an error.
func (g *Gateway) copyHalf(dst, src *net.TCPConn, lastActive *atomic.Int64) (int64, error) {
	rawSrc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	rawDst, err := dst.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		n, end, noPipe, err := g.pipes.move(rawDst, rawSrc)
		if noPipe {
			if err := waitReadable(rawSrc); err != nil {
				return total, err
			}
			n, end, err = copyBuffered(dst, rawSrc)
		}
		total += n
		if n > 0 {
			lastActive.Store(time.Now().UnixNano())
		}
		if err != nil {
			return total, err
		}
		if end {
			return total, dst.CloseWrite()
		}
	}
}

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
// src ended, or an error.
func copyBuffered(dst *net.TCPConn, src syscall.RawConn) (total int64, end bool, err error) {
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
			return total, false, err
		}
		switch {
		case readErr == syscall.EAGAIN:
			return total, false, nil
		case readErr != nil:
			return total, false, os.NewSyscallError("read", readErr)
		case n == 0:
			return total, true, nil
		}
		written, err := dst.Write(buf[:n])
		total += int64(written)
		if err != nil || total >= roundBytes {
			return total, false, err
		}
	}
}

// errNoDescriptor says whether err is the system's refusal of a new descriptor.
func errNoDescriptor(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS)
}
