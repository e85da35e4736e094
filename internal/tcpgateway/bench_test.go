package tcpgateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// The benchmarks compare the gateway with a direct connection to the same echo instance, in the
// same run: each has a direct and a gateway sub-benchmark. p50 and p99 are of the operations'
// own durations. make bench-gateway is the loopback load run with the gateway in a process of its
// own (hack/tcpgateway-load).

// benchPaths returns the ways to the same echo instance: dial directly, through a gateway and its
// token, or through the same gateway's WebSocket listener (wsrx's upgrade, binary messages).
func benchPaths(b *testing.B) map[string]func() net.Conn {
	instance := startBackend(b, echo)
	g := startWSGateway(b, func(c *Config) {
		c.MaxConnectionsPerToken = 1 << 20
	})
	minted := mint(b, tcptoken.Target{Service: instance.addr()})
	wsPath := "/ws/" + minted
	token := []byte(minted + "\n")
	prompt := make([]byte, len(Prompt))
	return map[string]func() net.Conn{
		"direct": func() net.Conn {
			c, err := net.Dial("tcp4", instance.addr().String())
			require.NoError(b, err)
			return c
		},
		"gateway": func() net.Conn {
			c, err := net.Dial("tcp4", g.addr)
			require.NoError(b, err)
			_, err = io.ReadFull(c, prompt)
			require.NoError(b, err)
			_, err = c.Write(token)
			require.NoError(b, err)
			return c
		},
		"websocket": func() net.Conn {
			// Not dialWS: a connection bound to its source address before it connects takes a
			// port of its own for good, and a benchmark's thousands of connections run out of them.
			c, err := net.Dial("tcp4", g.wsAddr)
			require.NoError(b, err)
			_, err = io.WriteString(c, wsrxRequest(g.wsAddr, wsPath, newWSKey()))
			require.NoError(b, err)
			w := &wsClient{t: b, conn: c.(*net.TCPConn), r: bufio.NewReader(c)}
			w.resp, err = http.ReadResponse(w.r, nil)
			require.NoError(b, err)
			require.Equal(b, http.StatusSwitchingProtocols, w.resp.StatusCode)
			return &wsBenchConn{TCPConn: w.conn, r: &frameReader{w: w}}
		},
	}
}

// wsBenchConn is a WebSocket as the stream it carries: bytes out in a binary message each write,
// in from the binary messages read.
type wsBenchConn struct {
	*net.TCPConn
	r *frameReader
}

func (c *wsBenchConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *wsBenchConn) Write(p []byte) (int, error) {
	if _, err := c.TCPConn.Write(clientFrame(opBinary, p, len(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// echoByte sends one byte and reads it back.
func echoByte(b *testing.B, c net.Conn) {
	buf := []byte{'x'}
	_, err := c.Write(buf)
	require.NoError(b, err)
	_, err = io.ReadFull(c, buf)
	require.NoError(b, err)
}

// reportPercentiles adds p50 and p99 of the durations, in microseconds.
func reportPercentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1000, "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1000, "p99-µs")
}

// BenchmarkConnect: from dial to the first byte echoed by the instance, then close.
func BenchmarkConnect(b *testing.B) {
	paths := benchPaths(b)
	for _, name := range []string{"direct", "gateway", "websocket"} {
		b.Run(name, func(b *testing.B) {
			d := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				c := paths[name]()
				echoByte(b, c)
				d = append(d, time.Since(start))
				c.Close()
			}
			reportPercentiles(b, d)
		})
	}
}

// BenchmarkEcho: a 1-byte round trip on an open connection.
func BenchmarkEcho(b *testing.B) {
	paths := benchPaths(b)
	for _, name := range []string{"direct", "gateway", "websocket"} {
		b.Run(name, func(b *testing.B) {
			c := paths[name]()
			defer c.Close()
			echoByte(b, c)
			d := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				echoByte(b, c)
				d = append(d, time.Since(start))
			}
			reportPercentiles(b, d)
		})
	}
}

// BenchmarkBulk: 4 MiB each way per operation through the echo instance, written and read at
// once on one connection.
func BenchmarkBulk(b *testing.B) {
	const chunk = 4 << 20
	paths := benchPaths(b)
	for _, name := range []string{"direct", "gateway"} {
		b.Run(name, func(b *testing.B) {
			c := paths[name]()
			defer c.Close()
			echoByte(b, c)
			out := make([]byte, 64<<10)
			in := make([]byte, 64<<10)
			b.SetBytes(chunk)
			for b.Loop() {
				done := make(chan error, 1)
				go func() {
					var err error
					for sent := 0; sent < chunk && err == nil; sent += len(out) {
						_, err = c.Write(out)
					}
					done <- err
				}()
				for got := 0; got < chunk; {
					n, err := c.Read(in)
					require.NoError(b, err)
					got += n
				}
				require.NoError(b, <-done)
			}
		})
	}
}

// BenchmarkWebSocketBulk: BenchmarkBulk's 4 MiB each way through the WebSocket listener, sent in
// 64 KiB binary messages (as wsrx and websocat send them) and read back from the gateway's
// binary messages; for a profile of the gateway's share (the client masks nothing: its frames
// are masked once, before the timer).
func BenchmarkWebSocketBulk(b *testing.B) {
	const chunk = 4 << 20
	instance := startBackend(b, echo)
	g := startWSGateway(b, nil)
	w := upgradeWS(b, g.wsAddr, "/ws/"+mint(b, tcptoken.Target{Service: instance.addr()}))
	defer w.conn.Close()
	w.send(opBinary, []byte("x"))
	w.expect("x")
	out := clientFrame(opBinary, make([]byte, 64<<10), 64<<10)
	b.SetBytes(chunk)
	for b.Loop() {
		done := make(chan error, 1)
		go func() {
			var err error
			for sent := 0; sent < chunk && err == nil; sent += 64 << 10 {
				_, err = w.conn.Write(out)
			}
			done <- err
		}()
		for got := 0; got < chunk; {
			_, payload, err := w.readFrame()
			require.NoError(b, err)
			got += len(payload)
		}
		require.NoError(b, <-done)
	}
}
