package tcpgateway

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// connect dials the instance and sends it what must come before the splice: the PROXY header
// when the token asks for one, then the bytes the player sent after its lines.
func (g *Gateway) connect(player *net.TCPConn, target tcptoken.Target, lines *lineReader, log connLog) (*net.TCPConn, *refusal) {
	unreachable := &refusal{reason: reasonUnreachable, line: "instance not reachable (stopped or starting?)\n"}
	instance, err := g.dial(target.Service)
	if errNoDescriptor(err) {
		log.log(slog.LevelWarn, "no descriptor left to dial the instance: the open-file limit is below what --max-connections needs", slog.String("error", err.Error()))
		return nil, &refusalFull
	}
	if err != nil {
		// A stopped or starting instance refuses or drops: the player's business. Anything else
		// (out of file descriptors, no route) is the gateway's, and an operator's.
		level := slog.LevelWarn
		var ne net.Error
		if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &ne) && ne.Timeout() {
			level = slog.LevelDebug
		}
		log.log(level, "instance not reachable", slog.String("error", err.Error()))
		return nil, unreachable
	}
	// Nothing the instance receives comes before the PROXY header: the header, then the bytes the
	// player sent after its lines, then the splice.
	var early []byte
	if target.ProxyProtocol {
		early = proxyHeader(log.player, addrPort(player.LocalAddr()))
	}
	early = append(early, lines.rest()...)
	if len(early) > 0 {
		instance.SetWriteDeadline(time.Now().Add(g.cfg.DialTimeout))
		if _, err := instance.Write(early); err != nil {
			instance.Close()
			log.log(slog.LevelDebug, "instance not reachable", slog.String("error", err.Error()))
			return nil, unreachable
		}
		instance.SetWriteDeadline(time.Time{})
	}
	return instance, nil
}

// dial connects to the instance, within the dialer's timeout (the dial timeout).
func (g *Gateway) dial(service netip.AddrPort) (*net.TCPConn, error) {
	conn, err := g.dialer.Dial("tcp4", service.String())
	if err != nil {
		return nil, err
	}
	return conn.(*net.TCPConn), nil
}

// specialRanges are the destinations that are never an instance's Service unless listed
// explicitly: loopback (the gateway's own listeners), link-local (cloud metadata), unspecified
// (this host) and multicast.
var specialRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/3"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
}

// dialable says whether addr is inside the Service CIDRs: for an address of a special range, inside
// a listed prefix that lies within that range (127.0.0.0/8 listed for a test), never merely inside
// a wider one (0.0.0.0/0 opens no loopback).
func (g *Gateway) dialable(addr netip.Addr) bool {
	addr = addr.Unmap()
	var special netip.Prefix
	for _, r := range specialRanges {
		if r.Contains(addr) {
			special = r
			break
		}
	}
	for _, cidr := range g.cfg.ServiceCIDRs {
		if !cidr.Contains(addr) {
			continue
		}
		if !special.IsValid() || special.Bits() <= cidr.Bits() && special.Contains(cidr.Addr()) {
			return true
		}
	}
	return false
}

// reservedDescriptors are the process's descriptors beside its connections and pipes: the
// listeners, the metrics server's connections, the standard streams, the runtime's.
const reservedDescriptors = 64

// Descriptors is the open-file limit that maxConnections needs: two sockets each (the player's and
// the instance's), the splice pipes, and the process's own.
func Descriptors(maxConnections int) uint64 {
	return 2*uint64(maxConnections) + 2*splicePipes + reservedDescriptors
}

// MaxConnectionsWithin is the largest --max-connections that an open-file limit carries (0: none).
func MaxConnectionsWithin(openFiles uint64) int {
	if openFiles <= 2*splicePipes+reservedDescriptors {
		return 0
	}
	return int((openFiles - 2*splicePipes - reservedDescriptors) / 2)
}
