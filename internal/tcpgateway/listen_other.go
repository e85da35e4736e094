//go:build !linux

package tcpgateway

import "net"

// listenConfig sets keep-alive on each accepted connection.
func listenConfig() net.ListenConfig {
	return net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: playerKeepAliveIdle, Interval: playerKeepAliveInterval, Count: playerKeepAliveCount}}
}
