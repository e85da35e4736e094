//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// hookServer is a running challenge-hook binary, the one `make build` produces.
type hookServer struct {
	baseURL string
	token   string // Metacontroller's token, which its --token-file holds
	client  *http.Client
}

// lockedBuffer collects the hook's log lines; the process writes while tests read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// hookProcess is bin/challenge-hook serving on a fixed loopback address; it can be killed and
// started again on the same address (the hook-down test does).
type hookProcess struct {
	bin, root, addr string
	flags           []string
	logs            *lockedBuffer
	proc            *e2eutil.Process // nil when not running
}

// suiteTokenFile holds Metacontroller's token for the whole run: setUpSuite writes it, puts the
// same token in the Secret every CompositeController's authorization names, and every hook it or a
// test starts without a --token-file of its own serves with it. Set once, before any hook starts.
var suiteTokenFile string

// newHookProcess describes the hook binary (E2E_HOOK_BIN, else bin/challenge-hook) run in the
// repository root, so that testdata paths resolve, on addr with the given flags besides --listen.
// Without a --token-file among flags it serves with the suite's token (suiteTokenFile), which
// Metacontroller sends from the CompositeControllers' Secret; its metrics listen on a free
// loopback port (metricsAddr).
func newHookProcess(root, addr string, flags ...string) *hookProcess {
	bin := os.Getenv("E2E_HOOK_BIN")
	if bin == "" {
		bin = filepath.Join(root, "bin", "challenge-hook")
	}
	flags = append([]string{"--metrics-listen=127.0.0.1:0"}, flags...)
	if tokenFile(flags) == "" {
		flags = append(flags, "--token-file="+suiteTokenFile)
	}
	return &hookProcess{bin: bin, root: root, addr: addr, flags: flags, logs: &lockedBuffer{}}
}

// tokenFile is the value of the last --token-file among flags, or "".
func tokenFile(flags []string) string {
	file := ""
	for _, flag := range flags {
		if value, ok := strings.CutPrefix(flag, "--token-file="); ok {
			file = value
		}
	}
	return file
}

// token is Metacontroller's token the process serves with (its --token-file, from the repository
// root).
func (p *hookProcess) token() (string, error) {
	file := tokenFile(p.flags)
	if !filepath.IsAbs(file) {
		file = filepath.Join(p.root, file)
	}
	content, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("the hook's --token-file: %w", err)
	}
	return strings.TrimSpace(string(content)), nil
}

// metricsAddr is where the running process serves GET /metrics, as its last "listening" log line
// says (it changes when the process is started again).
func (p *hookProcess) metricsAddr() string {
	addr := ""
	for line := range strings.Lines(p.logs.String()) {
		var entry struct {
			Msg         string `json:"msg"`
			MetricsAddr string `json:"metrics_addr"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "listening" {
			addr = entry.MetricsAddr
		}
	}
	return addr
}

// start runs the hook and waits until /readyz answers 200.
func (p *hookProcess) start() error {
	cmd := exec.Command(p.bin, append([]string{"--listen=" + p.addr}, p.flags...)...)
	cmd.Dir = p.root
	// The hook falls back to CHALLENGE_HOOK_* variables: do not let the caller's leak in.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHALLENGE_HOOK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	dieWithParent(cmd)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	proc, err := e2eutil.Start(cmd)
	if err != nil {
		return err
	}
	p.proc = proc
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-proc.Exited():
			p.proc = nil
			return fmt.Errorf("challenge-hook exited before serving: %v\n%s", proc.Err(), p.logs.String())
		default:
		}
		resp, err := client.Get("http://" + p.addr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			p.stop(syscall.SIGKILL)
			return fmt.Errorf("challenge-hook not ready on %s after 15s (last error %v)\n%s", p.addr, err, p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends sig (SIGTERM: graceful; SIGKILL: a crash) and waits for the process to exit,
// killing it after 10s.
func (p *hookProcess) stop(sig syscall.Signal) {
	if p.proc == nil {
		return
	}
	p.proc.Stop(sig, 10*time.Second)
	p.proc = nil
}

// startHook starts bin/challenge-hook on a free loopback port with the given flags (besides
// --listen) and stops it (SIGTERM) when the test ends. Its log is shown when the test fails.
func startHook(t *testing.T, root string, flags ...string) *hookServer {
	t.Helper()
	p := newHookProcess(root, freeLoopbackAddr(t), flags...)
	token, err := p.token()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("challenge-hook %s log:\n%s", strings.Join(flags, " "), p.logs.String())
		}
	})
	return &hookServer{baseURL: "http://" + p.addr, token: token, client: &http.Client{Timeout: 10 * time.Second}}
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port nothing listens on right now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatalf("release port %s: %v", addr, err)
	}
	return addr
}

// post sends a JSON body to a hook path with Metacontroller's token and returns the body of a 200
// answer; any other status is an error, as it is for Metacontroller.
func (h *hookServer) post(ctx context.Context, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s response: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(data))
	}
	return data, nil
}

// devFlags are the flags the golden files were computed with (testdata/dev.flags), so that the
// hook answers each testdata request with its response.json.
func devFlags(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "testdata", "dev.flags"))
	if err != nil {
		t.Fatalf("read dev flags: %v", err)
	}
	return strings.Fields(string(data))
}
