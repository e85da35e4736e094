package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The bearer tokens of tokenServer: Metacontroller's (--token-file) for /sync, /finalize and
// /customize, and the platform's (--verify-token-file) for /flags/verify.
const (
	testToken       = "right-token"
	testVerifyToken = "verify-token"
)

// tokenServer serves with both tokens and a flag key.
type tokenServer struct {
	url       string // the main listener: Metacontroller's hooks, probes
	verifyURL string // the flag-verification listener
	metrics   string // the metrics listener
	logs      *logBuffer
	keyFile   string
	// flag is the dynamic flag delivered to dynamicFlagRequest's instance (inline template
	// ctf/pwn-team7, owner team-7).
	flag string
}

func newTokenServer(t *testing.T, extraArgs ...string) tokenServer {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600))
	verifyTokenFile := filepath.Join(dir, "verify-token")
	require.NoError(t, os.WriteFile(verifyTokenFile, []byte(testVerifyToken+"\n"), 0o600))
	keyFile := filepath.Join(dir, "flag.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("auth-test-key-of-at-least-32-bytes\n"), 0o600))
	args := append([]string{"--token-file=" + tokenFile, "--verify-token-file=" + verifyTokenFile, "--flag-key-file=" + keyFile}, extraArgs...)
	s := startTestServers(t, args...)
	require.NotNil(t, s.verify, "a verification token serves flag verification")
	resp, body := post(t, s.main.URL+"/sync", "application/json", dynamicFlagRequest(t), "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	return tokenServer{url: s.main.URL, verifyURL: s.verify.URL, metrics: s.metrics.URL, logs: s.logs, keyFile: keyFile, flag: flagFromResponse(t, body)}
}

func verification(t *testing.T, definition, owner, flag string) []byte {
	body, err := json.Marshal(map[string]string{"definition": definition, "owner": owner, "flag": flag})
	require.NoError(t, err)
	return body
}

func TestFlagVerify(t *testing.T) {
	ts := newTokenServer(t)
	srv, logs, flag := ts.verifyURL, ts.logs, ts.flag
	const inlineDefinition = "inline/ctf/pwn-team7"
	auth := []string{"Authorization", "Bearer " + testVerifyToken}
	wrongFlag := flag[:len(flag)-2] + "0}"
	if wrongFlag == flag {
		wrongFlag = flag[:len(flag)-2] + "1}"
	}

	answers := []struct {
		name                    string
		definition, owner, flag string
		correct                 bool
	}{
		{"the delivered flag", inlineDefinition, "team-7", flag, true},
		{"one hex digit off", inlineDefinition, "team-7", wrongFlag, false},
		{"another owner's", inlineDefinition, "team-8", flag, false},
		{"another definition's", "ctf/pwn", "team-7", flag, false},
		{"not shaped like a flag", inlineDefinition, "team-7", "hunter2", false},
	}
	for _, tt := range answers {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, srv+"/flags/verify", "application/json", verification(t, tt.definition, tt.owner, tt.flag), auth...)
			require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
			assert.JSONEq(t, map[bool]string{true: `{"correct":true}`, false: `{"correct":false}`}[tt.correct], string(body))
		})
	}

	refused := []struct {
		name     string
		body     []byte
		header   []string
		wantCode int
		want     string
	}{
		{"no token", verification(t, inlineDefinition, "team-7", flag), nil, 401, "bearer token"},
		{"wrong token", verification(t, inlineDefinition, "team-7", flag), []string{"Authorization", "Bearer " + flag}, 401, "bearer token"},
		{"Metacontroller's token", verification(t, inlineDefinition, "team-7", flag), []string{"Authorization", "Bearer " + testToken}, 403, "grants /sync, /finalize, /customize, /prepull/sync and /prepull/customize only"},
		{"no flag", verification(t, inlineDefinition, "team-7", ""), auth, 400, "flag is required"},
		{"no owner", verification(t, inlineDefinition, "", flag), auth, 400, "owner is required"},
		{"definition without namespace", verification(t, "pwn", "team-7", flag), auth, 400, "<namespace>/<name>"},
		{"unknown field", []byte(`{"definition":"ctf/pwn","owner":"team-7","flag":"` + flag + `","flagg":"x"}`), auth, 400, `unknown field "flagg"`},
		{"flag a number", []byte(`{"definition":"ctf/pwn","owner":"team-7","flag":7}`), auth, 400, "flag"},
		{"malformed JSON", []byte(`{"definition":"ctf/pwn","owner":"team-7","flag":"` + flag), auth, 400, "unexpected EOF"},
		{"two objects", append(verification(t, inlineDefinition, "team-7", flag), verification(t, inlineDefinition, "team-7", flag)...), auth, 400, "after the JSON object"},
		{"over the limit", append([]byte(`{"flag":"`), bytes.Repeat([]byte("x"), int(flagVerifyMaxBytes))...), auth, 413,
			fmt.Sprintf("larger than %d bytes (the fixed limit of a flag verification: three short strings and at most 5000 candidate owners)", flagVerifyMaxBytes)},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, srv+"/flags/verify", "application/json", tt.body, tt.header...)
			require.Equal(t, tt.wantCode, resp.StatusCode, "body: %s", body)
			var e errorBody
			require.NoError(t, json.Unmarshal(body, &e), "body: %s", body)
			assert.Contains(t, e.Error, tt.want)
			assert.NotContains(t, string(body), flag, "an answer echoes the flag")
			assert.NotContains(t, string(body), "--max-request-bytes", "a flag that does not set the verification's limit")
		})
	}
	resp, body := post(t, srv+"/flags/verify", "text/plain", verification(t, inlineDefinition, "team-7", flag), auth...)
	assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "body: %s", body)
	req, err := http.NewRequest(http.MethodGet, srv+"/flags/verify", nil)
	require.NoError(t, err)
	resp, _ = do(t, req)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	hexPart := flag[strings.IndexByte(flag, '{')+1 : len(flag)-1]
	require.Contains(t, logs.String(), `"path":"/flags/verify"`, "verifications are logged")
	for _, secret := range []string{flag, hexPart, wrongFlag} {
		assert.NotContains(t, logs.String(), secret, "the logs show a flag")
	}
}

// Without a verification token, flag verification does not exist: no listener, and the main
// listener has no such route whatever its token. Anyone reaching the hook could otherwise test
// guesses, and Metacontroller's token must not verify flags.
func TestFlagVerifyNeedsAVerifyTokenFile(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "flag.key")
	require.NoError(t, os.WriteFile(keyFile, []byte("verify-test-key-of-at-least-32-bytes"), 0o600))
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken), 0o600))
	for _, args := range [][]string{{"--flag-key-file=" + keyFile}, {"--flag-key-file=" + keyFile, "--token-file=" + tokenFile}} {
		srv, verify, _ := newTestServers(t, args...)
		assert.Nil(t, verify, "%v: no verification listener without --verify-token-file", args)
		resp, body := post(t, srv.URL+"/flags/verify", "application/json", verification(t, "ctf/pwn", "team-7", "flag{0}"), "Authorization", "Bearer "+testToken)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%v: body: %s", args, body)
		assert.Contains(t, string(body), "--verify-token-file")
	}

	// run does not open the verification listener either.
	r := startRun(t, "--listen=127.0.0.1:0", "--flag-key-file="+keyFile)
	assert.Empty(t, r.verifyAddr)
	assert.Contains(t, r.logs.String(), `"flag_verification":false`)
}

// With a token but no key there is no dynamic flag to verify: the platform hears why, instead of
// "incorrect" for every submission.
func TestFlagVerifyWithoutAKey(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "verify-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testVerifyToken), 0o600))
	_, verify, _ := newTestServers(t, "--verify-token-file="+tokenFile)
	resp, body := post(t, verify.URL+"/flags/verify", "application/json", verification(t, "ctf/pwn", "team-7", "flag{0}"), "Authorization", "Bearer "+testVerifyToken)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "body: %s", body)
	assert.Contains(t, string(body), "--flag-key-file")
}

// `challenge-hook flag` prints the flag the hook delivers and verifies.
func TestFlagCommandPrintsTheDeliveredFlag(t *testing.T) {
	ts := newTokenServer(t)
	srv, flag, keyFile := ts.verifyURL, ts.flag, ts.keyFile
	var stdout bytes.Buffer
	err := run(t.Context(), []string{"challenge-hook", "flag", "--definition=inline/ctf/pwn-team7", "--owner=team-7", "--flag-key-file=" + keyFile}, noEnv, &stdout, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, flag+"\n", stdout.String())

	stdout.Reset()
	err = run(t.Context(), []string{"challenge-hook", "flag", "--definition=ctf/web-sqli", "--owner=team-42", "--prefix=CTF"},
		envMap(map[string]string{"CHALLENGE_HOOK_FLAG_KEY_FILE": keyFile}), &stdout, &bytes.Buffer{})
	require.NoError(t, err)
	printed := strings.TrimSpace(stdout.String())
	require.True(t, strings.HasPrefix(printed, "CTF{"), printed)
	resp, body := post(t, srv+"/flags/verify", "application/json", verification(t, "ctf/web-sqli", "team-42", printed), "Authorization", "Bearer "+testVerifyToken)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{"correct":true}`, string(body), "the printed flag verifies")

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--owner=team-7", "--flag-key-file=" + keyFile}, "--definition"},
		{[]string{"--definition=ctf/web", "--flag-key-file=" + keyFile}, "owner is required"},
		{[]string{"--definition=ctf/web", "--owner=team-7"}, "--flag-key-file is required"},
		{[]string{"--definition=ctf/web", "--owner=team-7", "--flag-key-file=" + keyFile, "--prefix=a-b"}, "--prefix"},
		{[]string{"--definition=ctf/web", "--owner=team-7", "--flag-key-file=/nonexistent/key"}, "flag-key-file"},
	} {
		err := run(t.Context(), append([]string{"challenge-hook", "flag"}, tt.args...), noEnv, &bytes.Buffer{}, &bytes.Buffer{})
		if assert.Error(t, err, "%v", tt.args) {
			assert.Contains(t, err.Error(), tt.want)
		}
	}
}

// attribution is a verification body with candidate owners.
func attribution(t *testing.T, definition, owner, flag string, candidates ...string) []byte {
	body, err := json.Marshal(map[string]any{"definition": definition, "owner": owner, "flag": flag, "candidates": candidates})
	require.NoError(t, err)
	return body
}

// TestFlagAttribution: with candidate owners, a flag wrong for its owner but another candidate's
// valid flag on the same definition is answered with that owner (ownedBy); a right, a wrong, a
// malformed flag, or another definition's, never names anyone. Every answer to a request with
// candidates has one length and one log line, whatever the verdict and whoever the owner; a
// request without them is answered as before.
func TestFlagAttribution(t *testing.T) {
	ts := newTokenServer(t)
	const inlineDefinition = "inline/ctf/pwn-team7"
	auth := []string{"Authorization", "Bearer " + testVerifyToken}
	flag := ts.flag // team-7's
	hexPart := flag[strings.IndexByte(flag, '{')+1 : len(flag)-1]
	wrongFlag := flag[:len(flag)-2] + "0}"
	if wrongFlag == flag {
		wrongFlag = flag[:len(flag)-2] + "1}"
	}
	longName := strings.Repeat("t", 63)

	before := len(ts.logs.String())
	for _, tt := range []struct {
		name, definition, owner, flag string
		candidates                    []string
		correct                       bool
		ownedBy                       string
	}{
		{"right", inlineDefinition, "team-7", flag, []string{"team-1", "team-7", "team-8"}, true, ""},
		{"wrong", inlineDefinition, "team-7", wrongFlag, []string{"team-1", "team-8"}, false, ""},
		{"shared", inlineDefinition, "team-8", flag, []string{"team-1", "team-7", "team-9"}, false, "team-7"},
		{"shared, under another prefix", inlineDefinition, "team-8", "CTF{" + hexPart + "}", []string{"team-7"}, false, "team-7"},
		{"shared by an owner not among the candidates", inlineDefinition, "team-8", flag, []string{"team-1", "team-9"}, false, ""},
		{"another owner's flag on another definition", "ctf/pwn", "team-8", flag, []string{"team-7"}, false, ""},
		{"malformed", inlineDefinition, "team-8", "hunter2", []string{"team-7"}, false, ""},
		{"shared, in capitals", inlineDefinition, "team-8", strings.ToUpper(flag), []string{"team-7"}, false, ""},
		{"shared, the hex part alone", inlineDefinition, "team-8", hexPart, []string{"team-7"}, false, ""},
		{"the most candidates, the longest names", inlineDefinition, "team-8", flag,
			append(slices.Repeat([]string{longName}, 4999), "team-7"), false, "team-7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, ts.verifyURL+"/flags/verify", "application/json", attribution(t, tt.definition, tt.owner, tt.flag, tt.candidates...), auth...)
			require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
			var verdict struct {
				Correct *bool   `json:"correct"`
				OwnedBy *string `json:"ownedBy"`
			}
			require.NoError(t, json.Unmarshal(body, &verdict), "body: %q", body)
			require.NotNil(t, verdict.Correct, "body: %q", body)
			assert.Equal(t, tt.correct, *verdict.Correct)
			if tt.ownedBy == "" {
				assert.Nil(t, verdict.OwnedBy, "body: %q", body)
			} else if assert.NotNil(t, verdict.OwnedBy, "body: %q", body) {
				assert.Equal(t, tt.ownedBy, *verdict.OwnedBy)
			}
			assert.Len(t, body, attributedVerdictLength, "body: %q", body)
			assert.Equal(t, fmt.Sprint(len(body)), resp.Header.Get("Content-Length"))
			assert.NotContains(t, string(body), hexPart, "an answer echoes the flag")
		})
	}
	// One log line for all of them, but for the time and duration.
	lines := verifyLogLines(t, ts.logs.String()[before:])
	require.Len(t, lines, 10)
	assert.Contains(t, lines[0], "bytes")
	for _, line := range lines[1:] {
		assert.True(t, maps.EqualFunc(lines[0], line, func(a, b any) bool { return a == b }),
			"the log lines of two attributions differ:\n%v\n%v", lines[0], line)
	}
	assert.NotContains(t, ts.logs.String(), hexPart, "the logs show the flag")

	// Without candidates, or with none, the answer is today's: no attribution, the short verdicts.
	for _, body := range [][]byte{verification(t, inlineDefinition, "team-8", flag), attribution(t, inlineDefinition, "team-8", flag)} {
		resp, got := post(t, ts.verifyURL+"/flags/verify", "application/json", body, auth...)
		require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", got)
		assert.Equal(t, string(verdictWrong), string(got))
	}

	for _, tt := range []struct {
		name string
		body []byte
		want string
	}{
		{"too many candidates", attribution(t, inlineDefinition, "team-8", flag, slices.Repeat([]string{"t"}, 5001)...),
			"candidates: 5001 owners, at most 5000 in one verification: split them over several requests"},
		{"a candidate that is no owner", attribution(t, inlineDefinition, "team-8", flag, "team-1", "Team 7!"), `candidates[1]: owner "Team 7!"`},
		{"an empty candidate", attribution(t, inlineDefinition, "team-8", flag, ""), "candidates[0]: owner is required"},
		{"candidates not a list", []byte(`{"definition":"ctf/pwn","owner":"team-8","flag":"` + flag + `","candidates":"team-7"}`), "candidates"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, ts.verifyURL+"/flags/verify", "application/json", tt.body, auth...)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "body: %s", body)
			var e errorBody
			require.NoError(t, json.Unmarshal(body, &e), "body: %s", body)
			assert.Contains(t, e.Error, tt.want)
			assert.NotContains(t, string(body), hexPart, "an answer echoes the flag")
		})
	}
}

// `challenge-hook flag --whose` names the owners of a file whose flag a given one is, the
// organizer's way to trace a flag posted in public; a flag of nobody among them is an error.
func TestFlagCommandSaysWhoseAFlagIs(t *testing.T) {
	ts := newTokenServer(t)
	dir := t.TempDir()
	ownersFile := filepath.Join(dir, "owners")
	require.NoError(t, os.WriteFile(ownersFile, []byte("team-1\n\nteam-7\n team-9 \n"), 0o600))
	badOwners := filepath.Join(dir, "bad-owners")
	require.NoError(t, os.WriteFile(badOwners, []byte("team-1\nTeam 7!\n"), 0o600))
	whose := func(args ...string) (string, error) {
		var stdout bytes.Buffer
		err := run(t.Context(), append([]string{"challenge-hook", "flag", "--flag-key-file=" + ts.keyFile}, args...), noEnv, &stdout, &bytes.Buffer{})
		return stdout.String(), err
	}
	got, err := whose("--definition=inline/ctf/pwn-team7", "--whose="+ts.flag, "--owners-file="+ownersFile)
	require.NoError(t, err)
	assert.Equal(t, "team-7\n", got, "the delivered flag is team-7's")

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--definition=ctf/pwn", "--whose=" + ts.flag, "--owners-file=" + ownersFile}, "not the dynamic flag of any of the 3 owners"},
		{[]string{"--definition=inline/ctf/pwn-team7", "--whose=hunter2", "--owners-file=" + ownersFile}, "not the dynamic flag of any of the 3 owners"},
		{[]string{"--definition=inline/ctf/pwn-team7", "--whose=" + ts.flag}, "--whose needs --owners-file"},
		{[]string{"--definition=inline/ctf/pwn-team7", "--whose=" + ts.flag, "--owner=team-7", "--owners-file=" + ownersFile}, "--whose and --owner"},
		{[]string{"--definition=inline/ctf/pwn-team7", "--owner=team-7", "--owners-file=" + ownersFile}, "--owners-file is for --whose"},
		{[]string{"--definition=inline/ctf/pwn-team7", "--whose=" + ts.flag, "--owners-file=" + badOwners}, "line 2: owner \"Team 7!\""},
		{[]string{"--definition=inline/ctf/pwn-team7", "--whose=" + ts.flag, "--owners-file=/nonexistent/owners"}, "--owners-file"},
	} {
		out, err := whose(tt.args...)
		if assert.Error(t, err, "%v", tt.args) {
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), flagHexPart(ts.flag), "an error echoes the flag")
		}
		assert.Empty(t, out, "%v", tt.args)
	}
}

// flagHexPart is a flag's secret part, between the braces.
func flagHexPart(flag string) string {
	return flag[strings.IndexByte(flag, '{')+1 : len(flag)-1]
}
