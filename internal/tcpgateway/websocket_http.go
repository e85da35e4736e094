package tcpgateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// httpRefusal is a refusal answered in HTTP, before any upgrade.
type httpRefusal struct {
	refusal
	status int
}

// evictedRequestLine is what a WebSocket connection evicted while sending its request reads.
const evictedRequestLine = "gateway busy and your connection sent no request: reconnect and send it at once\n"

// errRequestTooLarge is a request whose line and headers pass maxRequestBytes.
var errRequestTooLarge = errors.New("request headers too large")

// requestLimit reads at most left bytes of a request, then errRequestTooLarge.
type requestLimit struct {
	r    io.Reader
	left int
	hit  bool
}

func (l *requestLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		l.hit = true
		return 0, errRequestTooLarge
	}
	if len(p) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= n
	return n, err
}

// readRequest reads the request, within the request's deadline and maxRequestBytes: the request
// and the reader holding what followed it, or why the connection goes no further (its slot
// charged then: slow headers, oversized ones and eviction cost their sender).
func (c *wsSession) readRequest() (*http.Request, *bufio.Reader, *httpRefusal) {
	limit := &requestLimit{r: c.player, left: maxRequestBytes}
	br := bufio.NewReaderSize(limit, requestBufferBytes)
	req, err := http.ReadRequest(br)
	if err == nil {
		return req, br, nil
	}
	if c.g.admission.presented(c.slot, noToken, time.Now()) {
		return nil, nil, &httpRefusal{refusal{reason: reasonEvicted, line: evictedRequestLine}, http.StatusServiceUnavailable}
	}
	switch {
	case limit.hit:
		return nil, nil, &httpRefusal{refusal{reason: reasonRequestTooLarge, line: fmt.Sprintf("request headers larger than %d bytes\n", maxRequestBytes)}, http.StatusRequestHeaderFieldsTooLarge}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, nil, &httpRefusal{refusal{reason: reasonTokenTimeout, line: fmt.Sprintf("no request within %s\n", c.g.cfg.TokenTimeout)}, http.StatusRequestTimeout}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET):
		return nil, nil, &httpRefusal{refusal{reason: reasonClosedEarly}, 0}
	}
	return nil, nil, &httpRefusal{refusal{reason: reasonBadRequest, line: "malformed HTTP request\n"}, http.StatusBadRequest}
}

// refuseRequest counts and logs the refusal and answers it in HTTP (nothing when it has no line).
func (c *wsSession) refuseRequest(r httpRefusal) {
	c.g.metrics.refused.WithLabelValues(r.reason).Inc()
	answer := answerRefused
	if r.reason == reasonBadRequest || r.reason == reasonRequestTooLarge {
		answer = answerBadRequest
	}
	c.g.metrics.requests.WithLabelValues(answer).Inc()
	c.log.log(slog.LevelDebug, "connection refused", slog.String("reason", r.reason))
	if r.line != "" {
		c.answer(r.status, r.line, false)
	}
}

// answer writes an HTTP answer and closes the connection's sending side, then reads what the
// client still sends for a moment (as net/http does before it closes): closed with unread bytes,
// the socket would reset, and the client might lose the answer before it reads it.
func (c *wsSession) answer(status int, line string, head bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nConnection: close\r\nCache-Control: no-store\r\n", status, http.StatusText(status))
	if status != http.StatusNoContent {
		fmt.Fprintf(&b, "Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n", len(line))
	}
	b.WriteString("\r\n")
	if status != http.StatusNoContent && !head {
		b.WriteString(line)
	}
	c.player.SetWriteDeadline(time.Now().Add(controlTimeout))
	if _, err := io.WriteString(c.player, b.String()); err != nil {
		return
	}
	c.player.CloseWrite()
	c.player.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(c.player, maxRequestBytes))
}

// badUpgrade answers a request that asks for an upgrade and fails the handshake's checks: 400
// and the library's reason.
func (g *Gateway) badUpgrade(w http.ResponseWriter, _ *http.Request, _ int, reason error) {
	if rw, ok := w.(*wsResponse); ok {
		rw.c.refuseRequest(httpRefusal{refusal{reason: reasonBadRequest, line: "bad WebSocket upgrade: " + reason.Error() + "\n"}, http.StatusBadRequest})
	}
}

// wsResponse is what the WebSocket library answers the upgrade through: it only hijacks the
// connection (a refusal is written by badUpgrade).
type wsResponse struct {
	c      *wsSession
	br     *bufio.Reader
	header http.Header
}

func (w *wsResponse) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *wsResponse) Write(p []byte) (int, error) { return len(p), nil }
func (w *wsResponse) WriteHeader(int)             {}

// Hijack hands the connection to the library, with a small reader of the session's own (the
// request's, empty once the upgrade is checked, is dropped), which the library reads frames
// through (Upgrader.ReadBufferSize 0: it reuses the hijacked one) and the splice reads what it
// buffered from, and a small writer whose buffer it writes the 101 answer in, dropped afterwards.
func (w *wsResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.c.br = bufio.NewReaderSize(w.c.player, wsReadBufferBytes)
	return w.c.player, bufio.NewReadWriter(w.c.br, bufio.NewWriterSize(w.c.player, 512)), nil
}

// tokenOf reads the token of a URL: /ws/<token> or /ws?token=<token>. alias: the URL is wsrx's
// probe's, /http/... or /http?token=..., for wsrx's desktop client probes the mapping's URL with
// "ws" replaced by "http" everywhere in it (Rust's str::replace), the path's and the token's.
func tokenOf(u *url.URL) (token string, alias, ok bool) {
	for _, base := range [...]string{"/ws", "/http"} {
		alias := base == "/http"
		if u.Path == base {
			token := u.Query().Get("token")
			return token, alias, token != ""
		}
		if token, found := strings.CutPrefix(u.Path, base+"/"); found {
			return token, alias, token != "" && !strings.Contains(token, "/")
		}
	}
	return "", false, false
}

// unaliasToken undoes wsrx's replacement in a token (tokens are lower-case base32: "ws" occurs in
// about one in thirty, "http" of its own in about one in thirty thousand, then the token is tried
// as it came first).
func unaliasToken(token string) string {
	return strings.ReplaceAll(token, "http", "ws")
}

// isUpgrade says whether a request asks for an upgrade, well formed or not: else it is a probe.
func isUpgrade(req *http.Request) bool {
	return req.Header.Get("Upgrade") != "" || req.Header.Get("Sec-WebSocket-Key") != "" ||
		strings.Contains(strings.ToLower(req.Header.Get("Connection")), "upgrade")
}

// playerOf is the player's address of a request from peer: the peer's, or, from a trusted proxy,
// the rightmost address of X-Forwarded-For outside the trusted proxies (port 0: the header carries
// none). Read from the right, each address was written by the hop before a trusted one; the
// addresses left of the first untrusted one were written by the player, who may write anything.
// An address that does not parse stops the walk at the last trusted hop.
func (g *Gateway) playerOf(peer netip.AddrPort, h http.Header) netip.AddrPort {
	if !g.trusted(peer.Addr()) {
		return peer
	}
	values := h.Values("X-Forwarded-For")
	player := peer
	for i := len(values) - 1; i >= 0; i-- {
		hops := strings.Split(values[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			addr, ok := parseForwardedAddr(strings.TrimSpace(hops[j]))
			if !ok {
				return player
			}
			player = netip.AddrPortFrom(addr, 0)
			if !g.trusted(addr) {
				return player
			}
		}
	}
	return player
}

// parseForwardedAddr parses an address of X-Forwarded-For: an IP address, or one with a port.
func parseForwardedAddr(s string) (netip.Addr, bool) {
	addr, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		addr = ap.Addr()
	}
	return addr.Unmap().WithZone(""), true
}

// trusted says whether addr is inside one of the trusted proxies.
func (g *Gateway) trusted(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range g.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
