package monitoring

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// A synthetic event, of the shape make e2e records: the series the platform component serves for
// each Challenge, from each of its two replicas (internal/platform/challengemetrics.go;
// e2e/monitoring_test.go checks the running one), the hook's,
// the activity stamper's and Metacontroller's, with the labels a ServiceMonitor's scrape adds, one sample every 30 s
// for two hours from Unix 0. Its model (which instance is in which phase when) is what the
// dashboard's numbers are checked against.
const (
	scrapeInterval = 30 * time.Second // the ServiceMonitors'
	eventLength    = 2 * time.Hour
	eventSteps     = int(eventLength / scrapeInterval) // samples 0..eventSteps
)

// phases are kube_ctf_challenge_status_phase's phase values (the platform component's
// challengePhases).
var phases = []string{"None", "Creating", "Running", "Queued", "Error", "Stopped", "Expired", "Terminating", "Deleted"}

// status is a Challenge's status from a moment on; phase "" is no status yet.
type status struct {
	from          time.Duration
	phase, reason string
}

// modelInstance is one Challenge of the event.
type modelInstance struct {
	namespace, name, owner, definition string // definition "" for an inline template
	created, readyAt, expiresAt        time.Duration
	deleted                            time.Duration // the platform deletes it; 0: never
	statuses                           []status      // in time order
}

// at is the instance's status at t (the last scrape at or before t), and whether it exists.
func (m modelInstance) at(t time.Duration) (status, bool) {
	if t < m.created || (m.deleted != 0 && t >= m.deleted) {
		return status{}, false
	}
	var s status
	for _, st := range m.statuses {
		if st.from <= t {
			s = st
		}
	}
	return s, true
}

// eventModel is the event: its instances and the hook's and Metacontroller's traffic.
type eventModel struct {
	instances []modelInstance
}

// newEventModel builds 40 instances in two namespaces, created 2.5 minutes apart, of three
// definitions and inline templates: most start within 20 to 80 s and expire 45 minutes later
// (deleted by the platform 15 minutes after), some cannot pull their image (alternating
// ErrImagePull and ImagePullBackOff), some crash-loop, some are stopped by their team, and the
// last two are never synced.
func newEventModel() eventModel {
	definitions := []string{"web", "pwn", "crypto", ""}
	var e eventModel
	for i := range 40 {
		m := modelInstance{
			namespace:  "ctf",
			owner:      fmt.Sprintf("team-%02d", i%12+1),
			definition: definitions[i%4],
			created:    time.Duration(i) * 150 * time.Second,
		}
		if i%3 == 2 {
			m.namespace = "ctf-finals"
		}
		name := m.definition
		if name == "" {
			name = "inline"
		}
		m.name = fmt.Sprintf("%s-%s-%d", name, m.owner, i)
		m.expiresAt = m.created + 45*time.Minute
		synced := m.created + scrapeInterval
		add := func(from time.Duration, phase, reason string) {
			m.statuses = append(m.statuses, status{from, phase, reason})
		}
		switch {
		case i >= 38: // never synced
		case i%9 == 6: // an image that cannot be pulled
			add(synced, "Creating", "Pending")
			for t := synced + time.Minute; t < m.expiresAt; t += 5 * time.Minute {
				add(t, "Error", "ErrImagePull")
				add(t+scrapeInterval, "Error", "ImagePullBackOff")
			}
		case i%9 == 8: // a container that keeps exiting
			add(synced, "Creating", "Starting")
			add(synced+time.Minute, "Error", "CrashLoopBackOff")
		default:
			add(synced, "Creating", "Starting")
			latency := 20*time.Second + time.Duration(i*7%61)*time.Second
			m.readyAt = m.created + latency
			// The platform component shows the status at the first scrape after it.
			add((m.readyAt+scrapeInterval-1)/scrapeInterval*scrapeInterval, "Running", "Ready")
			switch i % 9 {
			case 7:
				add(m.readyAt+20*time.Minute, "Stopped", "Stopped")
			case 5: // nobody used it for its idleTimeout, then a player came back
				add(m.readyAt+12*time.Minute, "Stopped", "Idle")
				add(m.readyAt+18*time.Minute, "Running", "Ready")
			}
		}
		if len(m.statuses) > 0 {
			add(m.expiresAt, "Expired", "Expired")
			m.deleted = m.expiresAt + 15*time.Minute
		}
		e.instances = append(e.instances, m)
	}
	return e
}

// Target labels of each scrape (Prometheus Operator: job is the Service's name).
const (
	hookTarget           = `job="challenge-hook", instance="10.0.0.20:8080", namespace="challenge-hook", container="challenge-hook", endpoint="http", pod="challenge-hook-6b7c9d5f4-x2x7k", service="challenge-hook"`
	stamperTarget        = `job="challenge-hook-activity-stamper-metrics", instance="10.0.0.40:8082", namespace="challenge-hook", container="activity-stamper", endpoint="metrics", pod="challenge-hook-activity-stamper-7d9f8c6b5-k2m4p", service="challenge-hook-activity-stamper-metrics"`
	metacontrollerTarget = `job="metacontroller-metrics", instance="10.0.0.30:9999", namespace="metacontroller", endpoint="metrics", pod="metacontroller-0", service="metacontroller-metrics"`
	metacontrollerHook   = `controller_name="challenge-hook", controller_type="CompositeController", method="post", url="http://challenge-hook.challenge-hook:80/sync"`
	metacontrollerQueue  = `name="CompositeController-challenge-hook", controller="CompositeController-challenge-hook"`
)

// platformTargets are the platform component's two replicas (manifests/components/platform), each
// serving every Challenge's series; honorLabels keeps the Challenge's namespace label.
var platformTargets = []string{
	`job="challenge-hook-platform-metrics", instance="10.0.0.50:8082", container="platform", endpoint="metrics", pod="challenge-hook-platform-7c5d9b8f4-q8w2e", service="challenge-hook-platform-metrics"`,
	`job="challenge-hook-platform-metrics", instance="10.0.0.51:8082", container="platform", endpoint="metrics", pod="challenge-hook-platform-7c5d9b8f4-z4x6v", service="challenge-hook-platform-metrics"`,
}

// Hook traffic per scrape interval. The hook's latency buckets (cmd/challenge-hook/metrics.go)
// and Metacontroller's (client_golang's default buckets), with the cumulative share of the
// requests in each.
const (
	hookSyncsPerStep = 40
	// From 50 minutes on, 1 of the hook's /sync answers per step is a 429 (--max-concurrent-requests).
	overloadFrom = 50 * time.Minute
	// The activity stamper writes stamperStampsPerStep stamps and reads one Service again after a
	// Conflict per step; from stamperForbiddenFrom on, stamperForbiddenPerStep stamps per step are
	// refused as Forbidden (a ClusterRole edited). Its polls of the gateways never fail. It serves
	// every reason of both counters from its start, at 0.
	stamperStampsPerStep    = 6
	stamperForbiddenFrom    = 90 * time.Minute
	stamperForbiddenPerStep = 2
)

// The reasons the stamper serves from its start (internal/stamper/metrics.go).
var (
	stamperRefusalReasons = []string{"Conflict", "Forbidden", "Invalid", "NotFound"}
	stamperPollFailures   = []string{"resolve", "request", "status", "response"}
)

var (
	hookLatencyBuckets    = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}
	hookLatencyCumulative = []int{0, 2, 12, 24, 34, 38, 39, 40, 40, 40, 40, 40} // of 40 per step
	mcLatencyBuckets      = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	mcLatencyCumulative   = []int{10, 24, 36, 39, 40, 40, 40, 40, 40, 40, 40} // of 40 per step
)

// seriesValues writes one series' values in promqltest's load notation, one token per sample.
type seriesValues []string

func newSeriesValues() seriesValues {
	v := make(seriesValues, eventSteps+1)
	for i := range v {
		v[i] = "_"
	}
	return v
}

// loadText is the event as a promqltest load command.
func (e eventModel) loadText() string {
	series := map[string]seriesValues{}
	set := func(name, labels string, step int, value string) {
		key := name + "{" + labels + "}"
		if series[key] == nil {
			series[key] = newSeriesValues()
		}
		series[key][step] = value
	}
	for _, m := range e.instances {
		for _, target := range platformTargets {
			loadChallenge(series, set, m, target)
		}
	}
	// The hook and Metacontroller: counters that grow by the same amount every scrape.
	for step := 0; step <= eventSteps; step++ {
		t := time.Duration(step) * scrapeInterval
		counter := func(perStep int) string { return strconv.Itoa(perStep * step) }
		set("up", hookTarget, step, "1")
		set("up", metacontrollerTarget, step, "1")
		set("challenge_hook_http_requests_total", hookTarget+`, route="/sync", code="200"`, step, counter(hookSyncsPerStep))
		set("challenge_hook_http_requests_total", hookTarget+`, route="/finalize", code="200"`, step, counter(2))
		set("challenge_hook_http_requests_total", hookTarget+`, route="/customize", code="200"`, step, counter(1))
		set("challenge_hook_http_requests_total", hookTarget+`, route="/healthz", code="200"`, step, counter(3))
		set("challenge_hook_http_requests_total", hookTarget+`, route="/metrics", code="200"`, step, counter(1))
		if t >= overloadFrom {
			overloaded := strconv.Itoa(1 + int((t-overloadFrom)/scrapeInterval))
			set("challenge_hook_http_requests_total", hookTarget+`, route="/sync", code="429"`, step, overloaded)
			set("challenge_hook_sync_errors_total", hookTarget+`, reason="overloaded"`, step, overloaded)
		}
		set("up", stamperTarget, step, "1")
		set("challenge_hook_activity_stamper_stamps_written_total", stamperTarget, step, counter(stamperStampsPerStep))
		for _, reason := range stamperRefusalReasons {
			refused := 0
			switch {
			case reason == "Conflict":
				refused = step
			case reason == "Forbidden" && t > stamperForbiddenFrom:
				refused = stamperForbiddenPerStep * int((t-stamperForbiddenFrom)/scrapeInterval)
			}
			set("challenge_hook_activity_stamper_stamps_refused_total", stamperTarget+fmt.Sprintf(`, reason=%q`, reason), step, strconv.Itoa(refused))
		}
		for _, reason := range stamperPollFailures {
			set("challenge_hook_activity_stamper_gateway_polls_failed_total", stamperTarget+fmt.Sprintf(`, reason=%q`, reason), step, "0")
		}
		set("challenge_hook_sync_errors_total", hookTarget+`, reason="ImagePullBackOff"`, step, counter(3))
		set("challenge_hook_sync_errors_total", hookTarget+`, reason="CrashLoopBackOff"`, step, counter(1))
		for i, le := range hookLatencyBuckets {
			set("challenge_hook_sync_duration_seconds_bucket", hookTarget+fmt.Sprintf(`, le="%g"`, le), step, counter(hookLatencyCumulative[i]))
		}
		set("challenge_hook_sync_duration_seconds_bucket", hookTarget+`, le="+Inf"`, step, counter(hookSyncsPerStep))
		set("metacontroller_sync_requests_total", metacontrollerTarget+", "+metacontrollerHook+`, code="200"`, step, counter(hookSyncsPerStep))
		for i, le := range mcLatencyBuckets {
			set("metacontroller_sync_request_duration_histogram_seconds_bucket", metacontrollerTarget+", "+metacontrollerHook+fmt.Sprintf(`, le="%g"`, le), step, counter(mcLatencyCumulative[i]))
		}
		set("metacontroller_sync_request_duration_histogram_seconds_bucket", metacontrollerTarget+", "+metacontrollerHook+`, le="+Inf"`, step, counter(hookSyncsPerStep))
		// The queue: a Challenge created this step waits one scrape.
		depth := 0
		for _, m := range e.instances {
			if m.created == t {
				depth++
			}
		}
		set("workqueue_depth", metacontrollerTarget+", "+metacontrollerQueue, step, strconv.Itoa(depth))
		set("workqueue_adds_total", metacontrollerTarget+", "+metacontrollerQueue, step, counter(hookSyncsPerStep+3))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "load %s\n", model.Duration(scrapeInterval))
	for _, key := range slices.Sorted(maps.Keys(series)) {
		fmt.Fprintf(&b, "  %s %s\n", key, strings.Join(series[key], " "))
	}
	return b.String()
}

func seconds(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// loadChallenge writes the series one replica of the platform component (target) serves for m:
// from its creation to its deletion, then stale.
func loadChallenge(series map[string]seriesValues, set func(name, labels string, step int, value string), m modelInstance, target string) {
	base := fmt.Sprintf(`namespace=%q, challenge=%q, owner=%q, %s`, m.namespace, m.name, m.owner, target)
	if m.definition != "" {
		base += fmt.Sprintf(`, definition=%q`, m.definition)
	}
	var prevReason string // the reason series' labels at the previous step
	var prevExists bool
	for step := 0; step <= eventSteps; step++ {
		t := time.Duration(step) * scrapeInterval
		s, exists := m.at(t)
		if !exists {
			if prevExists { // deleted: every series it had goes stale
				for key := range series {
					if strings.Contains(key, fmt.Sprintf("challenge=%q", m.name)) && strings.Contains(key, target) && series[key][step-1] != "_" && series[key][step-1] != "stale" {
						series[key][step] = "stale"
					}
				}
			}
			prevExists = false
			continue
		}
		prevExists = true
		set("kube_ctf_challenge_created", base, step, seconds(m.created))
		reasonLabels := ""
		if s.phase != "" {
			for _, p := range phases {
				v := "0"
				if p == s.phase {
					v = "1"
				}
				set("kube_ctf_challenge_status_phase", base+fmt.Sprintf(", phase=%q", p), step, v)
			}
			reasonLabels = base + fmt.Sprintf(", phase=%q, reason=%q", s.phase, s.reason)
			set("kube_ctf_challenge_status_reason", reasonLabels, step, "1")
			set("kube_ctf_challenge_status_expires_at", base, step, seconds(m.expiresAt))
			if m.readyAt != 0 && slices.ContainsFunc(m.statuses, func(st status) bool { return st.phase == "Running" && st.from <= t }) {
				set("kube_ctf_challenge_status_ready_at", base, step, seconds(m.readyAt))
			}
		}
		if prevReason != "" && prevReason != reasonLabels {
			set("kube_ctf_challenge_status_reason", prevReason, step, "stale")
		}
		prevReason = reasonLabels
	}
}
