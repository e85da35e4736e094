package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// TestTCPGatewayServesWebSocket runs `challenge-hook tcp-gateway --websocket-listen` as main does:
// the WebSocket listener answers a token's probe 204 and a forged one's 404, beside the TCP
// listener, and cancelling stops both.
func TestTCPGatewayServesWebSocket(t *testing.T) {
	key := "c2VjcmV0LWdhdGV3YXkta2V5LW9mLTMyLWJ5dGVzLWF0LWxlYXN0Cg"
	logs := newLogBuffer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"challenge-hook", "tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--websocket-listen=127.0.0.1:0",
			"--service-cidrs=127.0.0.0/8", "--trusted-proxies=10.0.0.0/8, fd00::/8", "--key-file=" + writeGatewayKey(t, key), "--shutdown-delay=0s"}, noEnv, io.Discard, logs)
	}()
	select {
	case <-logs.addr:
	case err := <-done:
		t.Fatalf("tcp-gateway returned: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("tcp-gateway did not listen; logs:\n%s", logs)
	}
	var wsAddr string
	for line := range strings.Lines(logs.String()) {
		var entry struct {
			Msg           string `json:"msg"`
			WebSocketAddr string `json:"websocket_addr"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "listening" {
			wsAddr = entry.WebSocketAddr
		}
	}
	require.NotEmpty(t, wsAddr, "the listening line names the WebSocket address:\n%s", logs)
	token, err := tcptoken.Mint([]byte(key), tcptoken.Target{Service: netip.MustParseAddrPort("127.0.0.1:9")})
	require.NoError(t, err)
	client := http.Client{Timeout: 10 * time.Second}
	for path, want := range map[string]int{"/ws/" + token: http.StatusNoContent, "/ws/" + strings.Repeat("a", tcptoken.Length): http.StatusNotFound} {
		req, err := http.NewRequest(http.MethodOptions, "http://"+wsAddr+path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, path)
	}
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("tcp-gateway did not stop")
	}
}

// TestTCPGatewayWebSocketFlags: --trusted-proxies takes IPv4 and IPv6 CIDRs and refuses host bits;
// -h lists the WebSocket flags.
func TestTCPGatewayWebSocketFlags(t *testing.T) {
	keyFile := writeGatewayKey(t, strings.Repeat("k", 32))
	for value, want := range map[string]string{"10.0.0.1/8": "has host bits set: did you mean 10.0.0.0/8?", "proxy": `"proxy": expected CIDRs`} {
		err := run(context.Background(), []string{"challenge-hook", "tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--service-cidrs=10.96.0.0/12",
			"--key-file=" + keyFile, "--trusted-proxies=" + value}, noEnv, io.Discard, io.Discard)
		if assert.Error(t, err, value) {
			assert.Contains(t, err.Error(), want)
		}
	}
	opts, err := parseTCPGatewayFlags([]string{"--service-cidrs=10.96.0.0/12", "--key-file=" + keyFile, "--trusted-proxies=10.0.0.0/8,fd00::/8", "--websocket-listen=:8081"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, ":8081", opts.websocketListen)
	assert.Len(t, opts.cfg.TrustedProxies, 2)
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "tcp-gateway", "-h"}, noEnv, io.Discard, &stderr))
	for _, flag := range []string{"-websocket-listen ", "-trusted-proxies "} {
		assert.Contains(t, stderr.String(), flag)
	}
}
