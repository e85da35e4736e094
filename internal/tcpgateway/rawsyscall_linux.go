//go:build linux

package tcpgateway

import (
	"net"
	"os"
	"syscall"
	"unsafe"
)

// The gateway's own system calls on its sockets, pipes and epoll instance never block (the
// sockets and pipes are non-blocking, and the poller asks epoll with no timeout), so they are
// made as raw system calls, without telling the Go scheduler that the thread may block: that costs
// two scheduler calls each, may wake the runtime's monitor thread (sysmon), which then polls every
// 20 µs for a while, and lets sysmon hand the goroutine's processor to another thread when the
// call takes a few microseconds (a splice or a shutdown that delivers on loopback). sysmon alone
// was about a tenth of the gateway's CPU per connection; the gateway's own calls no longer add to
// it (those of Go's net package still do).

// rawSplice is splice(2) between two non-blocking descriptors.
func rawSplice(out, in int, n int, flags int) (int, error) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), uintptr(flags))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// rawEpollCtl is epoll_ctl(2).
func rawEpollCtl(epfd, op, fd int, event *syscall.EpollEvent) error {
	if _, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(event)), 0, 0); e != 0 {
		return e
	}
	return nil
}

// rawEpollWaitNow is epoll_wait(2) with no timeout: the events ready now.
func rawEpollWaitNow(epfd int, events []syscall.EpollEvent) (int, error) {
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// closeWrite passes a source's end on to the destination: shutdown(2) of its writing half, as
// (*net.TCPConn).CloseWrite does.
func closeWrite(c *net.TCPConn, raw syscall.RawConn) error {
	var shutdownErr error
	if err := raw.Control(func(fd uintptr) {
		if _, _, e := syscall.RawSyscall(syscall.SYS_SHUTDOWN, fd, syscall.SHUT_WR, 0); e != 0 {
			shutdownErr = os.NewSyscallError("shutdown", e)
		}
	}); err != nil {
		return err
	}
	return shutdownErr
}

// newLargeBuffer maps a large buffer of the WebSocket splice (wsBufferPool) outside Go's heap:
// its pages become resident as they are first written (a connection that moves a byte touches
// one), and none is zeroed again. From Go's heap a MiB is zeroed, all of it resident, when made.
func newLargeBuffer() *[wsBufferBytes]byte {
	b, err := syscall.Mmap(-1, 0, wsBufferBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return new([wsBufferBytes]byte)
	}
	return (*[wsBufferBytes]byte)(b)
}
