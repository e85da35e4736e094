package platform

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The players' capabilities in the Challenges below: none may reach a series.
const (
	capabilityToken = "tok-7f3a9c1e5b2d8f4a6c0e"
	capabilityHost  = "k3x9q2w7.web.ctf.example.com"
)

// metricsChallenge is a stored Challenge of ns: spec and status as the API server holds them.
func metricsChallenge(ns, name, created string, spec, status map[string]any) *unstructured.Unstructured {
	obj := map[string]any{
		"apiVersion": v1alpha1.Group + "/" + v1alpha1.Version, "kind": "Challenge",
		"metadata": map[string]any{"name": name, "namespace": ns, "creationTimestamp": created},
		"spec":     spec,
	}
	if status != nil {
		obj["status"] = status
	}
	return &unstructured.Unstructured{Object: obj}
}

// challengeSeries is the exposition of the Challenges of TestChallengeCollector, as
// docs/monitoring.md documents the series.
const challengeSeries = `
# HELP kube_ctf_challenge_created Unix creation time of the Challenge (metadata.creationTimestamp).
# TYPE kube_ctf_challenge_created gauge
kube_ctf_challenge_created{challenge="new-team03",definition="web",namespace="ctf",owner="team-03"} 1.780002e+09
kube_ctf_challenge_created{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02"} 1.7800002e+09
kube_ctf_challenge_created{challenge="web-team01",definition="web",namespace="ctf",owner="team-01"} 1.78e+09
kube_ctf_challenge_created{challenge="web-team04",definition="web",namespace="ctf",owner="team-04"} 1.7800001e+09
# HELP kube_ctf_challenge_status_expires_at Unix time the instance's workload is removed (status.expiresAt).
# TYPE kube_ctf_challenge_status_expires_at gauge
kube_ctf_challenge_status_expires_at{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02"} 1.7800020e+09
kube_ctf_challenge_status_expires_at{challenge="web-team01",definition="web",namespace="ctf",owner="team-01"} 1.7800018e+09
kube_ctf_challenge_status_expires_at{challenge="web-team04",definition="web",namespace="ctf",owner="team-04"} 1.7800019e+09
# HELP kube_ctf_challenge_status_phase The Challenge's status.phase (1 for the current phase, 0 for the others).
# TYPE kube_ctf_challenge_status_phase gauge
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Creating"} 0
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Deleted"} 0
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Error"} 1
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Expired"} 0
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="None"} 0
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Queued"} 0
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Running"} 0
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Stopped"} 0
kube_ctf_challenge_status_phase{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Terminating"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Creating"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Deleted"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Error"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Expired"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="None"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Queued"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Running"} 1
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Stopped"} 0
kube_ctf_challenge_status_phase{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Terminating"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Creating"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Deleted"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Error"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Expired"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="None"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Queued"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Running"} 0
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Stopped"} 1
kube_ctf_challenge_status_phase{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Terminating"} 0
# HELP kube_ctf_challenge_status_ready_at Unix time the instance first became Running (status.readyAt).
# TYPE kube_ctf_challenge_status_ready_at gauge
kube_ctf_challenge_status_ready_at{challenge="web-team01",definition="web",namespace="ctf",owner="team-01"} 1.78000004e+09
kube_ctf_challenge_status_ready_at{challenge="web-team04",definition="web",namespace="ctf",owner="team-04"} 1.78000013e+09
# HELP kube_ctf_challenge_status_reason The Challenge's status.phase and status.reason, always 1.
# TYPE kube_ctf_challenge_status_reason gauge
kube_ctf_challenge_status_reason{challenge="pwn-team02",definition="",namespace="ctf-finals",owner="team-02",phase="Error",reason="ImagePullBackOff"} 1
kube_ctf_challenge_status_reason{challenge="web-team01",definition="web",namespace="ctf",owner="team-01",phase="Running",reason="Ready"} 1
kube_ctf_challenge_status_reason{challenge="web-team04",definition="web",namespace="ctf",owner="team-04",phase="Stopped",reason="Idle"} 1
`

// TestChallengeCollector: no series until the watches have listed; then the Challenges of the
// watched namespaces, from the watches' cache, as the series docs/monitoring.md documents,
// exactly: a Running instance of a definition (readyAt, expiresAt, every phase 0 but Running), an
// inline template in Error (no definition, no readyAt), one stopped for idleness, one the hook has
// not answered (its creation time alone); none of a namespace not watched, and none of the
// endpoints' hosts, URLs or tokens, nor the flag.
func TestChallengeCollector(t *testing.T) {
	byRef := map[string]any{"definitionRef": map[string]any{"name": "web"}}
	withOwner := func(spec map[string]any, owner string) map[string]any {
		out := map[string]any{"owner": owner, "flag": "CTF{not-in-any-series}"}
		for k, v := range spec {
			out[k] = v
		}
		return out
	}
	endpoints := []any{
		map[string]any{"name": "http", "protocol": "TCP", "host": capabilityHost, "port": int64(443), "url": "https://" + capabilityHost + "/"},
		map[string]any{"name": "shell", "protocol": "TCP", "host": "tcp.ctf.example.com", "port": int64(1337), "token": capabilityToken,
			"command": "nc tcp.ctf.example.com 1337"},
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{challengesGVR: "ChallengeList", definitionsGVR: "ChallengeDefinitionList"},
		metricsChallenge("ctf", "web-team01", "2026-05-28T20:26:40Z", withOwner(byRef, "team-01"), map[string]any{
			"phase": "Running", "reason": "Ready", "message": "Running at " + capabilityHost, "instanceId": "k3x9q2w7",
			"endpoints": endpoints, "startedAt": "2026-05-28T20:26:42Z", "readyAt": "2026-05-28T20:27:20Z",
			"expiresAt": "2026-05-28T20:56:40Z", "lastActivityAt": "2026-05-28T20:30:00Z",
		}),
		metricsChallenge("ctf-finals", "pwn-team02", "2026-05-28T20:30:00Z",
			withOwner(map[string]any{"template": map[string]any{"containers": []any{map[string]any{"name": "pwn", "image": "ghcr.io/example/pwn:nope"}}}}, "team-02"),
			map[string]any{"phase": "Error", "reason": "ImagePullBackOff", "message": `image "ghcr.io/example/pwn:nope" not found`,
				"expiresAt": "2026-05-28T21:00:00Z"}),
		metricsChallenge("ctf", "web-team04", "2026-05-28T20:28:20Z", withOwner(byRef, "team-04"), map[string]any{
			"phase": "Stopped", "reason": "Idle", "endpoints": endpoints[:1],
			// A fraction of a second: whole seconds, as the other times.
			"readyAt": "2026-05-28T20:28:50.75Z", "expiresAt": "2026-05-28T20:58:20Z",
		}),
		metricsChallenge("ctf", "new-team03", "2026-05-28T21:00:00Z", withOwner(byRef, "team-03"), nil),
		metricsChallenge("elsewhere", "web-team09", "2026-05-28T20:26:40Z", withOwner(byRef, "team-09"), map[string]any{
			"phase": "Running", "reason": "Ready", "readyAt": "2026-05-28T20:27:00Z", "expiresAt": "2026-05-28T20:56:40Z",
		}),
	)
	kube, err := NewKube(client, []string{"ctf", "ctf-finals"})
	require.NoError(t, err)
	collector := NewChallengeCollector(kube)
	assert.Zero(t, testutil.CollectAndCount(collector), "series before the watches have listed")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.True(t, kube.Start(ctx))
	require.Len(t, kube.Challenges(), 4, "the Challenges of the watched namespaces")

	require.NoError(t, testutil.CollectAndCompare(collector, strings.NewReader(challengeSeries)))
	assert.Equal(t, 4+9*3+3+2+3, testutil.CollectAndCount(collector), "every series: 4 created, 9 phases of 3, 3 reasons, 2 ready_at, 3 expires_at")
	problems, err := testutil.CollectAndLint(collector)
	require.NoError(t, err)
	assert.Empty(t, problems, "the series pass Prometheus' lint")

	// Nothing of a player's capability or of the flag, in any label of any series.
	registry := prometheus.NewPedanticRegistry()
	registry.MustRegister(collector)
	families, err := registry.Gather()
	require.NoError(t, err)
	for _, family := range families {
		for _, m := range family.GetMetric() {
			for _, pair := range m.GetLabel() {
				for _, secret := range []string{capabilityToken, "k3x9q2w7", "example.com", "CTF{", "not found"} {
					assert.NotContains(t, pair.GetValue(), secret, "%s{%s}", family.GetName(), pair.GetName())
				}
			}
		}
	}

	// The comparison sees a wrong value, a missing series and a series too many.
	for what, wrong := range map[string]string{
		"a wrong value":  strings.Replace(challengeSeries, `phase="Running"} 1`, `phase="Running"} 0`, 1),
		"a missing line": strings.Replace(challengeSeries, `kube_ctf_challenge_status_ready_at{challenge="web-team04",definition="web",namespace="ctf",owner="team-04"} 1.78000013e+09`+"\n", "", 1),
		"an extra line": strings.Replace(challengeSeries, "# HELP kube_ctf_challenge_status_ready_at",
			`kube_ctf_challenge_status_phase{challenge="new-team03",definition="web",namespace="ctf",owner="team-03",phase="None"} 1`+"\n# HELP kube_ctf_challenge_status_ready_at", 1),
	} {
		assert.Error(t, testutil.CollectAndCompare(collector, strings.NewReader(wrong)), what)
	}
}

// fakeChallenges is a ChallengeLister of fixed Challenges.
type fakeChallenges []*v1alpha1.Challenge

func (f fakeChallenges) Challenges() []*v1alpha1.Challenge { return f }

// TestChallengeCollectorEveryPhase: each phase the hook writes has its series, 1 exactly for the
// Challenge's own; a time that is not one serves no series rather than a wrong one.
func TestChallengeCollectorEveryPhase(t *testing.T) {
	for _, phase := range challengePhases {
		c := &v1alpha1.Challenge{}
		c.Namespace, c.Name, c.Spec.Owner = "ctf", "x", "team-1"
		c.Status.Phase, c.Status.Reason, c.Status.ReadyAt = phase, "Some", "yesterday"
		collector := NewChallengeCollector(fakeChallenges{c})
		var want strings.Builder
		want.WriteString("# HELP kube_ctf_challenge_status_phase The Challenge's status.phase (1 for the current phase, 0 for the others).\n" +
			"# TYPE kube_ctf_challenge_status_phase gauge\n")
		for _, p := range challengePhases {
			value := "0"
			if p == phase {
				value = "1"
			}
			want.WriteString(`kube_ctf_challenge_status_phase{challenge="x",definition="",namespace="ctf",owner="team-1",phase="` + p + `"} ` + value + "\n")
		}
		assert.NoError(t, testutil.CollectAndCompare(collector, strings.NewReader(want.String()), "kube_ctf_challenge_status_phase"), phase)
		assert.Equal(t, 0, testutil.CollectAndCount(collector, "kube_ctf_challenge_status_ready_at", "kube_ctf_challenge_status_expires_at"), phase)
	}
}
