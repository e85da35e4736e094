package tcpgateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

var testKey = bytes.Repeat([]byte{0x42}, tcptoken.MinKeyBytes)

// backend is an instance on loopback that counts the connections it accepted.
type backend struct {
	ln       net.Listener
	accepted atomic.Int64
}

// startBackend serves serve on every connection of a new loopback listener.
func startBackend(t testing.TB, serve func(net.Conn)) *backend {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	b := &backend{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return b
}

func (b *backend) addr() netip.AddrPort {
	return b.ln.Addr().(*net.TCPAddr).AddrPort()
}

// echo answers every byte with itself and passes the end on.
func echo(c net.Conn) {
	io.Copy(c, c)
	c.(*net.TCPConn).CloseWrite()
}

// banner writes its banner, then echoes.
func banner(text string) func(net.Conn) {
	return func(c net.Conn) {
		io.WriteString(c, text)
		echo(c)
	}
}

// syncBuffer is a log destination safe for the gateway's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// testGateway is a gateway serving on loopback, with its logs (debug level) and metrics.
type testGateway struct {
	*Gateway
	addr     string
	logs     *syncBuffer
	registry *prometheus.Registry
	cancel   context.CancelFunc
	done     chan error
}

// startGateway serves a gateway with the default limits as changed by configure.
func startGateway(t testing.TB, configure func(*Config)) *testGateway {
	t.Helper()
	cfg := Defaults()
	cfg.Key = testKey
	// The test's instances listen on loopback: listed explicitly, as only a test does.
	cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if configure != nil {
		configure(&cfg)
	}
	logs := &syncBuffer{}
	registry := prometheus.NewRegistry()
	g, err := New(cfg, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), registry)
	require.NoError(t, err)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	tg := &testGateway{Gateway: g, addr: ln.Addr().String(), logs: logs, registry: registry, cancel: cancel, done: make(chan error, 1)}
	go func() { tg.done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-tg.done:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("the gateway did not stop")
		}
	})
	return tg
}

func (g *testGateway) refused(reason string) float64 {
	return counterValue(g.metrics.refused.WithLabelValues(reason))
}

func (g *testGateway) closed(reason string) float64 {
	return counterValue(g.metrics.closed.WithLabelValues(reason))
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func mint(t testing.TB, target tcptoken.Target) string {
	t.Helper()
	token, err := tcptoken.Mint(testKey, target)
	require.NoError(t, err)
	return token
}

// player is a client of the gateway.
type player struct {
	t    testing.TB
	conn *net.TCPConn
	r    *bufio.Reader
}

// connect dials the gateway and reads its prompt.
func connect(t testing.TB, addr string) *player {
	t.Helper()
	p := dialGateway(t, addr)
	p.expect(Prompt)
	return p
}

// dialGateway dials the gateway and reads nothing.
func dialGateway(t testing.TB, addr string) *player {
	t.Helper()
	return dialGatewayFrom(t, addr, "127.0.0.1")
}

// connectFrom dials the gateway from source, an address of the loopback range, and reads its
// prompt.
func connectFrom(t testing.TB, addr, source string) *player {
	t.Helper()
	p := dialGatewayFrom(t, addr, source)
	p.expect(Prompt)
	return p
}

// dialGatewayFrom dials the gateway from source and reads nothing.
func dialGatewayFrom(t testing.TB, addr, source string) *player {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	c, err := d.Dial("tcp4", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return &player{t: t, conn: c.(*net.TCPConn), r: bufio.NewReader(c)}
}

// expect reads exactly want.
func (p *player) expect(want string) {
	p.t.Helper()
	got := make([]byte, len(want))
	_, err := io.ReadFull(p.r, got)
	require.NoError(p.t, err, "reading %q", want)
	require.Equal(p.t, want, string(got))
}

func (p *player) send(s string) {
	p.t.Helper()
	_, err := io.WriteString(p.conn, s)
	require.NoError(p.t, err)
}

// rest reads until the gateway closes.
func (p *player) rest() string {
	p.t.Helper()
	b, err := io.ReadAll(p.r)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		require.NoError(p.t, err)
	}
	return string(b)
}

// sendAndHalfClose sends payload and the end of input from p, and expects the same bytes back
// from an echo instance, then its end.
func sendAndHalfClose(t testing.TB, p *player, payload []byte) {
	t.Helper()
	go func() {
		p.conn.Write(payload)
		p.conn.CloseWrite()
	}()
	got, err := io.ReadAll(p.r)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(payload, got), "%d bytes back of %d", len(got), len(payload))
}

// waitFor polls cond for up to 10 s: the gateway counts after it wrote.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reachEcho sends token, then a byte, from each player, and reads the byte echoed by the instance.
func reachEcho(t testing.TB, token string, players ...*player) {
	t.Helper()
	for _, p := range players {
		p.send(token + "\nx")
		p.expect("x")
	}
}

// sendBadTokens sends n bad tokens from source, one connection each, each answered "invalid token".
func sendBadTokens(t testing.TB, addr, source string, n int) {
	t.Helper()
	for range n {
		p := connectFrom(t, addr, source)
		p.send("guess\n")
		assert.Equal(t, "invalid token\n", p.rest())
	}
}
