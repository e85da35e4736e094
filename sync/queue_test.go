package sync

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// TestErrorsWithoutAPodHoldNoPlace: a Challenge in Error for a reason that keeps the hook from
// building it (every reason a problem carries) holds its owner's place while its status says it
// may keep a Pod (workloadKept: the hook keeps what runs, Ready or not; readyAt: Ready once),
// and only then: one that never had a Pod must not keep an owner's queued instance waiting until
// it expires.
func TestErrorsWithoutAPodHoldNoPlace(t *testing.T) {
	for _, reason := range []string{
		v1alpha1.ReasonDefinitionNotFound, v1alpha1.ReasonInvalidDefinition, v1alpha1.ReasonInvalidSpec,
		v1alpha1.ReasonFlagKeyMissing, v1alpha1.ReasonGatewayAPINotEnabled, v1alpha1.ReasonTCPGatewayNotConfigured,
	} {
		var c Challenge
		c.Status.Phase, c.Status.Reason = v1alpha1.PhaseError, reason
		assert.False(t, holdsPlace(c), "%s, no Pod kept: no place", reason)
		assert.False(t, admitted(c), reason)
		c.Status.WorkloadKept = true
		assert.True(t, holdsPlace(c), "%s, never Ready, its Pod kept: its place", reason)
		assert.True(t, admitted(c), reason)
		c.Status.WorkloadKept, c.Status.ReadyAt = false, "2026-11-01T12:00:00Z"
		assert.True(t, holdsPlace(c), "%s, Ready once: its Pod may still run", reason)
	}
	var crashing Challenge
	crashing.Status.Phase, crashing.Status.Reason = v1alpha1.PhaseError, v1alpha1.ReasonCrashLoopBackOff
	assert.True(t, holdsPlace(crashing), "a failing Pod is a Pod")
}
