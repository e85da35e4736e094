package tcpgateway

import (
	"context"
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
func (g *Gateway) connect(player *net.TCPConn, playerAddr netip.AddrPort, target tcptoken.Target, lines *lineReader, log *slog.Logger) (*net.TCPConn, *refusal) {
	unreachable := &refusal{reason: reasonUnreachable, line: "instance not reachable (stopped or starting?)\n"}
	instance, err := g.dial(target.Service)
	if err != nil {
		// A stopped or starting instance refuses or drops: the player's business. Anything else
		// (out of file descriptors, no route) is the gateway's, and an operator's.
		level := slog.LevelWarn
		var ne net.Error
		if errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &ne) && ne.Timeout() {
			level = slog.LevelDebug
		}
		log.Log(context.Background(), level, "instance not reachable", slog.String("error", err.Error()))
		return nil, unreachable
	}
	// Nothing the instance receives comes before the PROXY header: the header, then the bytes the
	// player sent after its lines, then the splice.
	var early []byte
	if target.ProxyProtocol {
		early = proxyHeader(playerAddr, addrPort(player.LocalAddr()))
	}
	early = append(early, lines.rest()...)
	if len(early) > 0 {
		instance.SetWriteDeadline(time.Now().Add(g.cfg.DialTimeout))
		if _, err := instance.Write(early); err != nil {
			instance.Close()
			log.Debug("instance not reachable", slog.String("error", err.Error()))
			return nil, unreachable
		}
		instance.SetWriteDeadline(time.Time{})
	}
	return instance, nil
}

// dial connects to the instance.
func (g *Gateway) dial(service netip.AddrPort) (*net.TCPConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.DialTimeout)
	defer cancel()
	conn, err := g.dialer.DialContext(ctx, "tcp4", service.String())
	if err != nil {
		return nil, err
	}
	return conn.(*net.TCPConn), nil
}
