package platform

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The contract as rCTF v2's provider instancers/docker speaks it: every request shape it sends,
// and each bad one, against the component; every answer checked against the response schema
// (checkAnswer, written once from rCTF's zod schemas).

const testToken = "rctf-token-of-at-least-32-bytes-long!"

var testNow = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// dockerConfig is the config rCTF sends: the docker provider's defaults, in an order of its own.
const dockerConfig = `{"services":{"app":{"image":"traefik/whoami:latest","environment":{"tiny":"instancer"},"networks":[],"network_mode":"none",` +
	`"read_only":true,"privileged":false,"security_opt":["no-new-privileges"],"cap_add":[],"cap_drop":["ALL"],"mem_limit":"6m","cpus":1,"pids_limit":64,` +
	`"ulimits":{"nofile":{"soft":1024,"hard":1024}},"restart":"unless-stopped"}},"networks":{},"volumes":{}}`

func definition(name, rctfID string, flag *v1alpha1.Flag) *v1alpha1.ChallengeDefinition {
	d := &v1alpha1.ChallengeDefinition{ObjectMeta: metav1.ObjectMeta{Namespace: "ctf", Name: name}}
	if rctfID != "" {
		d.Annotations = map[string]string{v1alpha1.AnnotationRCTFChallenge: rctfID}
	}
	d.Spec.MaxLifetime = "2h"
	d.Spec.Flag = flag
	return d
}

// contract is the component over a fake store, served.
type contract struct {
	t      *testing.T
	store  *fakeStore
	now    time.Time
	server *httptest.Server
}

func newContract(t *testing.T, definitions ...*v1alpha1.ChallengeDefinition) *contract {
	c := &contract{t: t, now: testNow}
	clock := func() time.Time { return c.now }
	c.store = newFakeStore(clock, definitions...)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	instancer := NewInstancer(c.store, clock, logger, RateLimit{Burst: 3, Every: time.Minute})
	c.server = httptest.NewServer(NewHandler(instancer, []byte(testToken), NewMetrics(prometheus.NewRegistry()), logger))
	t.Cleanup(c.server.Close)
	return c
}

// body is a request as rCTF builds it: kind, its token, the team, the challenge, its config, and
// what the kind adds.
func body(kind, team, challenge string, extra map[string]any) map[string]any {
	b := map[string]any{"kind": kind, "rctfAuthToken": testToken, "teamId": team, "challengeIntegrationId": challenge, "config": json.RawMessage(dockerConfig)}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func createBody(team, challenge string) map[string]any {
	return body(kindCreate, team, challenge, map[string]any{
		"instancer": "k8s",
		"expose": []map[string]any{{"kind": "tcp", "hostPrefix": "pwn", "containerName": "app", "containerPort": 1337, "shouldDisplay": true, "title": "pwn"},
			{"kind": "https", "hostPrefix": "web", "containerName": "app", "containerPort": 8080, "shouldDisplay": true, "title": "web"}},
		"timeoutMilliseconds": 1800000,
		"extendable":          true,
		"flags":               []map[string]any{{"provider": "flags/static", "flag": "flag{" + team + "}"}},
	})
}

// do sends method with b (a map, or raw bytes) to /v1/instances/ as rCTF does (no Authorization
// header), checks the answer against the schema, and returns it and the HTTP status.
func (c *contract) do(method string, b any) (map[string]any, int) {
	c.t.Helper()
	raw, ok := b.([]byte)
	if !ok {
		var err error
		raw, err = json.Marshal(b)
		require.NoError(c.t, err)
	}
	req, err := http.NewRequest(method, c.server.URL+"/v1/instances/", bytes.NewReader(raw))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	assert.Equal(c.t, "application/json", resp.Header.Get("Content-Type"))
	parsed := checkAnswer(c.t, answer)
	if parsed["kind"] == kindError {
		assert.NotEqual(c.t, http.StatusOK, resp.StatusCode, "an instancerError answers a failure status, for the logs: %s", answer)
	} else {
		assert.Equal(c.t, http.StatusOK, resp.StatusCode, "%s", answer)
	}
	return parsed, resp.StatusCode
}

// checkAnswer is rCTF's response schema: instanceDetailsSchema or instancerErrorSchema, and no
// other field (zod strips unknown ones, so an extra field would be a silent mistake of ours).
func checkAnswer(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var answer map[string]any
	require.NoError(t, json.Unmarshal(raw, &answer), "the answer is no JSON object: %s", raw)
	switch answer["kind"] {
	case kindError:
		assert.ElementsMatch(t, []string{"kind", "message"}, keys(answer), "%s", raw)
		message, ok := answer["message"].(string)
		assert.True(t, ok && message != "", "message must be a non-empty string: %s", raw)
	case kindDetails:
		assert.ElementsMatch(t, []string{"kind", "status", "timeLeftMilliseconds", "endpoints"}, keys(answer), "%s", raw)
		assert.Contains(t, []any{statusStopped, statusStarting, statusRunning, statusStopping, statusErrored}, answer["status"], "%s", raw)
		if left := answer["timeLeftMilliseconds"]; left != nil {
			n, ok := left.(float64)
			assert.True(t, ok && n == float64(int64(n)) && n >= 0, "timeLeftMilliseconds must be an integer or null: %s", raw)
		}
		if eps := answer["endpoints"]; eps != nil {
			list, ok := eps.([]any)
			require.True(t, ok, "endpoints must be an array or null: %s", raw)
			for _, e := range list {
				checkEndpoint(t, e, raw)
			}
		}
	default:
		t.Errorf("kind must be %s or %s: %s", kindDetails, kindError, raw)
	}
	return answer
}

func checkEndpoint(t *testing.T, e any, raw []byte) {
	t.Helper()
	ep, ok := e.(map[string]any)
	require.True(t, ok, "an endpoint must be an object: %s", raw)
	for k, v := range ep {
		switch k {
		case "kind":
			assert.Contains(t, []any{endpointTCP, endpointTCPSSL, endpointHTTP, endpointHTTPS, endpointRaw}, v, "%s", raw)
		case "host", "title", "text":
			_, ok := v.(string)
			assert.True(t, ok, "%s must be a string: %s", k, raw)
		case "port":
			n, ok := v.(float64)
			assert.True(t, ok && n == float64(int64(n)) && n >= 0 && n <= 65535, "port must be an integer in 0..65535: %s", raw)
		case "bypassExpose":
			_, ok := v.(bool)
			assert.True(t, ok, "bypassExpose must be a boolean: %s", raw)
		default:
			t.Errorf("an endpoint has no field %q: %s", k, raw)
		}
	}
	for _, required := range []string{"kind", "host", "port"} {
		assert.Contains(t, ep, required, "%s", raw)
	}
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// running plays the hook: the team's instance is Running with a TCP gateway endpoint (and its
// WebSocket URL) and an HTTPS one, and a ClusterIP one for peers.
func (c *contract) running(key string) {
	c.store.sync(key, v1alpha1.ChallengeStatus{
		Phase: v1alpha1.PhaseRunning, Reason: v1alpha1.ReasonReady, ExpiresAt: c.now.Add(30 * time.Minute).Format(time.RFC3339),
		Endpoints: []v1alpha1.Endpoint{
			{Name: "pwn", Protocol: "TCP", Host: "tcp.ctf.example.org", Port: 1337, URL: "tcp://tcp.ctf.example.org:1337", Token: "tok3n",
				WebSocketURL: "wss://tcp.ctf.example.org/ws/tok3n"},
			{Name: "db", Protocol: "TCP", Host: "x--db.ctf.svc.cluster.local", Port: 5432, URL: "tcp://x--db.ctf.svc.cluster.local:5432"},
			{Name: "web", Protocol: "TCP", Host: "a1b2c3.ctf.example.org", Port: 443, URL: "https://a1b2c3.ctf.example.org/"},
		},
	})
}

func TestContractLifecycle(t *testing.T) {
	c := newContract(t, definition("pwn-heap", "pwn-heap", &v1alpha1.Flag{Platform: true, Env: "FLAG"}))

	got, _ := c.do(http.MethodPost, body(kindGet, "team-a", "pwn-heap", nil))
	assert.Equal(t, statusStopped, got["status"], "no instance yet")

	got, _ = c.do(http.MethodPut, createBody("team-a", "pwn-heap"))
	assert.Equal(t, statusStarting, got["status"])
	require.Len(t, c.store.keys(), 1)
	key := c.store.keys()[0]
	created := c.store.challenge(key)
	assert.Equal(t, "team-a", created.Spec.Owner)
	assert.Equal(t, "team-a", created.Labels[v1alpha1.LabelOwner])
	assert.Equal(t, "pwn-heap", created.Spec.DefinitionRef.Name)
	assert.Equal(t, "30m0s", created.Spec.Timeout)
	assert.Equal(t, "flag{team-a}", created.Spec.Flag, "the platform's flag becomes the instance's")
	assert.NotContains(t, fmt.Sprint(got), "flag{", "no answer holds the flag")

	again, _ := c.do(http.MethodPut, createBody("team-a", "pwn-heap"))
	assert.Equal(t, got, again, "a repeated start is the same instance")
	assert.Equal(t, 1, c.store.creates)

	c.running(key)
	got, _ = c.do(http.MethodPost, body(kindGet, "team-a", "pwn-heap", nil))
	assert.Equal(t, statusRunning, got["status"])
	assert.EqualValues(t, 30*60*1000, got["timeLeftMilliseconds"])
	assert.Equal(t, []any{
		map[string]any{"kind": "tcp", "host": "tcp.ctf.example.org", "port": float64(1337)},
		map[string]any{"kind": "https", "host": "a1b2c3.ctf.example.org", "port": float64(443)},
		map[string]any{"kind": "raw", "host": "", "port": float64(0), "title": "token", "bypassExpose": true,
			"text": "tok3n\n(echo tok3n; cat) | nc tcp.ctf.example.org 1337"},
		map[string]any{"kind": "raw", "host": "", "port": float64(0), "title": "websocket", "bypassExpose": true,
			"text": "wss://tcp.ctf.example.org/ws/tok3n\nwebsocat -b wss://tcp.ctf.example.org/ws/tok3n\nwsrx connect wss://tcp.ctf.example.org/ws/tok3n --port 1337, then nc 127.0.0.1 1337"},
	}, got["endpoints"], "the expose list's order, without the ClusterIP endpoint, then the token and the WebSocket way in")

	c.now = c.now.Add(10 * time.Minute)
	got, _ = c.do(http.MethodPatch, body(kindRenew, "team-a", "pwn-heap", map[string]any{"timeoutMilliseconds": 3600000}))
	assert.Equal(t, statusRunning, got["status"])
	assert.EqualValues(t, 3600*1000, got["timeLeftMilliseconds"])
	assert.Equal(t, c.now.Add(time.Hour).Format(time.RFC3339), c.store.challenge(key).Spec.ExpiresAt)

	got, _ = c.do(http.MethodPatch, body(kindRenew, "team-a", "pwn-heap", map[string]any{"timeoutMilliseconds": 3 * 3600000}))
	assert.Equal(t, testNow.Add(2*time.Hour).Format(time.RFC3339), c.store.challenge(key).Spec.ExpiresAt, "an extension stops at maxLifetime")
	assert.EqualValues(t, (2*time.Hour - 10*time.Minute).Milliseconds(), got["timeLeftMilliseconds"])

	got, _ = c.do(http.MethodDelete, body(kindDelete, "team-a", "pwn-heap", nil))
	assert.Equal(t, statusStopping, got["status"])
	assert.NotNil(t, c.store.challenge(key).DeletionTimestamp)
	got, _ = c.do(http.MethodPost, body(kindGet, "team-a", "pwn-heap", nil))
	assert.Equal(t, statusStopping, got["status"], "until its children are gone")
}

func TestContractTeamsApart(t *testing.T) {
	c := newContract(t, definition("web-sqli", "web", nil))
	c.do(http.MethodPut, createBody("team-a", "web"))
	c.do(http.MethodPut, createBody("team-b", "web"))
	require.Len(t, c.store.keys(), 2, "each team its own instance")
	names := map[string]string{}
	for _, key := range c.store.keys() {
		ch := c.store.challenge(key)
		names[ch.Spec.Owner] = key
		assert.Empty(t, ch.Spec.Flag, "a definition without flag.platform gets no flag from rCTF")
	}
	assert.NotEqual(t, names["team-a"], names["team-b"])
	c.running(names["team-b"])
	got, _ := c.do(http.MethodPost, body(kindGet, "team-a", "web", nil))
	assert.Equal(t, statusStarting, got["status"], "team-a sees its own instance, not team-b's")
	got, _ = c.do(http.MethodDelete, body(kindDelete, "team-a", "web", nil))
	assert.Nil(t, c.store.challenge(names["team-b"]).DeletionTimestamp, "team-a's stop leaves team-b's instance")
	assert.Equal(t, statusStopping, got["status"])
}

func TestContractPhases(t *testing.T) {
	for _, tc := range []struct {
		status v1alpha1.ChallengeStatus
		want   string
		note   string
	}{
		{v1alpha1.ChallengeStatus{}, statusStarting, ""},
		{v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseCreating}, statusStarting, ""},
		{v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseQueued, QueuePosition: 2, Message: "team-a runs 1 instance"}, statusStarting, "Position 2: team-a runs 1 instance"},
		{v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseError, Reason: v1alpha1.ReasonImagePullBackOff, Message: `image "x" not found`}, statusErrored, `image "x" not found`},
		{v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseStopped, Reason: v1alpha1.ReasonIdle}, statusStopped, ""},
		{v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseExpired}, statusStopped, ""},
		{v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseTerminating}, statusStopping, ""},
	} {
		t.Run(tc.status.Phase+tc.status.Reason, func(t *testing.T) {
			c := newContract(t, definition("pwn", "pwn", nil))
			c.do(http.MethodPut, createBody("team-a", "pwn"))
			c.store.sync(c.store.keys()[0], tc.status)
			got, _ := c.do(http.MethodPost, body(kindGet, "team-a", "pwn", nil))
			assert.Equal(t, tc.want, got["status"])
			if tc.note != "" {
				require.Len(t, got["endpoints"], 1)
				assert.Equal(t, tc.note, got["endpoints"].([]any)[0].(map[string]any)["text"])
			}
		})
	}
}

// A start of an instance that expired creates the next one (and deletes the record); one of an
// instance stopped for idleness wakes it.
func TestContractStartAgain(t *testing.T) {
	c := newContract(t, definition("pwn", "pwn", nil))
	c.do(http.MethodPut, createBody("team-a", "pwn"))
	first := c.store.keys()[0]
	c.store.sync(first, v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseStopped, Reason: v1alpha1.ReasonIdle})
	got, _ := c.do(http.MethodPut, createBody("team-a", "pwn"))
	assert.Equal(t, statusStarting, got["status"])
	assert.Equal(t, testNow.Format(time.RFC3339), c.store.challenge(first).Annotations[v1alpha1.AnnotationLastActivity], "an idle instance gets a fresh stamp")
	assert.Equal(t, 1, c.store.creates)

	c.store.sync(first, v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseExpired})
	c.now = c.now.Add(time.Hour)
	got, _ = c.do(http.MethodPut, createBody("team-a", "pwn"))
	assert.Equal(t, statusStarting, got["status"])
	require.Len(t, c.store.keys(), 2, "an expired instance is replaced")
	assert.Eventually(t, func() bool { return c.store.challenge(first).DeletionTimestamp != nil }, 5*time.Second, time.Millisecond, "and its record deleted")
	second := c.store.challenge(c.store.keys()[1])
	assert.Equal(t, "2", second.Annotations[annotationAttempt])
	assert.Equal(t, c.store.challenge(first).Name+"-2", second.Name)
}

// Every bad request: a clear instancerError, and nothing written.
func TestContractRefusals(t *testing.T) {
	without := func(b map[string]any, field string) map[string]any {
		delete(b, field)
		return b
	}
	with := func(b map[string]any, field string, v any) map[string]any {
		b[field] = v
		return b
	}
	for _, tc := range []struct {
		name, method string
		body         any
		status       int
		message      string
	}{
		{"wrong token", http.MethodPut, with(createBody("team-a", "pwn"), "rctfAuthToken", "guess"), http.StatusUnauthorized, "wrong rctfAuthToken"},
		{"no token", http.MethodPost, without(body(kindGet, "team-a", "pwn", nil), "rctfAuthToken"), http.StatusUnauthorized, "wrong rctfAuthToken"},
		{"not JSON", http.MethodPut, []byte("kind=instancerCreateInstanceForm"), http.StatusBadRequest, "no JSON object"},
		{"too large", http.MethodPut, with(createBody("team-a", "pwn"), "config", map[string]string{"x": strings.Repeat("a", MaxRequestBytes)}), http.StatusRequestEntityTooLarge, "larger than"},
		{"unknown kind", http.MethodPut, with(createBody("team-a", "pwn"), "kind", "instancerRebootForm"), http.StatusBadRequest, `kind "instancerRebootForm"`},
		{"kind of another verb", http.MethodPut, with(createBody("team-a", "pwn"), "kind", kindDelete), http.StatusBadRequest, "rCTF sends"},
		{"no teamId", http.MethodPut, without(createBody("team-a", "pwn"), "teamId"), http.StatusBadRequest, "teamId is missing"},
		{"no challengeIntegrationId", http.MethodPut, without(createBody("team-a", "pwn"), "challengeIntegrationId"), http.StatusBadRequest, "challengeIntegrationId is missing"},
		{"no config", http.MethodPost, without(body(kindGet, "team-a", "pwn", nil), "config"), http.StatusBadRequest, "config is missing"},
		{"no timeout", http.MethodPut, without(createBody("team-a", "pwn"), "timeoutMilliseconds"), http.StatusBadRequest, "timeoutMilliseconds is missing"},
		{"no renewal timeout", http.MethodPatch, body(kindRenew, "team-a", "pwn", nil), http.StatusBadRequest, "timeoutMilliseconds is missing"},
		{"negative timeout", http.MethodPut, with(createBody("team-a", "pwn"), "timeoutMilliseconds", -1), http.StatusBadRequest, "must be positive"},
		{"a timeout beyond a Go duration", http.MethodPatch, body(kindRenew, "team-a", "pwn", map[string]any{"timeoutMilliseconds": int64(1) << 60}), http.StatusBadRequest, "at most 31536000000 (a year)"},
		{"team no label value", http.MethodPut, createBody("team a/../b", "pwn"), http.StatusBadRequest, "no valid owner"},
		{"unmarked definition", http.MethodPut, createBody("team-a", "unmarked"), http.StatusNotFound, v1alpha1.AnnotationRCTFChallenge},
		{"two definitions", http.MethodPut, createBody("team-a", "twice"), http.StatusConflict, "ctf/twice-1, ctf/twice-2"},
		{"platform flag without flags", http.MethodPut, with(createBody("team-a", "platform-flag"), "flags", []any{}), http.StatusBadRequest, "takes its flag from the platform"},
		{"other method", http.MethodGet, nil, http.StatusMethodNotAllowed, "not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newContract(t, definition("pwn", "pwn", nil), definition("unmarked", "", nil),
				definition("twice-1", "twice", nil), definition("twice-2", "twice", nil),
				definition("platform-flag", "platform-flag", &v1alpha1.Flag{Platform: true, Env: "FLAG"}))
			got, status := c.do(tc.method, tc.body)
			assert.Equal(t, kindError, got["kind"])
			assert.Equal(t, tc.status, status)
			assert.Contains(t, got["message"], tc.message)
			assert.Zero(t, c.store.writes(), "a refused request writes nothing")
		})
	}
}

func TestContractNotExtendable(t *testing.T) {
	c := newContract(t, definition("pwn", "pwn", nil))
	c.do(http.MethodPut, with(createBody("team-a", "pwn"), "extendable", false))
	got, status := c.do(http.MethodPatch, body(kindRenew, "team-a", "pwn", map[string]any{"timeoutMilliseconds": 60000}))
	assert.Equal(t, http.StatusConflict, status)
	assert.Equal(t, "this challenge cannot be extended", got["message"])
	assert.Equal(t, 1, c.store.writes(), "the create alone")
}

func with(b map[string]any, field string, v any) map[string]any {
	b[field] = v
	return b
}

// A team that starts and deletes in a loop is slowed down, and no other team.
func TestContractTeamStartRate(t *testing.T) {
	c := newContract(t, definition("pwn", "pwn", nil))
	for i := range 3 {
		got, _ := c.do(http.MethodPut, createBody("team-a", "pwn"))
		require.Equal(t, kindDetails, got["kind"], "start %d", i)
		c.do(http.MethodDelete, body(kindDelete, "team-a", "pwn", nil))
	}
	got, status := c.do(http.MethodPut, createBody("team-a", "pwn"))
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Contains(t, got["message"], "too many instances")
	got, _ = c.do(http.MethodPut, createBody("team-b", "pwn"))
	assert.Equal(t, kindDetails, got["kind"], "another team starts")
	c.now = c.now.Add(time.Minute)
	got, _ = c.do(http.MethodPut, createBody("team-a", "pwn"))
	assert.Equal(t, kindDetails, got["kind"], "a minute later, team-a starts again")
}

func TestChallengeName(t *testing.T) {
	a := challengeName("ctf", "pwn.heap--v2", "team-a", 1)
	assert.Regexp(t, `^pwn-heap-v2-[0-9a-f]{12}$`, a)
	assert.NotEqual(t, a, challengeName("ctf", "pwn.heap--v2", "team-b", 1))
	assert.Equal(t, a+"-3", challengeName("ctf", "pwn.heap--v2", "team-a", 3))
	long := challengeName("ctf", "9"+strings.Repeat("x", 80), "4d5a7a3e-0a51-4f0e-9d27-63a0a9b8c1d2", 1000)
	assert.LessOrEqual(t, len(long), 63)
	assert.Regexp(t, `^[a-z]([-a-z0-9]*[a-z0-9])?$`, long)
	assert.NotContains(t, long, "--")
}
