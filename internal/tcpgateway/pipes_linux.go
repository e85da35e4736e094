//go:build linux

package tcpgateway

import (
	"os"
	"sync"
	"syscall"
)

// pipeBytes is the capacity the gateway asks for its pipes, and so the most one splice(2) call
// moves: four times the default, a quarter of the syscalls per byte of a bulk transfer. The pool's
// 64 pipes then hold at most 16 MiB, within the 64 MiB of pipe buffers an unprivileged user may
// have (fs.pipe-user-pages-soft); a pipe the kernel refuses to grow keeps its default.
const pipeBytes = 256 << 10

// maxSpliceBytes is the most one splice(2) call asks to move; the pipe's capacity bounds it.
const maxSpliceBytes = pipeBytes

// pipePool lends pipes for splice(2), at most max at once. A pipe given back empty is kept
// for the next copy; one left holding bytes (its destination failed) is closed.
type pipePool struct {
	free chan *pipe
	mu   sync.Mutex
	max  int
	made int
}

type pipe struct{ r, w int }

func newPipePool(max int) *pipePool {
	return &pipePool{free: make(chan *pipe, max), max: max}
}

// setMax lowers the bound (tests: 0 sends every copy through a buffer).
func (pp *pipePool) setMax(max int) {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.max = max
}

// get lends a pipe, or nil when max are lent (or the system has no descriptor left).
func (pp *pipePool) get() *pipe {
	select {
	case p := <-pp.free:
		return p
	default:
	}
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.made >= pp.max {
		return nil
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil
	}
	syscall.Syscall(syscall.SYS_FCNTL, uintptr(fds[1]), fSetPipeSize, pipeBytes)
	pp.made++
	return &pipe{r: fds[0], w: fds[1]}
}

// put gives back an empty pipe.
func (pp *pipePool) put(p *pipe) {
	pp.free <- p
}

// idle is the number of pipes given back and kept.
func (pp *pipePool) idle() int {
	return len(pp.free)
}

// lent is the number of pipes made and not given back.
func (pp *pipePool) lent() int {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return pp.made - len(pp.free)
}

// discard closes a pipe that may hold bytes.
func (pp *pipePool) discard(p *pipe) {
	syscall.Close(p.r)
	syscall.Close(p.w)
	pp.mu.Lock()
	pp.made--
	pp.mu.Unlock()
}

// close closes the pipes given back; called once no copy runs.
func (pp *pipePool) close() {
	for {
		select {
		case p := <-pp.free:
			pp.discard(p)
		default:
			return
		}
	}
}

// move splices what src has now to dst through a pipe of the pool, without waiting for more: the
// pipe is lent for the call, and given back when the source runs dry or ends. It returns the bytes moved, whether src ended, whether it ran dry (nothing more for now), or an
// error; noPipe when the pool had none to lend (nothing moved: the caller copies through a
// buffer). A message costs a splice in, a splice out and the splice that finds nothing more, as a
// read, a write and a read would.
func (pp *pipePool) move(dst, src syscall.RawConn) (total int64, end, dry, noPipe bool, err error) {
	p := pp.get()
	if p == nil {
		return 0, false, false, true, nil
	}
	for {
		n, err := spliceIn(src, p)
		switch {
		case err == syscall.EAGAIN:
			// Nothing more for now: the pipe goes back while the source is quiet.
			pp.put(p)
			return total, false, true, false, nil
		case err != nil:
			pp.put(p)
			return total, false, false, false, err
		case n == 0:
			pp.put(p)
			return total, true, false, false, nil
		}
		if err := pump(dst, p, n); err != nil {
			pp.discard(p)
			return total, false, false, false, err
		}
		total += int64(n)
		if total >= roundBytes {
			pp.put(p)
			return total, false, false, false, nil
		}
	}
}

// spliceIn splices what src has now into p, without waiting: the bytes, 0 at src's end, or an
// error (syscall.EAGAIN: nothing now).
func spliceIn(src syscall.RawConn, p *pipe) (n int, err error) {
	var spliceErr error
	if err := src.Read(func(fd uintptr) bool {
		for {
			n, spliceErr = spliceBytes(p.w, int(fd))
			if spliceErr != syscall.EINTR {
				return true
			}
		}
	}); err != nil {
		return 0, err
	}
	if spliceErr != nil && spliceErr != syscall.EAGAIN {
		return 0, os.NewSyscallError("splice", spliceErr)
	}
	return n, spliceErr
}

// pumpNow splices the n bytes in p to dst as far as dst takes them without waiting: the bytes
// left in p.
func pumpNow(dst syscall.RawConn, p *pipe, n int) (left int, err error) {
	var spliceErr error
	if err := dst.Write(func(fd uintptr) bool {
		_, spliceErr = spliceOut(int(fd), p, &n)
		return true
	}); err != nil {
		return n, err
	}
	return n, spliceErr
}

// pumpCarried pumps the n bytes a pipe holds to dst, and gives the pipe back.
func (pp *pipePool) pumpCarried(dst syscall.RawConn, p *pipe, n int) error {
	if err := pump(dst, p, n); err != nil {
		pp.discard(p)
		return err
	}
	pp.put(p)
	return nil
}

// pump splices the n bytes in p to dst, waiting while dst's buffer is full.
func pump(dst syscall.RawConn, p *pipe, n int) error {
	var spliceErr error
	if err := dst.Write(func(fd uintptr) bool {
		var done bool
		done, spliceErr = spliceOut(int(fd), p, &n)
		return done || spliceErr != nil
	}); err != nil {
		return err
	}
	return spliceErr
}

// spliceOut splices the *n bytes in p to the socket fd: done once none is left, not done when the
// socket takes no more for now, or an error.
func spliceOut(fd int, p *pipe, n *int) (done bool, err error) {
	for *n > 0 {
		written, err := spliceBytes(fd, p.r)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false, nil
		case err != nil:
			return false, os.NewSyscallError("splice", err)
		}
		*n -= written
	}
	return true, nil
}

// spliceBytes moves up to maxSpliceBytes from in to out without blocking on the pipe.
func spliceBytes(out, in int) (int, error) {
	return rawSplice(out, in, maxSpliceBytes, unixSpliceFNonblock|unixSpliceFMove)
}

// fSetPipeSize is fcntl(2)'s F_SETPIPE_SZ.
const fSetPipeSize = 1031

// The flags of splice(2) (linux/splice.h).
const (
	unixSpliceFMove     = 0x1
	unixSpliceFNonblock = 0x2
)
