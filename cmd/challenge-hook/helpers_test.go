package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// listenAddrs are the addresses run logs it listens on; verify is empty without flag verification.
type listenAddrs struct{ main, verify, metrics string }

// logBuffer collects the JSON log lines run writes, and reports the addresses it listens on.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	addr    chan listenAddrs
	partial []byte
}

func newLogBuffer() *logBuffer { return &logBuffer{addr: make(chan listenAddrs, 1)} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.partial = append(l.partial, p...)
	for {
		line, rest, found := bytes.Cut(l.partial, []byte("\n"))
		if !found {
			break
		}
		l.partial = rest
		var entry struct {
			Msg         string `json:"msg"`
			Addr        string `json:"addr"`
			VerifyAddr  string `json:"verify_addr"`
			MetricsAddr string `json:"metrics_addr"`
		}
		if json.Unmarshal(line, &entry) == nil && entry.Msg == "listening" {
			l.addr <- listenAddrs{entry.Addr, entry.VerifyAddr, entry.MetricsAddr}
		}
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// running is run() serving in the background.
type running struct {
	addr        string
	verifyAddr  string // empty without flag verification
	metricsAddr string
	cancel      context.CancelFunc
	done        chan error
	logs        *logBuffer
}

// startRun starts run with args (program name excluded) and no environment, and waits until it
// logs the addresses it listens on. Without --metrics-listen in args, metrics listen on a free
// loopback port; without --token-file, it serves without a token (withoutTokenUnlessGiven).
func startRun(t *testing.T, args ...string) *running {
	t.Helper()
	if !slices.ContainsFunc(args, func(arg string) bool { return strings.HasPrefix(arg, "--metrics-listen=") }) {
		args = append(args, "--metrics-listen=127.0.0.1:0")
	}
	args = withoutTokenUnlessGiven(args)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), logs: newLogBuffer()}
	go func() {
		r.done <- run(ctx, append([]string{"challenge-hook"}, args...), noEnv, io.Discard, r.logs)
	}()
	select {
	case addrs := <-r.logs.addr:
		r.addr, r.verifyAddr, r.metricsAddr = addrs.main, addrs.verify, addrs.metrics
	case err := <-r.done:
		cancel()
		t.Fatalf("run returned before listening: %v\nlogs:\n%s", err, r.logs)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("run did not log its address within 10s; logs:\n%s", r.logs)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Errorf("run did not return after cancel")
		}
	})
	return r
}

// stop cancels run's context and returns what run returned.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancel")
		return nil
	}
}

func noEnv(string) string { return "" }

// envMap is a getenv over a map.
func envMap(env map[string]string) func(string) string {
	return func(key string) string { return env[key] }
}

// missingPart returns the first of parts that s does not contain, or "".
func missingPart(s string, parts ...string) string {
	for _, part := range parts {
		if !strings.Contains(s, part) {
			return part
		}
	}
	return ""
}

// verifyLogLines are the request log lines of POST /flags/verify in logs, without what differs
// from one request to the next by itself (time, duration_ms).
func verifyLogLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range strings.Lines(logs) {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		if entry["path"] == "/flags/verify" {
			delete(entry, "time")
			delete(entry, "duration_ms")
			lines = append(lines, entry)
		}
	}
	return lines
}
