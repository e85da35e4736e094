package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSyncOverTheLimitSaysWhy: a sync request over --max-request-bytes (an owner whose many
// Challenges Metacontroller relates to each of them) is refused with 413; with the per-owner
// limit the answer (which Metacontroller puts in the Challenge's SyncError event) says that the
// request carries the owner's Challenges and what to do, the request log names the parent read
// from the prefix, and challenge_hook_http_requests_total counts it by route, where the alert
// ChallengeSyncRequestsTooLarge looks.
func TestSyncOverTheLimitSaysWhy(t *testing.T) {
	const limit = 64 << 10
	for _, ownerLimit := range []bool{false, true} {
		args := []string{fmt.Sprintf("--max-request-bytes=%d", limit)}
		if ownerLimit {
			args = append(args, "--max-instances-per-owner=1")
		}
		servers := startTestServers(t, args...)
		owners := map[string]any{}
		for i := range 100 {
			owners[fmt.Sprintf("ctf/pwn-team7-%03d", i)] = map[string]any{"metadata": map[string]any{"name": fmt.Sprintf("pwn-team7-%03d", i)},
				"status": map[string]any{"message": strings.Repeat("x", 1000)}}
		}
		body := mutate(t, func(req map[string]any) {
			req["related"] = map[string]any{"Challenge.ctf.challenge-hook.dev/v1alpha1": owners}
		})
		require.Greater(t, len(body), limit)
		for _, route := range []string{"/sync", "/finalize"} {
			resp, answer := post(t, servers.main.URL+route, "application/json", body)
			require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
			var e errorBody
			require.NoError(t, json.Unmarshal(answer, &e))
			assert.Contains(t, e.Error, fmt.Sprintf("larger than %d bytes (--max-request-bytes", limit))
			if ownerLimit {
				assert.Contains(t, e.Error, "carries every Challenge of the parent's owner")
				assert.Contains(t, e.Error, "delete the owner's ended Challenges")
			} else {
				assert.NotContains(t, e.Error, "owner")
			}
		}
		var lines int
		for _, line := range strings.Split(strings.TrimSpace(servers.logs.String()), "\n") {
			var entry map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &entry), line)
			if entry["msg"] == "request" && entry["status"] == float64(413) {
				lines++
				assert.Equal(t, "ctf/pwn-team7", entry["parent"], "the log line names the parent read from the prefix")
			}
		}
		assert.Equal(t, 2, lines, "logs:\n%s", servers.logs)
		metrics, err := http.Get(servers.metrics.URL + "/metrics")
		require.NoError(t, err)
		scraped, err := io.ReadAll(metrics.Body)
		metrics.Body.Close()
		require.NoError(t, err)
		for _, want := range []string{
			`challenge_hook_http_requests_total{code="413",route="/sync"} 1`,
			`challenge_hook_http_requests_total{code="413",route="/finalize"} 1`,
			`challenge_hook_sync_errors_total{reason="too_large"} 2`,
		} {
			assert.Contains(t, string(scraped), want)
		}
	}
}

// TestParentOfPrefix: the parent's name is read from a request's prefix when the prefix holds the
// whole parent, and nothing otherwise.
func TestParentOfPrefix(t *testing.T) {
	body := string(mutate(t, func(map[string]any) {}))
	assert.Equal(t, "ctf/pwn-team7", parentOfPrefix([]byte(body)))
	cut := strings.Index(body, `"spec"`)
	require.Positive(t, cut)
	assert.Equal(t, "", parentOfPrefix([]byte(body[:cut])), "the parent cut short")
	assert.Equal(t, "", parentOfPrefix([]byte(`{"controller":{}`)))
	assert.Equal(t, "", parentOfPrefix([]byte(`[`)))
	assert.Equal(t, "", parentOfPrefix(nil))
}

// ownerBoundCase is the golden case whose request sizes give the bound: a Running instance, its
// parent as the API server stores it with the status the hook wrote.
const ownerBoundCase = "../../testdata/life-4-running-resync-fixed-point/request.json"

// ownerRequest is the sync request of ownerBoundCase with n Challenges of the parent's owner
// related (the parent and n-1 like it, each labelled with the owner), as Metacontroller encodes
// it (compact, encoding/json).
func ownerRequest(t *testing.T, golden map[string]any, n int) []byte {
	t.Helper()
	var req map[string]any
	raw, err := json.Marshal(golden)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &req))
	parent := req["parent"].(map[string]any)
	meta := parent["metadata"].(map[string]any)
	meta["labels"] = map[string]any{"ctf.challenge-hook.dev/owner": parent["spec"].(map[string]any)["owner"]}
	challenges := map[string]any{}
	for i := range n {
		c, err := json.Marshal(parent)
		require.NoError(t, err)
		var other map[string]any
		require.NoError(t, json.Unmarshal(c, &other))
		name := meta["name"].(string)
		if i > 0 {
			name = fmt.Sprintf("%s-%04d", name, i) // a platform's names: the owner, the challenge, a number
		}
		other["metadata"].(map[string]any)["name"] = name
		challenges[fmt.Sprintf("%s/%s", meta["namespace"], name)] = other
	}
	req["related"].(map[string]any)["Challenge.ctf.challenge-hook.dev/v1alpha1"] = challenges
	body, err := json.Marshal(req)
	require.NoError(t, err)
	return body
}

// TestOwnerBoundInPlatformDoc: how many Running Challenges of one owner a sync request carries
// within the default --max-request-bytes, computed from the golden request sizes (each a Running
// instance as the API server stores it, with its status): the hook answers that request and
// refuses one more Challenge's (413), and docs/platform.md states that number.
func TestOwnerBoundInPlatformDoc(t *testing.T) {
	raw, err := os.ReadFile(ownerBoundCase)
	require.NoError(t, err)
	var golden map[string]any
	require.NoError(t, json.Unmarshal(raw, &golden))
	// From 2 on, each Challenge adds the same bytes (its name's suffix has 4 digits).
	two, three := len(ownerRequest(t, golden, 2)), len(ownerRequest(t, golden, 3))
	each := three - two
	bound := 2 + (defaultMaxRequestBytes-two)/each
	servers := startTestServers(t, "--max-instances-per-owner=2")
	resp, body := post(t, servers.main.URL+"/sync", "application/json", ownerRequest(t, golden, bound))
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%d Challenges: %s", bound, body)
	resp, _ = post(t, servers.main.URL+"/sync", "application/json", ownerRequest(t, golden, bound+1))
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%d Challenges", bound+1)
	doc, err := os.ReadFile("../../docs/platform.md")
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(doc), fmt.Sprintf("at most %d of them", bound)),
		"docs/platform.md says how many Running Challenges of an owner fit the default --max-request-bytes: at most %d of them (%d bytes each)", bound, each)
	t.Logf("%d Running Challenges of an owner fit in %d bytes (%d bytes each)", bound, defaultMaxRequestBytes, each)
}
