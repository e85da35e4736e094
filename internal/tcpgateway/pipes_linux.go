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
// pipe is taken when the first splice finds bytes, and given back when the source runs dry. It
// returns the bytes moved, whether src ended, whether it ran dry (nothing more for now), or an
// error; noPipe when the pool had none to lend (nothing moved: the caller copies through a
// buffer). A message costs a splice in, a splice out and the splice that finds nothing more, as a
// read, a write and a read would.
func (pp *pipePool) move(dst, src syscall.RawConn) (total int64, end, dry, noPipe bool, err error) {
	var p *pipe
	defer func() {
		if p != nil {
			pp.put(p)
		}
	}()
	for {
		var n int
		var spliceErr error
		readErr := src.Read(func(fd uintptr) bool {
			if p == nil {
				if p = pp.get(); p == nil {
					return true
				}
			}
			for {
				n, spliceErr = spliceBytes(p.w, int(fd))
				if spliceErr != syscall.EINTR {
					return true
				}
			}
		})
		switch {
		case readErr != nil:
			return total, false, false, false, readErr
		case p == nil:
			return total, false, false, true, nil
		case spliceErr == syscall.EAGAIN:
			// Nothing more for now: the pipe goes back while the source is quiet.
			return total, false, true, false, nil
		case spliceErr != nil:
			return total, false, false, false, os.NewSyscallError("splice", spliceErr)
		case n == 0:
			return total, true, false, false, nil
		}
		if err := pump(dst, p, n); err != nil {
			pp.discard(p)
			p = nil
			return total, false, false, false, err
		}
		total += int64(n)
		if total >= roundBytes {
			return total, false, false, false, nil
		}
	}
}

// pump splices the n bytes in p to dst, waiting while dst's buffer is full.
func pump(dst syscall.RawConn, p *pipe, n int) error {
	var spliceErr error
	err := dst.Write(func(fd uintptr) bool {
		for n > 0 {
			written, err := spliceBytes(int(fd), p.r)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return false
			case err != nil:
				spliceErr = err
				return true
			}
			n -= written
		}
		return true
	})
	if err != nil {
		return err
	}
	if spliceErr != nil {
		return os.NewSyscallError("splice", spliceErr)
	}
	return nil
}

// spliceBytes moves up to maxSpliceBytes from in to out without blocking on the pipe.
func spliceBytes(out, in int) (int, error) {
	n, err := syscall.Splice(in, nil, out, nil, maxSpliceBytes, unixSpliceFNonblock|unixSpliceFMove)
	return int(n), err
}

// fSetPipeSize is fcntl(2)'s F_SETPIPE_SZ.
const fSetPipeSize = 1031

// The flags of splice(2) (linux/splice.h).
const (
	unixSpliceFMove     = 0x1
	unixSpliceFNonblock = 0x2
)
