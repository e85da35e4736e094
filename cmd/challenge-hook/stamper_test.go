package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeAPIServer answers the stamper's lists and watches with nothing, and records the requests.
func fakeAPIServer(t *testing.T) (url string, requests func() []string) {
	var mu sync.Mutex
	var seen []string
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			// A watch that lists (sendInitialEvents): nothing, then the bookmark that ends the list.
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				fmt.Fprint(w, `{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"Service","metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n")
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/v1/") && strings.HasSuffix(r.URL.Path, "/services") {
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"ServiceList","metadata":{"resourceVersion":"1"},"items":[]}`)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(server.Close)
	return server.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestActivityStamperServes runs `challenge-hook activity-stamper` as main does, against an API
// server and a gateway of its own: it watches the Services labelled with a Challenge in each
// namespace given, and nothing else (no Challenge), is ready once each watch listed, polls the
// gateway, serves its metrics, and stops when cancelled.
func TestActivityStamperServes(t *testing.T) {
	api, requests := fakeAPIServer(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "`+api+`"}}]
users: [{name: test, user: {token: test}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
`), 0o600))
	var first, since atomic.Int32 // the polls without since, and with it
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("since") {
			since.Add(1)
		} else {
			first.Add(1)
		}
		fmt.Fprintf(w, `{"services":[{"address":"10.96.12.7:1337","lastActivity":"%s"}]}`, time.Now().UTC().Format(time.RFC3339Nano))
	}))
	defer gateway.Close()

	logs := newLogBuffer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"challenge-hook", "activity-stamper", "--kubeconfig=" + kubeconfig, "--metrics-listen=127.0.0.1:0",
			"--gateways=" + strings.TrimPrefix(gateway.URL, "http://"), "--interval=100ms", "--log-level=debug", "--namespaces=ctf,ctf-b"}, noEnv, io.Discard, logs)
	}()
	var addrs listenAddrs
	select {
	case addrs = <-logs.addr:
	case err := <-done:
		t.Fatalf("activity-stamper returned: %v\n%s", err, logs)
	case <-time.After(10 * time.Second):
		t.Fatalf("activity-stamper did not listen; logs:\n%s", logs)
	}
	metricsURL := "http://" + addrs.metrics
	require.Eventually(t, func() bool {
		resp, err := http.Get(metricsURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "not ready once the watches listed; logs:\n%s\nrequests: %v", logs, requests())
	require.Eventually(t, func() bool { return first.Load() == 1 && since.Load() > 0 }, 10*time.Second, 20*time.Millisecond,
		"a first poll, then polls since its answer")
	resp, err := http.Get(metricsURL + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{"challenge_hook_activity_stamper_stamps_written_total 0", "challenge_hook_activity_stamper_gateways 1",
		"challenge_hook_activity_stamper_activity_dropped_total 0",
		`challenge_hook_activity_stamper_gateway_polls_failed_total{reason="request"} 0`} {
		assert.Contains(t, string(body), series)
	}
	var watched []string
	for _, r := range requests() {
		assert.Regexp(t, `^GET /api/v1/namespaces/(ctf|ctf-b)/services\?`, r, "only the Services of the namespaces given")
		if strings.Contains(r, "watch=true") {
			watched = append(watched, strings.SplitN(r, "?", 2)[0])
			assert.Contains(t, r, "labelSelector=ctf.challenge-hook.dev%2Fchallenge", "only the Services of instances")
		}
	}
	assert.ElementsMatch(t, []string{"GET /api/v1/namespaces/ctf/services", "GET /api/v1/namespaces/ctf-b/services"}, watched, "a watch per namespace: %v", requests())

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("activity-stamper did not stop; logs:\n%s", logs)
	}
}

func TestActivityStamperRefusesToStart(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"gateways without a port":     {[]string{"--gateways=gateways.example"}, "-gateways"},
		"a namespace that is no name": {[]string{"--namespaces=ctf,CTF_B"}, "-namespaces"},
		"zero interval":               {[]string{"--interval=0s"}, "expected a positive duration"},
		"argument":                    {[]string{"extra"}, `unexpected argument "extra"`},
		"no kubeconfig":               {[]string{"--kubeconfig=" + filepath.Join(t.TempDir(), "absent")}, "--kubeconfig"},
	} {
		err := run(context.Background(), append([]string{"challenge-hook", "activity-stamper", "--metrics-listen=127.0.0.1:0"}, tc.args...), noEnv, io.Discard, io.Discard)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), tc.want, name)
		}
	}
}

func TestActivityStamperHelp(t *testing.T) {
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "activity-stamper", "-h"}, noEnv, io.Discard, &stderr))
	for _, flag := range []string{"-gateways", "-interval", "-timeout", "-namespaces", "-metrics-listen", "-kubeconfig", "-api-qps", "-log-level"} {
		assert.Contains(t, stderr.String(), flag+" ")
	}
}
