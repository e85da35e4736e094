//go:build !linux

package tcpgateway

import (
	"net"
	"syscall"
)

// closeWrite passes a source's end on to the destination.
func closeWrite(c *net.TCPConn, _ syscall.RawConn) error { return c.CloseWrite() }

// newLargeBuffer makes a large buffer of the WebSocket splice (wsBufferPool).
func newLargeBuffer() *[wsBufferBytes]byte { return new([wsBufferBytes]byte) }
