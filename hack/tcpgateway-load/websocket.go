package main

// The WebSocket path: the gateway's --websocket-listen, where a player's client (wsrx, websocat
// -b, the player page's terminal) opens GET /ws/<token> and the WebSocket carries the instance's
// TCP stream in binary messages. The load run measures it as one more way to the echo instance,
// through the same gateway process as the TCP path; the attack run has honest players on it
// and attacks of its own (attack_websocket.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// websocketListenFlag asks the gateway for its WebSocket listener on a port of the kernel's
// choice; startGateway reads the address from the gateway's "listening" line.
const websocketListenFlag = "--websocket-listen=127.0.0.1:0"

// wsMessageBytes is the most a message of ours carries: what wsrx and websocat send at most, so
// that the bulk figure is that of the clients players use, not of a client sending 256 KiB
// messages no one sends.
const wsMessageBytes = 64 << 10

// wsWriteBuffers are the clients' frame buffers, held only while a message is written: thousands
// of idle WebSockets in this process hold none (the idle figure is the gateway's, but this
// process's memory is the machine's too).
var wsWriteBuffers sync.Pool

// wsDialer is a WebSocket client as wsrx's: no subprotocol, no compression, no proxy. src, when
// valid, is the source address its connections are bound to (the attack run's players).
func wsDialer(src netip.Addr, timeout time.Duration) *websocket.Dialer {
	d := &websocket.Dialer{
		HandshakeTimeout: timeout,
		ReadBufferSize:   4 << 10,
		WriteBufferSize:  wsMessageBytes,
		WriteBufferPool:  &wsWriteBuffers,
	}
	if src.IsValid() {
		nd := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: timeout}
		d.NetDialContext = nd.DialContext
	}
	return d
}

// dialWebSocket opens GET /ws/<token> at addr and returns the WebSocket as a net.Conn; a refused
// upgrade's error begins with the gateway's status ("404 Not Found: ...").
func dialWebSocket(ctx context.Context, d *websocket.Dialer, addr, token string) (net.Conn, error) {
	ws, resp, err := d.DialContext(ctx, "ws://"+addr+"/ws/"+token, nil)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("%s: %w", resp.Status, err)
		}
		return nil, err
	}
	return &wsConn{Conn: ws}, nil
}

// wsConn is a WebSocket as a net.Conn, as a player's client carries a TCP stream over it: bytes
// out in binary messages, bytes in from the messages read one after another (a message boundary
// means nothing). Close closes the socket without a close frame, as a TCP client's close.
type wsConn struct {
	*websocket.Conn
	cur io.Reader // the message being read, nil between two
}

func (c *wsConn) Read(p []byte) (int, error) {
	for {
		if c.cur == nil {
			_, r, err := c.NextReader()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					// The gateway's close frame: the instance's end of the stream.
					return 0, io.EOF
				}
				return 0, err
			}
			c.cur = r
		}
		n, err := c.cur.Read(p)
		if err == io.EOF {
			c.cur, err = nil, nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

func (c *wsConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), wsMessageBytes)
		if err := c.WriteMessage(websocket.BinaryMessage, p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

func (c *wsConn) SetDeadline(t time.Time) error {
	return errors.Join(c.SetReadDeadline(t), c.SetWriteDeadline(t))
}
