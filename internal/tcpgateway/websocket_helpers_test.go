package tcpgateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wsTestGateway is a test gateway serving its WebSocket listener beside its TCP one.
type wsTestGateway struct {
	*testGateway
	wsAddr   string
	wsCancel context.CancelFunc
	wsDone   chan error
}

// startWSGateway serves a gateway on both listeners, with the default limits as changed by
// configure.
func startWSGateway(t testing.TB, configure func(*Config)) *wsTestGateway {
	t.Helper()
	g := startGateway(t, configure)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	wg := &wsTestGateway{testGateway: g, wsAddr: ln.Addr().String(), wsCancel: cancel, wsDone: make(chan error, 1)}
	go func() { wg.wsDone <- g.ServeWebSocket(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-wg.wsDone:
			assert.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("the WebSocket listener did not stop")
		}
	})
	return wg
}

// wsrxRequest is the upgrade request of wsrx (tokio-tungstenite's client: these headers, no
// subprotocol, no extension), for path on host.
func wsrxRequest(host, path, key string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n\r\n"
}

// wsClient is a test's WebSocket client: its own framing, so that a test sends exactly the frames
// it means (text frames, oversized ones) and sees every frame the gateway sends.
type wsClient struct {
	t    testing.TB
	conn *net.TCPConn
	r    *bufio.Reader
	resp *http.Response
}

// dialWS sends request (built by wsrxRequest or by hand) from source and reads the answer's head.
func dialWS(t testing.TB, addr, source, request string) *wsClient {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	c, err := d.Dial("tcp4", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	_, err = io.WriteString(c, request)
	require.NoError(t, err)
	w := &wsClient{t: t, conn: c.(*net.TCPConn), r: bufio.NewReader(c)}
	w.resp, err = http.ReadResponse(w.r, nil)
	require.NoError(t, err)
	return w
}

// upgradeWS upgrades to path as wsrx does and checks the 101 answer.
func upgradeWS(t testing.TB, addr, path string) *wsClient {
	t.Helper()
	key := newWSKey()
	w := dialWS(t, addr, "127.0.0.1", wsrxRequest(addr, path, key))
	require.Equal(t, http.StatusSwitchingProtocols, w.resp.StatusCode, "body: %s", w.body())
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	require.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), w.resp.Header.Get("Sec-WebSocket-Accept"))
	return w
}

func newWSKey() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// body reads the answer's body.
func (w *wsClient) body() string {
	b, _ := io.ReadAll(w.resp.Body)
	return string(b)
}

// WebSocket opcodes (RFC 6455, 5.2).
const (
	opText   = 1
	opBinary = 2
	opClose  = 8
	opPing   = 9
)

// send writes one masked frame, as a client must.
func (w *wsClient) send(opcode byte, payload []byte) {
	w.t.Helper()
	_, err := w.conn.Write(clientFrame(opcode, payload, len(payload)))
	require.NoError(w.t, err)
}

// clientFrame is a final, masked frame whose header says length (the payload may be shorter, for
// a frame sent in part).
func clientFrame(opcode byte, payload []byte, length int) []byte {
	frame := []byte{0x80 | opcode}
	switch {
	case length < 126:
		frame = append(frame, 0x80|byte(length))
	case length < 1<<16:
		frame = append(frame, 0x80|126)
		frame = binary.BigEndian.AppendUint16(frame, uint16(length))
	default:
		frame = append(frame, 0x80|127)
		frame = binary.BigEndian.AppendUint64(frame, uint64(length))
	}
	mask := [4]byte{0x12, 0x34, 0x56, 0x78}
	frame = append(frame, mask[:]...)
	for i, b := range payload {
		frame = append(frame, b^mask[i%4])
	}
	return frame
}

// readFrame reads one frame from the gateway, which never masks.
func (w *wsClient) readFrame() (opcode byte, payload []byte, err error) {
	var head [2]byte
	if _, err := io.ReadFull(w.r, head[:]); err != nil {
		return 0, nil, err
	}
	if head[1]&0x80 != 0 {
		return 0, nil, fmt.Errorf("a masked frame from the server")
	}
	length := uint64(head[1] & 0x7f)
	switch length {
	case 126:
		var b [2]byte
		_, err = io.ReadFull(w.r, b[:])
		length = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		_, err = io.ReadFull(w.r, b[:])
		length = binary.BigEndian.Uint64(b[:])
	}
	if err != nil {
		return 0, nil, err
	}
	payload = make([]byte, length)
	_, err = io.ReadFull(w.r, payload)
	return head[0] & 0x0f, payload, err
}

// readBytes reads n bytes of binary messages, failing on any other data frame; pings are skipped.
func (w *wsClient) readBytes(n int) []byte {
	w.t.Helper()
	var got []byte
	for len(got) < n {
		opcode, payload, err := w.readFrame()
		require.NoError(w.t, err, "after %d bytes of %d", len(got), n)
		switch opcode {
		case opPing:
			continue
		case opBinary:
			got = append(got, payload...)
		default:
			w.t.Fatalf("frame of opcode %d (%q) after %d bytes of %d: only binary frames carry bytes", opcode, payload, len(got), n)
		}
	}
	return got
}

// expect reads exactly want, in binary messages.
func (w *wsClient) expect(want string) {
	w.t.Helper()
	require.Equal(w.t, want, string(w.readBytes(len(want))))
}

// readClose reads until the close frame and returns its code and reason.
func (w *wsClient) readClose() (int, string) {
	w.t.Helper()
	for {
		opcode, payload, err := w.readFrame()
		require.NoError(w.t, err, "reading until the close frame")
		if opcode == opClose {
			require.GreaterOrEqual(w.t, len(payload), 2, "a close frame with a code")
			return int(binary.BigEndian.Uint16(payload)), string(payload[2:])
		}
	}
}

// probe sends a request without upgrade and returns its status and body.
func probe(t testing.TB, addr, method, path string) (int, string) {
	t.Helper()
	w := dialWS(t, addr, "127.0.0.1", method+" "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nUser-Agent: wsrx/0.5\r\nAccept: */*\r\n\r\n")
	return w.resp.StatusCode, strings.TrimSpace(w.body())
}

// frameReader reads the bytes of the gateway's binary messages, frame by frame.
type frameReader struct {
	w    *wsClient
	left []byte
}

func (f *frameReader) Read(p []byte) (int, error) {
	for len(f.left) == 0 {
		opcode, payload, err := f.w.readFrame()
		if err != nil {
			return 0, err
		}
		if opcode == opClose {
			return 0, io.EOF
		}
		if opcode != opBinary {
			return 0, fmt.Errorf("frame of opcode %d: only binary frames carry bytes", opcode)
		}
		f.left = payload
	}
	n := copy(p, f.left)
	f.left = f.left[n:]
	return n, nil
}

// bufioOf reads the binary messages' bytes as a stream, a frame at a time (so that what follows
// the frames read is still the client's to read).
func bufioOf(w *wsClient) *bufio.Reader {
	return bufio.NewReader(&frameReader{w: w})
}
