package platform

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// TestKubeReadsItsWrites: an answer right after a start, an extension or a deletion shows it,
// although it is read from the watch (rCTF may poll at once, or start again right after a stop).
func TestKubeReadsItsWrites(t *testing.T) {
	def := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.APIVersion, "kind": "ChallengeDefinition",
		"metadata": map[string]any{"namespace": "ctf", "name": "pwn", "annotations": map[string]any{v1alpha1.AnnotationRCTFChallenge: "pwn-heap"}},
		"spec":     map[string]any{"maxLifetime": "1h"},
	}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		challengesGVR: "ChallengeList", definitionsGVR: "ChallengeDefinitionList"}, def)
	kube, err := NewKube(client, []string{"ctf"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.True(t, kube.Start(ctx))

	defs := kube.Definitions("pwn-heap")
	require.Len(t, defs, 1, "the definition marked for rCTF, from the cache")
	assert.Equal(t, "1h", defs[0].Spec.MaxLifetime)
	assert.Empty(t, kube.Definitions("pwn"), "by its mark, not its name")

	challenge := newChallenge(target{definition: defs[0], team: "team-a"}, 1, 10*time.Minute, nil, "")
	_, err = kube.Create(ctx, challenge)
	require.NoError(t, err)
	instances := kube.Instances("ctf", "pwn", "team-a")
	require.Len(t, instances, 1, "a start shows at once")
	assert.Equal(t, "10m0s", instances[0].Spec.Timeout)
	assert.Empty(t, kube.Instances("ctf", "pwn", "team-b"))

	require.NoError(t, kube.Delete(ctx, "ctf", challenge.Name))
	assert.Empty(t, kube.Instances("ctf", "pwn", "team-a"), "a deletion shows at once")
}
