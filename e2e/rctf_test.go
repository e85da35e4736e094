//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// What rCTF sends and how often, for the challenge the test plays.
const (
	rctfChallengeID  = "pwn-heap"
	rctfAnnotation   = "ctf.challenge-hook.dev/rctf-challenge"
	rctfPollInterval = 2 * time.Second // rCTF's pace while a player's page waits for its instance
	rctfStartTimeout = 10 * time.Minute
	rctfRenewTimeout = 30 * time.Minute
)

// rctfDockerConfig is the `config` rCTF sends for a challenge whose instancer settings are the
// docker provider's defaults (one service "app"). The component reads nothing of it: what runs
// is the organizer's ChallengeDefinition.
const rctfDockerConfig = `{
  "services": {
    "app": {
      "image": "traefik/whoami:latest", "hostname": null, "environment": {"tiny": "instancer"},
      "command": null, "entrypoint": null, "working_dir": null, "user": null,
      "networks": [], "network_mode": "none", "dns": [], "dns_opt": [], "dns_search": [], "extra_hosts": [],
      "ports": [], "expose": [], "volumes": [], "tmpfs": {"/tmp": "rw,noexec,nosuid,nodev,size=65536k"},
      "shm_size": null, "healthcheck": null, "read_only": true, "privileged": false,
      "security_opt": ["no-new-privileges"], "cap_add": [], "cap_drop": ["ALL"],
      "mem_limit": "6m", "cpus": 1, "pids_limit": 64, "ulimits": {"nofile": {"soft": 1024, "hard": 1024}},
      "sysctls": {}, "labels": {}, "restart": "unless-stopped"
    }
  },
  "networks": {},
  "volumes": {}
}`

// TestRCTF plays rCTF v2 against `challenge-hook platform`, run as a process with the RBAC of
// manifests/components/platform (startPlatformComponent: its ServiceAccount impersonated through
// its kubeconfig, its RoleBinding in the event's namespace, which grants it no Secret), over the hook under Metacontroller: the organizer marks a
// ChallengeDefinition whose flag is the platform's for rCTF's challenge "pwn-heap"; then rCTF's
// requests, as its docker provider sends them, start team A's instance and poll it every 2 s until
// it runs (its endpoints are the Challenge's), deliver rCTF's flag in the instance's flag Secret
// alone, extend it, answer a repeated start with the same instance, give team B an instance of its
// own, delete A's (stopping, then stopped once its Pods are gone), and refuse a wrong token and an
// unknown challenge. Every answer must have the contract's shape (checkRCTFShape).
func TestRCTF(t *testing.T) {
	t.Parallel()
	admin := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := admin.createNamespace(ctx, t, "rctf", podSecurityRestricted)

	// The organizer publishes the challenge for rCTF, with the flag rCTF mints for each team.
	def := lifecycleChallenge("pwn-heap", "ghcr.io/example/pwn:1.0", "")
	def.SetKind("ChallengeDefinition")
	def.SetLabels(nil)
	def.SetAnnotations(map[string]string{rctfAnnotation: rctfChallengeID})
	def.Object["spec"] = template(def)
	template(def)["maxLifetime"] = "1h"
	template(def)["flag"] = map[string]any{"platform": true, "env": "FLAG"}
	createObject(ctx, t, admin, ns, def)

	component := startPlatformComponent(ctx, t, admin, ns)
	rctf := &rctfPlayer{url: component.contractURL, token: component.token, client: &http.Client{Timeout: 10 * time.Second},
		answers: map[string][]rctfAnswer{}}
	challenges := admin.dyn.Resource(chalGVR).Namespace(ns)
	// rCTF's team ids are UUIDs.
	const teamA, teamB = "3f6c1a52-9d4e-4b8e-a1c7-5e2f0d9b7a10", "8b2e4f17-0c3a-4d59-9e61-2a7d5c8f3b24"
	const flagA, flagB = "flag{team-a}", "flag{team-b}"
	begin := time.Now()

	// 1. Team A starts its instance; rCTF polls until it runs.
	started := rctf.create(ctx, t, teamA, flagA)
	wantDetails(t, "PUT (start) for team A", started, "starting", "running")
	t.Logf("team A's start answered: %s", started.body)
	chalA := teamInstance(ctx, t, admin, ns, teamA)
	if got := spec(chalA)["owner"]; got != teamA {
		t.Errorf("team A's Challenge %s has spec.owner %v, want %s", chalA.GetName(), got, teamA)
	}
	if ref, _, _ := unstructured.NestedString(chalA.Object, "spec", "definitionRef", "name"); ref != def.GetName() {
		t.Errorf("team A's Challenge %s names definition %q, want %s", chalA.GetName(), ref, def.GetName())
	}
	if got := spec(chalA)["timeout"]; got != rctfStartTimeout.String() {
		t.Errorf("team A's Challenge %s has spec.timeout %v, want rCTF's timeoutMilliseconds %s", chalA.GetName(), got, rctfStartTimeout)
	}
	runningA := rctf.pollUntil(ctx, t, teamA, "running", 60*time.Second, "starting")
	t.Logf("team A's instance %s running %s after the start: %s", chalA.GetName(), time.Since(begin).Round(time.Millisecond), runningA.body)
	chalA = mustGetChallenge(ctx, t, admin, ns, chalA.GetName())
	checkRCTFEndpoints(t, "team A's running instance", runningA, chalA)
	checkTimeLeft(t, "team A's running instance", runningA, rctfStartTimeout-time.Minute, rctfStartTimeout)

	// 2. rCTF's flag is in the instance's flag Secret, which its Pod reads, and nowhere in the
	// status or rCTF's answers.
	secret := oneChild(ctx, t, admin, ns, chalA.GetUID(), "secrets")
	if stored, _, _ := unstructured.NestedString(secret.Object, "data", "flag"); stored != base64.StdEncoding.EncodeToString([]byte(flagA)) {
		t.Errorf("team A's flag Secret %s holds %q (base64), want rCTF's flag %s", secret.GetName(), stored, flagA)
	}
	checkFlagFromSecret(t, onePod(ctx, t, admin, ns, chalA.GetUID()), secret.GetName(), flagA)
	if status, _ := json.Marshal(chalA.Object["status"]); bytes.Contains(status, []byte(flagA)) {
		t.Errorf("team A's Challenge status holds its flag: %s", status)
	}

	// 3. Extension: spec.expiresAt moves, the hook's status follows, the answer says 30 minutes.
	expiresBefore := statusTime(t, chalA, "expiresAt")
	renewed := rctf.renew(ctx, t, teamA, rctfRenewTimeout)
	renewedAt := time.Now()
	wantDetails(t, "PATCH (extend) for team A", renewed, "running")
	checkTimeLeft(t, "the extension's answer", renewed, rctfRenewTimeout-10*time.Second, rctfRenewTimeout)
	chalA = mustGetChallenge(ctx, t, admin, ns, chalA.GetName())
	rawSpecExpiry, _, _ := unstructured.NestedString(chalA.Object, "spec", "expiresAt")
	specExpiry, err := time.Parse(time.RFC3339, rawSpecExpiry)
	if err != nil {
		t.Fatalf("after the extension, team A's spec.expiresAt is %q: %v", rawSpecExpiry, err)
	}
	if earliest := renewedAt.Add(rctfRenewTimeout - 10*time.Second); specExpiry.Before(earliest) || !specExpiry.After(expiresBefore) {
		t.Errorf("after the extension, spec.expiresAt is %s, want about %s (30 min from the request) and later than the expiry before it, %s",
			specExpiry.Format(time.RFC3339), renewedAt.Add(rctfRenewTimeout).Format(time.RFC3339), expiresBefore.Format(time.RFC3339))
	}
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the hook to sync team A's extension into status.expiresAt", func() (bool, error) {
		chalA = mustGetChallenge(ctx, t, admin, ns, chalA.GetName())
		return statusTime(t, chalA, "expiresAt").After(expiresBefore), nil
	})
	if expiresAfter := statusTime(t, chalA, "expiresAt"); !expiresAfter.Equal(specExpiry) {
		t.Errorf("after a sync, status.expiresAt is %s, want spec.expiresAt %s (the definition's maxLifetime is 1h)",
			expiresAfter.Format(time.RFC3339), specExpiry.Format(time.RFC3339))
	}
	checkTimeLeft(t, "a poll after the extension", rctf.get(ctx, t, teamA), rctfRenewTimeout-time.Minute, rctfRenewTimeout)

	// 4. A second start is the same instance.
	again := rctf.create(ctx, t, teamA, flagA)
	wantDetails(t, "a second PUT (start) for team A", again, "running")
	if !slices.Equal(again.Endpoints, runningA.Endpoints) {
		t.Errorf("a second start of team A answers endpoints %v, want its running instance's %v", again.Endpoints, runningA.Endpoints)
	}
	if same := teamInstance(ctx, t, admin, ns, teamA); same.GetUID() != chalA.GetUID() {
		t.Errorf("a second start of team A made Challenge %s (uid %s), want its instance %s (uid %s)", same.GetName(), same.GetUID(), chalA.GetName(), chalA.GetUID())
	}

	// 5. Team B gets an instance of its own; team A's answers never show it.
	wantDetails(t, "PUT (start) for team B", rctf.create(ctx, t, teamB, flagB), "starting", "running")
	chalB := teamInstance(ctx, t, admin, ns, teamB)
	if chalB.GetName() == chalA.GetName() || spec(chalB)["owner"] != teamB || chalB.GetLabels()[ownerLabel] != teamB {
		t.Errorf("team B's Challenge %s (owner %v, label %q), want one of its own, not team A's %s, owned by %s",
			chalB.GetName(), spec(chalB)["owner"], chalB.GetLabels()[ownerLabel], chalA.GetName(), teamB)
	}
	runningB := rctf.pollUntil(ctx, t, teamB, "running", 60*time.Second, "starting")
	checkRCTFEndpoints(t, "team B's running instance", runningB, mustGetChallenge(ctx, t, admin, ns, chalB.GetName()))
	stillA := rctf.get(ctx, t, teamA)
	wantDetails(t, "team A's poll beside team B's instance", stillA, "running")
	if !slices.Equal(stillA.Endpoints, runningA.Endpoints) {
		t.Errorf("team A's poll answers endpoints %v, want its own %v", stillA.Endpoints, runningA.Endpoints)
	}
	rctf.neverShown(t, teamA, runningB.Endpoints)

	// 6. Team A deletes its instance: stopping, its Pods go, then stopped.
	wantDetails(t, "DELETE for team A", rctf.delete(ctx, t, teamA, rctf.token), "stopping")
	e2eutil.WaitFor(ctx, t, 30*time.Second, "team A's Pods to be gone", func() (bool, error) {
		return len(ofResource(childrenOf(ctx, t, admin, ns, chalA.GetUID()), "pods")) == 0, nil
	})
	rctf.pollUntil(ctx, t, teamA, "stopped", 60*time.Second, "stopping")
	if list, err := challenges.List(ctx, metav1.ListOptions{LabelSelector: ownerLabel + "=" + teamA}); err != nil || len(list.Items) != 0 {
		t.Errorf("team A's instance stopped, yet its Challenges are %v (err %v)", names(itemsOf(list)), err)
	}
	wantDetails(t, "team B's poll after team A's deletion", rctf.get(ctx, t, teamB), "running")

	// 7. What rCTF's instancer refuses: a wrong token (nothing created, nothing deleted) and a
	// challenge no definition is marked for.
	before := sortedNames(ctx, t, challenges)
	wrongToken := strings.Repeat("0", len(rctf.token))
	refused := rctf.send(ctx, t, http.MethodPut, rctf.createForm("c0ffee00-team-c", "flag{team-c}", wrongToken))
	wantError(t, "PUT with a wrong rctfAuthToken", refused, http.StatusUnauthorized, "rctfAuthToken")
	refused = rctf.delete(ctx, t, teamB, wrongToken)
	wantError(t, "DELETE of team B's instance with a wrong rctfAuthToken", refused, http.StatusUnauthorized, "rctfAuthToken")
	if b := mustGetChallenge(ctx, t, admin, ns, chalB.GetName()); b.GetDeletionTimestamp() != nil {
		t.Errorf("a DELETE with a wrong token deleted team B's instance %s", b.GetName())
	}
	unknown := rctf.createForm(teamB, flagB, rctf.token)
	unknown["challengeIntegrationId"] = "web-unknown"
	wantError(t, "PUT for a challenge no definition is marked for", rctf.send(ctx, t, http.MethodPut, unknown), http.StatusNotFound, rctfAnnotation)
	if after := sortedNames(ctx, t, challenges); !slices.Equal(after, before) {
		t.Errorf("refused requests changed the Challenges: %v, were %v", after, before)
	}

	// Team B's instance goes the way rCTF ends it.
	wantDetails(t, "DELETE for team B", rctf.delete(ctx, t, teamB, rctf.token), "stopping")
	rctf.pollUntil(ctx, t, teamB, "stopped", 60*time.Second, "stopping")
	for team, flag := range map[string]string{teamA: flagA, teamB: flagB} {
		rctf.neverSaid(t, team, flag)
	}
	t.Logf("rCTF played in %s", time.Since(begin).Round(time.Millisecond))
}

// rctfPlayer is rCTF's docker provider in front of one running platform component: its requests,
// and every answer, by team.
type rctfPlayer struct {
	url     string // {apiUrl}/v1/instances/
	token   string // the component's --rctf-token-file
	client  *http.Client
	answers map[string][]rctfAnswer
}

// rctfAnswer is an answer of rCTF's instancer contract.
type rctfAnswer struct {
	httpStatus           int
	body                 string
	Kind                 string         `json:"kind"`
	Status               string         `json:"status"`
	TimeLeftMilliseconds *int64         `json:"timeLeftMilliseconds"`
	Endpoints            []rctfEndpoint `json:"endpoints"`
	Message              string         `json:"message"`
}

type rctfEndpoint struct {
	Kind         string `json:"kind"`
	Host         string `json:"host"`
	Port         int64  `json:"port"`
	Title        string `json:"title"`
	Text         string `json:"text"`
	BypassExpose bool   `json:"bypassExpose"`
}

func (e rctfEndpoint) String() string { return fmt.Sprintf("%s %s:%d", e.Kind, e.Host, e.Port) }

// form is what every request of rCTF carries, with token as rctfAuthToken.
func (r *rctfPlayer) form(kind, team, token string) map[string]any {
	return map[string]any{"kind": kind, "rctfAuthToken": token, "teamId": team, "challengeIntegrationId": rctfChallengeID,
		"config": json.RawMessage(rctfDockerConfig)}
}

// createForm is rCTF's start for team: the challenge's expose list (one tcp port), its timeout,
// extendable, and the flag rCTF minted for the team.
func (r *rctfPlayer) createForm(team, flag, token string) map[string]any {
	f := r.form("instancerCreateInstanceForm", team, token)
	f["instancer"] = "k8s"
	f["expose"] = []any{map[string]any{"kind": "tcp", "hostPrefix": "pwn-heap", "containerName": "app", "containerPort": 1337,
		"shouldDisplay": true, "title": "pwn"}}
	f["timeoutMilliseconds"] = rctfStartTimeout.Milliseconds()
	f["extendable"] = true
	f["flags"] = []any{map[string]any{"provider": "flags/static", "flag": flag}}
	return f
}

func (r *rctfPlayer) create(ctx context.Context, t *testing.T, team, flag string) rctfAnswer {
	t.Helper()
	return r.send(ctx, t, http.MethodPut, r.createForm(team, flag, r.token))
}

func (r *rctfPlayer) get(ctx context.Context, t *testing.T, team string) rctfAnswer {
	t.Helper()
	return r.send(ctx, t, http.MethodPost, r.form("instancerGetInstanceForm", team, r.token))
}

func (r *rctfPlayer) renew(ctx context.Context, t *testing.T, team string, timeout time.Duration) rctfAnswer {
	t.Helper()
	f := r.form("instancerRenewInstanceForm", team, r.token)
	f["timeoutMilliseconds"] = timeout.Milliseconds()
	return r.send(ctx, t, http.MethodPatch, f)
}

func (r *rctfPlayer) delete(ctx context.Context, t *testing.T, team, token string) rctfAnswer {
	t.Helper()
	return r.send(ctx, t, http.MethodDelete, r.form("instancerDeleteInstanceForm", team, token))
}

// send is one request as rCTF makes it (JSON, no Authorization header); the answer must have the
// contract's shape whatever its kind.
func (r *rctfPlayer) send(ctx context.Context, t *testing.T, method string, form map[string]any) rctfAnswer {
	t.Helper()
	payload, err := json.Marshal(form)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.url, bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (%s): %v", method, r.url, form["kind"], err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the answer to %s %s: %v", method, form["kind"], err)
	}
	what := fmt.Sprintf("%s %s for team %v", method, form["kind"], form["teamId"])
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	checkRCTFShape(t, what, body)
	a := rctfAnswer{httpStatus: resp.StatusCode, body: strings.TrimSpace(string(body))}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("%s: %v: %s", what, err, body)
	}
	team, _ := form["teamId"].(string)
	r.answers[team] = append(r.answers[team], a)
	return a
}

// pollUntil asks for team's instance every 2 s, the first time 2 s after the request before, as
// rCTF does, until its status is want, and fails on any status but want and passing.
func (r *rctfPlayer) pollUntil(ctx context.Context, t *testing.T, team, want string, timeout time.Duration, passing ...string) rctfAnswer {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []string
	for {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(rctfPollInterval):
		}
		a := r.get(ctx, t, team)
		wantDetails(t, "a poll of team "+team, a, append([]string{want}, passing...)...)
		if seen = append(seen, a.Status); a.Status == want {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("team %s's instance not %s within %s of polls every %s: %v; last answer %s", team, want, timeout, rctfPollInterval, seen, a.body)
		}
	}
}

// neverShown: no answer to team carried any of endpoints (another team's).
func (r *rctfPlayer) neverShown(t *testing.T, team string, endpoints []rctfEndpoint) {
	t.Helper()
	for _, a := range r.answers[team] {
		for _, ep := range a.Endpoints {
			if slices.Contains(endpoints, ep) {
				t.Errorf("an answer to team %s shows another team's endpoint %s: %s", team, ep, a.body)
			}
		}
	}
}

// neverSaid: no answer to team holds flag.
func (r *rctfPlayer) neverSaid(t *testing.T, team, flag string) {
	t.Helper()
	for _, a := range r.answers[team] {
		if strings.Contains(a.body, flag) {
			t.Errorf("an answer to team %s holds its flag: %s", team, a.body)
		}
	}
}

// The values rCTF's schema allows.
var (
	rctfStatuses      = []string{"stopped", "starting", "running", "stopping", "errored"}
	rctfEndpointKinds = []string{"tcp", "tcp-ssl", "http", "https", "raw"}
)

// checkRCTFShape: body is an instancerInstanceDetails or an instancerError, with the contract's
// fields and nothing else, each of the contract's type.
func checkRCTFShape(t *testing.T, what string, body []byte) {
	t.Helper()
	var answer map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&answer); err != nil {
		t.Fatalf("%s: the answer is no JSON object: %v: %s", what, err, body)
	}
	var problems []string
	fields := func(obj map[string]any, allowed ...string) {
		for key := range obj {
			if !slices.Contains(allowed, key) {
				problems = append(problems, fmt.Sprintf("field %q is not rCTF's", key))
			}
		}
	}
	integer := func(v any) (int64, bool) {
		n, ok := v.(json.Number)
		if !ok {
			return 0, false
		}
		i, err := n.Int64()
		return i, err == nil
	}
	switch answer["kind"] {
	case "instancerInstanceDetails":
		fields(answer, "kind", "status", "timeLeftMilliseconds", "endpoints")
		for _, key := range []string{"status", "timeLeftMilliseconds", "endpoints"} {
			if _, ok := answer[key]; !ok {
				problems = append(problems, key+" is missing")
			}
		}
		if status, _ := answer["status"].(string); !slices.Contains(rctfStatuses, status) {
			problems = append(problems, fmt.Sprintf("status %v is none of %v", answer["status"], rctfStatuses))
		}
		if left := answer["timeLeftMilliseconds"]; left != nil {
			if ms, ok := integer(left); !ok || ms < 0 {
				problems = append(problems, fmt.Sprintf("timeLeftMilliseconds %v is no integer >= 0 or null", left))
			}
		}
		endpoints, ok := answer["endpoints"].([]any)
		if answer["endpoints"] != nil && !ok {
			problems = append(problems, fmt.Sprintf("endpoints %v is no list or null", answer["endpoints"]))
		}
		for i, raw := range endpoints {
			ep, _ := raw.(map[string]any)
			fields(ep, "kind", "host", "port", "title", "text", "bypassExpose")
			kind, _ := ep["kind"].(string)
			host, _ := ep["host"].(string)
			port, isInt := integer(ep["port"])
			switch {
			case !slices.Contains(rctfEndpointKinds, kind):
				problems = append(problems, fmt.Sprintf("endpoint %d: kind %v is none of %v", i, ep["kind"], rctfEndpointKinds))
			case kind == "raw" && ep["title"] == nil && ep["text"] == nil:
				problems = append(problems, fmt.Sprintf("endpoint %d: a raw endpoint with no title or text", i))
			case kind != "raw" && (host == "" || !isInt || port < 1 || port > 65535):
				problems = append(problems, fmt.Sprintf("endpoint %d: host %v port %v, want a host and a port from 1 to 65535", i, ep["host"], ep["port"]))
			}
		}
	case "instancerError":
		fields(answer, "kind", "message")
		if message, _ := answer["message"].(string); message == "" {
			problems = append(problems, "an instancerError without a message")
		}
	default:
		problems = append(problems, fmt.Sprintf("kind %v is neither instancerInstanceDetails nor instancerError", answer["kind"]))
	}
	if len(problems) > 0 {
		t.Errorf("%s: the answer breaks rCTF's contract: %s: %s", what, strings.Join(problems, "; "), body)
	}
}

// wantDetails: a is an instancerInstanceDetails (HTTP 200) with one of statuses.
func wantDetails(t *testing.T, what string, a rctfAnswer, statuses ...string) {
	t.Helper()
	if a.Kind != "instancerInstanceDetails" || a.httpStatus != http.StatusOK || !slices.Contains(statuses, a.Status) {
		t.Fatalf("%s: HTTP %d %s, want instancerInstanceDetails (HTTP 200) with status %s", what, a.httpStatus, a.body, strings.Join(statuses, " or "))
	}
}

// wantError: a is an instancerError with HTTP status and a message that says says.
func wantError(t *testing.T, what string, a rctfAnswer, status int, says string) {
	t.Helper()
	if a.Kind != "instancerError" || a.httpStatus != status || !strings.Contains(a.Message, says) {
		t.Errorf("%s: HTTP %d %s, want an instancerError (HTTP %d) naming %s", what, a.httpStatus, a.body, status, says)
	}
}

// checkTimeLeft: the answer's timeLeftMilliseconds is within [least, most].
func checkTimeLeft(t *testing.T, what string, a rctfAnswer, least, most time.Duration) {
	t.Helper()
	if a.TimeLeftMilliseconds == nil {
		t.Errorf("%s: timeLeftMilliseconds null, want from %s to %s", what, least, most)
		return
	}
	if left := time.Duration(*a.TimeLeftMilliseconds) * time.Millisecond; left < least || left > most {
		t.Errorf("%s: timeLeftMilliseconds %d (%s), want from %s to %s", what, *a.TimeLeftMilliseconds, left, least, most)
	}
}

// checkRCTFEndpoints: a running instance's answer shows the Challenge's one endpoint (the
// definition's NodePort, on the hook's public host) as rCTF's tcp endpoint, the first entry of the
// challenge's expose list.
func checkRCTFEndpoints(t *testing.T, what string, a rctfAnswer, chal *unstructured.Unstructured) {
	t.Helper()
	endpoints, _, _ := unstructured.NestedSlice(chal.Object, "status", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("%s: Challenge %s has status.endpoints %v, want the definition's one NodePort", what, chal.GetName(), endpoints)
	}
	ep, _ := endpoints[0].(map[string]any)
	host, _ := ep["host"].(string)
	port, _ := ep["port"].(int64)
	if ep["protocol"] != "TCP" || host != publicHost {
		t.Errorf("%s: Challenge %s's endpoint %v, want TCP on %s", what, chal.GetName(), ep, publicHost)
	}
	want := []rctfEndpoint{{Kind: "tcp", Host: host, Port: port}}
	if !slices.Equal(a.Endpoints, want) {
		t.Errorf("%s: endpoints %v, want %v (Challenge %s's status.endpoints)", what, a.Endpoints, want, chal.GetName())
	}
}

// checkFlagFromSecret: the instance's container reads FLAG from its flag Secret, and the Pod holds
// no flag of its own.
func checkFlagFromSecret(t *testing.T, pod *unstructured.Unstructured, secret, flag string) {
	t.Helper()
	found := false
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	for _, raw := range containers {
		c, _ := raw.(map[string]any)
		if c["name"] != "app" {
			continue
		}
		env, _ := c["env"].([]any)
		for _, rawVar := range env {
			v, _ := rawVar.(map[string]any)
			if v["name"] != "FLAG" {
				continue
			}
			found = true
			if name, _, _ := unstructured.NestedString(v, "valueFrom", "secretKeyRef", "name"); name != secret {
				t.Errorf("Pod %s reads FLAG from %v, want Secret %s", pod.GetName(), v, secret)
			}
		}
	}
	if !found {
		t.Errorf("Pod %s: container app has no FLAG variable: %v", pod.GetName(), containers)
	}
	if data, _ := json.Marshal(pod.Object); bytes.Contains(data, []byte(flag)) {
		t.Errorf("Pod %s holds the flag itself, want it only in Secret %s: %s", pod.GetName(), secret, data)
	}
}

// teamInstance is the one Challenge of team (by the owner label the component sets) in ns.
func teamInstance(ctx context.Context, t *testing.T, c *cluster, ns, team string) *unstructured.Unstructured {
	t.Helper()
	list, err := c.dyn.Resource(chalGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: ownerLabel + "=" + team})
	if err != nil {
		t.Fatalf("list team %s's Challenges: %v", team, err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("team %s has Challenges %v, want exactly one", team, names(itemsOf(list)))
	}
	return &list.Items[0]
}

func itemsOf(list *unstructured.UnstructuredList) []*unstructured.Unstructured {
	if list == nil {
		return nil
	}
	out := make([]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out
}
