package stamper

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func object(o map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: o}
}

// TestKube: the watches map a Service address (each ClusterIP with each port, IPv6 too) to the
// Challenge its label names, in its namespace; a Service without the label is not watched; a
// Challenge is read with its stamp and status times; a stamp is a merge patch of the annotation
// alone, conditional on the resourceVersion.
func TestKube(t *testing.T) {
	scheme := runtime.NewScheme()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{
		servicesGVR: "ServiceList", challengesGVR: "ChallengeList",
	},
		object(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{
			"name": "web-team42", "namespace": "ctf", "labels": map[string]any{LabelChallenge: "web-team42"},
		}, "spec": map[string]any{"clusterIP": "10.96.12.7", "clusterIPs": []any{"10.96.12.7", "fd00::7"},
			"ports": []any{map[string]any{"port": int64(1337)}, map[string]any{"port": int64(8080)}}}}),
		object(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "kubernetes", "namespace": "default"},
			"spec": map[string]any{"clusterIP": "10.96.0.1", "ports": []any{map[string]any{"port": int64(443)}}}}),
		object(map[string]any{"apiVersion": "ctf.challenge-hook.dev/v1alpha1", "kind": "Challenge", "metadata": map[string]any{
			"name": "web-team42", "namespace": "ctf", "resourceVersion": "41",
			"annotations": map[string]any{AnnotationLastActivity: "2026-11-27T13:41:00Z", "other": "x"},
		}, "spec": map[string]any{"owner": "team-42"}, "status": map[string]any{
			"phase": "Running", "lastActivityAt": "2026-11-27T13:41:00Z", "idleAt": "2026-11-27T13:51:00Z"}}),
	)
	var patches []string
	client.PrependReactor("patch", "challenges", func(action k8stesting.Action) (bool, runtime.Object, error) {
		p := action.(k8stesting.PatchAction)
		assert.Equal(t, types.MergePatchType, p.GetPatchType())
		patches = append(patches, string(p.GetPatch()))
		return false, nil, nil
	})
	kube, err := NewKube(client)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.True(t, kube.Start(ctx))

	for _, address := range []string{"10.96.12.7:1337", "10.96.12.7:8080", "[fd00::7]:1337"} {
		key, ok := kube.ChallengeAt(netip.MustParseAddrPort(address))
		assert.True(t, ok, address)
		assert.Equal(t, web, key, address)
	}
	for _, address := range []string{"10.96.12.7:1338", "10.96.0.1:443"} {
		_, ok := kube.ChallengeAt(netip.MustParseAddrPort(address))
		assert.False(t, ok, address)
	}
	c, ok := kube.Challenge(web)
	require.True(t, ok)
	want := Challenge{Key: web, ResourceVersion: "41", Stamp: "2026-11-27T13:41:00Z",
		LastActivityAt: t0.Add(time.Minute), IdleAt: t0.Add(11 * time.Minute)}
	assert.Equal(t, want, c)

	_, err = kube.Stamp(ctx, web, "41", "2026-11-27T13:45:00Z")
	require.NoError(t, err)
	require.Len(t, patches, 1)
	var patch map[string]any
	require.NoError(t, json.Unmarshal([]byte(patches[0]), &patch))
	assert.Equal(t, map[string]any{"metadata": map[string]any{
		"annotations":     map[string]any{AnnotationLastActivity: "2026-11-27T13:45:00Z"},
		"resourceVersion": "41",
	}}, patch)
	got, err := kube.Get(ctx, web)
	require.NoError(t, err)
	assert.Equal(t, "2026-11-27T13:45:00Z", got.Stamp)
}
