package main

// The attack run's WebSocket side: honest players who reach their instance through the gateway's
// WebSocket listener (beside those on its TCP listener, in every class), and the attacks of the
// upgrade itself, each from -attack-addrs addresses against the WebSocket listener:
//
//   - ws-slow-headers: an upgrade request for the attacker's own instance trickled one byte a
//     second, its headers never ended (slowloris), held as the slow class's lines are;
//   - ws-oversized-headers: an upgrade request whose headers run past the gateway's bound (32 KiB
//     of them, never ended);
//   - ws-oversized-frames: an upgrade for the attacker's own instance, then a frame whose header
//     announces 1 GiB (past the gateway's bound on a message), and some of its bytes;
//   - ws-bad-tokens: random tokens by URL, as an upgrade of /ws/<token>, of /ws?token=<token>
//     and as wsrx's OPTIONS probe, in turn.
//
// The attackers write their requests and frames by hand, not through a WebSocket library: they
// send what no library sends, and cost their process as little as they can.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"
)

// upgradeRequest is a WebSocket upgrade of target as wsrx sends it (no subprotocol, no
// extension), or, when upgrade is false, the same request without its upgrade headers (a probe),
// ended by the empty line when ended.
func upgradeRequest(method, target string, upgrade, ended bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: gateway.ctf.test\r\n", method, target)
	if upgrade {
		b.WriteString("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
	}
	if ended {
		b.WriteString("\r\n")
	}
	return b.String()
}

// wsAttackDial connects from src to the WebSocket listener; nil when it could not (counted). The
// connection closes when ctx ends.
func (a *attackRun) wsAttackDial(ctx context.Context, src netip.Addr) (net.Conn, *bufio.Reader) {
	a.dials.Add(1)
	c, err := dialFrom(ctx, src, a.wsGateway, a.timeout)
	if err != nil {
		a.dialErrors.Add(1)
		a.answer(ctx, "connect: "+short(err))
		return nil, nil
	}
	context.AfterFunc(ctx, func() { c.Close() })
	return c, bufio.NewReaderSize(c, 512)
}

// readStatus reads the gateway's status line (its deadline a.timeout) and counts it, or how the
// connection ended; it returns the status code, 0 for none.
func (a *attackRun) readStatus(ctx context.Context, c net.Conn, r *bufio.Reader) int {
	c.SetReadDeadline(time.Now().Add(a.timeout))
	line, err := r.ReadString('\n')
	var code int
	if _, scanErr := fmt.Sscanf(line, "HTTP/1.1 %d", &code); scanErr != nil {
		if line != "" {
			a.answer(ctx, short(errors.New(line)))
		} else {
			a.answer(ctx, short(err))
		}
		return 0
	}
	a.answer(ctx, "HTTP "+strings.TrimSpace(strings.TrimPrefix(line, "HTTP/1.1 ")))
	return code
}

// wsBadToken sends a random token by URL, in one of the three ways a client can.
func wsBadToken(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.wsAttackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	token := randomTokenLine()
	var req string
	switch mrand.IntN(3) {
	case 0:
		req = upgradeRequest("GET", "/ws/"+token, true, true)
	case 1:
		req = upgradeRequest("GET", "/ws?token="+token, true, true)
	default:
		req = upgradeRequest("OPTIONS", "/ws/"+token, false, true)
	}
	c.SetWriteDeadline(time.Now().Add(a.timeout))
	if _, err := io.WriteString(c, req); err != nil {
		a.answer(ctx, short(err))
		return
	}
	a.readStatus(ctx, c, r)
}

// wsSlowHeaders trickles an upgrade for the attacker's own instance one byte a second, then
// header lines without end, until the gateway answers or closes, or the class ends.
func wsSlowHeaders(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.wsAttackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// No deadline of ours: the gateway's token timeout or eviction ends it.
		line, err := r.ReadString('\n')
		if line != "" {
			a.answer(ctx, "HTTP "+strings.TrimSpace(strings.TrimPrefix(line, "HTTP/1.1 ")))
		} else {
			a.answer(ctx, short(err))
		}
	}()
	request := upgradeRequest("GET", "/ws/"+a.ownToken, true, false) + "X-Padding: " + strings.Repeat("a", 1<<20)
	a.trickle(ctx, c, done, request)
}

// wsOversizedHeaders sends an upgrade whose headers run to 32 KiB without an end.
func wsOversizedHeaders(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.wsAttackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	request := upgradeRequest("GET", "/ws/"+a.ownToken, true, false)
	for len(request) < 32<<10 {
		request += "X-Padding: " + strings.Repeat("a", 1000) + "\r\n"
	}
	c.SetWriteDeadline(time.Now().Add(a.timeout))
	// A write cut short is no answer: the gateway may answer and close before it read it all.
	io.WriteString(c, request)
	a.readStatus(ctx, c, r)
}

// wsOversizedFrame upgrades to the attacker's own instance, sends a binary frame whose header
// announces 1 GiB and 16 KiB of its payload, and reads what comes back up to the close frame.
func wsOversizedFrame(ctx context.Context, a *attackRun, src netip.Addr) {
	c, r := a.wsAttackDial(ctx, src)
	if c == nil {
		return
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(a.timeout))
	if _, err := io.WriteString(c, upgradeRequest("GET", "/ws/"+a.ownToken, true, true)); err != nil {
		a.answer(ctx, short(err))
		return
	}
	if a.readStatus(ctx, c, r) != 101 {
		return
	}
	for { // the rest of the 101's headers
		line, err := r.ReadString('\n')
		if err != nil {
			a.answer(ctx, "after 101: "+short(err))
			return
		}
		if line == "\r\n" {
			break
		}
	}
	a.spliced.Add(1)
	// FIN, binary; masked, 64-bit length; the mask (zero: the payload goes as it is).
	frame := binary.BigEndian.AppendUint64([]byte{0x82, 0x80 | 127}, 1<<30)
	frame = append(frame, 0, 0, 0, 0)
	payload := make([]byte, 16<<10)
	rand.Read(payload)
	if _, err := c.Write(append(frame, payload...)); err != nil {
		a.answer(ctx, "frame: "+short(err))
		return
	}
	a.answer(ctx, readUntilClose(c, r, a.timeout))
}

// readUntilClose reads the gateway's frames (the instance's banner, perhaps) up to its close
// frame and says how the connection ended: "close <code>", or what ended it without one.
func readUntilClose(c net.Conn, r *bufio.Reader, timeout time.Duration) string {
	c.SetReadDeadline(time.Now().Add(timeout))
	for {
		var head [2]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return "no close frame: " + short(err)
		}
		size := uint64(head[1] & 0x7f)
		switch size {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return "no close frame: " + short(err)
			}
			size = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return "no close frame: " + short(err)
			}
			size = binary.BigEndian.Uint64(b[:])
		}
		if size > 1<<20 {
			return fmt.Sprintf("a frame of %d bytes from the gateway", size)
		}
		payload := make([]byte, size)
		if _, err := io.ReadFull(r, payload); err != nil {
			return "no close frame: " + short(err)
		}
		if head[0]&0x0f == 0x8 {
			if len(payload) < 2 {
				return "close without code"
			}
			return fmt.Sprintf("close %d", binary.BigEndian.Uint16(payload))
		}
	}
}

// honestConnectWS is one connection of an honest WebSocket player: dial, upgrade, its banner in
// the first messages, a 1-byte echo. Its handshake is from dial to the banner read: a WebSocket
// client sends the token in its request, with no paste delay to leave out.
func honestConnectWS(gateway string, src netip.Addr, token, banner string, o attackOptions) (handshake, toPrompt time.Duration, failure string) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), o.honestTimeout)
	defer cancel()
	c, err := dialWebSocket(ctx, wsDialer(src, o.honestTimeout), gateway, token)
	if err != nil {
		return 0, 0, "upgrade: " + wsShort(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(o.honestTimeout))
	r := bufio.NewReaderSize(c, 256)
	line, err := r.ReadString('\n')
	if line != banner {
		if line == "" {
			return 0, 0, "banner: " + short(err)
		}
		return 0, 0, "banner: " + short(errors.New(line))
	}
	handshake = time.Since(start)
	if _, err := c.Write([]byte{'x'}); err != nil {
		return 0, 0, "echo: " + short(err)
	}
	if b, err := r.ReadByte(); err != nil || b != 'x' {
		return 0, 0, "echo: no byte"
	}
	return handshake, 0, ""
}

// wsShort is a refused upgrade's status ("503 Service Unavailable"), or short's reading of the error.
func wsShort(err error) string {
	if s := err.Error(); len(s) > 3 && s[0] >= '1' && s[0] <= '5' && s[3] == ' ' {
		status, _, _ := strings.Cut(s, ":")
		return status
	}
	return short(err)
}
