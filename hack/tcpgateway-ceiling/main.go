// Command tcpgateway-ceiling is a yardstick for the TCP gateway's benchmarks, never a gateway to
// deploy: the least a proxy can do per connection on Linux, one epoll loop per core over raw
// non-blocking sockets (no net.TCPConn, no goroutine per step, no limit, no log, no metric), in
// two modes that hack/tcpgateway-load runs in place of the gateway and of HAProxy:
//
//	tcpgateway-ceiling tcp-gateway --listen=ADDR --key-file=FILE   # the gateway's exchange: the prompt, a token opened with the key, the token's instance
//	tcpgateway-ceiling -db -f haproxy.cfg                          # HAProxy's work: the config's bind, spliced to its server at once
//
// So that one load run tells what the exchange of a token costs by itself (the first mode against
// the second), and what the gateway adds to it (the gateway against the first mode):
//
//	go build -o /tmp/ceiling ./hack/tcpgateway-ceiling
//	go run ./hack/tcpgateway-load -binary /tmp/ceiling -haproxy /tmp/ceiling   # token loop against plain loop
//	go run ./hack/tcpgateway-load -binary /tmp/ceiling                         # token loop against HAProxy
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "tcpgateway-ceiling: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 1 && args[0] == "-v":
		// The load run prints the first line of `haproxy -v`.
		fmt.Println("tcpgateway-ceiling: a plain epoll loop standing in for HAProxy")
		return nil
	case len(args) == 3 && args[0] == "-db" && args[1] == "-f":
		bind, server, err := readHAProxyConfig(args[2])
		if err != nil {
			return err
		}
		return serve(bind, func([]byte) (netip.AddrPort, bool) { return server, true }, false)
	case len(args) > 0 && args[0] == "tcp-gateway":
		fs := flag.NewFlagSet("tcp-gateway", flag.ExitOnError)
		listen := fs.String("listen", "127.0.0.1:0", "`host:port` to accept players on")
		fs.String("metrics-listen", "", "accepted and ignored: no metrics")
		keyFile := fs.String("key-file", "", "`file` holding the gateway key")
		fs.Parse(args[1:])
		keyText, err := os.ReadFile(*keyFile)
		if err != nil {
			return err
		}
		key := []byte(strings.TrimSpace(string(keyText)))
		open := func(line []byte) (netip.AddrPort, bool) {
			target, err := tcptoken.Open(key, string(line))
			return target.Service, err == nil
		}
		return serve(*listen, open, true)
	}
	return errors.New("usage: tcpgateway-ceiling tcp-gateway --listen=ADDR --key-file=FILE | -db -f HAPROXY_CONFIG")
}

// readHAProxyConfig reads the frontend's bind and the backend's server of the load run's config.
func readHAProxyConfig(path string) (bind string, server netip.AddrPort, err error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	for _, line := range strings.Split(string(text), "\n") {
		switch f := strings.Fields(line); {
		case len(f) == 2 && f[0] == "bind":
			bind = f[1]
		case len(f) == 3 && f[0] == "server":
			if server, err = netip.ParseAddrPort(f[2]); err != nil {
				return "", netip.AddrPort{}, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if bind == "" || !server.IsValid() {
		return "", netip.AddrPort{}, fmt.Errorf("%s: no bind or no server line", path)
	}
	return bind, server, nil
}

// serve listens on listen and runs one loop per GOMAXPROCS, all accepting from the one socket.
// With prompt, a connection is sent the gateway's prompt and spliced to the instance its token
// line opens to (target); without, it is spliced to target(nil) at once.
func serve(listen string, target func(line []byte) (netip.AddrPort, bool), prompt bool) error {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("listen address %q: an IPv4 host:port", listen)
	}
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := syscall.SetsockoptInt(lfd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
		return fmt.Errorf("bind %s: %w", listen, err)
	}
	if err := syscall.Listen(lfd, 4096); err != nil {
		return err
	}
	sa, err := syscall.Getsockname(lfd)
	if err != nil {
		return err
	}
	bound := netip.AddrPortFrom(ap.Addr(), uint16(sa.(*syscall.SockaddrInet4).Port))
	// The line the load run waits for, as the gateway logs it.
	fmt.Fprintf(os.Stderr, `{"level":"INFO","msg":"listening","addr":%q}`+"\n", bound)
	loops := runtime.GOMAXPROCS(0)
	failed := make(chan error, loops)
	for range loops {
		l, err := newLoop(lfd, target, prompt)
		if err != nil {
			return err
		}
		go func() { failed <- l.run() }()
	}
	return <-failed
}

// conn is one player's connection, known to its loop by both its descriptors.
type conn struct {
	player, instance int // instance: -1 until dialled
	connected        bool
	line             []byte // the token line so far
	toInstance       []byte // bytes read and not yet written
	toPlayer         []byte
	playerEnded      bool // its end passed on to the instance
	instanceEnded    bool
}

// loop is one thread's epoll instance and the connections it accepted.
type loop struct {
	ep, lfd int
	target  func(line []byte) (netip.AddrPort, bool)
	prompt  bool
	conns   map[int]*conn // by descriptor, the player's and the instance's
	buf     []byte
}

const (
	maxLine        = 128
	epollET        = 1 << 31
	epollExclusive = 1 << 28
	edges          = syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET
)

func newLoop(lfd int, target func([]byte) (netip.AddrPort, bool), prompt bool) (*loop, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// EPOLLEXCLUSIVE: a connection wakes one loop, not all of them.
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, lfd, &syscall.EpollEvent{Events: syscall.EPOLLIN | epollExclusive, Fd: int32(lfd)}); err != nil {
		return nil, err
	}
	return &loop{ep: ep, lfd: lfd, target: target, prompt: prompt, conns: map[int]*conn{}, buf: make([]byte, 64<<10)}, nil
}

func (l *loop) run() error {
	runtime.LockOSThread()
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(l.ep, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range events[:n] {
			fd := int(e.Fd)
			if fd == l.lfd {
				l.accept()
			} else if c := l.conns[fd]; c != nil {
				l.step(c, fd)
			}
		}
	}
}

func (l *loop) accept() {
	for {
		fd, _, err := syscall.Accept4(l.lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		c := &conn{player: fd, instance: -1}
		if l.prompt {
			if _, err := syscall.Write(fd, []byte("token: ")); err != nil {
				syscall.Close(fd)
				continue
			}
		}
		l.conns[fd] = c
		if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: edges, Fd: int32(fd)}); err != nil {
			l.close(c)
			continue
		}
		if !l.prompt {
			to, _ := l.target(nil)
			l.dial(c, to)
		}
	}
}

func (l *loop) close(c *conn) {
	delete(l.conns, c.player)
	syscall.Close(c.player)
	if c.instance >= 0 {
		delete(l.conns, c.instance)
		syscall.Close(c.instance)
	}
}

func (l *loop) step(c *conn, fd int) {
	switch {
	case c.instance < 0:
		l.readToken(c)
	case !c.connected:
		if fd != c.instance {
			return // the player's bytes wait in its socket until the instance is connected
		}
		if soErr, err := syscall.GetsockoptInt(c.instance, syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil || soErr != 0 {
			syscall.Write(c.player, []byte("instance not reachable\n"))
			l.close(c)
			return
		}
		c.connected = true
		l.pumpBoth(c)
	default:
		l.pumpBoth(c)
	}
}

// readToken reads the player's line and dials the instance its token opens to.
func (l *loop) readToken(c *conn) {
	for {
		n, err := syscall.Read(c.player, l.buf[:maxLine])
		if err == syscall.EAGAIN {
			return
		}
		if err != nil || n == 0 {
			l.close(c)
			return
		}
		c.line = append(c.line, l.buf[:n]...)
		end := bytes.IndexByte(c.line, '\n')
		if end < 0 {
			if len(c.line) > maxLine {
				l.close(c)
				return
			}
			continue
		}
		to, ok := l.target(c.line[:end])
		if !ok {
			syscall.Write(c.player, []byte("invalid token\n"))
			l.close(c)
			return
		}
		c.toInstance = append([]byte(nil), c.line[end+1:]...)
		c.line = nil
		l.dial(c, to)
		return
	}
}

func (l *loop) dial(c *conn, to netip.AddrPort) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		l.close(c)
		return
	}
	c.instance = fd
	l.conns[fd] = c
	syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())}); err != nil && err != syscall.EINPROGRESS {
		l.close(c)
		return
	}
	if err := syscall.EpollCtl(l.ep, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: edges, Fd: int32(fd)}); err != nil {
		l.close(c)
	}
}

// pumpBoth moves what each side has to the other, and closes the connection once both ended.
func (l *loop) pumpBoth(c *conn) {
	if !l.pump(c.player, c.instance, &c.toInstance, &c.playerEnded) || !l.pump(c.instance, c.player, &c.toPlayer, &c.instanceEnded) {
		l.close(c)
		return
	}
	if c.playerEnded && c.instanceEnded {
		l.close(c)
	}
}

// pump moves src's bytes to dst until src is dry or dst full; its end is passed on as dst's
// half-close once every byte before it is written. False on an error.
func (l *loop) pump(src, dst int, pending *[]byte, ended *bool) bool {
	for {
		if len(*pending) > 0 {
			n, err := syscall.Write(dst, *pending)
			if err == syscall.EAGAIN {
				return true
			}
			if err != nil {
				return false
			}
			if *pending = (*pending)[n:]; len(*pending) > 0 {
				return true
			}
			*pending = nil
		}
		if *ended {
			return true
		}
		n, err := syscall.Read(src, l.buf)
		switch {
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			return false
		case n == 0:
			*ended = true
			syscall.Shutdown(dst, syscall.SHUT_WR)
			return true
		}
		written, err := syscall.Write(dst, l.buf[:n])
		if err == syscall.EAGAIN {
			written, err = 0, nil
		}
		if err != nil {
			return false
		}
		if written < n {
			*pending = append([]byte(nil), l.buf[written:n]...)
			return true
		}
	}
}
