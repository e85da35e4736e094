package tcpgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"
)

// workerIdle is how long a worker goroutine waits for its next job before it ends.
const workerIdle = time.Second

// work runs job t on a worker that waits for one, or on a new worker when none waits: never later
// than a goroutine of its own would. A worker's stack stays grown by the jobs it ran (a player's
// token, the dial, the moves, the log line of a connection's end) from one job to the next,
// where a goroutine per connection grew a new stack each time: its copies were about 5% of the
// gateway's CPU per connection. A worker serving a player who is still to send a token waits
// on that stack for the token timeout at most; the garbage collector shrinks the stack of a
// goroutine that uses a quarter of it.
func (g *Gateway) work(t job) {
	select {
	case g.workerJobs <- t:
	default:
		go g.worker(t)
	}
}

// job is what a worker runs: a player's connection until its splice began, or a direction.
type job interface{ run() }

// acceptor accepts the next player's connection, hands accepting on to another worker (on which
// it waits for the next connection while this one is served), and serves the one it took: the
// player's prompt is written by the goroutine the kernel woke for the connection, not by another
// one woken for it (a hand-off of 10 to 30 µs on the connection's path on two cores).
type acceptor struct {
	g       *Gateway
	ctx     context.Context
	ln      net.Listener
	backoff time.Duration
	ended   chan<- error // when accepting ends: nil once ctx ended, or why it failed
}

func (a *acceptor) run() {
	g := a.g
	for {
		conn, err := a.ln.Accept()
		if err != nil {
			if a.ctx.Err() != nil {
				a.ended <- nil
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				// Out of file descriptors, or a connection reset before accept: wait, as net/http does.
				a.backoff = min(max(2*a.backoff, 5*time.Millisecond), time.Second)
				g.logger.Warn("accept failed; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", a.backoff))
				time.Sleep(a.backoff)
				continue
			}
			a.ended <- fmt.Errorf("accept: %w", err)
			return
		}
		a.backoff = 0
		tcp, ok := conn.(*net.TCPConn)
		if !ok {
			conn.Close()
			continue
		}
		g.wg.Add(1)
		g.work(a)
		defer g.wg.Done()
		g.handle(tcp)
		return
	}
}

// worker runs t, then the jobs handed to it, until none comes for workerIdle or the gateway
// stopped serving.
func (g *Gateway) worker(t job) {
	var idle *time.Timer
	for {
		t.run()
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case t = <-g.workerJobs:
		case <-idle.C:
			return
		case <-g.stopped:
			idle.Stop()
			return
		}
	}
}
