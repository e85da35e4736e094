package tcpgateway

import (
	"context"
	"net"
	"time"
)

// Players' connections have TCP keep-alive, as Go gives accepted connections by default: probes
// after playerKeepAliveIdle of silence, every playerKeepAliveInterval, and playerKeepAliveCount
// unanswered end the connection; a player gone without a word frees its slot in minutes, not at
// the idle timeout.
const (
	playerKeepAliveIdle     = 15 * time.Second
	playerKeepAliveInterval = 15 * time.Second
	playerKeepAliveCount    = 9
)

// Listen listens for players on addr. Where the system lets accepted connections inherit the
// listening socket's keep-alive (Linux), it is set once there, not with four setsockopt calls on
// each connection.
func Listen(addr string) (net.Listener, error) {
	lc := listenConfig()
	return lc.Listen(context.Background(), "tcp", addr)
}
