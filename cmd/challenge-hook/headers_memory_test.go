package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// childArgsEnv, set, makes the test binary serve the hook with these arguments (JSON) instead of
// running tests: TestHeldHeadersFitTheMemoryLimit measures a process of its own that way.
const childArgsEnv = "HOOK_MEMORY_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if encoded := os.Getenv(childArgsEnv); encoded != "" {
		os.Exit(serveAsChild(encoded))
	}
	os.Exit(m.Run())
}

// serveAsChild runs the hook as main does, with the arguments the parent test chose.
func serveAsChild(encoded string) int {
	var args []string
	if err := json.Unmarshal([]byte(encoded), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := run(ctx, append([]string{"challenge-hook"}, args...), noEnv, io.Discard, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// procStatusKiB reads a field of /proc/<pid>/status in KiB (VmRSS: resident now; VmHWM: the peak).
func procStatusKiB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if value, ok := strings.CutPrefix(scanner.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// childHook is the hook serving in a child process, with its three listeners' addresses.
type childHook struct {
	cmd                   *exec.Cmd
	main, verify, metrics string
	logs                  *lockedLog
}

type lockedLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *lockedLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() < 64<<10 {
		l.buf.WriteString(line + "\n")
	}
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startChildHook runs the test binary as the hook with args and GOMEMLIMIT, and waits until it
// logs its addresses.
func startChildHook(t *testing.T, args []string, goMemLimit int64) *childHook {
	t.Helper()
	encoded, err := json.Marshal(args)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childArgsEnv+"="+string(encoded), "GOMEMLIMIT="+strconv.FormatInt(goMemLimit, 10))
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	h := &childHook{cmd: cmd, logs: &lockedLog{}}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	listening := make(chan listenAddrs, 1)
	go func() {
		scanner := bufio.NewScanner(stderr)
		scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for scanner.Scan() {
			h.logs.add(scanner.Text())
			var entry struct {
				Msg         string `json:"msg"`
				Addr        string `json:"addr"`
				VerifyAddr  string `json:"verify_addr"`
				MetricsAddr string `json:"metrics_addr"`
			}
			if json.Unmarshal(scanner.Bytes(), &entry) == nil && entry.Msg == "listening" {
				listening <- listenAddrs{entry.Addr, entry.VerifyAddr, entry.MetricsAddr}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case addrs := <-listening:
		h.main, h.verify, h.metrics = addrs.main, addrs.verify, addrs.metrics
	case <-time.After(30 * time.Second):
		t.Fatalf("the child hook did not listen within 30s; its log:\n%s", h.logs)
	}
	return h
}

// deploymentArgsOnLoopback are the Deployment's arguments with its listeners on free loopback
// ports and the files of its Secrets (under /etc/challenge-hook/) written into dir: the flag key
// is the test key, every other file a token of its own.
func deploymentArgsOnLoopback(t *testing.T, deploymentArgs []string, dir string) (args []string, hookToken string) {
	t.Helper()
	key, err := os.ReadFile("../../testdata/flag.key")
	require.NoError(t, err)
	for _, arg := range deploymentArgs {
		name, value, _ := strings.Cut(arg, "=")
		switch {
		case strings.HasSuffix(name, "listen"):
			value = "127.0.0.1:0"
		case strings.HasPrefix(value, "/etc/challenge-hook/"):
			file := filepath.Join(dir, filepath.Base(value))
			content := []byte("token-of-" + filepath.Base(value))
			if strings.Contains(name, "flag-key") {
				content = key
			}
			require.NoError(t, os.WriteFile(file, content, 0o600))
			if name == "--token-file" {
				hookToken = string(content)
			}
			value = file
		}
		args = append(args, name+"="+value)
	}
	require.NotEmpty(t, hookToken, "the Deployment sets no --token-file")
	return args, hookToken
}

// TestHeldHeadersFitTheMemoryLimit: callers without any token open many connections to each of the
// hook's three listeners and hold each open sending up to 1 MiB of headers that never end,
// reconnecting whenever the hook closes one, for about as long as --read-header-timeout lets a
// connection live. The hook runs in a process of its own with the Deployment's arguments and
// GOMEMLIMIT; its peak resident memory (VmHWM) must stay under the Deployment's memory limit, and
// it must serve Metacontroller again afterwards.
func TestHeldHeadersFitTheMemoryLimit(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("measures the child's memory in /proc/<pid>/status (Linux)")
	}
	if testing.Short() {
		t.Skip("holds 600 connections for 4 s")
	}
	limit, goMemLimit, deploymentArgs := deploymentMemory(t)
	args, hookToken := deploymentArgsOnLoopback(t, deploymentArgs, t.TempDir())
	hook := startChildHook(t, args, goMemLimit)
	require.NotEmpty(t, hook.verify, "the Deployment serves flag verification")
	pid := hook.cmd.Process.Pid
	baseline, err := procStatusKiB(pid, "VmRSS")
	require.NoError(t, err)

	const (
		connectionsPerListener = 200
		headerBytes            = 1 << 20
		hold                   = 4 * time.Second
	)
	line := []byte("X-Fill: " + strings.Repeat("x", 1014) + "\r\n") // 1 KiB
	deadline := time.Now().Add(hold)
	var connections, sentBytes atomic.Int64
	var peakRSS atomic.Int64
	var wg sync.WaitGroup
	for _, addr := range []string{hook.main, hook.verify, hook.metrics} {
		for range connectionsPerListener {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
					if err != nil {
						time.Sleep(10 * time.Millisecond)
						continue
					}
					connections.Add(1)
					_ = conn.SetWriteDeadline(deadline)
					n, err := io.WriteString(conn, "POST /sync HTTP/1.1\r\nHost: challenge-hook\r\n")
					sentBytes.Add(int64(n))
					for sent := 0; err == nil && sent < headerBytes; sent += len(line) {
						n, err = conn.Write(line)
						sentBytes.Add(int64(n))
					}
					if err == nil {
						time.Sleep(time.Until(deadline)) // the headers never end
					}
					conn.Close()
				}
			})
		}
	}
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for time.Now().Before(deadline.Add(500 * time.Millisecond)) {
			if rss, err := procStatusKiB(pid, "VmRSS"); err == nil {
				peakRSS.Store(max(peakRSS.Load(), rss))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	wg.Wait()
	<-sampled
	hwm, err := procStatusKiB(pid, "VmHWM")
	require.NoError(t, err, "the hook exited; its log:\n%s", hook.logs)

	// Metacontroller is served again.
	request := mutate(t, func(map[string]any) {})
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodPost, "http://"+hook.main+"/sync", strings.NewReader(string(request)))
		req.Header.Set("Authorization", "Bearer "+hookToken)
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 15*time.Second, 100*time.Millisecond, "the hook does not answer Metacontroller after the load; its log:\n%s", hook.logs)

	mib := func(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
	t.Logf("%d connections per listener (3 listeners), each sending up to %d bytes of headers for %s: %d connections opened, %.1f MiB of headers sent; "+
		"the hook's resident memory %s before, %s at the sampled peak, VmHWM %s; limit %s, GOMEMLIMIT %s",
		connectionsPerListener, headerBytes, hold, connections.Load(), float64(sentBytes.Load())/(1<<20),
		mib(baseline), mib(peakRSS.Load()), mib(hwm), mib(limit>>10), mib(goMemLimit>>10))
	assert.Less(t, hwm<<10, limit, "the hook's peak resident memory exceeds the Deployment's memory limit: it would be OOM-killed")
}
