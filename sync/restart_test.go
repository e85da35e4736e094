package sync

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// A restart changes the Pod by its annotation alone: every other child, and the instance id, stay
// byte for byte what they were, so Metacontroller replaces the Pod and touches nothing else.
func TestRestartChangesOnlyThePodAnnotation(t *testing.T) {
	cfg := goldenConfig(t)
	req, err := DecodeRequest(goldenCaseNamed(t, "running-to-creating-restartedat-changed").request)
	require.NoError(t, err)
	require.NotEmpty(t, req.Parent.Spec.RestartedAt)
	restarted := Sync(req, goldenNow, cfg)
	req.Parent.Spec.RestartedAt = ""
	before := Sync(req, goldenNow, cfg)

	require.Len(t, restarted.Children, len(before.Children))
	for i := range before.Children {
		got, want := decodedChild(t, restarted.Children[i]), decodedChild(t, before.Children[i])
		if got["kind"] == "Pod" {
			annotations := got["metadata"].(map[string]any)["annotations"].(map[string]any)
			assert.Equal(t, "2026-11-01T12:04:30Z", annotations[AnnotationRestartedAt])
			delete(annotations, AnnotationRestartedAt)
		}
		assert.Equal(t, want, got, "child %d", i)
	}
	assert.Equal(t, before.Status.InstanceID, restarted.Status.InstanceID)
	assert.Equal(t, before.Status.Endpoints, restarted.Status.Endpoints)
	assert.Equal(t, v1alpha1.PhaseRunning, before.Status.Phase, "the observed Pod has no restart annotation: without restartedAt it is Running")
	assert.Equal(t, v1alpha1.PhaseCreating, restarted.Status.Phase, "with one, it is being restarted")
}

// A restartedAt that is not a time is an invalid spec: the children stay as they are.
func TestInvalidRestartedAtKeepsChildren(t *testing.T) {
	req, err := DecodeRequest(goldenCaseNamed(t, "running-to-creating-restartedat-changed").request)
	require.NoError(t, err)
	req.Parent.Spec.RestartedAt = "yesterday"
	resp := Sync(req, goldenNow, goldenConfig(t))
	assert.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	assert.Contains(t, resp.Status.Message, `spec.restartedAt: Invalid value: "yesterday": not an RFC 3339 time`)
	require.Len(t, resp.Children, req.Children.Count())
	for _, child := range resp.Children {
		assert.IsType(t, keptChild{}, child)
	}
}
