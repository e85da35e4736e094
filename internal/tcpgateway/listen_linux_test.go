package tcpgateway

import (
	"net"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlayersHaveKeepAlive: a connection accepted by Listen has the players' keep-alive, inherited
// from the listening socket.
func TestPlayersHaveKeepAlive(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	accepted, err := ln.Accept()
	require.NoError(t, err)
	defer accepted.Close()
	raw, err := accepted.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	got := map[string]int{}
	require.NoError(t, raw.Control(func(fd uintptr) {
		for name, opt := range map[string]struct{ level, name int }{
			"SO_KEEPALIVE":  {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE},
			"TCP_KEEPIDLE":  {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE},
			"TCP_KEEPINTVL": {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL},
			"TCP_KEEPCNT":   {syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT},
			"TCP_NODELAY":   {syscall.IPPROTO_TCP, syscall.TCP_NODELAY},
		} {
			v, err := syscall.GetsockoptInt(int(fd), opt.level, opt.name)
			require.NoError(t, err)
			got[name] = v
		}
	}))
	assert.Equal(t, map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 15, "TCP_KEEPINTVL": 15, "TCP_KEEPCNT": 9, "TCP_NODELAY": 1}, got)
}
