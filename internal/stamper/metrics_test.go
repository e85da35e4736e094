package stamper

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
)

// TestMetricsServeTheAlertedReasonsFromTheStart: the refusals and failed polls the monitoring
// component alerts on are served at 0 before the first one, so that Prometheus's increase() and
// rate() see the first refusal (a series that first appears at 1 shows no increase).
func TestMetricsServeTheAlertedReasonsFromTheStart(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	assert.Equal(t, 4, testutil.CollectAndCount(m.refused))
	for _, reason := range []string{"Conflict", "Forbidden", "Invalid", "NotFound"} {
		assert.Equal(t, 0.0, testutil.ToFloat64(m.refused.WithLabelValues(reason)), reason)
	}
	assert.Equal(t, 4, testutil.CollectAndCount(m.pollsFailed))
	for _, reason := range []string{failResolve, failRequest, failStatus, failResponse} {
		assert.Equal(t, 0.0, testutil.ToFloat64(m.pollsFailed.WithLabelValues(reason)), reason)
	}
}
