package sync

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// TestNoTimerNeedsTheResyncPeriod is what lets the CompositeController's resyncPeriodSeconds be
// long (issue 23: each resync of an idle instance costs a hook call and an API read): every timer
// of the hook (expiry, the expiry warning, a Pod's progress deadline) is carried by the answer's
// resyncAfterSeconds, never by Metacontroller's periodic resync.
//
// For every golden sync case, the answer is applied as Metacontroller applies it (the status
// stored; the children as they were, or with the answer's creates and deletes landed), and then
// nothing changes but the clock. The answer to that request at the golden clock asks to be woken
// after w seconds, and:
//   - the answer (status and children) is the same at every later moment before w, so no sync in
//     between is needed;
//   - with w > 0, the answer at w differs: the wake-up is not earlier than needed;
//   - with w = 0 (no wake-up), the answer is the same at every moment up to 8 days later, longer
//     than any lifetime the golden cases allow.
//
// A restart (spec.restartedAt), a stop, an extension or a definition change are edits of an
// object, which Metacontroller sees as events: none waits for a timer.
func TestNoTimerNeedsTheResyncPeriod(t *testing.T) {
	cfg := goldenConfig(t)
	for _, c := range goldenCases(t) {
		if strings.HasPrefix(c.name, "customize-") {
			continue
		}
		for _, how := range []struct {
			name    string
			applied mcsim.Applied
		}{{"status-stored", mcsim.Applied{}}, {"children-landed", mcsim.Applied{Create: true, Delete: true}}} {
			t.Run(c.name+"/"+how.name, func(t *testing.T) {
				t.Parallel()
				first := answer(t, c, cfg)
				fed := c.with(applyAnswer(t, c.request, first, how.applied))
				caseCfg := withFlags(t, cfg, c.flags)
				req, err := DecodeRequest(fed.request)
				require.NoError(t, err)
				base := Sync(req, goldenNow, caseCfg)
				w := time.Duration(base.ResyncAfterSeconds) * time.Second
				same := func(at time.Time) bool {
					got := Sync(req, at, caseCfg)
					return reflect.DeepEqual(got.Status, base.Status) && reflect.DeepEqual(got.Children, base.Children) &&
						got.Finalized == base.Finalized
				}
				until := w
				if w == 0 {
					until = 8 * 24 * time.Hour
				}
				for _, d := range samples(until) {
					if !same(goldenNow.Add(d)) {
						require.Failf(t, "the answer changes before the wake-up it asked",
							"resyncAfterSeconds %v, but the answer %s later differs: only a resync would show it", base.ResyncAfterSeconds, d)
					}
				}
				if w > 0 && same(goldenNow.Add(w)) {
					require.Failf(t, "woken for nothing", "resyncAfterSeconds %v, and the answer then is the same", base.ResyncAfterSeconds)
				}
			})
		}
	}
}

// samples are the moments to look at strictly before until: every second for the first two
// minutes (a progress deadline is 120 s), then every 10 s, then every 10 minutes past six hours,
// and the last second before until.
func samples(until time.Duration) []time.Duration {
	var out []time.Duration
	for d := time.Second; d < until; {
		out = append(out, d)
		switch {
		case d < 2*time.Minute:
			d += time.Second
		case d < 6*time.Hour:
			d += 10 * time.Second
		default:
			d += 10 * time.Minute
		}
	}
	if last := until - time.Second; last > 0 && (len(out) == 0 || out[len(out)-1] != last) {
		out = append(out, last)
	}
	return out
}

func TestSamples(t *testing.T) {
	require.Empty(t, samples(0))
	require.Empty(t, samples(time.Second))
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second}, samples(3*time.Second))
	s := samples(time.Hour)
	require.Equal(t, time.Hour-time.Second, s[len(s)-1], "the last second before the wake-up")
	require.Equal(t, fmt.Sprint(2*time.Minute), fmt.Sprint(s[119]), "every second for two minutes")
}
