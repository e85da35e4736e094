// Package ingressactivity holds the test of stamp.sh, the example that stamps HTTP instances'
// activity from ingress-nginx's access log.
package ingressactivity

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeKubectl answers `get services` with the hook's Services of two instances (one of them with
// two Pods, whose Services are not named after the Challenge) and records every annotate.
const fakeKubectl = `#!/usr/bin/env bash
case "$1" in
  get) printf '%s\n' "ctf web-sqli-team42 web-sqli-team42 80," "ctf trio-team-a-web trio-team-a 80,8080," ;;
  annotate) echo "$*" >>"$CALLS" ;;
  *) exit 1 ;;
esac
`

// logLine is ingress-nginx's default access log line for a request to upstream.
func logLine(upstream string) string {
	return `203.0.113.7 - - [27/Nov/2026:13:40:01 +0000] "GET / HTTP/1.1" 200 612 "-" "curl/8.5.0" 78 0.002 [` +
		upstream + `] [] 10.244.0.12:8080 612 0.002 200 4f1e8a3c`
}

// TestStampFromIngressLog: each Challenge whose Service served a request is stamped once per
// STAMP_EVERY, whichever of its Services and ports served it; requests to anything else stamp
// nothing.
func TestStampFromIngressLog(t *testing.T) {
	dir := t.TempDir()
	kubectl := filepath.Join(dir, "kubectl")
	require.NoError(t, os.WriteFile(kubectl, []byte(fakeKubectl), 0o755))
	calls := filepath.Join(dir, "calls")
	log := strings.Join([]string{
		logLine("ctf-web-sqli-team42-80"),
		logLine("ctf-web-sqli-team42-80"), // within STAMP_EVERY: no second stamp
		logLine("upstream-default-backend"),
		logLine("platform-scoreboard-80"),
		`a line in another format`,
		logLine("ctf-trio-team-a-web-8080"),
		logLine("ctf-trio-team-a-web-80"),
	}, "\n") + "\n"
	cmd := exec.Command("bash", "stamp.sh")
	cmd.Env = append(os.Environ(), "KUBECTL="+kubectl, "CALLS="+calls, "STAMP_EVERY=120", "REFRESH_SECONDS=0")
	cmd.Stdin = strings.NewReader(log)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	data, err := os.ReadFile(calls)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 2, "one stamp per Challenge: %q", lines)
	for i, want := range []string{"-n ctf web-sqli-team42 ", "-n ctf trio-team-a "} {
		assert.Contains(t, lines[i], "annotate --overwrite challenges.ctf.challenge-hook.dev "+want)
		assert.Regexp(t, `ctf\.challenge-hook\.dev/last-activity=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, lines[i])
	}
}
