package sync

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// derivedCase is a golden case whose request is computed from another case's: the base request,
// changed as the platform or a user would change it, then taken through the hook's answers as
// Metacontroller applies them (applyAnswer, Pods lingering Terminating for one request). So the
// request is what Metacontroller would send at that moment, previous status included, and it
// follows the hook when the hook changes: `make update` writes it again.
type derivedCase struct {
	name, base string
	// change edits the base request's parent and request before the first answer.
	change func(parent, req map[string]any)
	// applied is how many answers are applied before the case's request (0: the changed base).
	applied int
	// description says what the case shows, as a case.yaml's does.
	description string
}

func setSpec(field string, value any) func(parent, req map[string]any) {
	return func(parent, _ map[string]any) { parent["spec"].(map[string]any)[field] = value }
}

// deleting: the Challenge is deleted; the customize answer for its new generation relates
// nothing (Customize), so the request carries no related object.
func deleting(parent, req map[string]any) {
	parent["metadata"].(map[string]any)["deletionTimestamp"] = formatTime(goldenNow)
	req["finalizing"] = true
	req["related"] = map[string]any{}
}

// withoutChild removes one observed child group's objects, e.g. a policy deleted by hand.
func withoutChild(groupKey string) func(parent, req map[string]any) {
	return func(_, req map[string]any) { req["children"].(map[string]any)[groupKey] = map[string]any{} }
}

const (
	runningCase         = "life-4-running-resync-fixed-point"
	firstSyncCase       = "life-1-none-first-sync"
	definitionGoneCase  = "definition-missing-keeps-children"
	networkPolicyGroup  = "NetworkPolicy.networking.k8s.io/v1"
	expiredBeforeGolden = "2026-11-01T12:04:00Z"
)

var derivedCases = []derivedCase{
	{name: "none-to-creating-policy-before-pod", base: firstSyncCase, description: `
First sync of a new Challenge: nothing observed. The hook declares the NetworkPolicy, Service and flag
Secret, but not the Pod: a Pod is declared only once the policy that isolates it is observed, so it
never runs a moment unisolated; nor the Ingress, which names its Service and is declared only once
that Service is observed among the Challenge's children. Phase None.`},
	{name: "creating-policy-observed-pod-created", base: firstSyncCase, applied: 1, description: `
The sync after the first: Metacontroller created the NetworkPolicy, Service and flag Secret the first
answer declared. The policy (and the Secret the Pod reads its flag from) being observed, the hook now
declares the Pod, and the Service being observed, the Ingress to it. Phase Creating, no endpoint yet.`},
	{name: "readme-example-pod-created", base: "readme-example-first-sync", applied: 1, description: `
The README's sample once Metacontroller created what its first sync declared
(readme-example-first-sync): the NetworkPolicy is observed, so the Pod is declared with the rest, and
the Service is, so the Ingress is.
` + "`challenge-hook render`" + ` of examples/challenge.yaml and examples/definition.yaml prints exactly these
children and this status (cmd/challenge-hook's TestRenderMatchesGolden).`},
	{name: "running-policy-deleted-pod-removed", base: runningCase, change: withoutChild(networkPolicyGroup), description: `
A Running instance whose NetworkPolicy was deleted by hand: its Pod is not isolated any more. The hook
declares the policy again and leaves the Pod out, so that Metacontroller deletes it; it is created
again once the policy is observed. Phase Creating, and the message says why.`},
	{name: "running-to-expired-pod-terminating-policy-kept", base: runningCase, change: setSpec("expiresAt", expiredBeforeGolden), applied: 1, description: `
The platform ended the instance early (spec.expiresAt in the past): the first answer past the deadline
declared only the NetworkPolicy, and Metacontroller deleted everything else. The Pod is Terminating
(its process ignores SIGTERM, its grace period runs): the policy stays, exactly as it was, so the Pod is
isolated to its last moment. Phase Expired.`},
	{name: "expired-pod-gone-policy-removed", base: runningCase, change: setSpec("expiresAt", expiredBeforeGolden), applied: 2, description: `
After running-to-expired-pod-terminating-policy-kept: the Pod is gone, only the NetworkPolicy is
observed. The answer declares no child, so the policy goes now, after the last Pod. Phase Expired.`},
	{name: "finalize-pod-terminating-policy-kept", base: runningCase, change: deleting, applied: 1, description: `
A Running Challenge is deleted: the first finalize answer declared only the NetworkPolicy and
Metacontroller deleted every other child. The Pod is Terminating: the policy stays while it is
observed, and the Challenge is not finalized. Phase Terminating.`},
	{name: "finalize-pod-gone-policy-removed", base: runningCase, change: deleting, applied: 2, description: `
After finalize-pod-terminating-policy-kept: the Pod is gone, only the NetworkPolicy is observed. The
answer declares no child, so the policy goes now; the Challenge is finalized on the next sync, once
nothing is observed. Phase Terminating.`},
	{name: "running-to-stopped-pod-terminating-policy-kept", base: runningCase, change: setSpec("stopped", true), applied: 1, description: `
The platform stopped a Running instance (spec.stopped): the Pod was left out and is Terminating; the
NetworkPolicy, Service, Ingress and Secret stay, the policy isolating the Pod to its last moment.
Phase Stopped.`},
	{name: "definition-missing-policy-missing-pod-removed", base: definitionGoneCase, change: withoutChild(networkPolicyGroup), description: `
The definition is gone, so the hook keeps every child as it is; but the NetworkPolicy is gone too
(deleted by hand), so the Pod runs unisolated. The hook leaves the Pod out, so that Metacontroller
deletes it, and declares a policy that admits nothing, built from the Challenge alone, to hold it while
it terminates. Phase Error, DefinitionNotFound.`},
}

// derivedRequest computes a derived case's request from its base case's.
func derivedRequest(t testing.TB, d derivedCase, cases map[string]goldenCase, cfg Config) []byte {
	base, ok := cases[d.base]
	require.True(t, ok, "base case %s", d.base)
	request := base.request
	if d.change != nil {
		var req map[string]any
		require.NoError(t, json.Unmarshal(request, &req))
		d.change(req["parent"].(map[string]any), req)
		var err error
		request, err = json.Marshal(req)
		require.NoError(t, err)
	}
	for range d.applied {
		request = applyAnswer(t, request, answer(t, base.with(request), cfg), mcsim.Applied{Create: true, Delete: true, PodsLinger: true})
	}
	return indent(t, compact(t, request))
}

func compact(t testing.TB, body []byte) []byte {
	var v any
	require.NoError(t, json.Unmarshal(body, &v))
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return out
}

// TestGoldenDerivedRequests: each derived case's request.json is what its derivation computes;
// `make update` writes it before TestGolden answers it.
func TestGoldenDerivedRequests(t *testing.T) {
	cfg := goldenConfig(t)
	cases := map[string]goldenCase{}
	for _, c := range goldenCases(t) {
		cases[c.name] = c
	}
	for _, d := range derivedCases {
		t.Run(d.name, func(t *testing.T) {
			require.NotEmpty(t, strings.TrimSpace(d.description), "a derived case says what it shows")
			got := derivedRequest(t, d, cases, cfg)
			dir := filepath.Join("..", "testdata", d.name)
			path := filepath.Join(dir, "request.json")
			if *update {
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run `make update` to derive it from %s", d.base)
			require.Equal(t, string(want), string(got), "derived from %s; run `make update` and read the difference", d.base)
		})
	}
}
