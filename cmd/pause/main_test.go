package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary is the program under test too: with pauseAsMain set it runs main.
const pauseAsMain = "PAUSE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(pauseAsMain) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// run starts this program with args, as a container would.
func run(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), pauseAsMain+"=1")
	return cmd
}

// TestInstallCopiesItself: -install writes an identical, read-only executable copy, as the init
// container does into the emptyDir.
func TestInstallCopiesItself(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "pause")
	out, err := run(t, "-install", dest).CombinedOutput()
	require.NoError(t, err, "%s", out)
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.ReadFile(self)
	require.NoError(t, err)
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the copy differs from the program")
	info, err := os.Stat(dest)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o555), info.Mode().Perm())
	entries, err := os.ReadDir(filepath.Dir(dest))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left beside the copy")
}

// TestInstallFailsClearly: a directory that does not exist is an error naming the path.
func TestInstallFailsClearly(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "missing", "pause")
	out, err := run(t, "-install", dest).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "pause: install "+dest)
}

// TestPauseExitsOnSIGTERM: it waits, and SIGTERM (what the kubelet sends first) ends it at once
// with status 0, not after the grace period.
func TestPauseExitsOnSIGTERM(t *testing.T) {
	cmd := run(t)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("pause exited before any signal: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err, "exit status 0 on SIGTERM")
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("pause ignored SIGTERM")
	}
}

// TestUsage: anything else is refused with the usage.
func TestUsage(t *testing.T) {
	out, err := run(t, "sleep").CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 2, exit.ExitCode())
	require.Contains(t, string(out), "usage: pause")
}
