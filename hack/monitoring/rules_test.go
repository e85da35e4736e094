package monitoring

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promql "github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// ruleTestFile is the part of promtool's rule test file format (`promtool test rules`, Prometheus's
// cmd/promtool/unittest.go) that the checks here read: which rule files it loads and, per alert
// test, what it expects.
type ruleTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name        string `json:"name"`
		InputSeries []struct {
			Series string `json:"series"`
		} `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// ruleTestFiles are the component's promtool test files: every *.test.yaml beside the rules.
func ruleTestFiles(t *testing.T) map[string]ruleTestFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(component, "*.test.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no *.test.yaml in %s (%v)", component, err)
	}
	out := map[string]ruleTestFile{}
	for _, path := range paths {
		var f ruleTestFile
		readYAML(t, path, &f)
		if len(f.RuleFiles) == 0 || len(f.Tests) == 0 {
			t.Fatalf("%s: needs rule_files and tests", path)
		}
		out[path] = f
	}
	return out
}

// plainRules is a PrometheusRule file's spec.groups as the rules file Prometheus and promtool
// read ({groups: [...]}), every field of each rule kept as written.
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

// promtool is Prometheus's promtool at the version go.mod pins (a tool of this module): $PROMTOOL
// when set (make test builds it first, outside any test's timeout), else built here. -trimpath
// keeps the build cache's keys independent of the module cache's path, so that a warm build cache
// serves it from an empty module cache (CI's).
func promtool(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("PROMTOOL"); path != "" {
		return path
	}
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	path := filepath.Join(t.TempDir(), "promtool")
	if out, err := exec.Command(goCmd, "build", "-trimpath", "-o", path, "github.com/prometheus/prometheus/cmd/promtool").CombinedOutput(); err != nil {
		t.Fatalf("build promtool: %v\n%s", err, out)
	}
	return path
}

// TestAlertRules runs Prometheus's own rule unit tests, `promtool test rules`, on every
// *.test.yaml of the component: series in, the alerts Prometheus's rule manager fires (labels,
// annotations, after their for:) out. A PrometheusRule is not a rules file: each one a test
// names is written, as its spec.groups, under the same name in a directory with the test files.
func TestAlertRules(t *testing.T) {
	dir := t.TempDir()
	var copied []string
	for path, f := range ruleTestFiles(t) {
		for _, name := range f.RuleFiles {
			if name != filepath.Base(name) || strings.ContainsAny(name, "*?[") {
				t.Fatalf("%s: rule_files entry %q: name a PrometheusRule file beside the test, without a directory or pattern", path, name)
			}
			target := filepath.Join(dir, name)
			if _, err := os.Stat(target); err == nil {
				continue
			}
			if err := os.WriteFile(target, plainRules(t, filepath.Join(component, name)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		content, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(target, content, 0o644); err != nil {
			t.Fatal(err)
		}
		copied = append(copied, target)
	}
	slices.Sort(copied)
	var out bytes.Buffer
	cmd := exec.Command(promtool(t), append([]string{"test", "rules"}, copied...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	// Paths in the temporary directory read as the component's own.
	report := strings.ReplaceAll(out.String(), dir+string(filepath.Separator), component+"/")
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, report)
	}
	t.Logf("promtool test rules:\n%s", report)
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
