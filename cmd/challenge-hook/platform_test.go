package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlatformRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	shortToken := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(shortToken, []byte("too-short\n"), 0o600))
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("an rCTF token of at least 32 bytes, surely\n"), 0o600))
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no token":             {[]string{"--namespaces=ctf"}, "--rctf-token-file is required"},
		"no namespace":         {[]string{"--rctf-token-file=" + token}, "--namespaces is required"},
		"a short token":        {[]string{"--rctf-token-file=" + shortToken, "--namespaces=ctf"}, "fewer than 32"},
		"an absent token file": {[]string{"--rctf-token-file=" + filepath.Join(dir, "absent"), "--namespaces=ctf"}, "rctf-token-file"},
		"a bad namespace":      {[]string{"--rctf-token-file=" + token, "--namespaces=CTF"}, "-namespaces"},
		"no kubeconfig":        {[]string{"--rctf-token-file=" + token, "--namespaces=ctf", "--kubeconfig=" + filepath.Join(dir, "absent")}, "--kubeconfig"},
		"argument":             {[]string{"extra"}, `unexpected argument "extra"`},
	} {
		err := run(context.Background(), append([]string{"challenge-hook", "platform", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}, tc.args...), noEnv, io.Discard, io.Discard)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

func TestPlatformHelp(t *testing.T) {
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "platform", "-h"}, noEnv, io.Discard, &stderr))
	for _, flag := range []string{"-listen", "-metrics-listen", "-rctf-token-file", "-namespaces", "-kubeconfig", "-api-qps", "-team-starts", "-team-start-interval", "-log-level"} {
		assert.Contains(t, stderr.String(), flag+" ")
	}
}
