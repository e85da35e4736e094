package sync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// A dynamic flag needs the hook's key; without one the instance is an Error and, if it already
// runs, its children are kept as they are.
func TestDynamicFlagWithoutKey(t *testing.T) {
	cfg := goldenConfig(t)
	cfg.FlagKey = nil
	for name, wantChildren := range map[string]int{"life-1-none-first-sync": 0, "life-3-running-http": 5} {
		c := goldenCaseNamed(t, name)
		req, err := DecodeRequest(c.request)
		require.NoError(t, err)
		resp := Sync(req, goldenNow, cfg)
		require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
		require.Equal(t, v1alpha1.ReasonFlagKeyMissing, resp.Status.Reason)
		require.Contains(t, resp.Status.Message, "--flag-key-file")
		require.Len(t, resp.Children, wantChildren, name)
		requireKeptChildren(t, req, resp)
	}
}
