package sync

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// TestDecodePrePullRequestRefuses: what the pre-pull hook cannot read is a bad request (400,
// Metacontroller changes nothing), never a guess.
func TestDecodePrePullRequestRefuses(t *testing.T) {
	for body, want := range map[string]string{
		``:                           "request: EOF",
		`{}`:                         "request has no parent",
		`{"parent":{"metadata":{}}}`: "request has no parent",
		`{"parent":{"metadata":{"name":"web"}},"children":{"Pod.v1":{}}}`:                                   `unknown child type "Pod.v1"`,
		`{"parent":{"metadata":{"name":"web"}},"children":{"DaemonSet.apps/v1":{"ctf/x":{"metadata":{}}}}}`: "has no metadata.name",
		`{"parent":{"metadata":{"name":"web"}}} {}`:                                                         "unexpected data after the JSON object",
	} {
		_, err := DecodePrePullRequest([]byte(body))
		require.ErrorIs(t, err, ErrBadRequest, body)
		require.ErrorContains(t, err, want, body)
	}
}

// TestPrePullRefusesWhatItCannotLabel: a definition name longer than a label value (the CRD
// refuses it; a hand-made request may not) keeps what is observed and says why.
func TestPrePullRefusesWhatItCannotLabel(t *testing.T) {
	def := ChallengeDefinition{Metadata: ObjectMeta{Name: strings.Repeat("a", 64), Namespace: "ctf"}, Spec: v1alpha1.DefinitionSpec{
		Containers: []v1alpha1.Container{{Name: "web", Image: "registry.example/web:1", Ports: []v1alpha1.ContainerPort{{ContainerPort: 8080}}}},
	}}
	resp := PrePull(PrePullRequest{Parent: def}, Config{PrePullImage: "registry.example/hook:1"})
	require.Equal(t, v1alpha1.PrePullStateInvalidDefinition, resp.Status.PrePull.State)
	require.Contains(t, resp.Status.PrePull.Message, "metadata.name")
	require.Empty(t, resp.Children)

	def.Metadata.Name = "web"
	resp = PrePull(PrePullRequest{Parent: def}, Config{PrePullImage: "registry.example/hook:1"})
	require.Equal(t, v1alpha1.PrePullStatePrePulling, resp.Status.PrePull.State)
	require.Len(t, resp.Children, 2)
}

// FuzzPrePull: whatever the body, decoding fails with a bad request or the answer is byte for
// byte the same when asked twice, and never panics; seeded with the golden requests.
func FuzzPrePull(f *testing.F) {
	requests, err := filepath.Glob(filepath.Join(prePullCasesDir, "*", "request.json"))
	require.NoError(f, err)
	for _, path := range requests {
		body, err := os.ReadFile(path)
		require.NoError(f, err)
		f.Add(body)
	}
	cfg := Config{PrePullImage: "registry.example/hook:1"}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodePrePullRequest(body)
		if err != nil {
			require.ErrorIs(t, err, ErrBadRequest)
			return
		}
		first, err := EncodeResponse(PrePull(req, cfg))
		require.NoError(t, err)
		again, err := DecodePrePullRequest(body)
		require.NoError(t, err)
		second, err := EncodeResponse(PrePull(again, cfg))
		require.NoError(t, err)
		require.Equal(t, string(first), string(second))
	})
}

// TestPrePullImagesOfPods: a definition of several pods pre-pulls every pod's images once each,
// in template order, each container named <pod>--<container> (two pods may have containers of the
// same name, and the pod a-b's container c is not the pod a's container b-c), or
// pod<i>-container<j> where that would not fit a container name.
func TestPrePullImagesOfPods(t *testing.T) {
	long := strings.Repeat("c", 59) // bot--<59 c> would be 64 characters
	spec := v1alpha1.DefinitionSpec{Pods: []v1alpha1.PodTemplate{
		{Name: "web", Containers: []v1alpha1.Container{{Name: "app", Image: "registry.example/web:1"}}},
		{Name: "db", Containers: []v1alpha1.Container{{Name: "app", Image: "registry.example/db:1"}}},
		{Name: "bot", Containers: []v1alpha1.Container{{Name: "app", Image: "registry.example/web:1"}, {Name: long, Image: "registry.example/bot:1"}}},
		{Name: "a-b", Containers: []v1alpha1.Container{{Name: "c", Image: "registry.example/a-b:1"}}},
		{Name: "a", Containers: []v1alpha1.Container{{Name: "b-c", Image: "registry.example/a:1"}}},
	}}
	require.Equal(t, []prePullImage{
		{"web--app", "registry.example/web:1"},
		{"db--app", "registry.example/db:1"},
		{"pod2-container1", "registry.example/bot:1"},
		{"a-b--c", "registry.example/a-b:1"},
		{"a--b-c", "registry.example/a:1"},
	}, prePullImages(spec))
}
