package sync

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Messages quote user input; however large the input, the status stays small.
func TestStatusMessagesAreBounded(t *testing.T) {
	c := goldenCaseNamed(t, "life-3-running-http")
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	req.Parent.Spec.Owner = strings.Repeat("x", 7<<20)
	resp := Sync(req, goldenNow, goldenConfig(t))
	require.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	require.LessOrEqual(t, len(resp.Status.Message), maxMessageLength)
	for _, cond := range resp.Status.Conditions {
		require.LessOrEqual(t, len(cond.Message), maxMessageLength)
	}
	require.Equal(t, "ab...", truncate("abcdefgh", 5))
	require.Equal(t, "...", truncate("ééé", 4), "a cut never splits a character")
}
