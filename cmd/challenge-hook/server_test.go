package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/golden"
)

// formContentType is what `curl -d` sends, the way the README tells users to try the hook.
const formContentType = "application/x-www-form-urlencoded"

// newTestServer builds the server as run does from args, served by httptest on 127.0.0.1: the
// main listener's routes.
func newTestServer(t *testing.T, args ...string) (*httptest.Server, *logBuffer) {
	t.Helper()
	srv, _, logs := newTestServers(t, args...)
	return srv, logs
}

// newTestServers is newTestServer with the flag-verification listener's routes too, served
// separately; verify is nil when args set no verification token.
func newTestServers(t *testing.T, args ...string) (main, verify *httptest.Server, logs *logBuffer) {
	t.Helper()
	s := startTestServers(t, args...)
	return s.main, s.verify, s.logs
}

// testServers are the three listeners' handlers of one app, each served by httptest.
type testServers struct {
	main, verify, metrics *httptest.Server // verify is nil without a verification token
	logs                  *logBuffer
}

func startTestServers(t *testing.T, args ...string) testServers {
	t.Helper()
	s := testServers{logs: newLogBuffer()}
	a := newTestApp(t, s.logs, args...)
	s.main = httptest.NewServer(a.handler)
	t.Cleanup(s.main.Close)
	s.metrics = httptest.NewServer(a.metricsHandler)
	t.Cleanup(s.metrics.Close)
	if a.verifyHandler != nil {
		s.verify = httptest.NewServer(a.verifyHandler)
		t.Cleanup(s.verify.Close)
	}
	return s
}

// withoutTokenUnlessGiven adds --insecure-serve-without-token to args that set no --token-file:
// the tests of everything but the token serve without one, as `make run` could; the token's own
// tests pass --token-file, and TestTokenIsRequired shows the hook refusing to start without either.
func withoutTokenUnlessGiven(args []string) []string {
	for _, arg := range args {
		if strings.HasPrefix(arg, "--token-file=") || arg == "--"+insecureNoTokenFlag {
			return args
		}
	}
	return append(append([]string(nil), args...), "--"+insecureNoTokenFlag)
}

// newTestApp builds the server as run does from args (no environment), logging to logOut.
func newTestApp(tb testing.TB, logOut io.Writer, args ...string) *app {
	tb.Helper()
	cfg, _, err := parseServerConfig(withoutTokenUnlessGiven(args), noEnv)
	require.NoError(tb, err)
	a, err := newApp(cfg, logOut)
	require.NoError(tb, err)
	return a
}

// devAuthorization is the Authorization header `make run`'s callers send: testdata/dev.flags
// serves with --token-file=testdata/dev.token (paths relative to the repository root).
func devAuthorization(tb testing.TB) []string {
	tb.Helper()
	token, err := os.ReadFile("testdata/dev.token")
	require.NoError(tb, err)
	return []string{"Authorization", "Bearer " + strings.TrimSpace(string(token))}
}

func post(t *testing.T, url, contentType string, body []byte, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// TestMakeRunStarts: `make run`'s flags (testdata/dev.flags, paths from the repository root)
// start the hook, which serves Metacontroller's routes only with a token: the demo token the
// README's curl sends (devAuthorization).
func TestMakeRunStarts(t *testing.T) {
	t.Chdir("../..")
	devFlags, err := os.ReadFile("testdata/dev.flags")
	require.NoError(t, err)
	assert.Contains(t, strings.Fields(string(devFlags)), "--token-file=testdata/dev.token")
	// A hook that starts serves until the deadline, then returns nil.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	args := append([]string{"challenge-hook", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}, strings.Fields(string(devFlags))...)
	assert.NoError(t, run(ctx, args, noEnv, io.Discard, io.Discard), "make run's flags do not start the hook")
}

// TestGoldenReplay serves every testdata case over HTTP with the flags `make run` uses, plus the
// case's own testdata/<case>/hook.flags if it has one (e.g. a Gateway), the way the README's curl
// does, and expects response.json byte for byte.
func TestGoldenReplay(t *testing.T) {
	t.Chdir("../..") // dev.flags names files relative to the repository root, as `make run` does
	devFlags, err := os.ReadFile("testdata/dev.flags")
	require.NoError(t, err)
	servers := map[string]string{} // case flags -> server URL

	cases, err := golden.Cases("testdata")
	require.NoError(t, err)
	for _, c := range cases {
		caseFlags := strings.Join(c.Flags, " ")
		url, started := servers[caseFlags]
		if !started {
			srv, _ := newTestServer(t, append(strings.Fields(string(devFlags)), c.Flags...)...)
			url = srv.URL
			servers[caseFlags] = url
		}
		t.Run(c.Name, func(t *testing.T) {
			require.NotNil(t, c.Response, "%s has no %s: run `make update`", c.Dir, golden.ResponseFile)
			path := "/sync"
			if c.Customize() {
				path = "/customize"
			}
			// `curl -d @file` drops the file's newlines and carriage returns and sends the form type.
			curlBody := []byte(strings.NewReplacer("\n", "", "\r", "").Replace(string(c.Request)))
			resp, got := post(t, url+path, formContentType, curlBody, devAuthorization(t)...)
			require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", got)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			// The golden files hold the wire bytes indented for review (sync/golden_test.go): indenting
			// what the server sent must give the file byte for byte.
			var indented bytes.Buffer
			require.NoError(t, json.Indent(&indented, got, "", "  "))
			if !bytes.Equal(c.Response, indented.Bytes()) {
				t.Errorf("POST %s %s: the answer differs from %s\n got: %s\nwant: %s", path, c.Dir, golden.ResponseFile, indented.Bytes(), c.Response)
			}
		})
	}
}

// validRequest is a first sync of a NodePort challenge with an inline template.
func validRequest() map[string]any {
	return map[string]any{
		"controller": map[string]any{},
		"parent": map[string]any{
			"apiVersion": "ctf.challenge-hook.dev/v1alpha1",
			"kind":       "Challenge",
			"metadata":   map[string]any{"name": "pwn-team7", "namespace": "ctf", "uid": "5e0c4a9e-0000-4000-8000-000000000007", "generation": 1},
			"spec": map[string]any{
				"owner": "team-7",
				"template": map[string]any{
					"containers": []any{map[string]any{"name": "pwn", "image": "registry.example/pwn:1", "ports": []any{map[string]any{"name": "tcp", "containerPort": 1337}}}},
					"expose":     []any{map[string]any{"port": 1337, "type": "NodePort"}},
				},
			},
		},
		"children": map[string]any{
			"Pod.v1": map[string]any{}, "Service.v1": map[string]any{}, "Secret.v1": map[string]any{},
			"NetworkPolicy.networking.k8s.io/v1": map[string]any{}, "Ingress.networking.k8s.io/v1": map[string]any{},
		},
		"related":    map[string]any{},
		"finalizing": false,
	}
}

// mutate returns the JSON of validRequest after change.
func mutate(t *testing.T, change func(req map[string]any)) []byte {
	t.Helper()
	req := validRequest()
	change(req)
	body, err := json.Marshal(req)
	require.NoError(t, err)
	return body
}

func parentOf(req map[string]any) map[string]any { return req["parent"].(map[string]any) }
func specOf(req map[string]any) map[string]any   { return parentOf(req)["spec"].(map[string]any) }

func TestBadInputMatrix(t *testing.T) {
	srv, logs := newTestServer(t)
	valid := mutate(t, func(map[string]any) {})
	// Deeper than encoding/json's limit of 10000 levels, which applies to each value the hook decodes.
	nested := []byte(`{"parent":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`)
	huge := mutate(t, func(req map[string]any) { specOf(req)["owner"] = strings.Repeat("x", defaultMaxRequestBytes-4<<10) })
	objectWithoutMetadata := map[string]any{"apiVersion": "v1", "kind": "Pod"}

	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        []byte
		wantCode    int
		wantError   string // substring of the JSON error; empty for 2xx
		allowCodes  []int  // other acceptable codes (huge input)
	}{
		{name: "malformed JSON", body: []byte(`{"parent": }`), wantCode: 400, wantError: "invalid character"},
		{name: "truncated JSON", body: valid[:len(valid)/2], wantCode: 400, wantError: "unexpected EOF"},
		{name: "empty body", body: nil, wantCode: 400, wantError: "EOF"},
		{name: "trailing garbage", body: append(append([]byte{}, valid...), "garbage"...), wantCode: 400, wantError: "after the JSON object"},
		{name: "two JSON objects", body: append(append([]byte{}, valid...), valid...), wantCode: 400, wantError: "after the JSON object"},
		{name: "body over the limit", body: bytes.Repeat([]byte(" "), defaultMaxRequestBytes+1), wantCode: 413, wantError: fmt.Sprintf("larger than %d bytes", defaultMaxRequestBytes)},
		{name: "missing parent", body: mutate(t, func(req map[string]any) { delete(req, "parent") }), wantCode: 400, wantError: "no parent"},
		{name: "null parent", body: mutate(t, func(req map[string]any) { req["parent"] = nil }), wantCode: 400, wantError: "no parent"},
		{name: "JSON null", body: []byte("null"), wantCode: 400, wantError: "no parent"},
		{name: "parent without metadata.name", body: mutate(t, func(req map[string]any) { delete(parentOf(req)["metadata"].(map[string]any), "name") }), wantCode: 400, wantError: "metadata.name"},
		{name: "parent without metadata", body: mutate(t, func(req map[string]any) { delete(parentOf(req), "metadata") }), wantCode: 400, wantError: "metadata.name"},
		{name: "parent.spec a string", body: mutate(t, func(req map[string]any) { parentOf(req)["spec"] = "pwn" }), wantCode: 400, wantError: "parent"},
		{name: "metadata.name a number", body: mutate(t, func(req map[string]any) { parentOf(req)["metadata"].(map[string]any)["name"] = 7 }), wantCode: 400, wantError: "metadata.name"},
		{name: "spec.owner an object", body: mutate(t, func(req map[string]any) { specOf(req)["owner"] = map[string]any{"team": 7} }), wantCode: 400, wantError: "spec.owner"},
		{name: "containers an object", body: mutate(t, func(req map[string]any) {
			specOf(req)["template"].(map[string]any)["containers"] = map[string]any{"name": "pwn"}
		}), wantCode: 400, wantError: "containers"},
		{name: "finalizing a string", body: mutate(t, func(req map[string]any) { req["finalizing"] = "yes" }), wantCode: 400, wantError: "finalizing"},
		// DecodeRequest reads a null map as an empty one: Metacontroller always sends {} but null means
		// the same thing, so these decode and answer normally.
		{name: "null children", body: mutate(t, func(req map[string]any) { req["children"] = nil }), wantCode: 200},
		{name: "null related", body: mutate(t, func(req map[string]any) { req["related"] = nil }), wantCode: 200},
		{name: "children an array", body: mutate(t, func(req map[string]any) { req["children"] = []any{} }), wantCode: 400, wantError: "children"},
		{name: "unknown child kind", body: mutate(t, func(req map[string]any) {
			req["children"].(map[string]any)["Job.batch/v1"] = map[string]any{"x": map[string]any{"metadata": map[string]any{"name": "x"}}}
		}), wantCode: 400, wantError: `unknown child type "Job.batch/v1"`},
		{name: "child without metadata", body: mutate(t, func(req map[string]any) {
			req["children"].(map[string]any)["Pod.v1"] = map[string]any{"pwn-team7": objectWithoutMetadata}
		}), wantCode: 400, wantError: "has no metadata.name"},
		{name: "child status of the wrong type", body: mutate(t, func(req map[string]any) {
			req["children"].(map[string]any)["Pod.v1"] = map[string]any{"pwn-team7": map[string]any{"metadata": map[string]any{"name": "pwn-team7"}, "status": "ready"}}
		}), wantCode: 400, wantError: "status"},
		{name: "unknown related kind", body: mutate(t, func(req map[string]any) {
			req["related"] = map[string]any{"ConfigMap.v1": map[string]any{"ctf/x": map[string]any{"metadata": map[string]any{"name": "x"}}}}
		}), wantCode: 400, wantError: `unknown related type "ConfigMap.v1"`},
		{name: "JSON array", body: []byte(`[` + string(valid) + `]`), wantCode: 400, wantError: "cannot unmarshal array"},
		{name: "JSON string", body: []byte(`"sync please"`), wantCode: 400, wantError: "cannot unmarshal string"},
		{name: "deeply nested JSON", body: nested, wantCode: 400, wantError: "depth"},
		{name: "invalid UTF-8", body: bytes.Replace(valid, []byte("team-7"), []byte("team-\xff"), 1), wantCode: 400, wantError: "not valid UTF-8"},
		{name: "huge string value", body: huge, wantCode: 200, allowCodes: []int{400}},
		{name: "GET /sync", method: http.MethodGet, path: "/sync", wantCode: 405, wantError: "method GET not allowed"},
		{name: "PUT /finalize", method: http.MethodPut, path: "/finalize", body: valid, wantCode: 405, wantError: "method PUT not allowed"},
		{name: "DELETE /customize", method: http.MethodDelete, path: "/customize", wantCode: 405, wantError: "method DELETE not allowed"},
		{name: "POST /healthz", path: "/healthz", body: valid, wantCode: 405, wantError: "method POST not allowed"},
		{name: "unknown path", path: "/synch", body: valid, wantCode: 404, wantError: "no route /synch"},
		{name: "root path", method: http.MethodGet, path: "/", wantCode: 404, wantError: "no route /"},
		{name: "text/plain", contentType: "text/plain", body: valid, wantCode: 415, wantError: `unsupported Content-Type "text/plain"`},
		{name: "multipart", contentType: "multipart/form-data; boundary=x", body: valid, wantCode: 415, wantError: "unsupported Content-Type"},
		{name: "unparsable content type", contentType: "application/json; =", body: valid, wantCode: 415, wantError: "unsupported Content-Type"},
		{name: "finalize malformed", path: "/finalize", body: []byte(`{`), wantCode: 400, wantError: "unexpected EOF"},
		{name: "customize without parent", path: "/customize", body: []byte(`{"controller":{}}`), wantCode: 400, wantError: "no parent"},
		{name: "customize parent without name", path: "/customize", body: []byte(`{"parent":{"metadata":{}}}`), wantCode: 400, wantError: "metadata.name"},
		{name: "customize over the limit", path: "/customize", body: bytes.Repeat([]byte(" "), defaultMaxRequestBytes+1), wantCode: 413, wantError: "larger than"},
	}
	require.GreaterOrEqual(t, len(tests), 25)
	passed := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path, contentType := tt.method, tt.path, tt.contentType
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/sync"
			}
			if contentType == "" && method == http.MethodPost {
				contentType = formContentType
			}
			req, err := http.NewRequest(method, srv.URL+path, bytes.NewReader(tt.body))
			require.NoError(t, err)
			if contentType != "" {
				req.Header.Set("Content-Type", contentType)
			}
			resp, body := do(t, req)
			if resp.StatusCode != tt.wantCode && !contains(tt.allowCodes, resp.StatusCode) {
				t.Fatalf("status %d, want %d; body: %.300s", resp.StatusCode, tt.wantCode, body)
			}
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			if resp.StatusCode >= 400 {
				var e errorBody
				require.NoError(t, json.Unmarshal(body, &e), "error body is not JSON: %.300s", body)
				require.NotEmpty(t, e.Error)
				if tt.wantError != "" {
					assert.Contains(t, e.Error, tt.wantError)
				}
			} else {
				var ok map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(body, &ok))
				assert.Contains(t, ok, "status")
			}
			if len(tt.allowCodes) > 0 {
				t.Logf("answered %d: %.200s", resp.StatusCode, body)
			}
			if !t.Failed() {
				passed++
			}
		})
	}
	t.Logf("bad-input matrix: %d cases, %d passed", len(tests), passed)

	// The hook is still fine after all that.
	resp, body := post(t, srv.URL+"/sync", formContentType, valid)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.NotContains(t, logs.String(), `"level":"ERROR"`)
}

func contains(codes []int, code int) bool {
	for _, c := range codes {
		if c == code {
			return true
		}
	}
	return false
}

// dynamicFlagRequest asks for a dynamic flag delivered in $FLAG.
func dynamicFlagRequest(t *testing.T) []byte {
	return mutate(t, func(req map[string]any) {
		specOf(req)["template"].(map[string]any)["flag"] = map[string]any{"dynamic": true, "env": "FLAG"}
	})
}

// flagFromResponse returns the decoded flag of the Secret child in a sync answer.
func flagFromResponse(t *testing.T, body []byte) string {
	t.Helper()
	var resp struct {
		Children []struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		} `json:"children"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	for _, child := range resp.Children {
		if child.Kind == "Secret" {
			for _, encoded := range child.Data {
				flag, err := base64.StdEncoding.DecodeString(encoded)
				require.NoError(t, err)
				return string(flag)
			}
		}
	}
	t.Fatalf("no Secret with a flag in the answer: %s", body)
	return ""
}

func TestBearerToken(t *testing.T) {
	ts := newTokenServer(t)
	request, flag := dynamicFlagRequest(t), ts.flag
	require.NotEmpty(t, flag)
	encodedFlag := base64.StdEncoding.EncodeToString([]byte(flag))

	refused := []struct{ name, authorization string }{
		{"no header", ""},
		{"wrong token", "Bearer wrong-token"},
		{"token prefix", "Bearer right"},
		{"token with suffix", "Bearer right-token-and-more"},
		{"empty bearer", "Bearer "},
		{"basic scheme", "Basic " + base64.StdEncoding.EncodeToString([]byte("user:right-token"))},
		{"token without scheme", "right-token"},
	}
	for _, path := range []string{"/sync", "/finalize", "/customize", "/flags/verify"} {
		base := ts.url
		if path == "/flags/verify" {
			base = ts.verifyURL
		}
		for _, tt := range refused {
			t.Run(path+" "+tt.name, func(t *testing.T) {
				var header []string
				if tt.authorization != "" {
					header = []string{"Authorization", tt.authorization}
				}
				resp, body := post(t, base+path, "application/json", request, header...)
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "body: %s", body)
				assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
				assert.JSONEq(t, `{"error":"missing or invalid bearer token"}`, string(body))
				assert.NotContains(t, string(body), flag)
				assert.NotContains(t, string(body), encodedFlag)
			})
		}
	}
	for _, path := range []string{"/finalize", "/customize"} {
		resp, body := post(t, ts.url+path, "application/json", request, "Authorization", "bearer right-token")
		assert.Equal(t, http.StatusOK, resp.StatusCode, "%s with the right token (scheme is case-insensitive): %s", path, body)
	}
	// Probes need no token (metrics are on a listener of their own: TestMetricsHaveTheirOwnListener).
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(ts.url + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.NotEqual(t, http.StatusUnauthorized, resp.StatusCode, path)
	}
}

func TestPanicIsRecovered(t *testing.T) {
	logs := newLogBuffer()
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	m := newMetrics()
	r := chi.NewRouter()
	r.Use(logRequests(logger, m), recoverPanics(logger)) // the middleware newServer installs
	r.Post("/sync", func(http.ResponseWriter, *http.Request) { panic("boom in a handler") })
	r.Get("/healthz", handleHealthz())
	srv := httptest.NewServer(r)
	defer srv.Close()

	resp, body := post(t, srv.URL+"/sync", "application/json", []byte(`{}`))
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	assert.JSONEq(t, `{"error":"internal error"}`, string(body))

	var panicLines int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		if entry["msg"] == "panic serving request" {
			panicLines++
			assert.Equal(t, "ERROR", entry["level"])
			assert.Equal(t, "boom in a handler", entry["panic"])
			assert.Contains(t, entry["stack"], "TestPanicIsRecovered")
		}
	}
	assert.Equal(t, 1, panicLines, "logs:\n%s", logs)

	resp, err := http.Get(srv.URL + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the server keeps serving after a panic")
}

func TestMetricsAndRequestLog(t *testing.T) {
	servers := startTestServers(t) // no flag key: a dynamic flag is an Error phase (FlagKeyMissing)
	srv, logs := servers.main, servers.logs
	const staticFlag = "flag{must-never-be-logged}"
	static := mutate(t, func(req map[string]any) {
		specOf(req)["template"].(map[string]any)["flag"] = map[string]any{"value": staticFlag, "env": "FLAG"}
	})
	resp, body := post(t, srv.URL+"/sync", "application/json", static)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	require.Contains(t, string(body), base64.StdEncoding.EncodeToString([]byte(staticFlag)), "the static flag is in the Secret child")
	resp, body = post(t, srv.URL+"/sync", "application/json", dynamicFlagRequest(t))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	require.Contains(t, string(body), `"reason":"FlagKeyMissing"`)
	resp, _ = post(t, srv.URL+"/sync", "application/json", []byte(`{"parent":`))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = post(t, srv.URL+"/finalize", "application/json", bytes.Repeat([]byte(" "), defaultMaxRequestBytes+1))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	metricsResp, err := http.Get(servers.metrics.URL + "/metrics")
	require.NoError(t, err)
	scraped, err := io.ReadAll(metricsResp.Body)
	metricsResp.Body.Close()
	require.NoError(t, err)
	for _, want := range []string{
		`challenge_hook_http_requests_total{code="200",route="/sync"} 2`,
		`challenge_hook_http_requests_total{code="400",route="/sync"} 1`,
		`challenge_hook_http_requests_total{code="413",route="/finalize"} 1`,
		`challenge_hook_sync_errors_total{reason="FlagKeyMissing"} 1`,
		`challenge_hook_sync_errors_total{reason="bad_request"} 1`,
		`challenge_hook_sync_errors_total{reason="too_large"} 1`,
		`challenge_hook_phases_total{phase="Error"} 1`,
		`challenge_hook_sync_duration_seconds_count 2`,
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		assert.Contains(t, string(scraped), want)
	}

	var syncLines []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var entry map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
		if entry["msg"] == "request" && entry["path"] == "/sync" && entry["status"] == float64(200) {
			syncLines = append(syncLines, entry)
		}
	}
	require.Len(t, syncLines, 2, "one line per request; logs:\n%s", logs)
	for _, entry := range syncLines {
		assert.Equal(t, "POST", entry["method"])
		assert.Equal(t, "ctf/pwn-team7", entry["parent"])
		assert.NotEmpty(t, entry["phase"])
		assert.NotEmpty(t, entry["reason"])
		assert.Contains(t, entry, "duration_ms")
		assert.Greater(t, entry["bytes"], float64(0))
	}
	assert.Equal(t, "FlagKeyMissing", syncLines[1]["reason"])
	for _, secret := range []string{staticFlag, base64.StdEncoding.EncodeToString([]byte(staticFlag)), "registry.example/pwn"} {
		assert.NotContains(t, logs.String(), secret, "the request log shows request or response bodies")
	}
}

// TestFinalizeRouteForcesTheFinalizePath: Metacontroller calls /finalize with finalizing: true, but
// the route alone must be enough, whatever the body says.
func TestFinalizeRouteForcesTheFinalizePath(t *testing.T) {
	srv, _ := newTestServer(t)
	body := mutate(t, func(req map[string]any) { req["finalizing"] = false })
	type answer struct {
		Status    struct{ Phase string } `json:"status"`
		Children  []json.RawMessage      `json:"children"`
		Finalized bool                   `json:"finalized"`
	}
	decode := func(path string) answer {
		resp, raw := post(t, srv.URL+path, "application/json", body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, raw)
		var a answer
		require.NoError(t, json.Unmarshal(raw, &a))
		return a
	}
	synced, finalized := decode("/sync"), decode("/finalize")
	assert.False(t, synced.Finalized)
	assert.NotEmpty(t, synced.Children, "/sync builds the instance")
	assert.True(t, finalized.Finalized, "nothing observed: /finalize lets the Challenge go")
	assert.Equal(t, "Deleted", finalized.Status.Phase)
	assert.Empty(t, finalized.Children)
}

// In-cluster the flag key is an optional Secret: a key file that does not exist leaves the hook
// serving, with a warning, and a Challenge asking for a dynamic flag is an Error that says so.
func TestMissingFlagKeyFileServesAndRefusesDynamicFlags(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "flag-key")
	srv, logs := newTestServer(t, "--clock=2026-11-01T12:05:00Z", "--flag-key-file="+missing)
	require.Contains(t, logs.String(), "flag key file does not exist")
	require.Contains(t, logs.String(), missing)
	body, err := os.ReadFile("../../testdata/life-1-none-first-sync/request.json")
	require.NoError(t, err)
	resp, out := post(t, srv.URL+"/sync", "application/json", body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var answer struct {
		Status struct{ Phase, Reason string } `json:"status"`
	}
	require.NoError(t, json.Unmarshal(out, &answer))
	require.Equal(t, "Error", answer.Status.Phase)
	require.Equal(t, "FlagKeyMissing", answer.Status.Reason)
}

// A pinned clock is for demos and golden replays: the hook says so at start-up, and only then.
func TestPinnedClockWarnsAtStartup(t *testing.T) {
	clockWarnings := func(logs string) []map[string]any {
		var warnings []map[string]any
		for line := range strings.Lines(logs) {
			var entry map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &entry), "log line %q", line)
			if entry["level"] == "WARN" && strings.Contains(entry["msg"].(string), "--clock") {
				warnings = append(warnings, entry)
			}
		}
		return warnings
	}
	_, logs := newTestServer(t, "--clock=2026-11-01T12:05:00Z")
	warnings := clockWarnings(logs.String())
	require.Len(t, warnings, 1, "logs:\n%s", logs)
	assert.Contains(t, warnings[0]["msg"], "demos and golden replays only")
	assert.Equal(t, "2026-11-01T12:05:00Z", warnings[0]["clock"])

	_, logs = newTestServer(t)
	assert.Empty(t, clockWarnings(logs.String()), "the real clock needs no warning")
}

// The trust switches through the server: an inline template is refused by /sync, and /customize
// relates no definition from a namespace the hook does not take them from.
func TestTrustSwitchesOverHTTP(t *testing.T) {
	srv, _ := newTestServer(t, "--inline-templates=false", "--definition-namespaces=ctf-definitions", "--definition-grants=ct*=ctf-definitions")
	resp, body := post(t, srv.URL+"/sync", "application/json", mutate(t, func(map[string]any) {}))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	var answer struct {
		Status   struct{ Phase, Reason, Message string } `json:"status"`
		Children []json.RawMessage                       `json:"children"`
	}
	require.NoError(t, json.Unmarshal(body, &answer))
	assert.Equal(t, "Error", answer.Status.Phase)
	assert.Equal(t, "InvalidSpec", answer.Status.Reason)
	assert.Contains(t, answer.Status.Message, "--inline-templates=false")
	assert.Empty(t, answer.Children)

	byRef := func(namespace string) []byte {
		return mutate(t, func(req map[string]any) {
			delete(specOf(req), "template")
			specOf(req)["definitionRef"] = map[string]any{"name": "pwn", "namespace": namespace}
		})
	}
	resp, body = post(t, srv.URL+"/customize", "application/json", byRef("ctf"))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.JSONEq(t, `{"relatedResources":[]}`, string(body))
	resp, body = post(t, srv.URL+"/customize", "application/json", byRef("ctf-definitions"))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.Contains(t, string(body), `"namespace":"ctf-definitions"`)

	resp, body = post(t, srv.URL+"/sync", "application/json", byRef("ctf"))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	require.NoError(t, json.Unmarshal(body, &answer))
	assert.Equal(t, "InvalidSpec", answer.Status.Reason)
	assert.Contains(t, answer.Status.Message, "--definition-namespaces=ctf-definitions")

	// Without the grant, another namespace than the Challenge's (ctf) is refused too.
	srv, _ = newTestServer(t, "--definition-namespaces=ctf-definitions")
	resp, body = post(t, srv.URL+"/customize", "application/json", byRef("ctf-definitions"))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.JSONEq(t, `{"relatedResources":[]}`, string(body))
	resp, body = post(t, srv.URL+"/sync", "application/json", byRef("ctf-definitions"))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	require.NoError(t, json.Unmarshal(body, &answer))
	assert.Equal(t, "InvalidSpec", answer.Status.Reason)
	assert.Contains(t, answer.Status.Message, "add ctf=ctf-definitions to the hook's --definition-grants")
}
