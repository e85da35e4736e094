package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Without --token-file the hook does not start, unless --insecure-serve-without-token says so:
// Metacontroller's routes answer with every team's flag. The error says what to pass.
func TestTokenIsRequired(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
	base := []string{"challenge-hook", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}

	// A hook that starts serves until the deadline, then returns nil.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	err := run(ctx, base, noEnv, io.Discard, io.Discard)
	require.Error(t, err, "the hook started without a token")
	if missing := missingPart(err.Error(), "--token-file is not set", "/sync", "every team's flag", "authorization.secretRef", "--insecure-serve-without-token"); missing != "" {
		t.Errorf("error lacks %q: %v", missing, err)
	}
	err = run(ctx, append(base, "--token-file="+tokenFile, "--insecure-serve-without-token"), noEnv, io.Discard, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "both set")

	// Said explicitly, it serves any caller, and says so loudly.
	r := startRun(t, "--listen=127.0.0.1:0", "--insecure-serve-without-token")
	resp, body := post(t, "http://"+r.addr+"/sync", "application/json", mutate(t, func(map[string]any) {}))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	if missing := missingPart(r.logs.String(), `"level":"WARN"`, "without a token (--insecure-serve-without-token)", `"token_required":false`); missing != "" {
		t.Errorf("logs lack %q:\n%s", missing, r.logs)
	}

	// With the token, a caller without it gets 401 on every route of Metacontroller's.
	r = startRun(t, "--listen=127.0.0.1:0", "--token-file="+tokenFile, "--prepull-image=registry.example/hook:1")
	assert.Contains(t, r.logs.String(), `"token_required":true`)
	for _, path := range []string{"/sync", "/finalize", "/customize", "/prepull/sync"} {
		resp, body := post(t, "http://"+r.addr+path, "application/json", mutate(t, func(map[string]any) {}))
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s: %s", path, body)
	}
}

// /metrics is served on a listener of its own, without a token (it holds no flag), and nowhere
// else; that listener serves nothing else, so that admitting Prometheus to it admits nothing that
// mints a flag.
func TestMetricsHaveTheirOwnListener(t *testing.T) {
	dir := t.TempDir()
	tokenFile, verifyTokenFile := filepath.Join(dir, "token"), filepath.Join(dir, "verify-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
	require.NoError(t, os.WriteFile(verifyTokenFile, []byte(testVerifyToken), 0o600))
	r := startRun(t, "--listen=127.0.0.1:0", "--verify-listen=127.0.0.1:0", "--token-file="+tokenFile, "--verify-token-file="+verifyTokenFile,
		"--flag-key-file=../../testdata/flag.key")
	require.NotEmpty(t, r.metricsAddr)
	require.NotEqual(t, r.addr, r.metricsAddr)

	resp, err := http.Get("http://" + r.metricsAddr + "/metrics")
	require.NoError(t, err)
	scraped, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(scraped), "challenge_hook_sync_duration_seconds")

	for _, addr := range []string{r.addr, r.verifyAddr} {
		resp, body := get(t, "http://"+addr+"/metrics")
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, "/metrics on %s: %s", addr, body)
	}
	_, body := get(t, "http://"+r.addr+"/metrics")
	assert.Contains(t, string(body), "--metrics-listen", "the 404 says where metrics are")
	for _, path := range []string{"/sync", "/finalize", "/customize", "/prepull/sync", "/flags/verify"} {
		for _, token := range []string{testToken, testVerifyToken} {
			resp, body = post(t, "http://"+r.metricsAddr+path, "application/json", dynamicFlagRequest(t), "Authorization", "Bearer "+token)
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, "%s on the metrics listener: %s", path, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, _ = get(t, "http://"+r.metricsAddr+path)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}

	for _, args := range [][]string{
		{"--listen=:9000", "--metrics-listen=:9000"},
		{"--verify-listen=:9001", "--metrics-listen=:9001", "--verify-token-file=" + verifyTokenFile},
	} {
		_, _, err := parseServerConfig(args, noEnv)
		require.Error(t, err, "%v", args)
		assert.Contains(t, err.Error(), "metrics need a listener of their own")
	}
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return do(t, req)
}

// rawRequest sends a GET with extra header bytes on a connection of its own and returns the
// status code the server answers, or 0 when it answers nothing within wait.
func rawRequest(t *testing.T, addr, path string, headerBytes int, wait time.Duration) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	return requestOn(t, conn, path, headerBytes, wait)
}

func requestOn(t *testing.T, conn net.Conn, path string, headerBytes int, wait time.Duration) int {
	t.Helper()
	var request strings.Builder
	fmt.Fprintf(&request, "GET %s HTTP/1.1\r\nHost: hook\r\n", path)
	for i := 0; headerBytes > 0; i++ {
		line := fmt.Sprintf("X-Fill-%d: %s\r\n", i, strings.Repeat("x", min(headerBytes, 1000)))
		request.WriteString(line)
		headerBytes -= len(line)
	}
	request.WriteString("Connection: close\r\n\r\n")
	require.NoError(t, conn.SetDeadline(time.Now().Add(wait)))
	if _, err := io.WriteString(conn, request.String()); err != nil {
		return 0 // the server closed the connection while the headers arrived
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Every listener reads at most --max-header-bytes of headers, before any token is checked.
func TestHeadersAreBoundedOnEveryListener(t *testing.T) {
	dir := t.TempDir()
	verifyTokenFile := filepath.Join(dir, "verify-token")
	require.NoError(t, os.WriteFile(verifyTokenFile, []byte(testVerifyToken), 0o600))
	cfg, _, err := parseServerConfig(nil, noEnv)
	require.NoError(t, err)
	assert.Equal(t, int64(16<<10), cfg.maxHeaderBytes, "the default")
	r := startRun(t, "--listen=127.0.0.1:0", "--verify-listen=127.0.0.1:0", "--verify-token-file="+verifyTokenFile)
	for name, target := range map[string]string{"main": r.addr + " /healthz", "verify": r.verifyAddr + " /flags/verify", "metrics": r.metricsAddr + " /metrics"} {
		addr, path, _ := strings.Cut(target, " ")
		// net/http reads 4 KiB past the bound before it refuses.
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, rawRequest(t, addr, path, 24<<10, 5*time.Second), "%s listener, 24 KiB of headers", name)
		assert.NotEqual(t, http.StatusRequestHeaderFieldsTooLarge, rawRequest(t, addr, path, 12<<10, 5*time.Second), "%s listener, 12 KiB of headers", name)
	}
}

// Each listener holds at most --max-connections connections open: the next one is not served
// until one of them closes.
func TestConnectionsAreCappedPerListener(t *testing.T) {
	dir := t.TempDir()
	verifyTokenFile := filepath.Join(dir, "verify-token")
	require.NoError(t, os.WriteFile(verifyTokenFile, []byte(testVerifyToken), 0o600))
	r := startRun(t, "--listen=127.0.0.1:0", "--verify-listen=127.0.0.1:0", "--verify-token-file="+verifyTokenFile, "--max-connections=2")
	for name, target := range map[string]string{"main": r.addr + " /healthz", "verify": r.verifyAddr + " /flags/verify", "metrics": r.metricsAddr + " /metrics"} {
		t.Run(name, func(t *testing.T) {
			addr, path, _ := strings.Cut(target, " ")
			var held []net.Conn
			for range 2 {
				conn, err := net.Dial("tcp", addr)
				require.NoError(t, err)
				defer conn.Close()
				held = append(held, conn)
			}
			// The third: the kernel completes its handshake, the hook does not accept it.
			third, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer third.Close()
			assert.Zero(t, requestOn(t, third, path, 0, 500*time.Millisecond), "a third connection was served while two were open")

			held[0].Close()
			fourth, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer fourth.Close()
			assert.NotZero(t, requestOn(t, fourth, path, 0, 5*time.Second), "no connection served once one of the two closed")
		})
	}
}

// A verification's answer and its log line are the same whether the flag is right or wrong, but
// for the verdict itself: whoever reads the logs (or the sizes on the wire) learns nothing.
func TestVerdictsAreNotInferableFromLogsOrSize(t *testing.T) {
	ts := newTokenServer(t)
	wrongFlag := ts.flag[:len(ts.flag)-2] + "0}"
	if wrongFlag == ts.flag {
		wrongFlag = ts.flag[:len(ts.flag)-2] + "1}"
	}
	before := len(ts.logs.String())
	var bodies [][]byte
	for _, flag := range []string{ts.flag, wrongFlag} {
		resp, body := post(t, ts.verifyURL+"/flags/verify", "application/json", verification(t, "inline/ctf/pwn-team7", "team-7", flag),
			"Authorization", "Bearer "+testVerifyToken)
		require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
		assert.Equal(t, fmt.Sprint(len(body)), resp.Header.Get("Content-Length"))
		bodies = append(bodies, body)
	}
	assert.JSONEq(t, `{"correct":true}`, string(bodies[0]))
	assert.JSONEq(t, `{"correct":false}`, string(bodies[1]))
	assert.Len(t, bodies[1], len(bodies[0]), "the two verdicts differ in size: %q, %q", bodies[0], bodies[1])

	lines := verifyLogLines(t, ts.logs.String()[before:])
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], "bytes")
	assert.True(t, maps.EqualFunc(lines[0], lines[1], func(a, b any) bool { return a == b }),
		"the log lines of a right and a wrong flag differ:\n%v\n%v", lines[0], lines[1])
}

// Flag verifications answered at once are bounded (--max-concurrent-verifications): one whose
// body is still arriving holds its slot; the next waits, then gets 429 naming the flag.
func TestConcurrentVerificationsAreBounded(t *testing.T) {
	ts := newTokenServer(t, "--max-concurrent-verifications=1")
	body := verification(t, "inline/ctf/pwn-team7", "team-7", ts.flag)

	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.verifyURL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /flags/verify HTTP/1.1\r\nHost: hook\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		testVerifyToken, len(body), body[:5])
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // the held verification takes its slot

	start := time.Now()
	resp, answer := post(t, ts.verifyURL+"/flags/verify", "application/json", body, "Authorization", "Bearer "+testVerifyToken)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "body: %s", answer)
	assert.GreaterOrEqual(t, time.Since(start), concurrencyWait, "it waited for the slot first")
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(answer), "1 flag verifications already (--max-concurrent-verifications)")

	_, err = conn.Write(body[5:])
	require.NoError(t, err)
	held, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	held.Body.Close()
	assert.Equal(t, http.StatusOK, held.StatusCode, "the held verification is answered")
	resp, answer = post(t, ts.verifyURL+"/flags/verify", "application/json", body, "Authorization", "Bearer "+testVerifyToken)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", answer)
}
