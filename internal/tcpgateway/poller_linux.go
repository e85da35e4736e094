//go:build linux

package tcpgateway

import (
	"errors"
	"os"
	"sync"
	"syscall"
)

// poller holds the parked directions of spliced connections: an epoll instance of the gateway's
// own, in which each direction's source is registered once, edge-triggered, when its splice
// begins, and a goroutine that runs the directions whose source became readable. The epoll
// descriptor itself waits in Go's poller, so the goroutine holds no thread while nothing is
// readable.
type poller struct {
	file *os.File
	raw  syscall.RawConn
	fd   int

	mu   sync.Mutex
	dirs map[uint64]*direction // armed at least once and not ended, by id
	next uint64
}

// newPoller starts a poller, closed by close.
func newPoller() (*poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	file := os.NewFile(uintptr(fd), "epoll")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, err
	}
	p := &poller{file: file, raw: raw, fd: fd, dirs: map[uint64]*direction{}}
	go p.serve()
	return p, nil
}

// serve runs the directions the epoll instance reports, until the poller is closed.
func (p *poller) serve() {
	events := make([]syscall.EpollEvent, 128)
	ready := make([]*direction, 0, len(events))
	for {
		var n int
		var waitErr error
		err := p.raw.Read(func(fd uintptr) bool {
			for {
				n, waitErr = rawEpollWaitNow(int(fd), events)
				if waitErr != syscall.EINTR {
					return n > 0 || waitErr != nil
				}
			}
		})
		if err != nil || waitErr != nil {
			return
		}
		p.mu.Lock()
		for i := range events[:n] {
			if d := p.dirs[uint64(uint32(events[i].Fd))|uint64(uint32(events[i].Pad))<<32]; d != nil {
				ready = append(ready, d)
			}
		}
		p.mu.Unlock()
		for i, d := range ready {
			switch {
			case !d.claim():
			case d.ws != nil:
				// A WebSocket's bytes are framed: no splice(2) inline, a worker reads them.
				d.schedule()
			default:
				p.runInline(d)
			}
			ready[i] = nil
		}
		ready = ready[:0]
	}
}

// runInline moves, on the poller's goroutine, what d's source has when that takes no wait: a
// message the destination takes at once, after which the source is dry, costs no worker. Anything
// else (more bytes, a full destination, the source's end or an error, no pipe free) goes on in a
// worker from where this stopped: a worker may wait, the poller may not. The source's end is passed
// on here too when the other direction still runs: the last to end, which logs, is a worker.
func (p *poller) runInline(d *direction) {
	pp := d.s.g.pipes
	pipe := pp.get()
	if pipe == nil {
		d.s.g.work(d)
		return
	}
	for message := false; ; message = true {
		n, err := spliceIn(d.rawSrc, pipe)
		switch {
		case err == syscall.EAGAIN:
			pp.put(pipe)
			if parked, _ := d.tryPark(); parked {
				return
			}
			// Notified meanwhile, or not armed (the worker waits then).
		case err != nil:
			pp.put(pipe)
			d.carried = carried{err: err}
		case n == 0:
			pp.put(pipe)
			if d.endFirst() {
				return
			}
			d.carried = carried{end: true}
		case message:
			d.carried = carried{pipe: pipe, n: n}
		default:
			left, err := pumpNow(d.rawDst, pipe, n)
			d.count(int64(n - left))
			if err != nil {
				pp.discard(pipe)
				d.carried = carried{err: err}
			} else if left > 0 {
				d.carried = carried{pipe: pipe, n: left}
			} else {
				continue
			}
		}
		d.s.g.work(d)
		return
	}
}

// errNoPoller: the gateway has no poller; its directions wait as goroutines.
var errNoPoller = errors.New("no poller")

// arm asks for d to be run once its source is readable (at once if it is now). Only the goroutine
// running d calls it.
//
// The source is registered once, edge-triggered: epoll reports it each time bytes (or its end, or
// an error) arrive, whatever d's state, and arming it again costs no system call. An edge that
// comes while d runs finds it running and tells it to look again before it parks (claim), so no
// edge is lost between the source running dry and d parking. (Armed once per run with
// EPOLLONESHOT, each message cost an epoll_ctl.)
func (p *poller) arm(d *direction) error {
	if p == nil {
		return errNoPoller
	}
	if d.registered {
		return nil
	}
	if d.id == 0 {
		p.mu.Lock()
		p.next++
		d.id = p.next
		p.dirs[d.id] = d
		p.mu.Unlock()
	}
	event := syscall.EpollEvent{Events: syscall.EPOLLIN | epollET, Fd: int32(uint32(d.id)), Pad: int32(uint32(d.id >> 32))}
	var ctlErr error
	if err := d.rawSrc.Control(func(fd uintptr) {
		ctlErr = rawEpollCtl(p.fd, syscall.EPOLL_CTL_ADD, int(fd), &event)
	}); err != nil {
		return err
	}
	if ctlErr != nil {
		return os.NewSyscallError("epoll_ctl", ctlErr)
	}
	d.registered = true
	return nil
}

// epollET is EPOLLET as the uint32 of an event's mask.
const epollET = 1 << 31

// forget drops an ended direction. Its source leaves the epoll instance when it is closed.
func (p *poller) forget(d *direction) {
	if p == nil || d.id == 0 {
		return
	}
	p.mu.Lock()
	delete(p.dirs, d.id)
	p.mu.Unlock()
}

// notifyAll runs every parked direction (once their connections are closed, for them to end).
func (p *poller) notifyAll() {
	if p == nil {
		return
	}
	p.mu.Lock()
	dirs := make([]*direction, 0, len(p.dirs))
	for _, d := range p.dirs {
		dirs = append(dirs, d)
	}
	p.mu.Unlock()
	for _, d := range dirs {
		d.notify()
	}
}

// close stops the poller; called once no direction runs.
func (p *poller) close() {
	if p != nil {
		p.file.Close()
	}
}
