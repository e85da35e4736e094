//go:build linux

package tcpgateway

import (
	"net"
	"os"
	"syscall"
)

// listenConfig sets keep-alive on the listening socket, which Linux copies to every connection it
// accepts, and asks Go to set none per connection.
func listenConfig() net.ListenConfig {
	return net.ListenConfig{
		KeepAlive: -1,
		Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			if controlErr := c.Control(func(fd uintptr) {
				for _, opt := range []struct{ level, name, value int }{
					{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
					{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, int(playerKeepAliveIdle.Seconds())},
					{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, int(playerKeepAliveInterval.Seconds())},
					{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, playerKeepAliveCount},
				} {
					if err = syscall.SetsockoptInt(int(fd), opt.level, opt.name, opt.value); err != nil {
						err = os.NewSyscallError("setsockopt", err)
						return
					}
				}
			}); controlErr != nil {
				return controlErr
			}
			return err
		},
	}
}
