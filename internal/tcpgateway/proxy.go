package tcpgateway

import (
	"encoding/binary"
	"net/netip"
)

// proxySignature starts every PROXY protocol v2 header.
var proxySignature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// proxyHeader returns the PROXY protocol v2 header (haproxy's proxy-protocol.txt, section 2.2)
// that tells the instance the player's address (source) and the gateway's address the player
// connected to (destination): version 2, command PROXY, TCP over IPv4, or over IPv6 when either
// address is IPv6.
func proxyHeader(player, gateway netip.AddrPort) []byte {
	src, dst := player.Addr().Unmap(), gateway.Addr().Unmap()
	header := make([]byte, 0, 16+36)
	header = append(header, proxySignature...)
	header = append(header, 0x21) // version 2, PROXY
	if src.Is4() && dst.Is4() {
		header = append(header, 0x11) // AF_INET, STREAM
		header = binary.BigEndian.AppendUint16(header, 12)
		s, d := src.As4(), dst.As4()
		header = append(header, s[:]...)
		header = append(header, d[:]...)
	} else {
		header = append(header, 0x21) // AF_INET6, STREAM
		header = binary.BigEndian.AppendUint16(header, 36)
		s, d := src.As16(), dst.As16()
		header = append(header, s[:]...)
		header = append(header, d[:]...)
	}
	header = binary.BigEndian.AppendUint16(header, player.Port())
	header = binary.BigEndian.AppendUint16(header, gateway.Port())
	return header
}
