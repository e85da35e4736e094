package tcpgateway

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// randomBytes is n random bytes: not UTF-8, as challenge output often is not.
func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// TestWebSocketWsrxEcho: wsrx's probe and handshake (no subprotocol) reach the instance, and 1 MiB
// of random bytes in binary frames comes back byte for byte, in binary frames only.
func TestWebSocketWsrxEcho(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, nil)
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	status, _ := probe(t, g.wsAddr, http.MethodOptions, "/ws/"+token)
	assert.Equal(t, http.StatusNoContent, status, "wsrx's OPTIONS probe")

	w := upgradeWS(t, g.wsAddr, "/ws/"+token)
	assert.Empty(t, w.resp.Header.Get("Sec-WebSocket-Protocol"), "no subprotocol offered, none selected")
	payload := randomBytes(t, 1<<20)
	go func() {
		for chunk := range slicesChunk(payload, 64<<10) {
			w.send(opBinary, chunk)
		}
	}()
	got := w.readBytes(len(payload))
	assert.True(t, bytes.Equal(payload, got), "1 MiB echoed byte for byte")
	assert.EqualValues(t, 0, instance.accepted.Load()-1, "one instance connection; the probe dialled nothing")
}

func slicesChunk(b []byte, n int) func(func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(b) > 0 {
			k := min(n, len(b))
			if !yield(b[:k]) {
				return
			}
			b = b[k:]
		}
	}
}

// TestWebSocketTextFramesAreBytes: websocat without -b sends text frames; their bytes reach the
// instance, and come back in binary frames.
func TestWebSocketTextFramesAreBytes(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, nil)
	w := upgradeWS(t, g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: instance.addr()}))
	w.send(opText, []byte("id\n"))
	w.send(opBinary, []byte{0xff, 0x00, '\n'})
	w.expect("id\n\xff\x00\n")
}

// TestWebSocketTokenInQueryAndSubprotocol: /ws?token= works as /ws/<token>; a client offering the
// subprotocol "binary" (websockify, noVNC) gets it.
func TestWebSocketTokenInQueryAndSubprotocol(t *testing.T) {
	instance := startBackend(t, banner("hello\n"))
	g := startWSGateway(t, nil)
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	status, _ := probe(t, g.wsAddr, http.MethodGet, "/ws?token="+token)
	assert.Equal(t, http.StatusNoContent, status, "GET without upgrade")
	request := strings.Replace(wsrxRequest(g.wsAddr, "/ws?token="+token, newWSKey()), "\r\n\r\n", "\r\nSec-WebSocket-Protocol: base64, binary\r\n\r\n", 1)
	w := dialWS(t, g.wsAddr, "127.0.0.1", request)
	require.Equal(t, http.StatusSwitchingProtocols, w.resp.StatusCode)
	assert.Equal(t, "binary", w.resp.Header.Get("Sec-WebSocket-Protocol"))
	w.expect("hello\n")
}

// TestWebSocketWsrxProbeAlias: wsrx probes its mapping's URL with every "ws" replaced by "http",
// the token's letters too: the probe of a token holding "ws" still answers 204; such a URL opens no
// WebSocket.
func TestWebSocketWsrxProbeAlias(t *testing.T) {
	g := startWSGateway(t, nil)
	var token string
	for port := uint16(1000); !strings.Contains(token, "ws"); port++ {
		token = mint(t, tcptoken.Target{Service: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)})
	}
	for _, path := range []string{"/ws/" + token, "/ws?token=" + token} {
		status, _ := probe(t, g.wsAddr, http.MethodOptions, strings.ReplaceAll(path, "ws", "http"))
		assert.Equal(t, http.StatusNoContent, status, path)
	}
	w := dialWS(t, g.wsAddr, "127.0.0.1", wsrxRequest(g.wsAddr, strings.ReplaceAll("/ws/"+token, "ws", "http"), newWSKey()))
	assert.Equal(t, http.StatusNotFound, w.resp.StatusCode)
}

// TestWebSocketBadTokensReachNothing: a forged token, one of another key, one outside the Service
// CIDRs and a URL without a token are answered 404 to the probe and to the upgrade, and no
// connection reaches any instance.
func TestWebSocketBadTokensReachNothing(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, func(c *Config) {
		c.MaxBadTokensPerMinute = 1000
		c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	valid := mint(t, tcptoken.Target{Service: instance.addr()})
	forged := valid[:10] + string("ab"[boolIndex(valid[10] == 'a')]) + valid[11:]
	otherKey, err := tcptoken.Mint(bytes.Repeat([]byte{1}, tcptoken.MinKeyBytes), tcptoken.Target{Service: instance.addr()})
	require.NoError(t, err)
	outside := mint(t, tcptoken.Target{Service: netip.MustParseAddrPort("10.96.0.10:1337")})
	for name, path := range map[string]string{
		"forged": "/ws/" + forged, "other key": "/ws/" + otherKey, "outside the CIDRs": "/ws?token=" + outside,
		"garbage": "/ws/..%2f..%2fetc", "no token": "/ws", "other path": "/" + valid, "too long": "/ws/" + strings.Repeat(valid, 5),
	} {
		for _, method := range []string{http.MethodOptions, http.MethodGet} {
			status, _ := probe(t, g.wsAddr, method, path)
			assert.Equal(t, http.StatusNotFound, status, "%s %s", name, method)
		}
		w := dialWS(t, g.wsAddr, "127.0.0.1", wsrxRequest(g.wsAddr, path, newWSKey()))
		assert.Equal(t, http.StatusNotFound, w.resp.StatusCode, name)
		assert.NotContains(t, w.body(), valid[:8], name)
	}
	assert.EqualValues(t, 0, instance.accepted.Load(), "no bad token dialled the instance")
	w := upgradeWS(t, g.wsAddr, "/ws/"+valid)
	w.send(opBinary, []byte("x"))
	w.expect("x")
	assert.EqualValues(t, 1, instance.accepted.Load(), "the valid token does")
}

// TestWebSocketPerTokenCapSharedWithTCP: a token's connections count together, TCP and WebSocket:
// past the cap, either is refused and dials nothing.
func TestWebSocketPerTokenCapSharedWithTCP(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, func(c *Config) { c.MaxConnectionsPerToken = 2 })
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	p := connect(t, g.addr)
	reachEcho(t, token, p)
	w := upgradeWS(t, g.wsAddr, "/ws/"+token)
	w.send(opBinary, []byte("y"))
	w.expect("y")

	refused := dialWS(t, g.wsAddr, "127.0.0.1", wsrxRequest(g.wsAddr, "/ws/"+token, newWSKey()))
	assert.Equal(t, http.StatusTooManyRequests, refused.resp.StatusCode)
	assert.Contains(t, refused.body(), "too many connections with this token (at most 2 at once)")
	q := connect(t, g.addr)
	q.send(token + "\n")
	assert.Contains(t, q.rest(), "too many connections with this token")
	assert.EqualValues(t, 2, instance.accepted.Load())

	w.conn.Close()
	waitFor(t, func() bool { return g.targets.acquire(instance.addr()) }, "the WebSocket's place freed")
	g.targets.release(instance.addr())
}

// TestWebSocketSilentUpgradeEvicted: at the cap, a connection still sending its upgrade request is
// pending as a TCP one presenting its token: a newcomer takes its slot, and it reads why.
func TestWebSocketSilentUpgradeEvicted(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, func(c *Config) { c.MaxConnections = 3 })
	slow := func() *net.TCPConn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.4")}}
		c, err := d.Dial("tcp4", g.wsAddr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(c, "GET /ws/")
		return c.(*net.TCPConn)
	}
	oldest := slow()
	waitFor(t, func() bool { return g.admission.slotsHeld() == 1 }, "the first slot held")
	slow()
	younger := connectFrom(t, g.addr, "127.0.0.5")

	newcomer := connectFrom(t, g.addr, "127.0.0.6")
	got, _ := io.ReadAll(oldest)
	assert.Contains(t, string(got), "503 Service Unavailable")
	assert.Contains(t, string(got), evictedRequestLine)
	assert.EqualValues(t, 1, g.refused(reasonEvicted))
	reachEcho(t, mint(t, tcptoken.Target{Service: instance.addr()}), newcomer, younger)
}

// TestWebSocketForwardedFor: X-Forwarded-For names the player only from a trusted proxy: then the
// PROXY header carries the rightmost address outside the trusted proxies; from another peer, the
// peer's.
func TestWebSocketForwardedFor(t *testing.T) {
	headers := make(chan proxyV2, 1)
	instance := startBackend(t, func(c net.Conn) {
		b := make([]byte, 28)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, b); err == nil {
			headers <- parseProxyV2Header(t, b)
		}
		echo(c)
	})
	g := startWSGateway(t, func(c *Config) {
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}
	})
	token := mint(t, tcptoken.Target{Service: instance.addr(), ProxyProtocol: true})
	forwarded := "X-Forwarded-For: 198.51.100.1, 203.0.113.7\r\nX-Forwarded-For: 10.1.2.3\r\n\r\n"
	for source, want := range map[string]string{"127.0.0.1": "203.0.113.7", "127.0.0.2": "127.0.0.2"} {
		request := strings.Replace(wsrxRequest(g.wsAddr, "/ws/"+token, newWSKey()), "\r\n\r\n", "\r\n"+forwarded, 1)
		w := dialWS(t, g.wsAddr, source, request)
		require.Equal(t, http.StatusSwitchingProtocols, w.resp.StatusCode)
		h := <-headers
		assert.Equal(t, want, h.source.Addr().String(), "from %s", source)
		assert.Equal(t, w.conn.RemoteAddr().(*net.TCPAddr).AddrPort(), h.destination)
		w.send(opBinary, []byte("z"))
		w.expect("z")
	}
}

func TestPlayerOf(t *testing.T) {
	g := &Gateway{cfg: Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}}
	peer := netip.MustParseAddrPort("10.0.0.1:4000")
	for _, tc := range []struct {
		peer string
		xff  []string
		want string
	}{
		{"192.0.2.1:5", []string{"203.0.113.7"}, "192.0.2.1:5"},
		{"", []string{"203.0.113.7"}, "203.0.113.7:0"},
		{"", []string{"1.1.1.1, 203.0.113.7, 10.2.2.2"}, "203.0.113.7:0"},
		{"", []string{"1.1.1.1", "203.0.113.7:443"}, "203.0.113.7:0"},
		{"", []string{"2001:db8::1, fd00::2"}, "[2001:db8::1]:0"},
		{"", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3:0"},
		{"", []string{"garbage, 10.2.2.2"}, "10.2.2.2:0"},
		{"", nil, "10.0.0.1:4000"},
	} {
		p := peer
		if tc.peer != "" {
			p = netip.MustParseAddrPort(tc.peer)
		}
		h := http.Header{"X-Forwarded-For": tc.xff}
		assert.Equal(t, tc.want, g.playerOf(p, h).String(), "%v", tc)
	}
}

// TestWebSocketBounds: a message past maxMessageBytes is closed with 1009; headers past
// maxRequestBytes are answered 431; a request not sent within the token timeout 408; a bad
// upgrade 400 with what was wrong.
func TestWebSocketBounds(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, func(c *Config) { c.TokenTimeout = 300 * time.Millisecond })
	token := mint(t, tcptoken.Target{Service: instance.addr()})

	w := upgradeWS(t, g.wsAddr, "/ws/"+token)
	_, err := w.conn.Write(clientFrame(opBinary, []byte("abc"), maxMessageBytes+1))
	require.NoError(t, err)
	code, _ := w.readClose()
	assert.Equal(t, 1009, code, "message too big")

	big := strings.Replace(wsrxRequest(g.wsAddr, "/ws/"+token, newWSKey()), "\r\n\r\n", "\r\nCookie: "+strings.Repeat("a", maxRequestBytes)+"\r\n\r\n", 1)
	w = dialWS(t, g.wsAddr, "127.0.0.1", big)
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, w.resp.StatusCode)

	w = dialWS(t, g.wsAddr, "127.0.0.1", "GET /ws/"+token+" HTTP/1.1\r\nHost: x\r\n")
	assert.Equal(t, http.StatusRequestTimeout, w.resp.StatusCode)
	assert.Equal(t, "no request within 300ms\n", w.body())

	bad := strings.Replace(wsrxRequest(g.wsAddr, "/ws/"+token, newWSKey()), "Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8", 1)
	w = dialWS(t, g.wsAddr, "127.0.0.1", bad)
	assert.Equal(t, http.StatusBadRequest, w.resp.StatusCode)
	assert.Contains(t, w.body(), "bad WebSocket upgrade: websocket: unsupported version")
	assert.EqualValues(t, 1, instance.accepted.Load(), "only the first reached the instance")
}

// TestWebSocketInstanceEndCloses: the instance's end is a close frame, normal closure, after its
// last bytes; the player's close frame is the instance's end of input, whose answer still comes.
func TestWebSocketInstanceEndCloses(t *testing.T) {
	goodbye := startBackend(t, func(c net.Conn) { io.WriteString(c, "bye\n") })
	counter := startBackend(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		io.WriteString(c, "read "+string(rune('0'+len(b)))+" bytes\n")
	})
	g := startWSGateway(t, nil)
	w := upgradeWS(t, g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: goodbye.addr()}))
	w.expect("bye\n")
	code, _ := w.readClose()
	assert.Equal(t, 1000, code)
	w.send(opClose, []byte{0x03, 0xe8})

	w = upgradeWS(t, g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: counter.addr()}))
	w.send(opBinary, []byte("12345"))
	w.send(opClose, []byte{0x03, 0xe8})
	w.expect("read 5 bytes\n")
	code, _ = w.readClose()
	assert.Equal(t, 1000, code)
	waitFor(t, func() bool { return g.closed(closedByPeers) == 2 }, "both closes counted")
}

// TestWebSocketProofOfWork: the puzzle and its prompt come in binary messages, the answer goes in
// a message, and what follows the answer's line reaches the instance first.
func TestWebSocketProofOfWork(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, func(c *Config) { c.ProofOfWorkTimeout = 2 * time.Second })
	token := mint(t, tcptoken.Target{Service: instance.addr(), ProofOfWorkBits: 10})
	w := upgradeWS(t, g.wsAddr, "/ws/"+token)
	p := &player{t: t, r: bufioOf(w)}
	challenge, bits, _ := p.readPuzzle()
	w.send(opText, []byte(solve(challenge, bits)+"\nfirst"))
	w.expect("first")

	w = upgradeWS(t, g.wsAddr, "/ws/"+token)
	p = &player{t: t, r: bufioOf(w)}
	p.readPuzzle()
	w.send(opBinary, []byte("wrong\n"))
	w.expect("wrong proof of work\n")
	code, reason := w.readClose()
	assert.Equal(t, 1008, code)
	assert.Equal(t, reasonWrongProofOfWork, reason)
	assert.EqualValues(t, 1, instance.accepted.Load())
}

// TestWebSocketIdleAndActivity: the spliced WebSocket's bytes are its instance's activity; one that
// moves none for the idle timeout is closed though the gateway pings it.
func TestWebSocketIdleAndActivity(t *testing.T) {
	instance := startBackend(t, echo)
	const idle = 400 * time.Millisecond
	g := startWSGateway(t, func(c *Config) { c.IdleTimeout = idle })
	before := time.Now()
	w := upgradeWS(t, g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: instance.addr()}))
	w.send(opBinary, []byte("x"))
	w.expect("x")
	// Counted once written on: the player may read the echo before the gateway's count.
	waitFor(t, func() bool { return len(g.Activity(before)) == 1 }, "the echo counted as activity")
	got := g.Activity(before)
	assert.Equal(t, instance.addr(), got[0].Address)
	start := time.Now()
	_, _, err := w.readFrame()
	for err == nil {
		_, _, err = w.readFrame()
	}
	assert.Less(t, time.Since(start), idle*2+time.Second)
	waitFor(t, func() bool { return g.closed(closedIdle) == 1 }, "the idle close counted")
	assert.NotEmpty(t, g.Activity(before), "its activity stays after its end")
}

// TestWebSocketDrain: at the drain's end a spliced WebSocket reads close 1012, the gateway
// restarting; TCP players read their line as before.
func TestWebSocketDrain(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, func(c *Config) {
		c.ShutdownDelay = 100 * time.Millisecond
		c.DrainTimeout = 300 * time.Millisecond
	})
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	w := upgradeWS(t, g.wsAddr, "/ws/"+token)
	p := connect(t, g.addr)
	reachEcho(t, token, p)
	g.cancel()
	g.wsCancel()
	code, reason := w.readClose()
	assert.Equal(t, 1012, code)
	assert.Equal(t, "gateway restarting, reconnect", reason)
	assert.Equal(t, restartLine, p.rest())
	waitFor(t, func() bool { return g.closed(closedShutdown) == 2 }, "both shutdown closes counted")
}

// TestWebSocketNoTokenInLogs: with debug logs, no token of a probe, an upgrade or a refused
// upgrade appears in any line.
func TestWebSocketNoTokenInLogs(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, nil)
	valid := mint(t, tcptoken.Target{Service: instance.addr()})
	const bad = "abcdefghijklmnopqrstuvwxyz234567"
	probe(t, g.wsAddr, http.MethodOptions, "/ws/"+valid)
	probe(t, g.wsAddr, http.MethodOptions, "/ws?token="+bad)
	dialWS(t, g.wsAddr, "127.0.0.1", wsrxRequest(g.wsAddr, "/ws/"+bad, newWSKey()))
	w := upgradeWS(t, g.wsAddr, "/ws/"+valid)
	w.send(opBinary, []byte("x"))
	w.expect("x")
	w.conn.Close()
	waitFor(t, func() bool { return g.closed(closedByPeers) == 1 }, "the connection logged")
	logs := strings.ToLower(g.logs.String())
	require.Contains(t, logs, `"websocket":true`)
	for _, secret := range []string{valid, bad, valid[:16], valid[16:], url.QueryEscape(valid)} {
		assert.NotContains(t, logs, secret)
	}
}

// FuzzTokenOf: any request target parses without panic, and a token is read only from the two
// URL shapes, never with a slash.
func FuzzTokenOf(f *testing.F) {
	for _, s := range []string{"/ws/abc", "/ws?token=abc", "/http/abc", "/ws/", "/ws//x", "/wsx/abc", "/ws?token=a&token=b", "/%77s/abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		token, _, ok := tokenOf(u)
		if !ok {
			return
		}
		assert.NotEmpty(t, token)
		if !strings.HasSuffix(u.Path, "/ws") && !strings.HasSuffix(u.Path, "/http") {
			assert.NotContains(t, token, "/")
			assert.True(t, strings.HasPrefix(u.Path, "/ws/") || strings.HasPrefix(u.Path, "/http/"), u.Path)
		}
	})
}

// TestWebSocketFramesSplitAnywhere: the player's frames are read as the bytes arrive (wsFrames),
// whatever the split: a fragmented message with a ping between its fragments (answered with its
// payload), a 16-bit length, an empty frame, all sent one byte at a time.
func TestWebSocketFramesSplitAnywhere(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, nil)
	w := upgradeWS(t, g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: instance.addr()}))
	long := strings.Repeat("x", 300) + "\n"
	first := clientFrame(opBinary, []byte("hel"), 3)
	first[0] &^= 0x80 // not final
	last := clientFrame(0, []byte("lo\n"), 3)
	var stream []byte
	for _, f := range [][]byte{first, clientFrame(0x9, []byte("ping"), 4), last, clientFrame(opText, []byte(long), len(long)), clientFrame(opBinary, nil, 0)} {
		stream = append(stream, f...)
	}
	for _, b := range stream {
		_, err := w.conn.Write([]byte{b})
		require.NoError(t, err)
		time.Sleep(100 * time.Microsecond)
	}
	var got []byte
	pongs := 0
	for len(got) < len("hello\n"+long) {
		opcode, payload, err := w.readFrame()
		require.NoError(t, err)
		switch opcode {
		case 0xa:
			pongs++
			assert.Equal(t, "ping", string(payload))
		case opBinary:
			got = append(got, payload...)
		}
	}
	assert.Equal(t, "hello\n"+long, string(got))
	assert.Equal(t, 1, pongs, "the ping answered")
}

// TestUnmaskTo: unmasking moved down over the bytes before (a frame header's length or more) is
// the byte-wise unmasking, from any key position.
func TestUnmaskTo(t *testing.T) {
	key := [4]byte{1, 2, 3, 250}
	for _, shift := range []int{0, 2, 14} {
		for pos := range 4 {
			b := make([]byte, 100+shift)
			for i := range b {
				b[i] = byte(i * 7)
			}
			want := make([]byte, 100)
			for i := range want {
				want[i] = b[shift+i] ^ key[(pos+i)&3]
			}
			assert.Equal(t, (pos+100)&3, unmaskTo(key, pos, b, b[shift:]))
			assert.Equal(t, want, b[:100], "shift %d, pos %d", shift, pos)
		}
	}
}

// TestWebSocketMessagesToASlowReader: the instance's bytes reach a player who reads slowly (the
// gateway's writes stop part-way through headers and payloads) byte for byte, in whole binary
// messages of at most 64 KiB, and the pongs to the player's pings come between two messages,
// each whole.
func TestWebSocketMessagesToASlowReader(t *testing.T) {
	payload := randomBytes(t, 8<<20)
	instance := startBackend(t, func(c net.Conn) { c.Write(payload) })
	g := startWSGateway(t, nil)
	w := upgradeWS(t, g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: instance.addr()}))
	const pings = 50
	go func() {
		for i := range pings {
			w.conn.Write(clientFrame(opPing, []byte(fmt.Sprint("ping ", i)), len(fmt.Sprint("ping ", i))))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(100 * time.Millisecond) // the socket buffers fill up
	var got []byte
	var pongs []string
	for {
		opcode, frame, err := w.readFrame()
		require.NoError(t, err, "after %d bytes", len(got))
		switch opcode {
		case opBinary:
			require.LessOrEqual(t, len(frame), wsMessageBytes)
			got = append(got, frame...)
			if len(got)%(256<<10) < len(frame) {
				time.Sleep(5 * time.Millisecond)
			}
			continue
		case 0xa:
			pongs = append(pongs, string(frame))
			continue
		}
		require.Equal(t, byte(opClose), opcode, "after %d bytes", len(got))
		break
	}
	assert.True(t, bytes.Equal(payload, got), "8 MiB byte for byte (%d bytes came)", len(got))
	for i, pong := range pongs {
		assert.Equal(t, fmt.Sprint("ping ", i), pong)
	}
	assert.NotEmpty(t, pongs)
}

// TestWebSocketControlFrameWaitsItsTurn: a control frame (a ping, a pong, a close) due while the
// instance's messages wait for a player who does not read is dropped at its deadline, and the
// messages are not cut by it: once the player reads, every byte comes in whole messages, and a
// control frame sent then comes after them, whole; nothing comes after a close frame.
func TestWebSocketControlFrameWaitsItsTurn(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("tcp4", ln.Addr().String())
	require.NoError(t, err)
	defer client.Close()
	server, err := ln.Accept()
	require.NoError(t, err)
	defer server.Close()
	c := &wsSession{player: server.(*net.TCPConn), turn: make(chan struct{}, 1)}

	payload := randomBytes(t, 32<<20) // beyond what the two sockets' buffers hold
	written := make(chan error, 1)
	go func() {
		err := c.writeMessages(payload)
		if err != nil {
			server.Close() // the player's read ends here, not at its deadline
		}
		written <- err
	}()
	waitFor(t, func() bool { return len(c.turn) == 1 }, "the messages' write in its turn")
	time.Sleep(100 * time.Millisecond) // the socket buffers fill up
	err = c.writeControl(websocket.PingMessage, []byte("dropped"), time.Now().Add(100*time.Millisecond))
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "no turn by the deadline: the ping is dropped")

	client.SetReadDeadline(time.Now().Add(10 * time.Second))
	w := &wsClient{t: t, conn: client.(*net.TCPConn), r: bufio.NewReader(client)}
	got := w.readBytes(len(payload))
	require.NoError(t, <-written, "the messages' write, not cut by the ping's deadline")
	assert.True(t, bytes.Equal(payload, got), "32 MiB byte for byte")
	require.NoError(t, c.writeControl(websocket.PingMessage, []byte("sent"), time.Now().Add(time.Second)))
	opcode, frame, err := w.readFrame()
	require.NoError(t, err)
	assert.Equal(t, byte(opPing), opcode)
	assert.Equal(t, "sent", string(frame))

	require.NoError(t, c.writeControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second)))
	assert.ErrorIs(t, c.writeMessages([]byte("after the close")), websocket.ErrCloseSent, "no message after a close frame")
	server.Close()
	opcode, _, err = w.readFrame()
	require.NoError(t, err)
	assert.Equal(t, byte(opClose), opcode)
	_, _, err = w.readFrame()
	assert.ErrorIs(t, err, io.EOF, "nothing after the close frame")
}

// TestWebSocketBufferBound: at most maxLarge large buffers are lent at once, then small ones;
// each given back makes room for the next.
func TestWebSocketBufferBound(t *testing.T) {
	p := newWSBufferPool(2)
	a, b, small := p.get(), p.get(), p.get()
	assert.Len(t, a, wsBufferBytes)
	assert.Len(t, b, wsBufferBytes)
	assert.Len(t, small, wsSmallBufferBytes, "past the bound, a small buffer")
	p.put(a)
	assert.Len(t, p.get(), wsBufferBytes, "a large one given back, a large one lent")
	p.put(small)
	assert.Equal(t, 2, p.lent())
}

// TestWebSocketSmallBuffersOnly: with every large buffer lent, 4 MiB of random bytes go to the
// instance and back byte for byte through the small ones.
func TestWebSocketSmallBuffersOnly(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, nil)
	g.wsBuffers.maxLarge = 0
	w := upgradeWS(t, g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: instance.addr()}))
	payload := randomBytes(t, 4<<20)
	go func() {
		for chunk := range slicesChunk(payload, 64<<10) {
			w.send(opBinary, chunk)
		}
	}()
	assert.True(t, bytes.Equal(payload, w.readBytes(len(payload))), "4 MiB echoed byte for byte")
	assert.Zero(t, g.wsBuffers.made.Load(), "no large buffer made")
}
