// Package ctfd holds the test of sign.py, the signing half of the CTFd plugin in this directory:
// python3 signs, platform.VerifyLink verifies. No CTFd is needed: sign.py is standard library.
package ctfd

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/platform"
)

// vectorKey, vectorSig: the signed link of internal/platform/link_test.go's linkVector (ctf,
// pwn-heap, team-42, expiring at 1796389200), which docs/player-page.md lists.
const (
	vectorKey = "a link key of the platform's, 32+ bytes long"
	vectorSig = "91347573c99c68ad3af3e218db6766d766622c608850ecaadf4155ef00811f75"
)

// python3 runs sign.py's arguments under python3 with env added to the environment (the
// CHALLENGE_HOOK_ variables cleared first) and returns what it printed and its error.
// make test runs this test, and CI's machine (the go kind) has python3 on PATH (pyenv's, and
// Debian's /usr/bin/python3); a machine without it skips the test rather than fail make test.
func python3(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on PATH: sign.py is not checked against VerifyLink")
	}
	cmd := exec.Command("python3", append([]string{"-B", "sign.py"}, args...)...) // -B: no __pycache__ in the tree
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHALLENGE_HOOK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		err = fmt.Errorf("%w: %s", err, exit.Stderr)
	}
	return strings.TrimSpace(string(out)), err
}

// TestSignVector: sign.py signs the vector's link to the byte, as Go's SignLink does, and from a
// key file with a trailing newline (as `kubectl create secret --from-file` of an editor's file
// holds it) as from the variable.
func TestSignVector(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "link-key")
	require.NoError(t, os.WriteFile(keyFile, []byte(vectorKey+"\n"), 0o600))
	want := "https://play.ctf.example.org/i/open?ns=ctf&def=pwn-heap&owner=team-42&exp=1796389200&sig=" + vectorSig
	vector := platform.Link{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: time.Unix(1796389200, 0)}
	require.Equal(t, vectorSig, platform.SignLink([]byte(vectorKey), vector).Get("sig"), "the vector is link_test.go's")

	for _, env := range [][]string{{"CHALLENGE_HOOK_LINK_KEY=" + vectorKey}, {"CHALLENGE_HOOK_LINK_KEY_FILE=" + keyFile}} {
		link, err := python3(t, env, "https://play.ctf.example.org/", "ctf", "pwn-heap", "team-42", "1796389200")
		require.NoError(t, err, "%v", env)
		assert.Equal(t, want, link, "%v", env)
	}
}

// TestSignedLinksVerify: the links sign.py prints for several namespaces, definitions and owners
// (teams and users, as the plugin names them, and label values with dots and underscores) are
// valid now for platform.VerifyLink, name what was signed, and expire in LIFETIME (120 s); under
// another key they are not.
func TestSignedLinksVerify(t *testing.T) {
	env := []string{"CHALLENGE_HOOK_LINK_KEY=" + vectorKey}
	for _, l := range []platform.Link{
		{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42"},
		{Namespace: "ctf-b", Definition: "web.sqli-2", Owner: "Team_7.b"},
		{Namespace: "ctf", Definition: "misc", Owner: "user-3"},
	} {
		before := time.Now()
		link, err := python3(t, env, "https://play.ctf.example.org", l.Namespace, l.Definition, l.Owner)
		require.NoError(t, err)
		u, err := url.Parse(link)
		require.NoError(t, err)
		assert.Equal(t, "/i/open", u.Path, link)

		got, err := platform.VerifyLink([][]byte{[]byte(vectorKey)}, u.Query(), time.Now())
		require.NoError(t, err, link)
		assert.Equal(t, l, platform.Link{Namespace: got.Namespace, Definition: got.Definition, Owner: got.Owner}, link)
		assert.WithinRange(t, got.Expires, before.Truncate(time.Second).Add(120*time.Second), time.Now().Add(120*time.Second), link)

		_, err = platform.VerifyLink([][]byte{[]byte("somebody else's key, 32+ bytes long...")}, u.Query(), time.Now())
		assert.ErrorContains(t, err, "wrong signature", link)
	}
}

// TestSignRefusesShortKey: without a key, or with one under platform.MinLinkKeyBytes, sign.py (and
// so the plugin's load, which reads the key first) stops with a message that names the variables.
func TestSignRefusesShortKey(t *testing.T) {
	require.Equal(t, 32, platform.MinLinkKeyBytes)
	for _, env := range [][]string{nil, {"CHALLENGE_HOOK_LINK_KEY=" + strings.Repeat("k", 31)}} {
		_, err := python3(t, env, "https://play.ctf.example.org", "ctf", "pwn-heap", "team-42")
		assert.ErrorContains(t, err, "CHALLENGE_HOOK_LINK_KEY_FILE or CHALLENGE_HOOK_LINK_KEY must hold", "%v", env)
	}
}

// TestDefinitionOf: which connection info marks a CTFd challenge as instanced, and by which
// ChallengeDefinition; any other (none, a host and port, a URL) leaves the challenge as CTFd shows it.
func TestDefinitionOf(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 on PATH")
	}
	const script = `import sign
for info in [None, "", "nc pwn.example.org 1337", "https://x.example.org", "challenge-hook:", " challenge-hook: pwn-heap ", "challenge-hook:web.sqli-2"]:
    print(repr(sign.definition_of(info)))`
	out, err := exec.Command("python3", "-B", "-c", script).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "None\nNone\nNone\nNone\nNone\n'pwn-heap'\n'web.sqli-2'\n", string(out))
}
