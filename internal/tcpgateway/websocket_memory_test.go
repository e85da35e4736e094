package tcpgateway

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// idleWebSocketBound bounds what an idle spliced WebSocket costs, measured as below: about 4.6
// KiB on linux/amd64 (Go 1.26), no goroutine (both directions park in the gateway's poller, the
// player's frames read by wsFrames between two reads, not by the library's NextReader): the
// descriptors, the library's reader (512 bytes) and connection, the session with its directions
// and frame state, and the test's own two sockets. It was 11.4 KiB with a goroutine per direction.
// Issue 52's target is 8 KiB of RSS per idle WebSocket in make bench-gateway. A regression guard.
const idleWebSocketBound = 6 << 10

// TestWebSocketIdleConnectionMemory opens n spliced WebSocket connections that then stay idle,
// and measures the heap and stacks in use before and after (after collections, with every pooled
// buffer dropped). The clients (bare sockets that sent the upgrade) and the instance (a listener
// holding its accepted sockets, no goroutine) are in this process too: what it measures is the
// gateway's cost plus two sockets, an upper bound of the gateway's.
func TestWebSocketIdleConnectionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1000 connections")
	}
	const n = 500
	ln, held := holdingInstance(t)
	g := startWSGateway(t, func(c *Config) { c.MaxConnectionsPerToken = n + 1 })
	request := wsrxRequest(g.wsAddr, "/ws/"+mint(t, tcptoken.Target{Service: ln.Addr().(*net.TCPAddr).AddrPort()}), "dGhlIHNhbXBsZSBub25jZQ==")
	upgrade := func() net.Conn {
		c, err := net.Dial("tcp4", g.wsAddr)
		require.NoError(t, err)
		_, err = io.WriteString(c, request)
		require.NoError(t, err)
		var buf [512]byte
		got := 0
		for !bytes.Contains(buf[:got], []byte("\r\n\r\n")) {
			k, err := c.Read(buf[got:])
			require.NoError(t, err)
			got += k
		}
		require.True(t, strings.HasPrefix(string(buf[:got]), "HTTP/1.1 101 "), "%s", buf[:got])
		return c
	}
	upgrade().Close() // the pools and the workers exist before the first measure
	before := inUse()
	clients := make([]net.Conn, 0, n)
	for range n {
		clients = append(clients, upgrade())
	}
	waitFor(t, func() bool { return held.count() == n+1 }, "every connection spliced")
	after := inUse()
	perConn := (int64(after) - int64(before)) / n
	t.Logf("%d idle WebSocket connections: %d bytes each (heap and stacks in use, the client's and the instance's sockets included)", n, perConn)
	assert.LessOrEqual(t, perConn, int64(idleWebSocketBound))
	// Ended before the gateway's drain: the instance's sockets, then the players'.
	held.close()
	for _, c := range clients {
		c.Close()
	}
	waitFor(t, func() bool { return g.admission.slotsHeld() == 0 }, "every connection ended")
}

// inUse is the heap and stack memory in use after collections that dropped the pools' buffers.
func inUse() uint64 {
	for range 3 {
		runtime.GC()
	}
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// heldConns are an instance's accepted sockets, held without a goroutine.
type heldConns struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (h *heldConns) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

func (h *heldConns) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
}

// holdingInstance is an instance that accepts and holds its connections, reading nothing.
func holdingInstance(t *testing.T) (net.Listener, *heldConns) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	held := &heldConns{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held.mu.Lock()
			held.conns = append(held.conns, c)
			held.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		held.close()
	})
	return ln, held
}
