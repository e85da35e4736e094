package sync

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// A stop is the platform's explicit request and needs no definition: when the hook cannot build the
// instance, the Pod still goes and every other child is kept exactly as last applied.
func TestStopWithAMissingDefinitionRemovesOnlyThePod(t *testing.T) {
	req, err := DecodeRequest(goldenCaseNamed(t, "running-to-stopped-pod-removed").request)
	require.NoError(t, err)
	require.Len(t, req.Children.Pods, 1)
	req.Related.Definitions = nil
	resp := Sync(req, goldenNow, goldenConfig(t))

	assert.Equal(t, v1alpha1.PhaseStopped, resp.Status.Phase)
	assert.Contains(t, resp.Status.Message, v1alpha1.ReasonDefinitionNotFound)
	assert.Nil(t, podOf(t, resp), "the Pod goes")
	var kinds []string
	for _, child := range resp.Children {
		kept, ok := child.(keptChild)
		require.True(t, ok, "a child the hook cannot build is returned as last applied, got %T", child)
		kinds = append(kinds, kept.obj.Kind)
	}
	assert.Equal(t, []string{"Service", "Ingress", "NetworkPolicy", "Secret"}, kinds)
	assert.Positive(t, resp.ResyncAfterSeconds, "woken at the deadline, when the rest goes")
}
