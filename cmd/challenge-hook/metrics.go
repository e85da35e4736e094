package main

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus metrics, on a registry of their own (no global state).
type metrics struct {
	registry     *prometheus.Registry
	requests     *prometheus.CounterVec
	syncDuration prometheus.Histogram
	phases       *prometheus.CounterVec
	syncErrors   *prometheus.CounterVec
	// Flag attribution's budget (attributionBudget).
	attributionsRefused   *prometheus.CounterVec
	attributionCandidates prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_http_requests_total",
			Help: "HTTP requests served, by route pattern and status code.",
		}, []string{"route", "code"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "challenge_hook_sync_duration_seconds",
			Help: "Time to decode a sync or finalize request, compute the answer and encode it.",
			// Syncs take microseconds to milliseconds; Metacontroller's default hook timeout is 10 s.
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}),
		phases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_phases_total",
			Help: "Challenge phases computed by sync and finalize answers.",
		}, []string{"phase"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_sync_errors_total",
			Help: "Errors: the status reason of answers in phase Error, or the kind of refused request (bad_request, too_large, unsupported_media_type, overloaded, internal_error).",
		}, []string{"reason"}),
		attributionsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_flag_attributions_refused_total",
			Help: "Flag verifications with candidates answered 429 by attribution's budget, by the limit that refused them: concurrency (--max-concurrent-attributions) or rate (--attribution-candidates-per-second).",
		}, []string{"limit"}),
		attributionCandidates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "challenge_hook_flag_attribution_candidates_total",
			Help: "Candidate owners that flag verifications were admitted to check, against --attribution-candidates-per-second.",
		}),
	}
	m.registry.MustRegister(
		m.requests, m.syncDuration, m.phases, m.syncErrors, m.attributionsRefused, m.attributionCandidates,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}
