package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each credential grants only what it names: Metacontroller's token never verifies a flag, and the
// platform's verification token never reaches /sync, /finalize or /customize, whose answers hold
// every team's flag. Each refusal is pinned here, with its status and JSON error.
func TestEachCredentialGrantsOnlyWhatItNames(t *testing.T) {
	ts := newTokenServer(t)
	request := dynamicFlagRequest(t)
	verifyBody := verification(t, "inline/ctf/pwn-team7", "team-7", ts.flag)
	encodedFlag := base64.StdEncoding.EncodeToString([]byte(ts.flag))

	tests := []struct {
		name      string
		url, path string
		token     string
		body      []byte
		wantCode  int
		wantError string
	}{
		// The verification token on Metacontroller's routes: a valid credential for something else.
		{"verify token on /sync", ts.url, "/sync", testVerifyToken, request, 403, "the flag-verification token (--verify-token-file) grants /flags/verify only, not /sync"},
		{"verify token on /finalize", ts.url, "/finalize", testVerifyToken, request, 403, "grants /flags/verify only, not /finalize"},
		{"verify token on /customize", ts.url, "/customize", testVerifyToken, request, 403, "grants /flags/verify only, not /customize"},
		// Metacontroller's token on flag verification.
		{"Metacontroller token on /flags/verify", ts.verifyURL, "/flags/verify", testToken, verifyBody, 403, "Metacontroller's token (--token-file) grants /sync, /finalize, /customize, /prepull/sync and /prepull/customize only, not /flags/verify"},
		// Flag verification is not on the main listener, whatever the token.
		{"/flags/verify on the main listener, verify token", ts.url, "/flags/verify", testVerifyToken, verifyBody, 404, "no route /flags/verify on this listener"},
		{"/flags/verify on the main listener, Metacontroller token", ts.url, "/flags/verify", testToken, verifyBody, 404, "--verify-listen"},
		// Nothing but /flags/verify is on the verification listener, whatever the token.
		{"/sync on the verification listener, verify token", ts.verifyURL, "/sync", testVerifyToken, request, 404, "serves POST /flags/verify only"},
		{"/sync on the verification listener, Metacontroller token", ts.verifyURL, "/sync", testToken, request, 404, "serves POST /flags/verify only"},
		{"/customize on the verification listener", ts.verifyURL, "/customize", testToken, request, 404, "serves POST /flags/verify only"},
		{"/finalize on the verification listener", ts.verifyURL, "/finalize", testToken, request, 404, "serves POST /flags/verify only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, tt.url+tt.path, "application/json", tt.body, "Authorization", "Bearer "+tt.token)
			require.Equal(t, tt.wantCode, resp.StatusCode, "body: %s", body)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e errorBody
			require.NoError(t, json.Unmarshal(body, &e), "error body is not JSON: %s", body)
			assert.Contains(t, e.Error, tt.wantError)
			assert.NotContains(t, string(body), ts.flag)
			assert.NotContains(t, string(body), encodedFlag)
		})
	}

	// Probes and metrics are the main listener's only.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(ts.verifyURL + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
	}
	// Each token opens its own routes.
	resp, body := post(t, ts.url+"/sync", "application/json", request, "Authorization", "Bearer "+testToken)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	resp, body = post(t, ts.verifyURL+"/flags/verify", "application/json", verifyBody, "Authorization", "Bearer "+testVerifyToken)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.JSONEq(t, `{"correct":true}`, string(body))
}

// With --insecure-serve-without-token (newTestServers without --token-file), Metacontroller's
// routes take any caller, but still not one that presents the verification token: that credential
// names flag verification alone.
func TestVerifyTokenIsRefusedEvenWithoutAHookToken(t *testing.T) {
	dir := t.TempDir()
	verifyTokenFile := filepath.Join(dir, "verify-token")
	require.NoError(t, os.WriteFile(verifyTokenFile, []byte(testVerifyToken), 0o600))
	srv, verify, _ := newTestServers(t, "--verify-token-file="+verifyTokenFile)
	require.NotNil(t, verify)
	request := mutate(t, func(map[string]any) {})

	resp, body := post(t, srv.URL+"/sync", "application/json", request, "Authorization", "Bearer "+testVerifyToken)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "body: %s", body)
	assert.Contains(t, string(body), "grants /flags/verify only")
	resp, body = post(t, srv.URL+"/sync", "application/json", request)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "no token configured for /sync: body: %s", body)
	resp, body = post(t, srv.URL+"/sync", "application/json", request, "Authorization", "Bearer anything-else")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "no token configured for /sync: body: %s", body)

	resp, body = post(t, verify.URL+"/flags/verify", "application/json", verification(t, "ctf/pwn", "team-7", "flag{00}"))
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "verification always needs its token: body: %s", body)
}

// The verification credential and listener are checked at start-up: one without the other, one
// address for both listeners, or one token for both credentials stops the hook.
func TestVerifyListenerConfiguration(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600))
	sameToken := filepath.Join(dir, "same-token")
	require.NoError(t, os.WriteFile(sameToken, []byte("  "+testToken+"\n"), 0o600))
	blank := filepath.Join(dir, "blank")
	require.NoError(t, os.WriteFile(blank, []byte("\n"), 0o600))

	cfg, _, err := parseServerConfig(nil, noEnv)
	require.NoError(t, err)
	assert.Equal(t, ":8081", cfg.verifyListen)
	assert.Empty(t, cfg.verifyTokenFile, "no flag verification by default")
	cfg, _, err = parseServerConfig(nil, envMap(map[string]string{"CHALLENGE_HOOK_VERIFY_TOKEN_FILE": tokenFile, "CHALLENGE_HOOK_VERIFY_LISTEN": "127.0.0.1:9443"}))
	require.NoError(t, err)
	assert.Equal(t, tokenFile, cfg.verifyTokenFile)
	assert.Equal(t, "127.0.0.1:9443", cfg.verifyListen)

	for _, tt := range []struct {
		name  string
		args  []string
		env   map[string]string
		wants []string
	}{
		{"listener without token", []string{"--verify-listen=:9443"}, nil, []string{"--verify-listen :9443 is set but --verify-token-file is not"}},
		{"listener without token, from the environment", nil, map[string]string{"CHALLENGE_HOOK_VERIFY_LISTEN": ":9443"}, []string{"--verify-token-file is not"}},
		{"one address for both", []string{"--listen=:9000", "--verify-listen=:9000", "--verify-token-file=" + tokenFile}, nil, []string{"--verify-listen and --listen are both :9000"}},
		{"default addresses swapped onto one", []string{"--listen=:8081", "--verify-token-file=" + tokenFile}, nil, []string{"are both :8081"}},
		{"bad address", []string{"--verify-listen=9443"}, nil, []string{"verify-listen", "host:port"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseServerConfig(tt.args, envMap(tt.env))
			require.Error(t, err)
			if missing := missingPart(err.Error(), tt.wants...); missing != "" {
				t.Errorf("error lacks %q: %v", missing, err)
			}
		})
	}

	for _, tt := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"one token for both", []string{"--token-file=" + tokenFile, "--verify-token-file=" + sameToken}, []string{"--verify-token-file " + sameToken + " holds the same token as --token-file", "separate"}},
		{"empty verification token", []string{"--verify-token-file=" + blank}, []string{"--verify-token-file", blank, "empty"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := run(t.Context(), append([]string{"challenge-hook", "--listen=127.0.0.1:0", "--verify-listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}, withoutTokenUnlessGiven(tt.args)...), noEnv, io.Discard, io.Discard)
			require.Error(t, err)
			if missing := missingPart(err.Error(), tt.wants...); missing != "" {
				t.Errorf("error lacks %q: %v", missing, err)
			}
			assert.NotContains(t, err.Error(), testToken, "the error shows the token")
		})
	}
}

// In-cluster the verification token is an optional Secret, like the flag key: a file that does not
// exist leaves the hook serving Metacontroller, with a warning, and no verification listener.
func TestMissingVerifyTokenFileServesWithoutVerification(t *testing.T) {
	missingFile := filepath.Join(t.TempDir(), "verify-token")
	r := startRun(t, "--listen=127.0.0.1:0", "--verify-listen=127.0.0.1:0", "--verify-token-file="+missingFile)
	assert.Empty(t, r.verifyAddr)
	assert.Contains(t, r.logs.String(), `"flag_verification":false`)
	if missing := missingPart(r.logs.String(), `"level":"WARN"`, "verification token file does not exist", missingFile); missing != "" {
		t.Errorf("logs lack %q:\n%s", missing, r.logs)
	}
	resp, err := http.Get("http://" + r.addr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// run serves both listeners, logs both addresses, and stops both on cancel.
func TestRunServesTheVerifyListener(t *testing.T) {
	dir := t.TempDir()
	verifyTokenFile := filepath.Join(dir, "verify-token")
	require.NoError(t, os.WriteFile(verifyTokenFile, []byte(testVerifyToken), 0o600))
	r := startRun(t, "--listen=127.0.0.1:0", "--verify-listen=127.0.0.1:0", "--verify-token-file="+verifyTokenFile,
		"--flag-key-file=../../testdata/flag.key")
	require.NotEmpty(t, r.verifyAddr)
	require.NotEqual(t, r.addr, r.verifyAddr)
	assert.Contains(t, r.logs.String(), `"flag_verification":true`)

	resp, body := post(t, "http://"+r.verifyAddr+"/flags/verify", "application/json", verification(t, "ctf/web", "team-7", "flag{00}"), "Authorization", "Bearer "+testVerifyToken)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.JSONEq(t, `{"correct":false}`, string(body))
	resp, body = post(t, "http://"+r.addr+"/flags/verify", "application/json", verification(t, "ctf/web", "team-7", "flag{00}"), "Authorization", "Bearer "+testVerifyToken)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "body: %s", body)

	require.NoError(t, r.stop(t))
	for _, addr := range []string{r.addr, r.verifyAddr} {
		_, err := http.Get("http://" + addr + "/healthz")
		assert.Error(t, err, "%s is still served after run returned", addr)
	}
}
