package platform

import (
	"net/url"
	"strings"
)

// An endpoint's webSocketURL (the TCP gateway's WebSocket listener, the token in its path) is the
// same way into the instance as its nc line, for players whose network passes only HTTPS, and
// for the player page's terminal. The clients players paste it into agree on one convention: one
// WebSocket is one TCP stream, in binary frames.

// wsrxLocalPort is the local port the page's wsrx command maps the instance to: wsrx connect
// listens there (on 127.0.0.1, its default host) and carries each connection over the WebSocket.
const wsrxLocalPort = "1337"

// webSocketOrigin is the scheme://host[:port] of a webSocketURL, the only place the page's
// terminal connects to (its Content-Security-Policy's connect-src); false for a URL that is not
// a ws:// or wss:// URL made only of what the hook's --tcp-gateway-websocket-url and a token
// are made of. The URL reaches a shell line and a response header: nothing else may pass.
func webSocketOrigin(raw string) (string, bool) {
	if raw == "" || strings.ContainsFunc(raw, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._/:", r))
	}) {
		return "", false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "ws" && u.Scheme != "wss" || u.Hostname() == "" || u.User != nil || !strings.Contains(u.Path, "/ws/") {
		return "", false
	}
	return u.Scheme + "://" + u.Host, true
}

// webSocketCommands are the lines a player pastes to reach the instance over its webSocketURL:
// websocat joins stdin and stdout to it (-b: binary frames, as the gateway speaks), and wsrx
// (XDSEC's WebSocketReflectorX: `wsrx connect <url> --port <port>`) maps it to a local port that
// nc, pwntools or a browser then reach.
func webSocketCommands(wsURL string) []pageCommand {
	return []pageCommand{
		{Label: "WebSocket URL", Text: wsURL},
		{Label: "websocat", Text: "websocat -b " + wsURL},
		{Label: "wsrx: map it to local port " + wsrxLocalPort, Text: "wsrx connect " + wsURL + " --port " + wsrxLocalPort},
		{Label: "then, while wsrx runs", Text: "nc 127.0.0.1 " + wsrxLocalPort},
	}
}

// webSocketText is the rCTF raw line of a webSocketURL: the URL, then websocat's and wsrx's
// commands, one a line.
func webSocketText(wsURL string) string {
	return wsURL + "\nwebsocat -b " + wsURL + "\nwsrx connect " + wsURL + " --port " + wsrxLocalPort + ", then nc 127.0.0.1 " + wsrxLocalPort
}
