package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/golden"
)

// TestGoldenReplayPrePull serves the pre-pull cases (testdata/prepull/<case>) at /prepull/sync
// with the flags `make run` uses, as curl sends them, and expects response.json byte for byte:
//
//	curl -s -XPOST localhost:8080/prepull/sync -H "Authorization: Bearer $(cat testdata/dev.token)" -d @testdata/prepull/first-sync/request.json
func TestGoldenReplayPrePull(t *testing.T) {
	t.Chdir("../..")
	devFlags, err := os.ReadFile("testdata/dev.flags")
	require.NoError(t, err)
	cases, err := golden.Cases("testdata/prepull")
	require.NoError(t, err)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			// The case's own flags, if any, on top of dev.flags, as `make run RUN_FLAGS=...` adds them.
			srv, _ := newTestServer(t, append(strings.Fields(string(devFlags)), c.Flags...)...)
			curlBody := []byte(strings.NewReplacer("\n", "", "\r", "").Replace(string(c.Request)))
			resp, got := post(t, srv.URL+prePullSyncPath, formContentType, curlBody, devAuthorization(t)...)
			require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", got)
			var indented bytes.Buffer
			require.NoError(t, json.Indent(&indented, got, "", "  "))
			require.Equal(t, string(c.Response), indented.String())
		})
	}
}

// TestPrePullNeedsItsImage: without --prepull-image the hook cannot build a DaemonSet; it answers
// 503 (Metacontroller changes nothing and retries) and says which flag to set; a request it
// cannot read is a 400, as on /sync.
func TestPrePullNeedsItsImage(t *testing.T) {
	srv, _ := newTestServer(t)
	resp, body := post(t, srv.URL+prePullSyncPath, "application/json", []byte(`{"parent":{"metadata":{"name":"web"}}}`))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, string(body), "--prepull-image")

	srv, _ = newTestServer(t, "--prepull-image=registry.example/hook:1")
	resp, body = post(t, srv.URL+prePullSyncPath, "application/json", []byte(`{"parent":{"metadata":{"name":"web"}},"children":{"Deployment.apps/v1":{}}}`))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), `unknown child type \"Deployment.apps/v1\"`)
}

// TestPrePullCustomizeOverHTTP: /prepull/customize relates every definition of the hook's
// --definition-namespaces to a definition of one of them, and nothing to one elsewhere; a request
// without a parent is a 400.
func TestPrePullCustomizeOverHTTP(t *testing.T) {
	srv, _ := newTestServer(t, "--definition-namespaces=ctf,ctf-2")
	resp, body := post(t, srv.URL+prePullCustomizePath, "application/json", []byte(`{"parent":{"metadata":{"name":"web","namespace":"ctf"}}}`))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	require.JSONEq(t, `{"relatedResources":[
		{"apiVersion":"ctf.challenge-hook.dev/v1alpha1","resource":"challengedefinitions","namespace":"ctf"},
		{"apiVersion":"ctf.challenge-hook.dev/v1alpha1","resource":"challengedefinitions","namespace":"ctf-2"}]}`, string(body))
	resp, body = post(t, srv.URL+prePullCustomizePath, "application/json", []byte(`{"parent":{"metadata":{"name":"web","namespace":"tenant-b"}}}`))
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	require.JSONEq(t, `{"relatedResources":[]}`, string(body))
	resp, _ = post(t, srv.URL+prePullCustomizePath, "application/json", []byte(`{}`))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
