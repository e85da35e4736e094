package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	promqlparser "github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
)

// grafana is what Grafana substitutes in a panel's query before it reaches Prometheus.
type grafana struct {
	// namespaces selected in the dashboard's $namespace (multi-value, include All); nil is All,
	// whose value is the variable's allValue.
	namespaces []string
	allValue   string
	// The Prometheus datasource's scrape interval setting (Grafana's default, 15 s, is below the
	// ServiceMonitors' 30 s: the harder case for $__rate_interval) and the panel's $__interval.
	datasourceScrapeInterval, interval time.Duration
}

// grafanaAll is the dashboard as it opens: All namespaces, Grafana's default scrape interval.
func grafanaAll() grafana {
	return grafana{allValue: ".*", datasourceScrapeInterval: 15 * time.Second, interval: 15 * time.Second}
}

// rateInterval is Grafana's $__rate_interval: max($__interval + scrape interval, 4 × scrape
// interval).
func (g grafana) rateInterval() time.Duration {
	return max(g.interval+g.datasourceScrapeInterval, 4*g.datasourceScrapeInterval)
}

// substitute replaces the variables as Grafana's Prometheus datasource does: a multi-value
// variable's values regex-escaped and joined as (a|b), All as its allValue.
func (g grafana) substitute(expr string) string {
	namespace := g.allValue
	if g.namespaces != nil {
		quoted := make([]string, len(g.namespaces))
		for i, ns := range g.namespaces {
			quoted[i] = regexp.QuoteMeta(ns)
		}
		namespace = strings.Join(quoted, "|")
		if len(quoted) > 1 {
			namespace = "(" + namespace + ")"
		}
	}
	return strings.NewReplacer(
		"$__rate_interval", promqlDuration(g.rateInterval()),
		"$__interval", promqlDuration(g.interval),
		"${namespace}", namespace,
		"$namespace", namespace,
	).Replace(expr)
}

func promqlDuration(d time.Duration) string { return fmt.Sprintf("%ds", int(d/time.Second)) }

// selects says whether the $namespace selection includes a namespace.
func (g grafana) selects(namespace string) bool {
	return g.namespaces == nil || slices.Contains(g.namespaces, namespace)
}

// moment is the event's model at one evaluation time, seen through the dashboard's selection.
type moment struct {
	e  eventModel
	g  grafana
	at time.Duration // the evaluation time
	t  time.Duration // the last scrape at or before it
	// unsettled: a rate's window does not hold its counter's whole slope yet (the counter's
	// first samples, where rate() extrapolates less): the numbers are not compared then.
	unsettled bool
}

// statuses are the selected instances that exist now, with their status.
func (m *moment) statuses() map[*modelInstance]status {
	out := map[*modelInstance]status{}
	for i := range m.e.instances {
		inst := &m.e.instances[i]
		if s, ok := inst.at(m.t); ok && m.g.selects(inst.namespace) {
			out[inst] = s
		}
	}
	return out
}

// countBy counts the selected instances with a status, by key.
func (m *moment) countBy(key func(*modelInstance, status) (string, bool)) map[string]float64 {
	out := map[string]float64{}
	for inst, s := range m.statuses() {
		if s.phase == "" {
			continue
		}
		if k, ok := key(inst, s); ok {
			out[k]++
		}
	}
	return out
}

// panelCheck is what one panel target must return.
type panelCheck struct {
	// labels: every series carries exactly these labels (a series' key is their values, in this
	// order), unless ownLabels: a selector's series keep their own and must carry these.
	labels    []string
	ownLabels bool
	// want is every series expected at a moment, by key, with its value.
	want func(m *moment) map[string]float64
	// top > 0: a topk(top, ...) (bottomk if bottom) of want's series: any top of them, the
	// largest (the smallest).
	top    int
	bottom bool
}

// rateFrom is a counter growing by perStep every scrape from `from`, as rate() over
// $__rate_interval reads it: none until the window holds two samples; its slope once the window
// starts after the counter's first sample.
func rateFrom(m *moment, from time.Duration, perStep float64) (float64, bool) {
	if m.t < from+scrapeInterval {
		return 0, false
	}
	if m.at-m.g.rateInterval() < from {
		m.unsettled = true
	}
	return perStep / scrapeInterval.Seconds(), true
}

// quantile is PromQL's quantile(): linear interpolation between the closest ranks.
func quantile(q float64, values []float64) float64 {
	sorted := slices.Sorted(slices.Values(values))
	rank := q * float64(len(sorted)-1)
	lower := math.Floor(rank)
	upper := math.Min(lower+1, float64(len(sorted)-1))
	return sorted[int(lower)] + (sorted[int(upper)]-sorted[int(lower)])*(rank-lower)
}

// bucketQuantile is histogram_quantile() over classic buckets: linear interpolation inside the
// bucket holding the rank, the first bucket starting at 0.
func bucketQuantile(q float64, upperBounds []float64, cumulative []int, total int) float64 {
	rank := q * float64(total)
	lowerBound, below := 0.0, 0
	for i, count := range cumulative {
		if float64(count) >= rank {
			return lowerBound + (upperBounds[i]-lowerBound)*(rank-float64(below))/float64(count-below)
		}
		lowerBound, below = upperBounds[i], count
	}
	return upperBounds[len(upperBounds)-1]
}

func single(v float64) map[string]float64 { return map[string]float64{"": v} }

// panelChecks are the expected results of every panel target, by "panel title/refId": the
// numbers the model of the event gives.
func panelChecks() map[string]panelCheck {
	latencies := func(m *moment) []float64 {
		var out []float64
		for inst, s := range m.statuses() {
			if s.phase != "" && slices.ContainsFunc(inst.statuses, func(st status) bool { return st.phase == "Running" && st.from <= m.t }) {
				out = append(out, (inst.readyAt - inst.created).Seconds())
			}
		}
		return out
	}
	startLatency := func(q float64) panelCheck {
		return panelCheck{want: func(m *moment) map[string]float64 {
			if l := latencies(m); len(l) > 0 {
				return single(quantile(q, l))
			}
			return nil
		}}
	}
	hookLatency := func(q float64) panelCheck {
		return panelCheck{want: func(m *moment) map[string]float64 {
			if _, ok := rateFrom(m, 0, 1); !ok {
				return nil
			}
			return single(bucketQuantile(q, hookLatencyBuckets, hookLatencyCumulative, hookSyncsPerStep))
		}}
	}
	rates := func(m *moment, perKey map[string]float64, from map[string]time.Duration) map[string]float64 {
		out := map[string]float64{}
		for k, perStep := range perKey {
			if r, ok := rateFrom(m, from[k], perStep); ok {
				out[k] = r
			}
		}
		return out
	}
	return map[string]panelCheck{
		"Instances per phase/A": {labels: []string{"phase"}, want: func(m *moment) map[string]float64 {
			out := m.countBy(func(_ *modelInstance, s status) (string, bool) { return s.phase, true })
			if len(out) > 0 { // the platform component serves a 0 for every other phase
				for _, p := range phases {
					out[p] += 0
				}
			}
			return out
		}},
		"Running instances per challenge/A": {labels: []string{"definition"}, want: func(m *moment) map[string]float64 {
			out := m.countBy(func(inst *modelInstance, _ status) (string, bool) { return inst.definition, true })
			for k := range out {
				out[k] = 0
			}
			for k, v := range m.countBy(func(inst *modelInstance, s status) (string, bool) { return inst.definition, s.phase == "Running" }) {
				out[k] = v
			}
			return out
		}},
		"Instances per challenge and phase/A": {labels: []string{"namespace", "definition", "phase"}, want: func(m *moment) map[string]float64 {
			return m.countBy(func(inst *modelInstance, s status) (string, bool) {
				return key(inst.namespace, inst.definition, s.phase), slices.Contains([]string{"Creating", "Running", "Error", "Stopped", "Expired"}, s.phase)
			})
		}},
		"Owners with the most running instances/A": {labels: []string{"namespace", "owner"}, top: 10, want: func(m *moment) map[string]float64 {
			out := m.countBy(func(inst *modelInstance, _ status) (string, bool) { return key(inst.namespace, inst.owner), true })
			for k := range out {
				out[k] = 0
			}
			for k, v := range m.countBy(func(inst *modelInstance, s status) (string, bool) {
				return key(inst.namespace, inst.owner), s.phase == "Running"
			}) {
				out[k] = v
			}
			return out
		}},
		"Instances in Error by reason/A": {labels: []string{"reason"}, want: func(m *moment) map[string]float64 {
			return m.countBy(func(_ *modelInstance, s status) (string, bool) { return s.reason, s.phase == "Error" })
		}},
		"Start latency (creation to Running)/A": startLatency(0.5),
		"Start latency (creation to Running)/B": startLatency(0.9),
		"Start latency (creation to Running)/C": startLatency(0.99),
		"Instances expiring soonest/A": {labels: []string{"challenge", "namespace", "owner"}, ownLabels: true, top: 20, bottom: true, want: func(m *moment) map[string]float64 {
			out := map[string]float64{}
			for inst, s := range m.statuses() {
				if s.phase == "Running" {
					out[key(inst.name, inst.namespace, inst.owner)] = (inst.expiresAt - m.t).Seconds()
				}
			}
			return out
		}},
		"Not yet synced/A": {want: func(m *moment) map[string]float64 {
			unsynced := 0.0
			for _, s := range m.statuses() {
				if s.phase == "" {
					unsynced++
				}
			}
			return single(unsynced)
		}},
		"Stopped for idleness/A": {want: func(m *moment) map[string]float64 {
			idle := 0.0
			for _, s := range m.statuses() {
				if s.phase == "Stopped" && s.reason == "Idle" {
					idle++
				}
			}
			return single(idle)
		}},
		"Hook sync latency/A": hookLatency(0.5),
		"Hook sync latency/B": hookLatency(0.9),
		"Hook sync latency/C": hookLatency(0.99),
		"Hook requests by route and code/A": {labels: []string{"route", "code"}, want: func(m *moment) map[string]float64 {
			return rates(m, map[string]float64{key("/sync", "200"): float64(hookSyncsPerStep), key("/finalize", "200"): 2, key("/customize", "200"): 1, key("/sync", "429"): 1},
				map[string]time.Duration{key("/sync", "429"): overloadFrom})
		}},
		"Hook error rate/A": {want: func(m *moment) map[string]float64 {
			if _, ok := rateFrom(m, 0, 1); !ok {
				return nil
			}
			if _, ok := rateFrom(m, overloadFrom, 1); !ok {
				return single(0)
			}
			return single(1.0 / float64(hookSyncsPerStep+1+2+1))
		}},
		"Hook error rate/B": {labels: []string{"reason"}, want: func(m *moment) map[string]float64 {
			return rates(m, map[string]float64{"ImagePullBackOff": 3, "CrashLoopBackOff": 1, "overloaded": 1}, map[string]time.Duration{"overloaded": overloadFrom})
		}},
		"Metacontroller queue/A": {labels: []string{"name"}, ownLabels: true, want: func(m *moment) map[string]float64 {
			depth := 0.0
			for _, inst := range m.e.instances {
				if inst.created == m.t {
					depth++
				}
			}
			return map[string]float64{"CompositeController-challenge-hook": depth}
		}},
		"Metacontroller queue/B": {labels: []string{"name"}, ownLabels: true, want: func(m *moment) map[string]float64 {
			return rates(m, map[string]float64{"CompositeController-challenge-hook": float64(hookSyncsPerStep + 3)}, nil)
		}},
		"Metacontroller calls to the hook/A": {labels: []string{"code"}, want: func(m *moment) map[string]float64 {
			return rates(m, map[string]float64{"200": float64(hookSyncsPerStep)}, nil)
		}},
		"Activity stamper/A": {want: func(m *moment) map[string]float64 {
			if r, ok := rateFrom(m, 0, stamperStampsPerStep); ok {
				return single(r)
			}
			return nil
		}},
		"Activity stamper/B": {labels: []string{"reason"}, want: func(m *moment) map[string]float64 {
			perStep := map[string]float64{}
			for _, reason := range stamperRefusalReasons {
				perStep[reason] = 0
			}
			perStep["Conflict"] = 1
			out := rates(m, perStep, nil)
			if _, ok := out["Forbidden"]; ok && m.t > stamperForbiddenFrom {
				out["Forbidden"], _ = rateFrom(m, stamperForbiddenFrom, stamperForbiddenPerStep)
			}
			return out
		}},
		"Activity stamper/C": {labels: []string{"reason"}, want: func(m *moment) map[string]float64 {
			perStep := map[string]float64{}
			for _, reason := range stamperPollFailures {
				perStep[reason] = 0
			}
			return rates(m, perStep, nil)
		}},
		"Metacontroller calls to the hook/B": {want: func(m *moment) map[string]float64 {
			if _, ok := rateFrom(m, 0, 1); !ok {
				return nil
			}
			return single(bucketQuantile(0.99, mcLatencyBuckets, mcLatencyCumulative, hookSyncsPerStep))
		}},
	}
}

func key(values ...string) string { return strings.Join(values, ",") }

// dashboardTarget is one panel query of dashboard.json, with what Grafana needs to run it.
type dashboardTarget struct {
	panel, refID, expr, legend string
	instant                    bool
}

func dashboardTargets(t *testing.T) []dashboardTarget {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(component, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Multi      bool   `json:"multi"`
				IncludeAll bool   `json:"includeAll"`
				AllValue   string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID        string `json:"refId"`
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
				Instant      bool   `json:"instant"`
			} `json:"targets"`
			Panels []json.RawMessage `json:"panels"` // a collapsed row's
		} `json:"panels"`
	}
	if err := json.Unmarshal(content, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	// The variables substitute knows: $datasource (not in queries) and $namespace as grafanaAll has it.
	for _, v := range d.Templating.List {
		switch {
		case v.Name == "datasource" && v.Type == "datasource":
		case v.Name == "namespace" && v.Multi && v.IncludeAll && v.AllValue == grafanaAll().allValue:
		default:
			t.Errorf("dashboard.json: variable %s (%+v) is not one grafana.substitute knows: teach it", v.Name, v)
		}
	}
	var out []dashboardTarget
	for _, p := range d.Panels {
		if len(p.Panels) > 0 { // none does today
			t.Fatalf("dashboard.json: row %q holds panels; read them here too", p.Title)
		}
		for _, target := range p.Targets {
			out = append(out, dashboardTarget{p.Title, target.RefID, target.Expr, target.LegendFormat, target.Instant})
		}
	}
	return out
}

// TestDashboardPanelsShowTheEvent evaluates every panel query of dashboard.json with Prometheus's
// query engine over the synthetic event (event_test.go), the variables substituted as Grafana
// does, for the whole event (range queries at the panel's step, instant queries at its end) and
// for All namespaces and one: each must return series of the expected labels (one per phase, per
// reason, ...) with the numbers the event's model gives (counts, latency percentiles in seconds,
// rates per second). A panel that returns nothing, a label its legend names but its series lack,
// or a wrong number fails.
func TestDashboardPanelsShowTheEvent(t *testing.T) {
	event := newEventModel()
	load := event.loadText()
	known := knownSeries(t)
	for _, line := range strings.Split(load, "\n")[1:] {
		if metric, _, ok := strings.Cut(strings.TrimSpace(line), "} "); ok {
			checkServed(t, known, "the event", metric+"}")
		}
	}
	store := promqltest.LoadedStorage(t, load)
	engine := promql.NewEngine(promql.EngineOpts{
		// A Prometheus server's defaults.
		MaxSamples:               50_000_000,
		Timeout:                  2 * time.Minute,
		LookbackDelta:            5 * time.Minute,
		EnableAtModifier:         true,
		EnableNegativeOffset:     true,
		NoStepSubqueryIntervalFn: func(int64) int64 { return time.Minute.Milliseconds() },
		Parser:                   promqlparser.NewParser(promqlparser.Options{}),
	})
	t.Cleanup(func() { _ = engine.Close() })
	checks := panelChecks()
	targets := dashboardTargets(t)
	seen := map[string]bool{}
	for _, g := range []grafana{
		grafanaAll(),
		{namespaces: []string{"ctf-finals"}, datasourceScrapeInterval: 15 * time.Second, interval: 15 * time.Second},
		{namespaces: []string{"ctf", "ctf-finals"}, datasourceScrapeInterval: 30 * time.Second, interval: 30 * time.Second},
	} {
		for _, target := range targets {
			name := target.panel + "/" + target.refID
			seen[name] = true
			check, ok := checks[name]
			if !ok {
				t.Errorf("panel %q target %s: no expected result in panelChecks: add one", target.panel, target.refID)
				continue
			}
			expr := g.substitute(target.expr)
			if strings.Contains(expr, "$") {
				t.Errorf("%s: a variable Grafana would not substitute: %s", name, expr)
				continue
			}
			where := fmt.Sprintf("%s (namespaces %v, $__rate_interval %s)\n  %s", name, g.namespaces, g.rateInterval(), expr)
			got, err := evaluate(engine, store, expr, target.instant, g.interval)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			checkPanel(t, where, check, target, event, g, got)
		}
	}
	for name := range checks {
		if !seen[name] {
			t.Errorf("panelChecks has %q, which dashboard.json does not have", name)
		}
	}
}

// series is one result series: its labels and its values by time.
type resultSeries struct {
	labels labels.Labels
	values map[time.Duration]float64
}

// evaluate runs a query as Grafana does: an instant query at the event's end, or a range query
// over the event at the panel's step.
func evaluate(engine *promql.Engine, store storage.Queryable, expr string, instant bool, step time.Duration) ([]resultSeries, error) {
	ctx := context.Background()
	end := time.Unix(0, 0).Add(eventLength)
	var q promql.Query
	var err error
	if instant {
		q, err = engine.NewInstantQuery(ctx, store, nil, expr, end)
	} else {
		q, err = engine.NewRangeQuery(ctx, store, nil, expr, time.Unix(0, 0), end, step)
	}
	if err != nil {
		return nil, err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, res.Err
	}
	if len(res.Warnings) > 0 {
		return nil, fmt.Errorf("warnings: %v", res.Warnings.AsErrors())
	}
	var out []resultSeries
	switch v := res.Value.(type) {
	case promql.Vector:
		for _, s := range v {
			out = append(out, resultSeries{s.Metric, map[time.Duration]float64{eventLength: s.F}})
		}
	case promql.Matrix:
		for _, s := range v {
			values := map[time.Duration]float64{}
			for _, p := range s.Floats {
				values[time.Duration(p.T)*time.Millisecond] = p.F
			}
			out = append(out, resultSeries{s.Metric, values})
		}
	default:
		return nil, fmt.Errorf("result of type %s, want a vector or a matrix", res.Value.Type())
	}
	return out, nil
}

// legendLabel is a {{label}} of a legend format.
var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

func checkPanel(t *testing.T, where string, check panelCheck, target dashboardTarget, event eventModel, g grafana, got []resultSeries) {
	t.Helper()
	if len(got) == 0 {
		t.Errorf("%s: no data", where)
		return
	}
	// By time: the series' values by key.
	byTime := map[time.Duration]map[string]float64{}
	for _, s := range got {
		var values []string
		for _, l := range check.labels {
			values = append(values, s.labels.Get(l))
		}
		if !check.ownLabels {
			var names []string
			s.labels.Range(func(l labels.Label) { names = append(names, l.Name) })
			want := slices.Clone(check.labels)
			sort.Strings(want)
			// An absent label reads as "" (an inline template's definition).
			if !isSubset(names, want) {
				t.Errorf("%s: a series with labels %v, want only %v", where, s.labels, want)
				return
			}
		} else {
			for _, l := range check.labels {
				if s.labels.Get(l) == "" {
					t.Errorf("%s: a series without %s: %v", where, l, s.labels)
					return
				}
			}
		}
		for _, m := range legendLabel.FindAllStringSubmatch(target.legend, -1) {
			if s.labels.Get(m[1]) == "" && !(m[1] == "definition" && slices.Contains(check.labels, "definition")) {
				t.Errorf("%s: legend %q names %s, which series %v lacks", where, target.legend, m[1], s.labels)
			}
		}
		k := key(values...)
		for at, v := range s.values {
			if byTime[at] == nil {
				byTime[at] = map[string]float64{}
			}
			if _, dup := byTime[at][k]; dup {
				t.Errorf("%s: two series with key %q at %s", where, k, at)
				return
			}
			byTime[at][k] = v
		}
	}
	problems := 0
	times := []time.Duration{eventLength}
	if !target.instant {
		times = nil
		for at := time.Duration(0); at <= eventLength; at += g.interval {
			times = append(times, at)
		}
	}
	for _, at := range times {
		m := &moment{e: event, g: g, at: at, t: at / scrapeInterval * scrapeInterval}
		want := check.want(m)
		if m.unsettled {
			continue
		}
		have := byTime[at]
		if problem := compare(check, want, have); problem != "" {
			t.Errorf("%s: at %s: %s", where, at, problem)
			if problems++; problems == 3 {
				return
			}
		}
	}
}

func isSubset(names, allowed []string) bool {
	for _, n := range names {
		if !slices.Contains(allowed, n) {
			return false
		}
	}
	return true
}

// compare says how the series a query returned at one time differ from the model's.
func compare(check panelCheck, want, have map[string]float64) string {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	if check.top > 0 {
		if len(have) != min(check.top, len(want)) {
			return fmt.Sprintf("%d series, want the top %d of %v", len(have), check.top, want)
		}
		// The edge: the smallest value shown of a topk, the largest of a bottomk.
		edge := math.Inf(1)
		if check.bottom {
			edge = math.Inf(-1)
		}
		for k, v := range have {
			if w, ok := want[k]; !ok || !near(v, w) {
				return fmt.Sprintf("series %q = %v, want %v (of %v)", k, v, w, want)
			}
			if check.bottom {
				edge = max(edge, v)
			} else {
				edge = min(edge, v)
			}
		}
		for k, w := range want {
			if _, shown := have[k]; !shown && (!check.bottom && w > edge || check.bottom && w < edge) {
				return fmt.Sprintf("series %q (%v) left out of %v", k, w, have)
			}
		}
		return ""
	}
	if !slices.Equal(slices.Sorted(maps.Keys(have)), slices.Sorted(maps.Keys(want))) {
		return fmt.Sprintf("series %v, want %v", have, want)
	}
	for k, w := range want {
		if !near(have[k], w) {
			return fmt.Sprintf("series %q = %v, want %v", k, have[k], w)
		}
	}
	return ""
}
