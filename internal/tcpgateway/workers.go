package tcpgateway

import (
	"net"
	"time"
)

// workerIdle is how long a worker goroutine waits for its next task before it ends.
const workerIdle = time.Second

// task is a worker's task: a player's connection to serve, or a direction of a splice to run.
type task struct {
	player    *net.TCPConn
	direction *direction
}

// work runs t on a worker that waits for one, or on a new worker when none waits: never later
// than a goroutine of its own would. A worker's stack stays grown by the token's work, the dial
// and the log line from one connection to the next, where a goroutine per task would grow a new
// one each time (copied two or three times, in most of the runtime's cost per connection).
func (g *Gateway) work(t task) {
	select {
	case g.tasks <- t:
	default:
		go g.worker(t)
	}
}

// worker runs t, then the tasks handed to it, until none comes for workerIdle or the gateway
// stopped serving.
func (g *Gateway) worker(t task) {
	var idle *time.Timer
	for {
		if t.player != nil {
			g.handle(t.player)
			g.wg.Done()
		} else {
			t.direction.run()
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case t = <-g.tasks:
		case <-idle.C:
			return
		case <-g.stopped:
			idle.Stop()
			return
		}
	}
}
