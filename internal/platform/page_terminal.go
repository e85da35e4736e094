package platform

import (
	"crypto/rand"
	"io/fs"
	"net/http"
	"strconv"
	"time"
)

// The player page's terminal: a page of its own per endpoint with a WebSocket URL, where
// xterm.js (served by the page itself, never from a CDN) and the page's terminal.js connect to
// that URL and behave like nc in a cooked tty. It is a page of its own because its
// Content-Security-Policy must name the WebSocket's origin, which the instance's page, loaded
// before the instance ran, does not know. The page links to it only from its script: without
// JavaScript there is no terminal to offer.

// Where hack/fetch-xterm.sh puts xterm.js's files (a gitignored directory whose README.md is
// committed, so that go:embed always has a file): no other project's file is in the repository.
const (
	xtermDir     = "assets/xterm/"
	xtermScript  = xtermDir + "xterm.js"
	xtermStyle   = xtermDir + "xterm.css"
	xtermLicense = xtermDir + "LICENSE"
)

// embedsXterm says whether this binary embeds xterm.js: then the page offers a terminal.
func embedsXterm() bool {
	for _, name := range []string{xtermScript, xtermStyle, xtermLicense} {
		if _, err := fs.Stat(pageAssets, name); err != nil {
			return false
		}
	}
	return true
}

// refusedNoTerminal is the terminal page's answer when there is nothing to connect to.
const refusedNoTerminal = "There is no terminal to this instance now: it is not running, or this way in has no WebSocket. Go back to the page of the instance."

// view is the page's view of the visit's instance at now, with the terminal's path on each
// endpoint that has a WebSocket URL when the page offers a terminal.
func (h *pageHandler) view(v visit, now time.Time) pageStatus {
	s := viewOf(v.instance, v.definition, now)
	if !h.terminal {
		return s
	}
	for i := range s.Endpoints {
		if s.Endpoints[i].WebSocketURL != "" {
			s.Endpoints[i].Terminal = v.path + "terminal?endpoint=" + strconv.Itoa(i)
		}
	}
	return s
}

// terminalPage answers the terminal to the visit's endpoint ?endpoint=<index>, whose CSP lets
// the page connect to that endpoint's WebSocket origin and nowhere else.
func (h *pageHandler) terminalPage(w http.ResponseWriter, r *http.Request, v visit) {
	if !h.terminal {
		writeRefused(w, http.StatusNotFound, "This page does not exist.", "")
		return
	}
	s := h.view(v, h.instancer.clock())
	i, err := strconv.Atoi(r.URL.Query().Get("endpoint"))
	if err != nil || i < 0 || i >= len(s.Endpoints) || s.Endpoints[i].Terminal == "" {
		writeRefused(w, http.StatusNotFound, refusedNoTerminal, v.path)
		return
	}
	ep := s.Endpoints[i]
	origin, _ := webSocketOrigin(ep.WebSocketURL) // pageEndpoints kept only URLs that have one
	// A fresh nonce per answer (26 base32 characters, 128 bits), valid as a CSP nonce.
	nonce := rand.Text()
	w.Header().Set("Content-Security-Policy", terminalCSP(origin, nonce))
	writeHTML(w, http.StatusOK, "terminal", struct{ Path, Definition, Endpoint, URL, Nonce string }{
		v.path, v.definition.Name, ep.Name, ep.WebSocketURL, nonce})
}

// terminalCSP is the page's policy with two additions: connect-src is the one WebSocket origin
// the terminal talks to, and style-src admits the <style> elements that carry nonce, which is
// how xterm.js sizes and colours its cells (terminal.js gives them the nonce).
func terminalCSP(webSocketOrigin, nonce string) string {
	return "default-src 'none'; script-src 'self'; style-src 'self' 'nonce-" + nonce + "'; img-src 'self'; connect-src " + webSocketOrigin + "; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}
