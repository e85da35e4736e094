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

// fakeKubectl answers `get services -n <namespace>` with the hook's Services of three instances
// in ctf and ctf-b (one with two Pods, whose Services are not named after the Challenge; one that
// does not idle, without the idle-timeout annotation) and records every annotate.
const fakeKubectl = `#!/usr/bin/env bash
case "$1 $2 $3 $4" in
  "get services -n ctf") printf '%s\n' "web-sqli-team42 80, 15m0s" "trio-team-a-web 80,8080, 15m0s" "trio-team-a-db 5432, " "misc-team42 80, " ;;
  "get services -n ctf-b") printf '%s\n' "pwn-team7 80, 15m0s" ;;
  "annotate --overwrite services -n") echo "$*" >>"$CALLS" ;;
  *) exit 1 ;;
esac
`

// logLine is ingress-nginx's default access log line for a request to upstream.
func logLine(upstream string) string {
	return playerLogLine("-", "GET / HTTP/1.1", "-", "curl/8.5.0", upstream)
}

// playerLogLine is ingress-nginx's default access log line for a request to upstream, with the
// fields a player writes: the Basic auth user, the request line, the Referer and the User-Agent
// (which nginx logs with a double quote as \x22).
func playerLogLine(user, request, referer, userAgent, upstream string) string {
	return `203.0.113.7 - ` + user + ` [27/Nov/2026:13:40:01 +0000] "` + request + `" 200 612 "` + referer + `" "` + userAgent + `" 78 0.002 [` +
		upstream + `] [] 10.244.0.12:8080, 10.244.0.13:8080 612, 0 0.002, 0.001 502, 200 4f1e8a3c`
}

// TestStampFromIngressLog: each Service of an idling instance that served a request is stamped
// once per STAMP_EVERY, whichever of its ports served it; a Service of an instance that does not
// idle, and requests to anything else, stamp nothing, whatever brackets a player wrote in the
// fields it controls (another team's upstream in its User-Agent, Referer, request line or Basic
// auth user).
func TestStampFromIngressLog(t *testing.T) {
	dir := t.TempDir()
	kubectl := filepath.Join(dir, "kubectl")
	require.NoError(t, os.WriteFile(kubectl, []byte(fakeKubectl), 0o755))
	calls := filepath.Join(dir, "calls")
	log := strings.Join([]string{
		playerLogLine("-", "GET / HTTP/1.1", "-", "x [ctf-b-pwn-team7-80] [] y", "platform-scoreboard-80"),
		playerLogLine("-", "GET / HTTP/1.1", "-", `x\x22 0 0.002 [ctf-b-pwn-team7-80] [] y`, "upstream-default-backend"),
		playerLogLine("-", "GET / HTTP/1.1", "https://x/ [ctf-b-pwn-team7-80] [] y", "curl/8.5.0", "platform-scoreboard-80"),
		playerLogLine("-", "GET /?q= [ctf-b-pwn-team7-80] [] HTTP/1.1", "-", "curl/8.5.0", "upstream-default-backend"),
		playerLogLine("a [ctf-b-pwn-team7-80] [] b", "GET / HTTP/1.1", "-", "curl/8.5.0", "upstream-default-backend"),
		playerLogLine("a [ctf-b-pwn-team7-80] [] b", "GET /[x] [y] HTTP/1.1", "[z] []", "[ctf-b-pwn-team7-80] []", "ctf-web-sqli-team42-80"),
		logLine("ctf-web-sqli-team42-80"), // within STAMP_EVERY: no second stamp
		logLine("upstream-default-backend"),
		logLine("platform-scoreboard-80"),
		`a line in another format`,
		logLine("ctf-trio-team-a-web-8080"),
		logLine("ctf-trio-team-a-web-80"),
		logLine("ctf-misc-team42-80"), // does not idle
	}, "\n") + "\n"
	cmd := exec.Command("bash", "stamp.sh")
	cmd.Env = append(os.Environ(), "KUBECTL="+kubectl, "CALLS="+calls, "STAMP_EVERY=120", "REFRESH_SECONDS=0", "NAMESPACES=ctf,ctf-b")
	cmd.Stdin = strings.NewReader(log)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	data, err := os.ReadFile(calls)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 2, "one stamp per Service, none of team 7's: %q", lines)
	for i, want := range []string{"-n ctf web-sqli-team42 ", "-n ctf trio-team-a-web "} {
		assert.Contains(t, lines[i], "annotate --overwrite services "+want)
		assert.Regexp(t, `ctf\.challenge-hook\.dev/last-activity=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`, lines[i])
	}
}
