package sync

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// TestGoldenIdleAt: over every golden sync answer, status.idleAt is there exactly when
// status.lastActivityAt is, and says when the idle clock stops the instance (lastActivityAt plus
// the template's idleTimeout, the instance's idle deadline). Answered again later, before that
// deadline and with no new activity, neither moves: idleAt changes only with lastActivityAt, so
// it costs no status write of its own.
func TestGoldenIdleAt(t *testing.T) {
	cfg := goldenConfig(t)
	withIdleAt := 0
	for _, c := range goldenCases(t) {
		if strings.HasPrefix(c.name, "customize-") {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			cfg := withFlags(t, cfg, c.flags)
			req, err := DecodeRequest(c.request)
			require.NoError(t, err)
			status := Sync(req, goldenNow, cfg).Status
			assert.Equal(t, status.LastActivityAt != "", status.IdleAt != "", "lastActivityAt %q, idleAt %q", status.LastActivityAt, status.IdleAt)
			if status.IdleAt == "" {
				return
			}
			withIdleAt++
			in := resolve(req, goldenNow, cfg)
			require.NotZero(t, in.idle.timeout, "idleAt without an idleTimeout")
			assert.Equal(t, formatTime(parseTime(status.LastActivityAt).Add(in.idle.timeout)), status.IdleAt)
			assert.Equal(t, formatTime(in.idle.at), status.IdleAt)

			// Fed back and answered a second before the idle deadline (or now, when it passed):
			// lastActivityAt and idleAt are the same.
			later := goldenNow
			if at := parseTime(status.IdleAt); at.After(later.Add(time.Second)) {
				later = at.Add(-time.Second)
			}
			again, err := DecodeRequest(applyAnswer(t, c.request, answer(t, c, cfg), mcsim.Applied{}))
			require.NoError(t, err)
			next := Sync(again, later, cfg).Status
			if parseTime(status.ExpiresAt).After(later) {
				assert.Equal(t, status.LastActivityAt, next.LastActivityAt, "at %s", formatTime(later))
				assert.Equal(t, status.IdleAt, next.IdleAt, "at %s", formatTime(later))
			}
		})
	}
	assert.GreaterOrEqual(t, withIdleAt, 5, "the corpus shows idleAt in a handful of cases")
}

// TestFirstRunningAnswerIsAFixedPoint: the answer that first says Running (and sets readyAt, which
// is activity) is a fixed point with an idle clock too: fed back, its status is the same, so it
// costs no second status write. Every golden case whose answer first reaches Running is answered
// with an idleTimeout on its template.
func TestFirstRunningAnswerIsAFixedPoint(t *testing.T) {
	cfg := goldenConfig(t)
	checked := 0
	for _, c := range goldenCases(t) {
		if strings.HasPrefix(c.name, "customize-") {
			continue
		}
		req, err := DecodeRequest(c.request)
		require.NoError(t, err)
		if req.Parent.Status.ReadyAt != "" || Sync(req, goldenNow, withFlags(t, cfg, c.flags)).Status.Phase != v1alpha1.PhaseRunning {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			c = c.with(withIdleTimeout(t, c.request, "10m"))
			first := answer(t, c, cfg)
			again := answer(t, c.with(applyAnswer(t, c.request, first, mcsim.Applied{})), cfg)
			var a, b struct {
				Status map[string]any `json:"status"`
			}
			require.NoError(t, json.Unmarshal(first, &a))
			require.NoError(t, json.Unmarshal(again, &b))
			require.NotEmpty(t, a.Status["lastActivityAt"], "the idle clock runs")
			assert.Equal(t, a.Status, b.Status)
		})
		checked++
	}
	assert.NotZero(t, checked, "the corpus has a first Running answer")
}

// withIdleTimeout is request with idleTimeout set on the template it uses: the related
// definitions' and the inline one.
func withIdleTimeout(t *testing.T, request []byte, timeout string) []byte {
	var req map[string]any
	require.NoError(t, json.Unmarshal(request, &req))
	spec := mapAt(mapAt(req, "parent"), "spec")
	if template, ok := spec["template"].(map[string]any); ok {
		template["idleTimeout"] = timeout
	}
	for key, group := range mapAt(req, "related") {
		if strings.HasPrefix(key, "ChallengeDefinition.") {
			for _, def := range group.(map[string]any) {
				mapAt(def.(map[string]any), "spec")["idleTimeout"] = timeout
			}
		}
	}
	out, err := json.Marshal(req)
	require.NoError(t, err)
	return out
}
