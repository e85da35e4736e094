//go:build !linux

package tcpgateway

import (
	"net"
	"net/netip"
	"syscall"
)

// closeWrite passes a source's end on to the destination.
func closeWrite(c *net.TCPConn, _ syscall.RawConn) error { return c.CloseWrite() }

// connectEarly leaves the connection to the dialer.
func connectEarly(syscall.RawConn, netip.AddrPort) error { return nil }
