package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// socketTables writes a network namespace's tcp and tcp6 tables as the kernel prints them.
func socketTables(t *testing.T, tcp, tcp6 string) string {
	t.Helper()
	dir := t.TempDir()
	const header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tcp"), []byte(header+tcp), 0o644))
	if tcp6 != "" {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tcp6"), []byte(header+tcp6), 0o644))
	}
	return dir
}

const (
	// A connection in TIME_WAIT (06) and one ESTABLISHED (01): nothing listens.
	tcpNoListener = "   0: 0100007F:8000 0100007F:803D 06 00000000:00000000 03:00000282 00000000     0        0 0 3 0000000000000000\n" +
		"   1: 0A000001:9C40 0A000002:0050 01 00000000:00000000 00:00000000 00000000 65532        0 1 1 0000000000000000 20 4 30 10 -1\n"
	// A sidecar listening on 15006, all addresses.
	tcpSidecar = "   0: 00000000:3A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1337        0 2 1 0000000000000000 100 0 0 10 0\n"
	// Something listening on [::]:8080.
	tcp6Server = "   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000 65532        0 3 1 0000000000000000 100 0 0 10 0\n"
)

func TestListeningTCPPorts(t *testing.T) {
	got, err := listeningTCPPorts(socketTables(t, tcpNoListener, ""))
	require.NoError(t, err)
	assert.Empty(t, got, "no tcp6 table (no IPv6) and nothing listening")

	got, err = listeningTCPPorts(socketTables(t, tcpNoListener+tcpSidecar, tcp6Server))
	require.NoError(t, err)
	assert.Equal(t, []string{"tcp port 15006", "tcp6 port 8080"}, got)

	_, err = listeningTCPPorts(socketTables(t, "   0: 00000000 00000000:0000 0A\n", ""))
	assert.ErrorContains(t, err, "unreadable local address")
	_, err = listeningTCPPorts(t.TempDir())
	assert.ErrorContains(t, err, "read the socket table")

	// This process's own network namespace, with a listener of the test's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got, err = listeningTCPPorts("/proc/self/net")
	require.NoError(t, err)
	assert.Contains(t, got, fmt.Sprintf("tcp port %d", ln.Addr().(*net.TCPAddr).Port))
}

// The target runs until its context ends while nothing listens, and fails, naming the sockets,
// as soon as something does: at start, or at a later check (a sidecar that starts after it).
func TestPolicyGateTargetRefusesListeners(t *testing.T) {
	dir := socketTables(t, tcpNoListener, "")
	ctx, cancel := context.WithCancel(context.Background())
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"challenge-hook", "policy-gate-target", "--proc-net=" + dir, "--check-interval=10ms"}, noEnv, &stdout, nil)
	}()
	select {
	case err := <-done:
		t.Fatalf("the target stopped while nothing listened: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tcp6"), []byte("header\n"+tcp6Server), 0o644))
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "TCP sockets listen in this Pod (tcp6 port 8080)")
	case <-time.After(5 * time.Second):
		t.Fatal("the target kept running with a listener beside it")
	}
	cancel()
	assert.Contains(t, stdout.String(), "nothing listens in this Pod")

	err := run(context.Background(), []string{"challenge-hook", "policy-gate-target", "--proc-net=" + socketTables(t, tcpSidecar, "")}, noEnv, &stdout, nil)
	assert.ErrorContains(t, err, "(tcp port 15006)")

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	assert.NoError(t, run(ctx, []string{"challenge-hook", "policy-gate-target", "--proc-net=" + socketTables(t, tcpNoListener, "")}, noEnv, &stdout, nil), "a stopped target exits 0")
	assert.Error(t, run(ctx, []string{"challenge-hook", "policy-gate-target", "extra"}, noEnv, &stdout, nil))
}
