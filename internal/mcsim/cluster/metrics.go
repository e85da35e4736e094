package cluster

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Metrics are the series Metacontroller serves that the project's alerts, dashboard and
// benchmarks read: each hook's requests, and the work queues'.
type Metrics struct {
	Registry *prometheus.Registry
	hooks    map[string]hookMetrics
	queue    queueMetrics
}

type hookMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
}

type queueMetrics struct {
	depth, longest, unfinished *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

// hookLabels are the labels of a hook's series: the controller and the URL it calls.
var hookLabels = []string{"url", "controller_name", "controller_type"}

// NewMetrics registers the series in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry(), hooks: map[string]hookMetrics{}}
	for _, hook := range []string{"sync", "finalize", "customize"} {
		h := hookMetrics{
			requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "metacontroller_" + hook + "_requests_total",
				Help: "Requests to the " + hook + " hook, by HTTP status code."}, append([]string{"code", "method"}, hookLabels...)),
			duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "metacontroller_" + hook + "_request_duration_histogram_seconds",
				Help: "The " + hook + " hook's latency.", Buckets: prometheus.DefBuckets}, append([]string{"method"}, hookLabels...)),
			inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "metacontroller_" + hook + "_in_flight_requests",
				Help: "Requests to the " + hook + " hook in flight."}, hookLabels),
		}
		m.Registry.MustRegister(h.requests, h.duration, h.inFlight)
		m.hooks[hook] = h
	}
	queueLabels := []string{"name", "controller"}
	m.queue = queueMetrics{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of the work queue."}, append(queueLabels, "priority")),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "How long the longest running processor has run."}, queueLabels),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, queueLabels),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Adds handled by the work queue."}, queueLabels),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Retries handled by the work queue."}, queueLabels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "Seconds an item stays in the queue before it is requested.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, queueLabels),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: "Seconds processing an item takes.",
			Buckets: prometheus.ExponentialBuckets(10e-9, 10, 12)}, queueLabels),
	}
	m.Registry.MustRegister(m.queue.depth, m.queue.longest, m.queue.unfinished, m.queue.adds, m.queue.retries, m.queue.latency, m.queue.work)
	return m
}

// instrument counts the requests of a hook's client as Metacontroller's does.
func (m *Metrics) instrument(hook, url, controller string, next http.RoundTripper) http.RoundTripper {
	h := m.hooks[hook]
	labels := prometheus.Labels{"url": url, "controller_name": controller, "controller_type": "CompositeController"}
	requests, duration, inFlight := h.requests.MustCurryWith(labels), h.duration.MustCurryWith(labels), h.inFlight.With(labels)
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		inFlight.Inc()
		defer inFlight.Dec()
		start := time.Now()
		resp, err := next.RoundTrip(req)
		if err == nil {
			requests.WithLabelValues(strconv.Itoa(resp.StatusCode), "post").Inc()
			duration.WithLabelValues("post").Observe(time.Since(start).Seconds())
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// queueProvider gives client-go's work queues their series, labelled as controller-runtime
// labels them (name and controller, both the queue's name).
type queueProvider struct{ m *Metrics }

func (p queueProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.m.queue.depth.WithLabelValues(name, name, "")
}
func (p queueProvider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.m.queue.adds.WithLabelValues(name, name)
}
func (p queueProvider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.m.queue.latency.WithLabelValues(name, name)
}
func (p queueProvider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.m.queue.work.WithLabelValues(name, name)
}
func (p queueProvider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.queue.unfinished.WithLabelValues(name, name)
}
func (p queueProvider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.m.queue.longest.WithLabelValues(name, name)
}
func (p queueProvider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.m.queue.retries.WithLabelValues(name, name)
}
