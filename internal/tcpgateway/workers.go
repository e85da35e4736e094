package tcpgateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
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

// job is what a worker runs: the accept loop and the player's connection it takes, until its
// splice began (acceptor), or a direction.
type job interface{ run() }

// acceptor is the gateway's accept loop as a worker's job: it takes the next player's connection,
// gives it a slot, hands itself on to another worker, which waits for the connection after, and
// serves the one it took. So the player's prompt is written by the goroutine that Go's poller woke
// for the connection, not by a second one woken in turn (10 to 30 µs on the connection's path on
// two cores). It hands itself on once the slot is given, not before: at the cap, giving it evicts
// a pending connection, whose goroutine the eviction wakes, and Go runs the goroutine woken last
// first (its run queue's next slot). Handed on after, the next accept runs as soon as this
// worker waits for the player's token, and the evicted connections' goroutines wait behind it;
// handed on before, the eviction's wake-up took that slot and the next accept waited behind every
// goroutine already runnable: under a flood that turns the slots over (about 2,000 evictions a
// second in make bench-gateway-attack's silent class), players' handshakes waited behind the
// evictions (docs/benchmarks-gateway.md).
//
// A connection from a source that holds other connections waiting beyond the instances it reached
// (a flood's address, pendingConn.behind) is handed to a worker of its own, and this one accepts
// the next at once: a flood that opens its connections in waves (evicted together, back together)
// fills the listen queue with thousands of them at a time, and a player's connection queued
// behind them waited for the prompt, the token's read and a goroutine switch of each before its
// accept; now for their accept and slot only.
type acceptor struct {
	g       *Gateway
	ctx     context.Context
	ln      net.Listener
	backoff time.Duration
	ended   chan<- error // when accepting ends: nil once ctx ended, or why it failed
	// handle serves a connection accepted (Gateway.handle, or handleWebSocket), counted in wg
	// meanwhile: each listener drains its own connections. It returns the job that serves the
	// connection when it served none of it after the slot.
	handle func(player *net.TCPConn, admitted func()) (later job)
	wg     *sync.WaitGroup
}

func (a *acceptor) run() {
	for {
		player := a.accept()
		if player == nil {
			return
		}
		a.wg.Add(1)
		later := a.handle(player, func() { a.g.work(a) })
		if later == nil {
			a.wg.Done()
			return
		}
		a.g.work(counted{later, a.wg})
	}
}

// counted runs a job counted in wg.
type counted struct {
	job
	wg *sync.WaitGroup
}

func (c counted) run() {
	defer c.wg.Done()
	c.job.run()
}

// accept returns the next player's connection, or nil once accepting ended (said on ended).
func (a *acceptor) accept() *net.TCPConn {
	for {
		conn, err := a.ln.Accept()
		if err != nil {
			if a.ctx.Err() != nil {
				a.ended <- nil
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				// Out of file descriptors, or a connection reset before accept: wait, as net/http does.
				a.backoff = min(max(2*a.backoff, 5*time.Millisecond), time.Second)
				a.g.logger.Warn("accept failed; retrying", slog.String("error", err.Error()), slog.Duration("retry_in", a.backoff))
				time.Sleep(a.backoff)
				continue
			}
			a.ended <- fmt.Errorf("accept: %w", err)
			return nil
		}
		a.backoff = 0
		if tcp, ok := conn.(*net.TCPConn); ok {
			return tcp
		}
		conn.Close()
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
