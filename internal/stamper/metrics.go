package stamper

import (
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metrics are the stamper's series.
type Metrics struct {
	written     prometheus.Counter
	refused     *prometheus.CounterVec
	polls       prometheus.Counter
	pollsFailed *prometheus.CounterVec
	gateways    prometheus.Gauge
	dropped     prometheus.Counter
}

// NewMetrics registers the stamper's series on registry.
func NewMetrics(registry prometheus.Registerer) *Metrics {
	m := &Metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "challenge_hook_activity_stamper_stamps_written_total",
			Help: "Last-activity stamps written to Challenges.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_activity_stamper_stamps_refused_total",
			Help: "Stamps the API server did not write, by its reason (Conflict: written meanwhile, read again; Forbidden, Invalid: RBAC or the admission policy; NotFound: deleted).",
		}, []string{"reason"}),
		polls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "challenge_hook_activity_stamper_gateway_polls_total",
			Help: "Polls of a gateway's GET /activity.",
		}),
		pollsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_activity_stamper_gateway_polls_failed_total",
			Help: "Polls that failed, by reason: resolve (the gateways' name), request (no answer), status (not 200), response (not the activity).",
		}, []string{"reason"}),
		gateways: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "challenge_hook_activity_stamper_gateways",
			Help: "Gateway Pods the gateways' name resolved to at the last poll.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "challenge_hook_activity_stamper_activity_dropped_total",
			Help: "Entries of the gateways' answers dropped: an address no Service is known for, while the stamper held the activity of its most addresses (a gateway answering addresses of no instance).",
		}),
	}
	registry.MustRegister(m.written, m.refused, m.polls, m.pollsFailed, m.gateways, m.dropped)
	// Every reason an alert or a panel reads is served from the start, at 0: a counter that first
	// appears at 1 has no increase() for Prometheus, so a first refusal would go unseen.
	for _, reason := range []string{failResolve, failRequest, failStatus, failResponse} {
		m.pollsFailed.WithLabelValues(reason)
	}
	for _, reason := range []metav1.StatusReason{metav1.StatusReasonConflict, metav1.StatusReasonForbidden, metav1.StatusReasonInvalid, metav1.StatusReasonNotFound} {
		m.refused.WithLabelValues(string(reason))
	}
	return m
}
