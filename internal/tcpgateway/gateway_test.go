package tcpgateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// TestTokenReachesItsInstance: each team's token leads to its own instance, and bytes go both
// ways.
func TestTokenReachesItsInstance(t *testing.T) {
	a := startBackend(t, banner("instance A\n"))
	b := startBackend(t, banner("instance B\n"))
	g := startGateway(t, nil)
	for _, tc := range []struct {
		backend *backend
		banner  string
	}{{a, "instance A\n"}, {b, "instance B\n"}, {a, "instance A\n"}} {
		p := connect(t, g.addr)
		// Typed in upper case and ended by CRLF, as some terminals send it.
		p.send(strings.ToUpper(mint(t, tcptoken.Target{Service: tc.backend.addr()})) + "\r\n")
		p.expect(tc.banner)
		p.send("ping\n")
		p.expect("ping\n")
		require.NoError(t, p.conn.CloseWrite())
		assert.Empty(t, p.rest(), "the instance's end follows the player's")
	}
	assert.EqualValues(t, 2, a.accepted.Load())
	assert.EqualValues(t, 1, b.accepted.Load())
	waitFor(t, func() bool { return g.closed(closedByPeers) == 3 }, "3 closed connections counted")
}

// TestBadTokensReachNothing: a forged token, one of another key, garbage, an empty or too long
// line, no token before the deadline and a connection closed at the prompt each get at most one
// short line and a close, and no connection to any instance.
func TestBadTokensReachNothing(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) {
		c.TokenTimeout = 300 * time.Millisecond
		c.MaxBadTokensPerMinute = 1000
	})
	valid := mint(t, tcptoken.Target{Service: instance.addr()})
	forged := valid[:10] + string("ab"[boolIndex(valid[10] == 'a')]) + valid[11:]
	otherKey, err := tcptoken.Mint(bytes.Repeat([]byte{1}, tcptoken.MinKeyBytes), tcptoken.Target{Service: instance.addr()})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		send   string
		close  bool
		want   string
		reason string
	}{
		"forged":          {send: forged + "\n", want: "invalid token\n", reason: reasonInvalidToken},
		"other key":       {send: otherKey + "\n", want: "invalid token\n", reason: reasonInvalidToken},
		"garbage":         {send: "cat flag.txt\n", want: "invalid token\n", reason: reasonInvalidToken},
		"empty line":      {send: "\n", want: "invalid token\n", reason: reasonInvalidToken},
		"too long":        {send: strings.Repeat("a", 129) + "\n", want: "line too long\n", reason: reasonLineTooLong},
		"endless":         {send: strings.Repeat(valid, 100), want: "line too long\n", reason: reasonLineTooLong},
		"no line":         {send: valid, want: "no token within 300ms\n", reason: reasonTokenTimeout},
		"nothing":         {want: "no token within 300ms\n", reason: reasonTokenTimeout},
		"closed":          {close: true, want: "", reason: reasonClosedEarly},
		"closed mid-line": {send: valid[:5], close: true, want: "", reason: reasonClosedEarly},
	} {
		before := g.refused(tc.reason)
		p := connect(t, g.addr)
		if tc.send != "" {
			p.send(tc.send)
		}
		if tc.close {
			require.NoError(t, p.conn.CloseWrite(), name)
		}
		assert.Equal(t, tc.want, p.rest(), name)
		waitFor(t, func() bool { return g.refused(tc.reason) == before+1 }, name+": the refusal counted")
	}
	// The good token does reach the instance: the count above is not zero for want of a path.
	p := connect(t, g.addr)
	p.send(valid + "\n")
	p.send("x")
	p.expect("x")
	assert.EqualValues(t, 1, instance.accepted.Load(), "only the valid token connected to the instance")
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestBytesAfterTheTokenReachTheInstance: what a script sends right after its token, without
// waiting, arrives first, after the PROXY header when there is one.
func TestBytesAfterTheTokenReachTheInstance(t *testing.T) {
	received := make(chan []byte, 2)
	instance := startBackend(t, func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(c)
		received <- b
	})
	g := startGateway(t, nil)
	for _, proxy := range []bool{false, true} {
		p := connect(t, g.addr)
		p.send(mint(t, tcptoken.Target{Service: instance.addr(), ProxyProtocol: proxy}) + "\nfirst\nsecond")
		require.NoError(t, p.conn.CloseWrite())
		got := <-received
		if proxy {
			header := parseProxyV2(t, got)
			got = got[len(header):]
		}
		assert.Equal(t, "first\nsecond", string(got), "proxy %v", proxy)
	}
}

// proxyV2 is a PROXY protocol v2 header as parsed from its bytes.
type proxyV2 struct {
	source, destination netip.AddrPort
	length              int
}

func (h proxyV2) len() int { return h.length }

// parseProxyV2 parses a PROXY v2 header of TCP over IPv4 by the specification (haproxy's
// proxy-protocol.txt, 2.2), independently of the gateway's code.
func parseProxyV2(t *testing.T, b []byte) []byte {
	t.Helper()
	h := parseProxyV2Header(t, b)
	return b[:h.len()]
}

func parseProxyV2Header(t *testing.T, b []byte) proxyV2 {
	t.Helper()
	require.GreaterOrEqual(t, len(b), 16)
	require.Equal(t, []byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}, b[:12], "signature")
	require.Equal(t, byte(0x2), b[12]>>4, "version 2")
	require.Equal(t, byte(0x1), b[12]&0xF, "command PROXY")
	require.Equal(t, byte(0x1), b[13]>>4, "AF_INET")
	require.Equal(t, byte(0x1), b[13]&0xF, "STREAM")
	length := int(b[14])<<8 | int(b[15])
	require.Equal(t, 12, length, "IPv4 addresses and ports")
	require.GreaterOrEqual(t, len(b), 16+length)
	a := b[16:]
	src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{a[0], a[1], a[2], a[3]}), uint16(a[8])<<8|uint16(a[9]))
	dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte{a[4], a[5], a[6], a[7]}), uint16(a[10])<<8|uint16(a[11]))
	return proxyV2{source: src, destination: dst, length: 16 + length}
}

// TestProxyProtocolNamesThePlayer: the instance reads the player's address and port and the
// gateway's as the source and destination of the header.
func TestProxyProtocolNamesThePlayer(t *testing.T) {
	headers := make(chan proxyV2, 1)
	instance := startBackend(t, func(c net.Conn) {
		b := make([]byte, 28)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, b); err != nil {
			close(headers)
			return
		}
		headers <- parseProxyV2Header(t, b)
		echo(c)
	})
	g := startGateway(t, nil)
	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: instance.addr(), ProxyProtocol: true}) + "\n")
	h, ok := <-headers
	require.True(t, ok, "the instance read a header")
	assert.Equal(t, p.conn.LocalAddr().(*net.TCPAddr).AddrPort(), h.source, "the player")
	assert.Equal(t, p.conn.RemoteAddr().(*net.TCPAddr).AddrPort(), h.destination, "the gateway's address the player connected to")
	p.send("after the header\n")
	p.expect("after the header\n")
}

// TestProxyHeaderIPv6 checks the IPv6 form's bytes, which loopback IPv4 does not exercise.
func TestProxyHeaderIPv6(t *testing.T) {
	got := proxyHeader(netip.MustParseAddrPort("[2001:db8::1]:40000"), netip.MustParseAddrPort("[2001:db8::2]:1337"))
	want := append([]byte("\r\n\r\n\x00\r\nQUIT\n"), 0x21, 0x21, 0, 36)
	want = append(want, netip.MustParseAddr("2001:db8::1").AsSlice()...)
	want = append(want, netip.MustParseAddr("2001:db8::2").AsSlice()...)
	want = binary.BigEndian.AppendUint16(want, 40000)
	want = binary.BigEndian.AppendUint16(want, 1337)
	assert.Equal(t, want, got)
}

// TestConnectionsPerTokenCapped: past the cap, a token's connection is refused with a line and
// costs no instance connection; a closed one frees its place.
func TestConnectionsPerTokenCapped(t *testing.T) {
	instance := startBackend(t, echo)
	other := startBackend(t, echo)
	g := startGateway(t, func(c *Config) { c.MaxConnectionsPerToken = 2 })
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	var open []*player
	for range 2 {
		p := connect(t, g.addr)
		p.send(token + "\nx")
		p.expect("x")
		open = append(open, p)
	}
	p := connect(t, g.addr)
	p.send(token + "\n")
	assert.Equal(t, "too many connections with this token (at most 2 at once), try again later\n", p.rest())
	assert.EqualValues(t, 2, instance.accepted.Load())
	assert.EqualValues(t, 1, g.refused(reasonTooManyForToken))

	// Another instance's token is not affected.
	q := connect(t, g.addr)
	q.send(mint(t, tcptoken.Target{Service: other.addr()}) + "\ny")
	q.expect("y")

	open[0].conn.Close()
	waitFor(t, func() bool {
		p := connect(t, g.addr)
		p.send(token + "\nz")
		b := make([]byte, 1)
		_, err := io.ReadFull(p.r, b)
		return err == nil && b[0] == 'z'
	}, "a place freed by a closed connection")
}

// TestValidTokenServedWhateverItsAddressDid: a venue's players share one address. After bad
// tokens from that address put it in debt, its next bad token waits for its answer, and a valid
// token from it is served at once.
func TestValidTokenServedWhateverItsAddressDid(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) { c.MaxBadTokensPerMinute = 3 })
	const venue = "127.0.0.2"
	sendBadTokens(t, g.addr, venue, 3)
	require.True(t, g.admission.inDebt(sourceOf(netip.MustParseAddr(venue)), time.Now()), "3 bad tokens: in debt")

	p := connectFrom(t, g.addr, venue)
	start := time.Now()
	p.send("guess\n")
	assert.Equal(t, "invalid token\n", p.rest())
	assert.GreaterOrEqual(t, time.Since(start), badTokenDelay, "a bad token from a source in debt waits for its answer")

	p = connectFrom(t, g.addr, venue)
	start = time.Now()
	p.send(mint(t, tcptoken.Target{Service: instance.addr()}) + "\nx")
	p.expect("x")
	assert.Less(t, time.Since(start), badTokenDelay, "a valid token from the same address is not delayed")
	assert.EqualValues(t, 0, g.refused(reasonTooManyConnections)+g.refused(reasonEvicted))
}

// TestSlowPastersAtOneAddress: 100 players behind one address connect, then take their time to
// paste their tokens: every one is served.
func TestSlowPastersAtOneAddress(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) { c.MaxConnectionsPerToken = 1000 })
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	var players []*player
	for range 100 {
		players = append(players, connectFrom(t, g.addr, "127.0.0.3"))
	}
	for _, p := range players {
		p.send(token + "\nx")
		p.expect("x")
	}
	assert.EqualValues(t, 100, instance.accepted.Load())
}

// TestFullGatewayEvictsTheOldestPending: when every slot is taken, a newcomer takes the slot of a
// connection waiting for its token, the oldest of the address holding the most (none has debt or
// credit here), and that one reads why.
func TestFullGatewayEvictsTheOldestPending(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) { c.MaxConnections = 3 })
	oldest := connectFrom(t, g.addr, "127.0.0.4")
	connectFrom(t, g.addr, "127.0.0.4")
	younger := connectFrom(t, g.addr, "127.0.0.5")

	newcomer := connectFrom(t, g.addr, "127.0.0.6")
	assert.Equal(t, evictedLine, oldest.rest())
	assert.EqualValues(t, 1, g.refused(reasonEvicted))
	reachEcho(t, mint(t, tcptoken.Target{Service: instance.addr()}), newcomer, younger)
}

// TestEvictionTakesFromSourcesInDebtFirst: an honest player waiting longest keeps its slot while a
// source in debt holds one.
func TestEvictionTakesFromSourcesInDebtFirst(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) {
		c.MaxConnections = 3
		c.MaxBadTokensPerMinute = 2
	})
	honest := connectFrom(t, g.addr, "127.0.0.7")
	const attacker = "127.0.0.8"
	sendBadTokens(t, g.addr, attacker, 2)
	holders := []*player{connectFrom(t, g.addr, attacker), connectFrom(t, g.addr, attacker)}

	newcomer := connectFrom(t, g.addr, "127.0.0.9")
	assert.Equal(t, evictedLine, holders[0].rest())
	reachEcho(t, mint(t, tcptoken.Target{Service: instance.addr()}), honest, newcomer)
}

// TestVenueStaysOutOfDebt: an address whose players present valid tokens is not in debt for the
// evictions and bad tokens among them, and under a full gateway keeps its waiting players while an
// address that presents only bad tokens gives its slots away.
func TestVenueStaysOutOfDebt(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) {
		c.MaxConnections = 4
		c.MaxBadTokensPerMinute = 2
		c.MaxConnectionsPerToken = 100
	})
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	const venue, attacker = "127.0.2.1", "127.0.2.2"
	var players []*player
	for range 3 {
		players = append(players, connectFrom(t, g.addr, venue))
	}
	reachEcho(t, token, players...)
	for _, p := range players {
		p.conn.Close()
	}
	sendBadTokens(t, g.addr, venue, 2)
	sendBadTokens(t, g.addr, attacker, 2)
	now := time.Now()
	require.False(t, g.admission.inDebt(sourceOf(netip.MustParseAddr(venue)), now), "2 bad tokens, 3 valid ones: not in debt")
	require.True(t, g.admission.inDebt(sourceOf(netip.MustParseAddr(attacker)), now), "2 bad tokens, no valid one: in debt")

	waitFor(t, func() bool { return g.admission.slotsHeld() == 0 }, "the first players' slots freed")
	pasting := connectFrom(t, g.addr, venue)
	holders := []*player{connectFrom(t, g.addr, attacker), connectFrom(t, g.addr, attacker), connectFrom(t, g.addr, attacker)}
	newcomer := connectFrom(t, g.addr, venue)
	assert.Equal(t, evictedLine, holders[0].rest())
	reachEcho(t, token, pasting, newcomer)
}

// TestEvictionSparesPlayersWhileAFloodTurnsOver: a flood's connections, evicted and back at once,
// are younger than a player pasting a token; the player, whose address presented a valid token
// lately, or who holds one connection where the flood holds many, keeps the slot.
func TestEvictionSparesPlayersWhileAFloodTurnsOver(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) {
		c.MaxConnections = 4
		c.MaxBadTokensPerMinute = 1000 // no one in debt: credit and numbers decide
		c.MaxConnectionsPerToken = 100
	})
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	const regular, newcomer, flood = "127.0.3.1", "127.0.3.2", "127.0.3.3"
	earlier := connectFrom(t, g.addr, regular)
	reachEcho(t, token, earlier)
	earlier.conn.Close()
	waitFor(t, func() bool { return g.admission.slotsHeld() == 0 }, "the earlier connection's slot freed")

	pasting := connectFrom(t, g.addr, regular) // the oldest, with credit
	first := connectFrom(t, g.addr, newcomer)  // no credit, one connection
	held := []*player{connectFrom(t, g.addr, flood), connectFrom(t, g.addr, flood)}
	for range 2 {
		// Each newcomer of the flood takes a slot of the flood's own.
		held = append(held, connectFrom(t, g.addr, flood))
	}
	assert.Equal(t, evictedLine, held[0].rest())
	assert.Equal(t, evictedLine, held[1].rest())
	reachEcho(t, token, pasting, first)
}

// TestFullOfSplicedConnections: with every slot spliced to an instance, a newcomer reads that the
// gateway is full before any prompt.
func TestFullOfSplicedConnections(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) { c.MaxConnections = 2 })
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	for range 2 {
		p := connect(t, g.addr)
		p.send(token + "\nx")
		p.expect("x")
	}
	p := dialGateway(t, g.addr)
	assert.Equal(t, "gateway full, try again later\n", p.rest())
	assert.EqualValues(t, 1, g.refused(reasonTooManyConnections))
}

// TestSlotHoldingCostsTheHolder: connections closed without a token (churn), silent to the
// deadline, or refused at their token's cap each count against their own address, and no other.
func TestSlotHoldingCostsTheHolder(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) {
		c.MaxBadTokensPerMinute = 3
		c.TokenTimeout = 200 * time.Millisecond
		c.MaxConnectionsPerToken = 1
	})
	inDebt := func(source string) bool {
		return g.admission.inDebt(sourceOf(netip.MustParseAddr(source)), time.Now())
	}
	const churner, silent, flooder = "127.0.1.1", "127.0.1.2", "127.0.1.3"
	for range 3 {
		connectFrom(t, g.addr, churner).conn.Close()
	}
	waitFor(t, func() bool { return inDebt(churner) }, "three early closes charged")

	for range 3 {
		p := connectFrom(t, g.addr, silent)
		assert.Equal(t, "no token within 200ms\n", p.rest())
	}
	waitFor(t, func() bool { return inDebt(silent) }, "three silent connections charged")

	token := mint(t, tcptoken.Target{Service: instance.addr()})
	p := connectFrom(t, g.addr, flooder)
	p.send(token + "\nx")
	p.expect("x")
	for range 3 {
		q := connectFrom(t, g.addr, flooder)
		q.send(token + "\n")
		assert.Contains(t, q.rest(), "too many connections with this token")
	}
	waitFor(t, func() bool { return inDebt(flooder) }, "three refusals at the token's cap charged")
	assert.False(t, inDebt("127.0.0.1"), "no one else pays")
}

// TestSourceOfGroupsIPv6Customers: an IPv6 customer's /56 is one source; IPv4 addresses are each
// their own.
func TestSourceOfGroupsIPv6Customers(t *testing.T) {
	a := sourceOf(netip.MustParseAddr("2001:db8:1:ff::1"))
	assert.Equal(t, a, sourceOf(netip.MustParseAddr("2001:db8:1:1::2")))
	assert.NotEqual(t, a, sourceOf(netip.MustParseAddr("2001:db8:1:100::1")))
	assert.Equal(t, netip.MustParseAddr("192.0.2.1"), sourceOf(netip.MustParseAddr("::ffff:192.0.2.1")))
	assert.NotEqual(t, sourceOf(netip.MustParseAddr("192.0.2.1")), sourceOf(netip.MustParseAddr("192.0.2.2")))
}

// TestTokenOutsideServiceCIDRsReachesNothing: a validly signed token for an address outside the
// Service CIDRs (the gateway's own loopback, a metadata address) dials nothing; loopback is
// dialled only when a loopback range is listed, never through a wider prefix.
func TestTokenOutsideServiceCIDRsReachesNothing(t *testing.T) {
	instance := startBackend(t, echo)
	for _, cidrs := range []string{"10.96.0.0/12", "0.0.0.0/0"} {
		g := startGateway(t, func(c *Config) { c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix(cidrs)} })
		p := connect(t, g.addr)
		p.send(mint(t, tcptoken.Target{Service: instance.addr()}) + "\n")
		assert.Equal(t, "this token leads to no instance\n", p.rest(), cidrs)
		assert.EqualValues(t, 1, g.refused(reasonNotAnInstance), cidrs)
	}
	assert.EqualValues(t, 0, instance.accepted.Load())
}

func TestDialable(t *testing.T) {
	for _, tc := range []struct {
		cidrs []string
		addr  string
		want  bool
	}{
		{[]string{"10.96.0.0/12"}, "10.96.0.10", true},
		{[]string{"10.96.0.0/12"}, "10.112.0.1", false},
		{[]string{"10.96.0.0/12", "fd00:10:96::/112"}, "fd00:10:96::1", true},
		{[]string{"10.96.0.0/12"}, "127.0.0.1", false},
		{[]string{"0.0.0.0/0"}, "127.0.0.1", false},
		{[]string{"0.0.0.0/0"}, "169.254.169.254", false},
		{[]string{"0.0.0.0/0"}, "0.0.0.0", false},
		{[]string{"0.0.0.0/0"}, "224.0.0.1", false},
		{[]string{"0.0.0.0/0"}, "192.0.2.1", true},
		{[]string{"::/0"}, "::1", false},
		{[]string{"::/0"}, "fe80::1", false},
		{[]string{"127.0.0.0/8"}, "127.0.0.1", true},
		{[]string{"127.0.0.1/32"}, "127.0.0.1", true},
		{[]string{"169.254.0.0/16"}, "169.254.169.254", true},
	} {
		g := &Gateway{cfg: Config{}}
		for _, c := range tc.cidrs {
			g.cfg.ServiceCIDRs = append(g.cfg.ServiceCIDRs, netip.MustParsePrefix(c))
		}
		assert.Equal(t, tc.want, g.dialable(netip.MustParseAddr(tc.addr)), "%s in %v", tc.addr, tc.cidrs)
	}
}

// TestIdleConnectionClosed: a spliced connection that moves no byte for the idle timeout is
// closed, within 1.25 times it; one that moves bytes one way only is not.
func TestIdleConnectionClosed(t *testing.T) {
	const idle = 400 * time.Millisecond
	ticker := startBackend(t, func(c net.Conn) {
		for range 20 {
			if _, err := c.Write([]byte{'.'}); err != nil {
				return
			}
			time.Sleep(idle / 8)
		}
		c.Write([]byte("done\n"))
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
	})
	silent := startBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	g := startGateway(t, func(c *Config) { c.IdleTimeout = idle })

	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: silent.addr()}) + "\n")
	start := time.Now()
	assert.Empty(t, p.rest())
	elapsed := time.Since(start)
	assert.GreaterOrEqual(t, elapsed, idle, "closed before the idle timeout")
	assert.Less(t, elapsed, idle*5/4+300*time.Millisecond, "closed late")
	waitFor(t, func() bool { return g.closed(closedIdle) == 1 }, "the idle close counted")

	// Two idle timeouts of output one way, the player silent: not idle.
	p = connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: ticker.addr()}) + "\n")
	assert.Equal(t, strings.Repeat(".", 20)+"done\n", p.rest())
}

// TestHalfClosePassedOn: the player's end of input reaches the instance, which still answers.
func TestHalfClosePassedOn(t *testing.T) {
	instance := startBackend(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		fmt.Fprintf(c, "read %d bytes\n", len(b))
	})
	g := startGateway(t, nil)
	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: instance.addr()}) + "\n")
	p.send(strings.Repeat("z", 100000))
	require.NoError(t, p.conn.CloseWrite())
	assert.Equal(t, "read 100000 bytes\n", p.rest())
}

// TestInstanceNotReachable: a token of a stopped instance gets one line.
func TestInstanceNotReachable(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	// A port free a moment ago, on a loopback address no test listens on: another test's listener
	// on 127.0.0.1 that took the port meanwhile (accepting, and saying nothing) cannot answer.
	stopped := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), ln.Addr().(*net.TCPAddr).AddrPort().Port())
	ln.Close()
	g := startGateway(t, nil)
	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: stopped}) + "\n")
	assert.Equal(t, "instance not reachable (stopped or starting?)\n", p.rest())
	assert.EqualValues(t, 1, g.refused(reasonUnreachable))
}

var puzzleLine = regexp.MustCompile(`^proof of work: sha256\(([0-9a-f]{32}) \+ answer\) with (\d+) leading zero bits; solve with: (.*) ([0-9a-f]{32}) (\d+)\n$`)

// readPuzzle reads the puzzle and its prompt and returns the challenge and the bits.
func (p *player) readPuzzle() (string, int, string) {
	p.t.Helper()
	line, err := p.r.ReadString('\n')
	require.NoError(p.t, err)
	m := puzzleLine.FindStringSubmatch(line)
	require.NotNil(p.t, m, "puzzle line %q", line)
	p.expect("answer: ")
	bits, err := strconv.Atoi(m[2])
	require.NoError(p.t, err)
	require.Equal(p.t, m[1], m[4], "the solver's command names the challenge")
	require.Equal(p.t, m[2], m[5], "the solver's command names the bits")
	return m[1], bits, m[3]
}

// solve finds an answer by brute force, independently of the gateway's check.
func solve(challenge string, bits int) string {
	for i := 0; ; i++ {
		sum := sha256.Sum256([]byte(challenge + strconv.Itoa(i)))
		v := binary.BigEndian.Uint64(sum[:8])
		if v>>(64-bits) == 0 {
			return strconv.Itoa(i)
		}
	}
}

// TestProofOfWork: a token that asks for work gets a puzzle; a right answer reaches the
// instance, a wrong one or none in time gets one line and no instance connection.
func TestProofOfWork(t *testing.T) {
	instance := startBackend(t, banner("welcome\n"))
	g := startGateway(t, func(c *Config) { c.ProofOfWorkTimeout = 300 * time.Millisecond })
	token := mint(t, tcptoken.Target{Service: instance.addr(), ProofOfWorkBits: 12})

	p := connect(t, g.addr)
	p.send(token + "\n")
	challenge, bits, _ := p.readPuzzle()
	require.Equal(t, 12, bits)
	p.send(solve(challenge, bits) + "\n")
	p.expect("welcome\n")

	p = connect(t, g.addr)
	p.send(token + "\n")
	challenge2, _, _ := p.readPuzzle()
	assert.NotEqual(t, challenge, challenge2, "a fresh challenge per connection")
	wrong := solve(challenge, bits) // the answer of another challenge
	if solves(challenge2, 12, []byte(wrong)) {
		t.Skip("the other challenge's answer happens to solve this one too")
	}
	p.send(wrong + "\n")
	assert.Equal(t, "wrong proof of work\n", p.rest())

	p = connect(t, g.addr)
	p.send(token + "\n")
	p.readPuzzle()
	assert.Equal(t, "no proof of work within 300ms\n", p.rest())

	assert.EqualValues(t, 1, instance.accepted.Load())
	assert.EqualValues(t, 1, g.refused(reasonWrongProofOfWork))
	waitFor(t, func() bool { return g.refused(reasonProofOfWorkTimeout) == 1 }, "the timeout counted")
}

// TestProofOfWorkSolverForPlayers runs the python one-liner the puzzle prints, as a player does.
func TestProofOfWorkSolverForPlayers(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	instance := startBackend(t, banner("welcome\n"))
	g := startGateway(t, nil)
	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: instance.addr(), ProofOfWorkBits: 10}) + "\n")
	challenge, bits, command := p.readPuzzle()
	require.Equal(t, Solver, command)
	// The command as printed, run by a shell: python3 -c '...' <challenge> <bits>.
	out, err := exec.Command("sh", "-c", fmt.Sprintf("%s %s %d", command, challenge, bits)).Output()
	require.NoError(t, err)
	p.send(string(out))
	p.expect("welcome\n")
}

// TestNoTokenInLogs: with debug logs, neither a valid token nor a bad one (nor the proof of
// work answer) appears in any log line; the player and the instance do.
func TestNoTokenInLogs(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, nil)
	valid := mint(t, tcptoken.Target{Service: instance.addr()})
	withWork := mint(t, tcptoken.Target{Service: instance.addr(), ProofOfWorkBits: 8})
	const badToken = "abcdefghijklmnopqrstuvwxyz234567"

	p := connect(t, g.addr)
	p.send(valid + "\nx")
	p.expect("x")
	p.conn.Close()
	p = connect(t, g.addr)
	p.send(badToken + "\n")
	p.rest()
	p = connect(t, g.addr)
	p.send(withWork + "\n")
	challenge, bits, _ := p.readPuzzle()
	answer := solve(challenge, bits)
	p.send(answer + "\n")
	p.send("y")
	p.expect("y")
	p.conn.Close()

	waitFor(t, func() bool { return g.closed(closedByPeers) == 2 }, "both connections logged")
	logs := g.logs.String()
	require.Contains(t, logs, `"reason":"invalid_token"`, "the refusal is logged")
	require.Contains(t, logs, instance.addr().String(), "the instance is logged")
	for _, secret := range []string{valid, withWork, badToken, valid[:16], valid[16:], challenge} {
		assert.NotContains(t, strings.ToLower(logs), secret)
	}
}

// TestDrain: on shutdown the gateway goes on accepting for the shutdown delay, then closes its
// listener; a spliced connection goes on until the drain timeout, then reads that the gateway
// restarts and is closed.
func TestDrain(t *testing.T) {
	instance := startBackend(t, echo)
	const delay = 300 * time.Millisecond
	g := startGateway(t, func(c *Config) {
		c.ShutdownDelay = delay
		c.DrainTimeout = 500 * time.Millisecond
	})
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	p := connect(t, g.addr)
	p.send(token + "\n")
	start := time.Now()
	g.cancel()
	late := connect(t, g.addr)
	late.send(token + "\nlate\n")
	late.expect("late\n")
	waitFor(t, func() bool {
		c, err := net.Dial("tcp4", g.addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the listener closed")
	assert.GreaterOrEqual(t, time.Since(start), delay, "new players accepted for the shutdown delay")
	p.send("still\n")
	p.expect("still\n")
	assert.Equal(t, restartLine, p.rest())
	assert.Equal(t, restartLine, late.rest())
	assert.GreaterOrEqual(t, time.Since(start), delay+500*time.Millisecond)
	waitFor(t, func() bool { return g.closed(closedShutdown) == 2 }, "the shutdown closes counted")
}

// TestIdleConnectionHoldsNoPipeNorGoroutine: once quiet, a spliced connection holds its two
// sockets, no splice pipe (two descriptors each way) and no goroutine, so that RLIMIT_NOFILE, not
// pipes, bounds how many idle players a gateway carries, and each costs little memory. Counted in
// this process: per connection the player's socket, the gateway's two and the instance's, and the
// instance's goroutine.
func TestIdleConnectionHoldsNoPipeNorGoroutine(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd")
	}
	// An instance that echoes through a buffer: io.Copy's splice would hold a pipe of its own.
	instance := startBackend(t, func(c net.Conn) {
		io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 512))
	})
	g := startGateway(t, func(c *Config) { c.MaxConnectionsPerToken = 100 })
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	// The descriptors open now, each as its number and what it refers to (socket:[inode],
	// pipe:[inode]): a number reused for another file counts as another descriptor.
	openFiles := func() map[string]bool {
		entries, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		open := map[string]bool{}
		for _, e := range entries {
			if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
				open[e.Name()+" "+target] = true
			}
		}
		return open
	}
	// Descriptors and goroutines of earlier tests' connections end a little later (on a loaded
	// machine, a few hundred milliseconds): start once both counts held still for a second. Only
	// the descriptors opened since count, so that one of theirs closing later changes nothing.
	before, goroutines := openFiles(), runtime.NumGoroutine()
	for settled := 0; settled < 20; {
		time.Sleep(50 * time.Millisecond)
		if now, nowGoroutines := openFiles(), runtime.NumGoroutine(); len(now) != len(before) || nowGoroutines != goroutines {
			before, goroutines, settled = now, nowGoroutines, 0
			continue
		}
		settled++
	}
	openedSince := func() int {
		opened := 0
		for f := range openFiles() {
			if !before[f] {
				opened++
			}
		}
		return opened
	}
	const n = 20
	for range n {
		p := connect(t, g.addr)
		p.send(token + "\nx")
		p.expect("x")
		p.send("y")
		p.expect("y")
	}
	// The pipes given back are kept for the next copies: the gateway's pool, not the
	// connections, holds them.
	waitFor(t, func() bool { return g.pipes.lent() == 0 }, "every pipe given back")
	assert.Equal(t, 4*n+2*g.pipes.idle(), openedSince(), "descriptors of %d idle connections (4 sockets each) and the pool's idle pipes", n)
	assert.LessOrEqual(t, g.pipes.idle(), splicePipes)
	waitFor(t, func() bool { return runtime.NumGoroutine()-goroutines == n },
		fmt.Sprintf("the goroutines of %d idle connections: the instance's %d, none of the gateway's", n, n))
}

// TestSpliceWithoutPoller: where the gateway has no poller (another system than Linux, or none
// could be made), each direction waits as a goroutine: bytes both ways, the half-close and the
// idle timeout work as with one.
func TestSpliceWithoutPoller(t *testing.T) {
	defer func(start func() (*poller, error)) { startPoller = start }(startPoller)
	startPoller = func() (*poller, error) { return nil, errNoPoller }
	instance := startBackend(t, echo)
	silent := startBackend(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	const idle = 400 * time.Millisecond
	g := startGateway(t, func(c *Config) { c.IdleTimeout = idle })
	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: instance.addr()}) + "\nx")
	p.expect("x")
	payload := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	sendAndHalfClose(t, p, payload)

	p = connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: silent.addr()}) + "\n")
	assert.Empty(t, p.rest())
	waitFor(t, func() bool { return g.closed(closedIdle) == 1 }, "the idle close counted")
}

// TestCopyWithoutPipes: with every pipe lent, copies go through a buffer: bulk bytes both ways and
// the half-close arrive as sent.
func TestCopyWithoutPipes(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, nil)
	g.pipes.setMax(0)
	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: instance.addr()}) + "\n")
	payload := make([]byte, 4<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	sendAndHalfClose(t, p, payload)
	assert.Equal(t, 0, g.pipes.lent()+g.pipes.idle(), "no pipe made")
}

// TestNoDescriptorReadsGatewayFull: when the gateway has no descriptor left to dial the instance,
// the player reads that the gateway is full, not that the instance is unreachable.
func TestNoDescriptorReadsGatewayFull(t *testing.T) {
	instance := startBackend(t, echo)
	g := startGateway(t, nil)
	g.dialer.Control = func(string, string, syscall.RawConn) error { return syscall.EMFILE }
	p := connect(t, g.addr)
	p.send(mint(t, tcptoken.Target{Service: instance.addr()}) + "\n")
	assert.Equal(t, "gateway full, try again later\n", p.rest())
	assert.EqualValues(t, 1, g.refused(reasonTooManyConnections))
	assert.EqualValues(t, 0, g.refused(reasonUnreachable))
}

// TestResetEndsBothSides: an instance that resets its connection (a crash) ends the player's at
// once, though the player was waiting, not sending; and the other way round.
func TestResetEndsBothSides(t *testing.T) {
	instanceConns := make(chan *net.TCPConn, 2)
	instance := startBackend(t, func(c net.Conn) {
		// Spliced once the player's first byte arrives.
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			return
		}
		instanceConns <- c.(*net.TCPConn)
		io.Copy(io.Discard, c)
	})
	g := startGateway(t, nil)
	token := mint(t, tcptoken.Target{Service: instance.addr()})

	p := connect(t, g.addr)
	p.send(token + "\nx")
	c := <-instanceConns
	require.NoError(t, c.SetLinger(0))
	c.Close()
	start := time.Now()
	assert.Empty(t, p.rest())
	assert.Less(t, time.Since(start), 5*time.Second)

	p = connect(t, g.addr)
	p.send(token + "\nx")
	c = <-instanceConns
	require.NoError(t, p.conn.SetLinger(0))
	p.conn.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.Copy(io.Discard, c)
	assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the instance's side still open 5 s after the player's reset")
}

// TestAcceptHandedOnAfterAdmission: the worker that accepted a connection hands accepting on only
// once the connection holds its slot, the pending connection it took evicted. The eviction wakes
// the evicted connection's goroutine; handed on after it, the next accept is the goroutine that
// runs next, and the evicted one waits behind it (the other way round, every accept at the cap
// waited behind the wake-ups of the evictions before it).
func TestAcceptHandedOnAfterAdmission(t *testing.T) {
	cfg := Defaults()
	cfg.Key = testKey
	cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	cfg.MaxConnections = 1
	g, err := New(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	require.NoError(t, err)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	pair := func() (*net.TCPConn, net.Conn) {
		client, err := net.Dial("tcp4", ln.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { client.Close() })
		server, err := ln.Accept()
		require.NoError(t, err)
		t.Cleanup(func() { server.Close() })
		return server.(*net.TCPConn), client
	}

	waiting, _ := pair()
	pending := g.admission.admit(waiting, netip.MustParseAddr("127.0.0.8"), time.Now())
	require.NotNil(t, pending)
	newcomer, client := pair()
	handedOn := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.handle(newcomer, func() {
			handedOn++
			assert.True(t, pending.evicted, "accepting handed on before the newcomer's admission evicted the pending connection")
			assert.Equal(t, 1, g.admission.slotsHeld())
		})
	}()
	client.Close()
	<-done
	assert.Equal(t, 1, handedOn)
}
