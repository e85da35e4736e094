package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
		done <- run(ctx, []string{"challenge-hook", "tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--service-cidrs=127.0.0.0/8",
			"--key-file=" + writeGatewayKey(t, key), "--log-level=debug", "--shutdown-delay=500ms"}, noEnv, io.Discard, logs)
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
	// The instance's banner moved bytes: its address is on /activity, for the activity stamper.
	activityURL := "http://" + addrs.metrics + "/activity"
	var report tcpgateway.ActivityReport
	require.Eventually(t, func() bool {
		report = getActivity(t, activityURL)
		return len(report.Services) == 1
	}, 5*time.Second, 10*time.Millisecond, "the instance's activity on /activity")
	assert.Equal(t, instance.Addr().(*net.TCPAddr).AddrPort(), report.Services[0].Address)
	assert.WithinDuration(t, time.Now(), report.Services[0].LastActivity, 10*time.Second)
	assert.Empty(t, getActivity(t, activityURL+"?since="+report.Services[0].LastActivity.Format(time.RFC3339Nano)).Services, "nothing moved since")
	resp, err := http.Get(activityURL + "?since=yesterday")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Contains(t, string(body), "not an RFC 3339 time")

	// A rollout: not ready at once, yet still accepting for the shutdown delay, so that the load
	// balancer stops sending players before the listener closes.
	cancel()
	waitForStatus(t, "http://"+addrs.metrics+"/readyz", http.StatusServiceUnavailable)
	c, err := net.Dial("tcp4", addrs.main)
	require.NoError(t, err, "a player arriving during the shutdown delay")
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, token+"\n")
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	assert.Equal(t, tcpgateway.Prompt+"hello from the instance\n", string(got))
	c.Close()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("tcp-gateway did not stop")
	}
	assert.NotContains(t, logs.String(), token)
}

// getActivity reads a gateway's GET /activity.
func getActivity(t *testing.T, url string) tcpgateway.ActivityReport {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var report tcpgateway.ActivityReport
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&report))
	return report
}

// waitForStatus polls url until it answers status, for up to 5 s.
func waitForStatus(t *testing.T, url string, status int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == status {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer %d within 5 s", url, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMaxConnectionsFitsTheOpenFileLimit: a cap the open-file limit cannot carry is lowered, with a
// warning naming both; one it carries is kept; a limit that carries nothing is an error.
func TestMaxConnectionsFitsTheOpenFileLimit(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	got, err := fitMaxConnections(10000, 1<<20, logger)
	require.NoError(t, err)
	assert.Equal(t, 10000, got)
	assert.Empty(t, logs.String())

	got, err = fitMaxConnections(10000, 20000, logger)
	require.NoError(t, err)
	assert.Less(t, got, 10000)
	assert.LessOrEqual(t, tcpgateway.Descriptors(got), uint64(20000), "the lowered cap fits")
	assert.Greater(t, tcpgateway.Descriptors(got+1), uint64(20000), "and is the largest that fits")
	assert.Contains(t, logs.String(), `"lowered_to":`+strconv.Itoa(got))
	assert.Contains(t, logs.String(), `"open_file_limit":20000`)

	_, err = fitMaxConnections(10000, 100, logger)
	assert.ErrorContains(t, err, "raise it")
}

// TestTCPGatewayRefusesToStart: without a key, with a short one, or with a bad limit, the gateway
// says what to fix.
func TestTCPGatewayRefusesToStart(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no key file":      {nil, "--key-file is required"},
		"missing file":     {[]string{"--key-file=" + filepath.Join(t.TempDir(), "absent")}, "no such file"},
		"short key":        {[]string{"--key-file=" + writeGatewayKey(t, "short")}, "head -c 32 /dev/urandom | base64"},
		"zero timeout":     {[]string{"--key-file=" + writeGatewayKey(t, strings.Repeat("k", 32)), "--token-timeout=0s"}, "expected a positive duration"},
		"line too tiny":    {[]string{"--key-file=" + writeGatewayKey(t, strings.Repeat("k", 32)), "--max-line-bytes=8"}, "a token is 32"},
		"argument":         {[]string{"extra"}, `unexpected argument "extra"`},
		"no Service CIDRs": {[]string{"--key-file=" + writeGatewayKey(t, strings.Repeat("k", 32)), "--service-cidrs="}, "--service-cidrs is required"},
	} {
		err := run(context.Background(), append([]string{"challenge-hook", "tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--service-cidrs=10.96.0.0/12"}, tc.args...), noEnv, io.Discard, io.Discard)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

func TestTCPGatewayHelp(t *testing.T) {
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "tcp-gateway", "-h"}, noEnv, io.Discard, &stderr))
	for _, flag := range []string{"-listen", "-metrics-listen", "-key-file", "-token-timeout", "-max-line-bytes", "-max-connections", "-max-connections-per-token",
		"-max-bad-tokens-per-minute", "-max-sources", "-proof-of-work-timeout", "-dial-timeout", "-idle-timeout", "-shutdown-delay", "-drain-timeout", "-service-cidrs", "-log-level"} {
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
	docs, _ := renderDocuments(t, "-f", challenge, "--tcp-gateway-address=tcp.ctf.example.org:1337", "--tcp-gateway-key-file="+keyFile, "--service-cidrs=10.96.0.0/12")
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
