package tcpgateway

import (
	"net"
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

// accepted is a player's connection, from accept to its splice.
type accepted struct {
	g      *Gateway
	player *net.TCPConn
}

func (a accepted) run() {
	defer a.g.wg.Done()
	a.g.handle(a.player)
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
