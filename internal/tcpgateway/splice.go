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

// spliced is how a spliced connection ended.
type spliced struct {
	reason               string
	toInstance, toPlayer int64
}

// splice copies bytes both ways until both sides closed (each half-close passed on), either side
// reset, the connection was idle for the idle timeout, or the drain ended.
//
// Each direction waits until its source is readable without holding anything, then moves what
// the source has: with splice(2) through a pipe lent by the gateway's bounded pool (no copy in
// user space), or through a pooled buffer when every pipe is lent. So an idle connection costs
// two goroutines, its two sockets and no pipe, and the pipes in use never pass the pool's bound.
func (g *Gateway) splice(player, instance *net.TCPConn) spliced {
	var lastActive atomic.Int64
	lastActive.Store(time.Now().UnixNano())
	var idle atomic.Bool
	tick := g.cfg.IdleTimeout / idleChecks
	var watchdog *time.Timer
	var mu sync.Mutex // guards watchdog: set before it first fires, never reset once stopped
	stopped := false
	mu.Lock()
	watchdog = time.AfterFunc(tick, func() {
		if time.Now().UnixNano()-lastActive.Load() >= int64(g.cfg.IdleTimeout) {
			idle.Store(true)
			player.Close()
			instance.Close()
			return
		}
		mu.Lock()
		if !stopped {
			watchdog.Reset(tick)
		}
		mu.Unlock()
	})
	mu.Unlock()
	defer func() {
		mu.Lock()
		stopped = true
		watchdog.Stop()
		mu.Unlock()
	}()

	var toPlayer int64
	var toPlayerErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		toPlayer, toPlayerErr = g.copyHalf(player, instance, &lastActive)
		if toPlayerErr != nil {
			// A reset (or the watchdog) on one side ends both at once: the other copy may be
			// waiting for a player who has nothing more to say.
			player.Close()
			instance.Close()
		}
	}()
	toInstance, toInstanceErr := g.copyHalf(instance, player, &lastActive)
	if toInstanceErr != nil {
		instance.Close()
		player.Close()
	}
	<-done
	g.metrics.bytes.WithLabelValues(directionToInstance).Add(float64(toInstance))
	g.metrics.bytes.WithLabelValues(directionToPlayer).Add(float64(toPlayer))
	reason := closedByPeers
	switch {
	case idle.Load():
		reason = closedIdle
	case g.drainEnded.Load():
		reason = closedShutdown
	}
	return spliced{reason: reason, toInstance: toInstance, toPlayer: toPlayer}
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
		if err := waitReadable(rawSrc); err != nil {
			return total, err
		}
		var n int64
		var end bool
		if p := g.pipes.get(); p != nil {
			n, end, err = g.pipes.move(rawDst, rawSrc, p)
		} else {
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
		if err != nil {
			return total, false, err
		}
	}
}

// errNoDescriptor says whether err is the system's refusal of a new descriptor.
func errNoDescriptor(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS)
}
