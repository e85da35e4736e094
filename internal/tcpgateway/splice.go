package tcpgateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// idleChecks is how many times per idle timeout a spliced connection looks at its activity: it
// closes between IdleTimeout and (1 + 2/idleChecks) times it after its last byte.
const idleChecks = 8

// copyRound is the longest a copy holds its pipe without moving a byte (see splice).
const copyRound = 100 * time.Millisecond

// spliced is how a spliced connection ended.
type spliced struct {
	reason               string
	toInstance, toPlayer int64
}

// splice copies bytes both ways until both sides closed (each half-close passed on), either side
// reset, the connection was idle for the idle timeout, or the drain ended. The copies are
// io.Copy between *net.TCPConn: splice(2) through a pipe, no copy in user space.
//
// An idle connection costs two goroutines and no pipe: each direction waits until its source is
// readable before it copies (splice holds its pipe, two file descriptors, for the whole call,
// waiting included), and each copy ends at a read deadline at most copyRound later, so that a
// connection gone quiet gives its pipe back within copyRound, and the bytes it moved count as
// activity.
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
		toPlayer, toPlayerErr = g.copyHalf(player, instance, tick, &lastActive)
		if toPlayerErr != nil {
			// A reset (or the watchdog) on one side ends both at once: the other copy may be
			// waiting for a player who has nothing more to say.
			player.Close()
			instance.Close()
		}
	}()
	toInstance, toInstanceErr := g.copyHalf(instance, player, tick, &lastActive)
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
func (g *Gateway) copyHalf(dst, src *net.TCPConn, tick time.Duration, lastActive *atomic.Int64) (int64, error) {
	raw, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		src.SetReadDeadline(time.Now().Add(tick))
		if err := waitReadable(raw); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return total, err
		}
		src.SetReadDeadline(time.Now().Add(min(tick, copyRound)))
		n, err := io.Copy(dst, src)
		total += n
		if n > 0 {
			lastActive.Store(time.Now().UnixNano())
		}
		if err == nil {
			return total, dst.CloseWrite()
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return total, err
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
