package sync

import (
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// TestTCPGatewayWebSocketURLFlag: --tcp-gateway-websocket-url takes the gateway's public
// WebSocket URL as the token's prefix, and refuses, saying what to fix, what no token can follow.
func TestTCPGatewayWebSocketURLFlag(t *testing.T) {
	parse := func(v string) (string, error) {
		cfg := DefaultConfig()
		fs := flag.NewFlagSet("hook", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		err := fs.Parse([]string{"--tcp-gateway-websocket-url=" + v})
		return cfg.TCPGateway.WebSocketURL, err
	}
	for _, good := range []string{"", "wss://tcp.ctf.example.org/ws/", "ws://127.0.0.1:8090/ws/", "wss://ctf.example.org:8443/ws/"} {
		got, err := parse(good)
		if assert.NoError(t, err, good) {
			assert.Equal(t, good, got)
		}
	}
	for _, tc := range []struct{ value, says string }{
		{"https://tcp.ctf.example.org/ws/", `the scheme is "https": write ws:// or wss://`},
		{"tcp.ctf.example.org/ws/", `the scheme is "": write ws:// or wss://`},
		{"wss://tcp.ctf.example.org/", `the path "/" must be /ws/`},
		{"wss://tcp.ctf.example.org/ws", `the path "/ws" must be /ws/`},
		{"wss://tcp.ctf.example.org/ws/?token=", "remove the user, query or fragment"},
		{"wss://tcp.ctf.example.org/ws/#", "remove the user, query or fragment"},
		{"wss://user:pw@tcp.ctf.example.org/ws/", "remove the user, query or fragment"},
		{"wss://tcp.ctf.example.org/a%20b/ws/", `the path "/a b/ws/" must be /ws/`},
		{"wss://tcp.ctf.example.org/gateway/ws/", `the path "/gateway/ws/" must be /ws/`},
		{"wss://ws.ctf.example.org/ws/", `the host "ws.ctf.example.org" holds "ws", which wsrx's desktop client replaces`},
		{"wss://news.example.org:8443/ws/", `the host "news.example.org:8443" holds "ws"`},
		{"wss://WS.example.org/ws/", `host "WS.example.org" is neither a DNS name (lower case) nor an IPv4 address`},
		{"wss://[::1]:8443/ws/", `host "::1" is neither`},
		{"wss:///ws/", `host "" is neither`},
		{"wss://tcp.ctf.example.org:0/ws/", `port "0" is not between 1 and 65535`},
		{"wss://tcp.ctf.example.org:99999/ws/", `port "99999" is not between 1 and 65535`},
	} {
		_, err := parse(tc.value)
		if assert.Error(t, err, tc.value) {
			assert.Contains(t, err.Error(), tc.says, tc.value)
			assert.Contains(t, err.Error(), "such as wss://tcp.ctf.example.org/ws/", tc.value)
		}
	}
}

// TestTCPEndpointWebSocketURL: with the gateway's WebSocket URL, each TCP gateway endpoint's
// webSocketURL is that URL and the endpoint's own token (the same capability, another way in);
// without it, none; and an endpoint that is not the gateway's never has one.
func TestTCPEndpointWebSocketURL(t *testing.T) {
	req, cfg := routedCase(t, "tcp-creating-to-running-proof-of-work-and-proxy-protocol")
	cfg.TCPGateway.WebSocketURL = "wss://tcp.ctf.example.org/ws/"
	resp := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.PhaseRunning, resp.Status.Phase, resp.Status.Message)
	require.Len(t, resp.Status.Endpoints, 2)
	for _, ep := range resp.Status.Endpoints {
		require.NotEmpty(t, ep.Token, ep.Name)
		assert.Equal(t, "wss://tcp.ctf.example.org/ws/"+ep.Token, ep.WebSocketURL, ep.Name)
	}
	assert.NotEqual(t, resp.Status.Endpoints[0].WebSocketURL, resp.Status.Endpoints[1].WebSocketURL, "each port its own token")

	cfg.TCPGateway.WebSocketURL = ""
	for _, ep := range Sync(req, goldenNow, cfg).Status.Endpoints {
		assert.Empty(t, ep.WebSocketURL, "without --tcp-gateway-websocket-url: %s", ep.Name)
		assert.NotEmpty(t, ep.Token, ep.Name)
	}

	req, cfg = routedCase(t, "life-3-running-http")
	cfg.TCPGateway.WebSocketURL = "wss://tcp.ctf.example.org/ws/"
	resp = Sync(req, goldenNow, cfg)
	require.NotEmpty(t, resp.Status.Endpoints)
	for _, ep := range resp.Status.Endpoints {
		assert.Empty(t, ep.WebSocketURL, "an HTTP endpoint: %s", ep.Name)
	}
}
