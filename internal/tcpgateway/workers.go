package tcpgateway

import "time"

// workerIdle is how long a worker goroutine waits for its next direction before it ends.
const workerIdle = time.Second

// work runs d on a worker that waits for one, or on a new worker when none waits: never later
// than a goroutine of its own would. A worker's stack stays grown by the moves and the log line
// of a connection's end from one direction to the next, where a goroutine per run would grow a
// new one each time. (A player's connection is served by a goroutine of its own until its splice
// begins: it may wait for its token for the whole token timeout, on the small stack a new
// goroutine has, not on a worker's grown one.)
func (g *Gateway) work(d *direction) {
	select {
	case g.directions <- d:
	default:
		go g.worker(d)
	}
}

// worker runs d, then the directions handed to it, until none comes for workerIdle or the
// gateway stopped serving.
func (g *Gateway) worker(d *direction) {
	var idle *time.Timer
	for {
		d.run()
		if idle == nil {
			idle = time.NewTimer(workerIdle)
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case d = <-g.directions:
		case <-idle.C:
			return
		case <-g.stopped:
			idle.Stop()
			return
		}
	}
}
