package monitoring

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	promql "github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"sigs.k8s.io/yaml"
)

// ruleTestFile is a rule test file in the format of Prometheus's `promtool test rules`
// (cmd/promtool/unittest.go), with the fields the component's tests use. The file is read
// strictly: a field this runner does not implement (promql_expr_test, group_eval_order,
// external_labels, start_timestamp, fuzzy_compare, ...) fails the test instead of being ignored.
type ruleTestFile struct {
	RuleFiles          []string       `json:"rule_files"`
	EvaluationInterval model.Duration `json:"evaluation_interval"`
	Tests              []ruleTest     `json:"tests"`
}

// ruleTest is one test group: series in, and the alerts expected at given times.
type ruleTest struct {
	Name        string         `json:"name"`
	Interval    model.Duration `json:"interval"`
	InputSeries []struct {
		Series string `json:"series"`
		Values string `json:"values"`
	} `json:"input_series"`
	AlertRuleTest []alertRuleTest `json:"alert_rule_test"`
}

// alertRuleTest is the alerts named alertname that must be firing at eval_time, none for
// exp_alerts absent.
type alertRuleTest struct {
	EvalTime  model.Duration `json:"eval_time"`
	Alertname string         `json:"alertname"`
	ExpAlerts []struct {
		ExpLabels      map[string]string `json:"exp_labels"`
		ExpAnnotations map[string]string `json:"exp_annotations"`
	} `json:"exp_alerts"`
}

// ruleTestFiles are the component's rule test files: every *.test.yaml beside the rules.
func ruleTestFiles(t *testing.T) map[string]ruleTestFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(component, "*.test.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no *.test.yaml in %s (%v)", component, err)
	}
	out := map[string]ruleTestFile{}
	for _, path := range paths {
		content, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f ruleTestFile
		if err := yaml.UnmarshalStrict(content, &f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(f.RuleFiles) == 0 || len(f.Tests) == 0 {
			t.Fatalf("%s: needs rule_files and tests", path)
		}
		out[path] = f
	}
	return out
}

// plainRules is a PrometheusRule file's spec.groups as the rules file Prometheus reads
// ({groups: [...]}), every field of each rule kept as written.
func plainRules(t *testing.T, path string) []byte {
	t.Helper()
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	readYAML(t, path, &rule)
	if rule.Kind != "PrometheusRule" || len(rule.Spec.Groups) == 0 {
		t.Fatalf("%s: want a PrometheusRule with spec.groups, got kind %q with %d groups", path, rule.Kind, len(rule.Spec.Groups))
	}
	out, err := yaml.Marshal(map[string]any{"groups": rule.Spec.Groups})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

// TestAlertRules runs every *.test.yaml of the component as `promtool test rules` does, in this
// process, with Prometheus's own rule manager, query engine and test storage at the version
// go.mod pins: the input series loaded as promtool loads them, every rule group evaluated at
// each evaluation_interval from time 0, and at each eval_time the firing alerts of its alertname
// (labels, alertname included, and expanded annotations) compared with exp_alerts. A
// PrometheusRule is not a rules file: each one a test names is written, as its spec.groups, to a
// temporary rules file.
func TestAlertRules(t *testing.T) {
	dir := t.TempDir()
	files := ruleTestFiles(t)
	for _, path := range slices.Sorted(maps.Keys(files)) {
		f := files[path]
		var ruleFiles []string
		for _, name := range f.RuleFiles {
			if name != filepath.Base(name) || strings.ContainsAny(name, "*?[") {
				t.Fatalf("%s: rule_files entry %q: name a PrometheusRule file beside the test, without a directory or pattern", path, name)
			}
			target := filepath.Join(dir, name)
			if _, err := os.Stat(target); err != nil {
				if err := os.WriteFile(target, plainRules(t, filepath.Join(component, name)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ruleFiles = append(ruleFiles, target)
		}
		evalInterval := time.Duration(f.EvaluationInterval)
		if evalInterval == 0 {
			evalInterval = time.Minute
		}
		for i, test := range f.Tests {
			name := test.Name
			if name == "" {
				name = fmt.Sprintf("unnamed#%d", i)
			}
			t.Run(filepath.Base(path)+"/"+name, func(t *testing.T) {
				for _, err := range runRuleTest(test, evalInterval, ruleFiles) {
					t.Error(err)
				}
			})
		}
	}
}

// runRuleTest is promtool's testGroup.test for alert_rule_test (Prometheus v0.316.0,
// cmd/promtool/unittest.go, with promtool's default options): the errors it would report.
func runRuleTest(test ruleTest, evalInterval time.Duration, ruleFiles []string) []error {
	interval := test.Interval
	if interval == 0 {
		interval = model.Duration(evalInterval)
	}
	p := promql.NewParser(promql.Options{})
	var load strings.Builder
	fmt.Fprintf(&load, "load %v\n", shortDuration(interval))
	for _, in := range test.InputSeries {
		fmt.Fprintf(&load, "  %v %v\n", in.Series, in.Values)
	}
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: p,
	})
	if err != nil {
		return []error{err}
	}
	defer suite.Close()
	suite.SubqueryInterval = evalInterval

	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
		Parser:       p,
	})
	groupsByName, errs := m.LoadGroups(time.Duration(interval), labels.EmptyLabels(), "", nil, false, ruleFiles...)
	if errs != nil {
		return errs
	}
	// promtool orders groups by group_eval_order only, none here; by name, for a fixed order.
	var groups []*rules.Group
	for _, name := range slices.Sorted(maps.Keys(groupsByName)) {
		groups = append(groups, groupsByName[name])
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if a, ok := r.(*rules.AlertingRule); ok {
				// As promtool: restored, so that the ALERTS series is written from the first eval.
				a.SetRestored(true)
			}
		}
	}

	byTime := map[model.Duration][]alertRuleTest{}
	var maxEval model.Duration
	for _, c := range test.AlertRuleTest {
		if c.Alertname == "" {
			return []error{fmt.Errorf("an item under alert_rule_test misses required attribute alertname at eval_time %v", c.EvalTime)}
		}
		byTime[c.EvalTime] = append(byTime[c.EvalTime], c)
		maxEval = max(maxEval, c.EvalTime)
	}
	evalTimes := slices.Sorted(maps.Keys(byTime))

	mint := time.Unix(0, 0).UTC()
	maxt := mint.Add(time.Duration(maxEval))
	curr := 0
	errs = nil
	for ts := mint; !ts.After(maxt); ts = ts.Add(evalInterval) {
		var evalErrs []error
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				errs = append(errs, err)
				return
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						evalErrs = append(evalErrs, fmt.Errorf("rule: %s, time: %s, err: %w", r.Name(), ts.Sub(mint), r.LastError()))
					}
				}
			}
		})
		errs = append(errs, evalErrs...)
		if len(evalErrs) > 0 {
			return errs
		}
		// An eval_time in [ts, ts+evalInterval) reads the alerts of the evaluation at ts.
		for curr < len(evalTimes) && ts.Sub(mint) <= time.Duration(evalTimes[curr]) &&
			time.Duration(evalTimes[curr]) < ts.Add(evalInterval).Sub(mint) {
			for _, c := range byTime[evalTimes[curr]] {
				if err := checkAlerts(groups, c); err != nil {
					errs = append(errs, err)
				}
			}
			curr++
		}
	}
	return errs
}

// firingAlert is one alert's labels and annotations, as promtool compares them.
type firingAlert struct{ labels, annotations labels.Labels }

func (a firingAlert) String() string {
	return "labels " + a.labels.String() + ", annotations " + a.annotations.String()
}

// checkAlerts compares the firing alerts named c.Alertname, of every group, with c.ExpAlerts, as
// sets.
func checkAlerts(groups []*rules.Group, c alertRuleTest) error {
	var got, want []firingAlert
	for _, g := range groups {
		for _, r := range g.Rules() {
			if a, ok := r.(*rules.AlertingRule); ok && a.Name() == c.Alertname {
				for _, alert := range a.ActiveAlerts() {
					if alert.State == rules.StateFiring {
						got = append(got, firingAlert{alert.Labels.Copy(), alert.Annotations.Copy()})
					}
				}
			}
		}
	}
	for _, exp := range c.ExpAlerts {
		lbls := maps.Clone(exp.ExpLabels)
		if lbls == nil {
			lbls = map[string]string{}
		}
		lbls[labels.AlertName] = c.Alertname
		want = append(want, firingAlert{labels.FromMap(lbls), labels.FromMap(exp.ExpAnnotations)})
	}
	order := func(a, b firingAlert) int {
		if n := labels.Compare(a.labels, b.labels); n != 0 {
			return n
		}
		return labels.Compare(a.annotations, b.annotations)
	}
	slices.SortFunc(got, order)
	slices.SortFunc(want, order)
	if !slices.EqualFunc(got, want, func(a, b firingAlert) bool {
		return labels.Equal(a.labels, b.labels) && labels.Equal(a.annotations, b.annotations)
	}) {
		return fmt.Errorf("alertname: %s, time: %s,\n  exp: %v,\n  got: %v", c.Alertname, c.EvalTime, want, got)
	}
	return nil
}

// shortDuration is a duration as promtool writes it in a load command: 1m, not 1m0s.
func shortDuration(d model.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// TestEveryAlertIsTested: each alert has, in the test files, a case where it fires (with its
// severity, a summary, a description and the labels docs/monitoring.md says it carries)
// and one where it must stay quiet; the doc's table of alerts has its severity and for:; the tests
// name no alert that does not exist, and feed only series the programs serve.
func TestEveryAlertIsTested(t *testing.T) {
	promised := promisedAlerts(t)
	firing, quiet := map[string]bool{}, map[string]bool{}
	alerts := map[string]alertRule{}
	for _, a := range readAlerts(t) {
		alerts[a.Alert] = a
	}
	known := knownSeries(t)
	for path, f := range ruleTestFiles(t) {
		for _, test := range f.Tests {
			for _, in := range test.InputSeries {
				checkServed(t, known, fmt.Sprintf("%s, test %q", path, test.Name), in.Series)
			}
			for _, c := range test.AlertRuleTest {
				a, ok := alerts[c.Alertname]
				if !ok {
					t.Errorf("%s, test %q: alert %q is not in alerts.yaml", path, test.Name, c.Alertname)
					continue
				}
				if len(c.ExpAlerts) == 0 {
					quiet[a.Alert] = true
				}
				for _, exp := range c.ExpAlerts {
					firing[a.Alert] = true
					where := fmt.Sprintf("%s, test %q, %s at %s", path, test.Name, a.Alert, c.EvalTime)
					if exp.ExpLabels["severity"] != a.Labels["severity"] {
						t.Errorf("%s: expects severity %q, the rule sets %q", where, exp.ExpLabels["severity"], a.Labels["severity"])
					}
					if exp.ExpAnnotations["summary"] == "" || exp.ExpAnnotations["description"] == "" {
						t.Errorf("%s: expects no summary or no description", where)
					}
					for _, label := range promised[a.Alert].labels {
						if exp.ExpLabels[label] == "" {
							t.Errorf("%s: expects no %s label, which docs/monitoring.md says the alert carries", where, label)
						}
					}
				}
			}
		}
	}
	for name := range alerts {
		if !firing[name] {
			t.Errorf("alert %s: no test case in which it fires (exp_alerts)", name)
		}
		if !quiet[name] {
			t.Errorf("alert %s: no test case in which it stays quiet (an alert_rule_test without exp_alerts)", name)
		}
		row, ok := promised[name]
		if !ok {
			t.Errorf("alert %s: not in the table of alerts of docs/monitoring.md", name)
		} else if row.severity != alerts[name].Labels["severity"] || row.forDuration != alerts[name].For {
			t.Errorf("alert %s: docs/monitoring.md says severity %s for %s, the rule has %s for %s",
				name, row.severity, row.forDuration, alerts[name].Labels["severity"], alerts[name].For)
		}
	}
}

// checkServed fails unless a series (name{label="value", ...}) is one a program serves, with only
// labels it carries or its scrape adds: a test fed series that do not exist proves nothing.
func checkServed(t *testing.T, known map[string]series, where, metric string) {
	t.Helper()
	lbls, err := promql.NewParser(promql.Options{}).ParseMetric(metric)
	if err != nil {
		t.Errorf("%s: series %s: %v", where, metric, err)
		return
	}
	name := lbls.Get(model.MetricNameLabel)
	s, ok := known[name]
	if !ok {
		t.Errorf("%s: series %s, which no program serves", where, name)
		return
	}
	lbls.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel && !slices.Contains(s.labels, l.Name) && !slices.Contains(targetLabels, l.Name) {
			t.Errorf("%s: series %s with label %s, which it does not carry (it has %v)", where, name, l.Name, s.labels)
		}
	})
}

// promisedAlert is a row of the table of alerts in docs/monitoring.md.
type promisedAlert struct {
	severity, forDuration string
	labels                []string // besides severity, for routing and silencing
}

// promisedAlerts reads the table of alerts in docs/monitoring.md, rows
// "| [`Alert`](#anchor) | severity | for | `label`, `label` |" ("none" for no label).
func promisedAlerts(t *testing.T) map[string]promisedAlert {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]promisedAlert{}
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 6 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "[`") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(cells[1]), "[`"), "`")
		row := promisedAlert{severity: strings.TrimSpace(cells[2]), forDuration: strings.TrimSpace(cells[3])}
		for _, l := range strings.Split(cells[4], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "none" {
				row.labels = append(row.labels, l)
			}
		}
		out[name] = row
	}
	if len(out) == 0 {
		t.Fatal("docs/monitoring.md has no table of alerts (| [`Alert`](#anchor) | severity | for | labels |)")
	}
	return out
}
