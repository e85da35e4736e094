package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/platform"
)

func TestPlatformRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	shortToken := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(shortToken, []byte("too-short\n"), 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("an rCTF token of at least 32 bytes, surely\n"), 0o600))
	linkKey := filepath.Join(dir, "link-key")
	require.NoError(t, os.WriteFile(linkKey, []byte("a link key of the platform's, 32+ bytes long\n"), 0o600))
	base := []string{"--rctf-token-file=" + token, "--namespaces=ctf"}
	page := append(base[:len(base):len(base)], "--link-key-file="+linkKey, "--page-origin=https://play.ctf.example.org")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no token":                             {[]string{"--namespaces=ctf"}, "--rctf-token-file is required"},
		"no namespace":                         {[]string{"--rctf-token-file=" + token}, "--namespaces is required"},
		"a short token":                        {[]string{"--rctf-token-file=" + shortToken, "--namespaces=ctf"}, "fewer than 32"},
		"an absent token file":                 {[]string{"--rctf-token-file=" + filepath.Join(dir, "absent"), "--namespaces=ctf"}, "rctf-token-file"},
		"a bad namespace":                      {[]string{"--rctf-token-file=" + token, "--namespaces=CTF"}, "-namespaces"},
		"no kubeconfig":                        {[]string{"--rctf-token-file=" + token, "--namespaces=ctf", "--kubeconfig=" + filepath.Join(dir, "absent")}, "--kubeconfig"},
		"argument":                             {[]string{"extra"}, `unexpected argument "extra"`},
		"a link key without the page's origin": {append(base, "--link-key-file="+linkKey), "--page-origin is required with --link-key-file"},
		"an origin without a link key":         {append(base, "--page-origin=https://play.ctf.example.org"), "need --link-key-file"},
		"a previous key without a link key":    {append(base, "--link-previous-key-file="+linkKey), "need --link-key-file"},
		"an origin with a path":                {append(page, "--page-origin=https://play.ctf.example.org/ctf"), "scheme://host[:port] and nothing else"},
		"an origin with a query":               {append(page, "--page-origin=https://play.ctf.example.org?x=1"), "scheme://host[:port] and nothing else"},
		"an origin of another scheme":          {append(page, "--page-origin=ftp://play.ctf.example.org"), "expected an https (or http) origin"},
		"no origin, a host":                    {append(page, "--page-origin=play.ctf.example.org"), "expected an https (or http) origin"},
		"a short link key":                     {append(base, "--link-key-file="+shortToken, "--page-origin=https://play.ctf.example.org"), "--link-key-file: the key in"},
		"a short previous key":                 {append(page, "--link-previous-key-file="+shortToken), "--link-previous-key-file: the key in"},
		"an empty link key":                    {append(base, "--link-key-file="+empty, "--page-origin=https://play.ctf.example.org"), "is empty"},
		"the page on rCTF's port":              {append(page, "--listen=127.0.0.1:9380", "--page-listen=127.0.0.1:9380"), "--page-listen and --listen are both"},
		"the page on the metrics' port":        {append(page, "--metrics-listen=127.0.0.1:9382", "--page-listen=127.0.0.1:9382"), "--page-listen and --metrics-listen are both"},
	} {
		err := run(context.Background(), append([]string{"challenge-hook", "platform", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}, tc.args...), noEnv, io.Discard, io.Discard)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

// TestPageOrigin: --page-origin is kept as a browser sends Origin.
func TestPageOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://play.ctf.example.org":      "https://play.ctf.example.org",
		"https://Play.CTF.example.org/":     "https://play.ctf.example.org",
		"https://play.ctf.example.org:443":  "https://play.ctf.example.org",
		"https://play.ctf.example.org:8443": "https://play.ctf.example.org:8443",
		"http://127.0.0.1:80":               "http://127.0.0.1",
		"http://127.0.0.1:8081":             "http://127.0.0.1:8081",
	} {
		var got string
		require.NoError(t, pageOrigin(&got)(in), in)
		assert.Equal(t, want, got, in)
	}
}

func TestPlatformHelp(t *testing.T) {
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "platform", "-h"}, noEnv, io.Discard, &stderr))
	for _, flag := range []string{"-listen", "-metrics-listen", "-rctf-token-file", "-namespaces", "-kubeconfig", "-api-qps", "-team-starts", "-team-start-interval", "-log-level",
		"-page-listen", "-link-key-file", "-link-previous-key-file", "-page-origin"} {
		assert.Contains(t, stderr.String(), flag+" ")
	}
}

// platformAPIServer answers the component's lists and watches: one ChallengeDefinition,
// ctf/pwn-heap, marked for the player page, and no Challenge.
func platformAPIServer(t *testing.T) string {
	items := map[string]string{
		"challenges": "",
		"challengedefinitions": `{"apiVersion":"ctf.challenge-hook.dev/v1alpha1","kind":"ChallengeDefinition","metadata":{"namespace":"ctf","name":"pwn-heap",` +
			`"resourceVersion":"1","annotations":{"ctf.challenge-hook.dev/player-page":"true"}},"spec":{"timeout":"30m"}}`,
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resource := path.Base(r.URL.Path)
		item, ok := items[resource]
		if !ok || !strings.HasPrefix(r.URL.Path, "/apis/ctf.challenge-hook.dev/v1alpha1/namespaces/ctf/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprintf(w, `{"apiVersion":"ctf.challenge-hook.dev/v1alpha1","kind":"List","metadata":{"resourceVersion":"1"},"items":[%s]}`, item)
			return
		}
		if r.URL.Query().Get("sendInitialEvents") == "true" {
			if item != "" {
				fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", item)
			}
			fmt.Fprint(w, `{"type":"BOOKMARK","object":{"apiVersion":"ctf.challenge-hook.dev/v1alpha1","kind":"Challenge","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(server.Close)
	return server.URL
}

// platformWithPage writes a kubeconfig of platformAPIServer, an rCTF token and a link key (in
// dir/link-key) and returns serve, which runs the component with the link key file given, as
// main does.
func platformWithPage(t *testing.T) (dir string, key []byte, serve func(keyFile string) (*logBuffer, context.CancelFunc, chan error)) {
	dir = t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "`+platformAPIServer(t)+`"}}]
users: [{name: test, user: {token: test}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`), 0o600))
	token := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(token, []byte("an rCTF token of at least 32 bytes, surely\n"), 0o600))
	key = []byte("a link key of the platform's, 32+ bytes long")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "link-key"), append(key, '\n'), 0o600))
	return dir, key, func(keyFile string) (*logBuffer, context.CancelFunc, chan error) {
		logs := newLogBuffer()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, []string{"challenge-hook", "platform", "--kubeconfig=" + kubeconfig, "--rctf-token-file=" + token, "--namespaces=ctf",
				"--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--page-listen=127.0.0.1:0", "--link-key-file=" + keyFile,
				"--link-previous-key-file=" + filepath.Join(dir, "absent"), "--page-origin=http://127.0.0.1"}, noEnv, io.Discard, logs)
		}()
		return logs, cancel, done
	}
}

// TestPlatformServesThePage runs `challenge-hook platform` as main does, with a link key: the
// player page listens on --page-listen beside rCTF's contract, trades a signed link for a session
// that opens the page, and stops with the rest. Without the key's file, nothing listens there.
func TestPlatformServesThePage(t *testing.T) {
	dir, key, serve := platformWithPage(t)
	logs, cancel, done := serve(filepath.Join(dir, "link-key"))
	pageAddr := regexp.MustCompile(`"msg":"serving the player page at /i/","addr":"([^"]+)"`)
	var m []string
	require.Eventually(t, func() bool { m = pageAddr.FindStringSubmatch(logs.String()); return m != nil }, 10*time.Second, 20*time.Millisecond,
		"the page is not served; logs:\n%s", logs)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	link := platform.SignLink(key, platform.Link{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: time.Now().Add(time.Minute)})
	resp, err := client.Get("http://" + m[1] + "/i/open?" + link.Encode())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	req, _ := http.NewRequest(http.MethodGet, "http://"+m[1]+"/i/ctf/pwn-heap/", nil)
	req.AddCookie(resp.Cookies()[0])
	resp, err = client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	assert.Contains(t, string(body), `<form id="start" method="post" action="/i/ctf/pwn-heap/start">`)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatalf("the component did not stop; logs:\n%s", logs)
	}
	_, err = http.Get("http://" + m[1] + "/i/open")
	assert.Error(t, err, "the page stopped with the component")

	logs, cancel, done = serve(filepath.Join(dir, "absent-link-key"))
	defer cancel()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "serving rCTF's instancer contract") }, 10*time.Second, 20*time.Millisecond, "%s", logs)
	assert.Contains(t, logs.String(), "link key file does not exist: no player page")
	assert.NotContains(t, logs.String(), "player page at /i/")
	cancel()
	require.NoError(t, <-done)
}
