package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcpgateway"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// writeGatewayKey writes a key file as the component's Secret holds it (base64 text, a newline).
func writeGatewayKey(t *testing.T, key string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(file, []byte(key+"\n"), 0o600))
	return file
}

// TestTCPGatewayServes runs `challenge-hook tcp-gateway` as main does: a token minted with the
// key file's key reaches its instance, a bad one is counted on /metrics, the probes answer, and
// cancelling stops it.
func TestTCPGatewayServes(t *testing.T) {
	key := "c2VjcmV0LWdhdGV3YXkta2V5LW9mLTMyLWJ5dGVzLWF0LWxlYXN0Cg"
	instance, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer instance.Close()
	go func() {
		for {
			c, err := instance.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "hello from the instance\n")
			c.Close()
		}
	}()

	logs := newLogBuffer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"challenge-hook", "tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0",
			"--key-file=" + writeGatewayKey(t, key), "--log-level=debug"}, noEnv, io.Discard, logs)
	}()
	var addrs listenAddrs
	select {
	case addrs = <-logs.addr:
	case err := <-done:
		t.Fatalf("tcp-gateway returned: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("tcp-gateway did not listen; logs:\n%s", logs)
	}

	token, err := tcptoken.Mint([]byte(key), tcptoken.Target{Service: instance.Addr().(*net.TCPAddr).AddrPort()})
	require.NoError(t, err)
	for _, tc := range []struct{ line, want string }{
		{token + "\n", tcpgateway.Prompt + "hello from the instance\n"},
		{strings.Repeat("a", tcptoken.Length) + "\n", tcpgateway.Prompt + "invalid token\n"},
	} {
		c, err := net.Dial("tcp4", addrs.main)
		require.NoError(t, err)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, tc.line)
		got, err := io.ReadAll(c)
		require.NoError(t, err)
		assert.Equal(t, tc.want, string(got))
		c.Close()
	}

	for path, want := range map[string]string{
		"/healthz": `"ok"`,
		"/readyz":  `"ok"`,
		"/metrics": `challenge_hook_tcp_gateway_refused_total{reason="invalid_token"} 1`,
	} {
		resp, err := http.Get("http://" + addrs.metrics + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, string(body), want, path)
	}
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("tcp-gateway did not stop")
	}
	assert.NotContains(t, logs.String(), token)
}

// TestTCPGatewayRefusesToStart: without a key, with a short one, or with a bad limit, the gateway
// says what to fix.
func TestTCPGatewayRefusesToStart(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no key file":   {nil, "--key-file is required"},
		"missing file":  {[]string{"--key-file=" + filepath.Join(t.TempDir(), "absent")}, "no such file"},
		"short key":     {[]string{"--key-file=" + writeGatewayKey(t, "short")}, "head -c 32 /dev/urandom | base64"},
		"zero timeout":  {[]string{"--key-file=" + writeGatewayKey(t, strings.Repeat("k", 32)), "--token-timeout=0s"}, "expected a positive duration"},
		"line too tiny": {[]string{"--key-file=" + writeGatewayKey(t, strings.Repeat("k", 32)), "--max-line-bytes=8"}, "a token is 32"},
		"argument":      {[]string{"extra"}, `unexpected argument "extra"`},
	} {
		err := run(context.Background(), append([]string{"challenge-hook", "tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}, tc.args...), noEnv, io.Discard, io.Discard)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

func TestTCPGatewayHelp(t *testing.T) {
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "tcp-gateway", "-h"}, noEnv, io.Discard, &stderr))
	for _, flag := range []string{"-listen", "-metrics-listen", "-key-file", "-token-timeout", "-max-line-bytes", "-max-connections", "-max-connections-per-token",
		"-max-bad-tokens-per-minute", "-max-pending-per-source", "-max-sources", "-proof-of-work-timeout", "-dial-timeout", "-idle-timeout", "-drain-timeout", "-log-level"} {
		assert.Contains(t, stderr.String(), flag+" ")
	}
}

// TestGatewayOpensTheHooksTokens: the gateway reads its --key-file as the hook reads
// --tcp-gateway-key-file, so the token render prints (the hook's) opens in the gateway, to the
// Service render allocated.
func TestGatewayOpensTheHooksTokens(t *testing.T) {
	challenge := filepath.Join(t.TempDir(), "challenge.yaml")
	require.NoError(t, os.WriteFile(challenge, []byte(`apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: pwn-team7, namespace: ctf}
spec:
  owner: team-7
  template:
    containers:
    - {name: pwn, image: registry.example/pwn:1, ports: [{containerPort: 1337}]}
    expose: [{port: 1337, type: TCP}]
`), 0o600))
	keyFile := filepath.Join("..", "..", "testdata", "tcp-gateway.key")
	docs, _ := renderDocuments(t, "-f", challenge, "--tcp-gateway-address=tcp.ctf.example.org:1337", "--tcp-gateway-key-file="+keyFile)
	status := docs[len(docs)-1]["status"].(map[string]any)
	token := status["endpoints"].([]any)[0].(map[string]any)["token"].(string)
	key, err := readGatewayKey(keyFile)
	require.NoError(t, err)
	target, err := tcptoken.Open(key, token)
	require.NoError(t, err)
	var servicePorts []int
	for _, doc := range docs {
		if doc["kind"] == "Service" {
			for _, port := range doc["spec"].(map[string]any)["ports"].([]any) {
				servicePorts = append(servicePorts, int(port.(map[string]any)["port"].(float64)))
			}
		}
	}
	assert.Equal(t, []int{int(target.Service.Port())}, servicePorts)
}
