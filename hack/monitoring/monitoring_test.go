package monitoring

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promql "github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite referenced-series.txt from the alerts and the dashboard")

const (
	repoRoot  = "../.."
	component = repoRoot + "/manifests/components/monitoring"
	// referencedSeriesFile lists every series the alerts and the dashboard select, with the
	// labels they match on; e2e/monitoring_test.go (the activity stamper's: e2e/stamper_test.go)
	// checks each against the running programs.
	referencedSeriesFile = "referenced-series.txt"
)

// Where a series comes from.
const (
	fromPlatform        = "platform" // manifests/components/platform: the Challenge series
	fromHook            = "challenge-hook"
	fromActivityStamper = "activity-stamper" // manifests/components/activity-stamper
	fromMetacontroller  = "metacontroller"
	fromPrometheus      = "prometheus" // made by the scrape itself, not served by a program
)

// targetLabels are the labels Prometheus puts on every series of a ServiceMonitor's target; a
// query may match on them whatever the program serves.
var targetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// series is one series name that a program serves, and the labels it carries.
type series struct {
	source string
	labels []string
}

// challengeSeriesSource is the platform component's collector of the Challenge series.
const challengeSeriesSource = "internal/platform/challengemetrics.go"

// knownSeries is every series the alerts and the dashboard may select: those the platform
// component's, the hook's and the activity stamper's code registers, those Metacontroller v4.17.2
// serves (metacontroller-v4.17.2.txt), and Prometheus's `up`.
func knownSeries(t *testing.T) map[string]series {
	t.Helper()
	known := map[string]series{"up": {source: fromPrometheus}}
	add := func(name string, s series) {
		if prev, dup := known[name]; dup {
			t.Fatalf("series %s is served by both %s and %s", name, prev.source, s.source)
		}
		known[name] = s
	}
	for name, labels := range registeredSeries(t, challengeSeriesSource) {
		add(name, series{fromPlatform, labels})
	}
	for name, labels := range registeredSeries(t, "cmd/challenge-hook/metrics.go") {
		add(name, series{fromHook, labels})
	}
	for name, labels := range registeredSeries(t, "internal/stamper/metrics.go") {
		add(name, series{fromActivityStamper, labels})
	}
	for name, labels := range metacontrollerSeries(t) {
		add(name, series{fromMetacontroller, labels})
	}
	return known
}

// registeredSeries reads the series a program registers from its source (a file, from the
// repository's root: the hook's cmd/challenge-hook/metrics.go, the activity stamper's
// internal/stamper/metrics.go, the platform component's internal/platform/challengemetrics.go):
// every prometheus.{Counter,Gauge,Histogram}Opts literal's Name, with the label names of the
// New...Vec call around it (a histogram serves _bucket (with le), _sum and _count), and every
// prometheus.NewDesc call's name and variable labels (a collector's, a gauge each).
func registeredSeries(t *testing.T, source string) map[string][]string {
	t.Helper()
	path := filepath.Join(repoRoot, filepath.FromSlash(source))
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	out := map[string][]string{}
	stringLiteral := func(expr ast.Expr, what string) string {
		lit, ok := expr.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			t.Fatalf("%s: %s is not a string literal", path, what)
		}
		value, _ := strconv.Unquote(lit.Value)
		return value
	}
	labelList := func(expr ast.Expr, name string) []string {
		list, ok := expr.(*ast.CompositeLit)
		if !ok {
			t.Fatalf("%s: the label names of %s are not a literal", path, name)
		}
		var labels []string
		for _, elt := range list.Elts {
			labels = append(labels, stringLiteral(elt, "a label name of "+name))
		}
		return labels
	}
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		if fun, ok := call.Fun.(*ast.SelectorExpr); ok && fmt.Sprint(fun.X) == "prometheus" && fun.Sel.Name == "NewDesc" {
			if len(call.Args) != 4 {
				t.Fatalf("%s: prometheus.NewDesc with %d arguments", path, len(call.Args))
			}
			name := stringLiteral(call.Args[0], "a NewDesc's name")
			var labels []string
			if ident, ok := call.Args[2].(*ast.Ident); !ok || ident.Name != "nil" {
				labels = labelList(call.Args[2], name)
			}
			out[name] = sortedUnique(labels)
			return true
		}
		opts, ok := call.Args[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		// The Go and process collectors' series are not listed: no query needs them.
		sel, ok := opts.Type.(*ast.SelectorExpr)
		if !ok || fmt.Sprint(sel.X) != "prometheus" || !slices.Contains([]string{"CounterOpts", "GaugeOpts", "HistogramOpts"}, sel.Sel.Name) {
			return true
		}
		var name string
		for _, elt := range opts.Elts {
			if kv, ok := elt.(*ast.KeyValueExpr); ok && fmt.Sprint(kv.Key) == "Name" {
				name = stringLiteral(kv.Value, "a metric Name")
			}
		}
		if name == "" {
			t.Fatalf("%s: %s without a Name", path, sel.Sel.Name)
		}
		var labels []string
		if len(call.Args) > 1 {
			labels = labelList(call.Args[1], name)
		}
		switch sel.Sel.Name {
		case "HistogramOpts":
			out[name+"_bucket"] = sortedUnique(append(labels, "le"))
			out[name+"_sum"] = sortedUnique(labels)
			out[name+"_count"] = sortedUnique(labels)
		default:
			out[name] = sortedUnique(labels)
		}
		return true
	})
	if len(out) == 0 {
		t.Fatalf("%s: found no metric", path)
	}
	return out
}

// metacontrollerSeries reads metacontroller-v4.17.2.txt: "name label..." per line.
func metacontrollerSeries(t *testing.T) map[string][]string {
	t.Helper()
	content, err := os.ReadFile("metacontroller-v4.17.2.txt")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, line := range strings.Split(string(content), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		out[fields[0]] = sortedUnique(fields[1:])
	}
	return out
}

// query is one PromQL expression of the component, and where it is.
type query struct {
	where string
	expr  string
}

// alertRule is one rule of the PrometheusRule.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func readAlerts(t *testing.T) []alertRule {
	t.Helper()
	var rule struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []struct {
				Name  string      `json:"name"`
				Rules []alertRule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	readYAML(t, filepath.Join(component, "alerts.yaml"), &rule)
	if rule.Kind != "PrometheusRule" {
		t.Fatalf("alerts.yaml: kind %q, want PrometheusRule", rule.Kind)
	}
	var out []alertRule
	for _, g := range rule.Spec.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("alerts.yaml: no rule")
	}
	return out
}

// dashboard is the part of Grafana's dashboard model the checks read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []dashboardPanel `json:"panels"`
}

type dashboardPanel struct {
	ID         int            `json:"id"`
	Title      string         `json:"title"`
	Type       string         `json:"type"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(component, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(content, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

func flattenPanels(panels []dashboardPanel) []dashboardPanel {
	var out []dashboardPanel
	for _, p := range panels {
		out = append(append(out, p), flattenPanels(p.Panels)...)
	}
	return out
}

// labelValuesQuery is Grafana's variable query label_values(<series selector>, <label>).
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// componentQueries is every PromQL expression of the component: each alert's, each panel
// target's and each dashboard variable's series selector.
func componentQueries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, a := range readAlerts(t) {
		out = append(out, query{"alert " + a.Alert, a.Expr})
	}
	d := readDashboard(t)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("dashboard variable %s: query: %v", v.Name, err)
		}
		m := labelValuesQuery.FindStringSubmatch(q.Query)
		if m == nil {
			t.Fatalf("dashboard variable %s: query %q is not label_values(<selector>, <label>)", v.Name, q.Query)
		}
		out = append(out, query{"dashboard variable " + v.Name, m[1]})
	}
	for _, p := range flattenPanels(d.Panels) {
		for _, target := range p.Targets {
			out = append(out, query{fmt.Sprintf("panel %q target %s", p.Title, target.RefID), grafanaAll().substitute(target.Expr)})
		}
	}
	return out
}

// selected is what one query selects: series names and, per name, the labels it matches on.
func selected(t *testing.T, q query) (map[string][]string, error) {
	t.Helper()
	expr, err := promql.NewParser(promql.Options{}).ParseExpr(q.expr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n  %s", q.where, err, q.expr)
	}
	out := map[string][]string{}
	var problems []string
	promql.Inspect(expr, func(node promql.Node, _ []promql.Node) error {
		vs, ok := node.(*promql.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		var matched []string
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				if m.Type != labels.MatchEqual {
					problems = append(problems, fmt.Sprintf("selects names with %s: name series exactly", m))
				}
				name = m.Value
				continue
			}
			// An exact value is recorded with the label ("name=value"): make e2e checks that the
			// program serves it, so that a query cannot silently match nothing.
			if m.Type == labels.MatchEqual && !strings.Contains(m.Value, "$") {
				matched = append(matched, m.Name+"="+m.Value)
			} else {
				matched = append(matched, m.Name)
			}
		}
		if name == "" {
			problems = append(problems, fmt.Sprintf("selector %s names no series", vs))
			return nil
		}
		out[name] = sortedUnique(append(out[name], matched...))
		return nil
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s\n  %s", q.where, strings.Join(problems, "; "), q.expr)
	}
	return out, nil
}

// TestQueriesSelectExistingSeries parses every alert and dashboard query with Prometheus's PromQL
// parser, and checks that every series it selects is one a program serves (knownSeries), matched
// only on labels that series carries or Prometheus adds to every target. It keeps
// referenced-series.txt, which make e2e checks against the running programs, in step (-update).
func TestQueriesSelectExistingSeries(t *testing.T) {
	known := knownSeries(t)
	referenced := map[string][]string{}
	queries := componentQueries(t)
	for _, q := range queries {
		names, err := selected(t, q)
		if err != nil {
			t.Error(err)
			continue
		}
		for name, labels := range names {
			s, ok := known[name]
			if !ok {
				t.Errorf("%s selects %s, which no program serves\n  %s", q.where, name, q.expr)
				continue
			}
			for _, matcher := range labels {
				label, _, _ := strings.Cut(matcher, "=")
				if !slices.Contains(s.labels, label) && !slices.Contains(targetLabels, label) {
					t.Errorf("%s matches %s on label %q, which it does not carry (it has %v)", q.where, name, label, s.labels)
				}
			}
			referenced[name] = sortedUnique(append(referenced[name], labels...))
		}
	}
	if len(queries) < 10 {
		t.Fatalf("only %d queries found: the component's files were not read", len(queries))
	}

	// The file: "<source> <series> <label>[=<value>]..." per series: the labels the program itself
	// serves (not the target's) that the queries match on, with the value of exact matches.
	var b strings.Builder
	b.WriteString("# Every series the alerts and the dashboard of manifests/components/monitoring select:\n" +
		"# <program serving it> <series> <label the queries match on>[=<value of an exact match>]...\n" +
		"# Written by `make update` (go test -update in hack/monitoring); make e2e checks each line\n" +
		"# against the running programs (e2e/monitoring_test.go; the activity stamper's lines,\n" +
		"# e2e/stamper_test.go).\n")
	for _, name := range slices.Sorted(maps.Keys(referenced)) {
		s := known[name]
		line := []string{s.source, name}
		for _, matcher := range referenced[name] {
			if label, _, _ := strings.Cut(matcher, "="); slices.Contains(s.labels, label) {
				line = append(line, matcher)
			}
		}
		b.WriteString(strings.Join(line, " ") + "\n")
	}
	if *update {
		if err := os.WriteFile(referencedSeriesFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	onDisk, err := os.ReadFile(referencedSeriesFile)
	if err != nil {
		t.Fatalf("%v (run make update)", err)
	}
	if string(onDisk) != b.String() {
		t.Errorf("%s is out of date: run make update and read the diff\nwant:\n%s", referencedSeriesFile, b.String())
	}
}

// TestQueryCheckCatchesMistakes: the check above fails on an unknown series, a label the series
// does not carry, and a query that does not parse, so that its passing means something.
func TestQueryCheckCatchesMistakes(t *testing.T) {
	known := knownSeries(t)
	for _, bad := range []string{
		`sum(kube_ctf_challenge_status_phases)`,
		`sum by (phase) (rate(challenge_hook_http_requests_total[5m])`,
		`{__name__=~"kube_ctf_.*"}`,
	} {
		names, err := selected(t, query{"test", bad})
		if err != nil {
			continue
		}
		for name := range names {
			if _, ok := known[name]; !ok {
				err = fmt.Errorf("unknown %s", name)
			}
		}
		if err == nil {
			t.Errorf("%q passed the check", bad)
		}
	}
	names, err := selected(t, query{"test", `kube_ctf_challenge_status_phase{team="x"}`})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(known["kube_ctf_challenge_status_phase"].labels, strings.Split(names["kube_ctf_challenge_status_phase"][0], "=")[0]) {
		t.Error("label team passed the label check")
	}
}

// TestAlertsAreComplete: every alert has a duration Prometheus accepts, a severity, a summary and
// a description, and the operator's page says what to do about it.
func TestAlertsAreComplete(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range readAlerts(t) {
		if a.Alert == "" || seen[a.Alert] {
			t.Errorf("alert name %q is empty or repeated", a.Alert)
		}
		seen[a.Alert] = true
		if _, err := model.ParseDuration(a.For); err != nil {
			t.Errorf("alert %s: for %q: %v", a.Alert, a.For, err)
		}
		if s := a.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want warning or critical", a.Alert, s)
		}
		if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("alert %s: needs a summary and a description", a.Alert)
		}
		if !strings.Contains(string(doc), "### "+a.Alert+"\n") {
			t.Errorf("docs/monitoring.md has no section \"### %s\" saying what to do", a.Alert)
		}
	}
}

// TestDashboardIsWellFormed: unique panel ids, and every query panel asks the dashboard's
// datasource variable, so that the dashboard works whatever the Prometheus datasource is called.
func TestDashboardIsWellFormed(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard.json needs a uid and a title")
	}
	ids := map[int]bool{}
	for _, p := range flattenPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel id %d repeated", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		for _, target := range p.Targets {
			if target.Expr == "" || target.Datasource == nil || target.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q target %s: needs an expr and datasource uid ${datasource}", p.Title, target.RefID)
			}
		}
	}
}

// TestChallengeSeriesAreDocumented: each Challenge series of the platform component is described
// in its collector's comments and on the operator's page, with each of its labels.
func TestChallengeSeriesAreDocumented(t *testing.T) {
	source, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(challengeSeriesSource)))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	challengeSeries := registeredSeries(t, challengeSeriesSource)
	if len(challengeSeries) < 5 {
		t.Fatalf("%s registers %d series, want the 5 Challenge series", challengeSeriesSource, len(challengeSeries))
	}
	for name, labels := range challengeSeries {
		if !regexp.MustCompile(`(?m)^//\s+` + name + `\s`).Match(source) {
			t.Errorf("%s's comments do not describe %s", challengeSeriesSource, name)
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/monitoring.md does not describe %s", name)
		}
		for _, label := range labels {
			if !strings.Contains(string(doc), "`"+label+"`") {
				t.Errorf("docs/monitoring.md does not describe label %s (of %s)", label, name)
			}
		}
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(content, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func sortedUnique(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return slices.Compact(out)
}

// TestPhaseListIsTheHooks: the phases the platform component serves a 0/1 series for
// (challengePhases in its collector, named by api/v1alpha1's constants) are exactly the phases the
// hook writes (the Phase* string constants of api/v1alpha1), so that every phase has its series
// and none is missed.
func TestPhaseListIsTheHooks(t *testing.T) {
	phases := map[string]string{} // constant name -> value
	files, _ := filepath.Glob(filepath.Join(repoRoot, "api", "v1alpha1", "*.go"))
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.ValueSpec)
			if !ok || len(spec.Names) != len(spec.Values) {
				return true
			}
			for i, name := range spec.Names {
				lit, ok := spec.Values[i].(*ast.BasicLit)
				if ok && lit.Kind == token.STRING && regexp.MustCompile(`^Phase[A-Z]\w*$`).MatchString(name.Name) {
					value, _ := strconv.Unquote(lit.Value)
					phases[name.Name] = value
				}
			}
			return true
		})
	}
	if len(phases) == 0 {
		t.Fatal("found no Phase* constant in api/v1alpha1")
	}

	path := filepath.Join(repoRoot, filepath.FromSlash(challengeSeriesSource))
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var listed []string
	found := false
	ast.Inspect(file, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || spec.Names[0].Name != "challengePhases" || len(spec.Values) != 1 {
			return true
		}
		found = true
		list, ok := spec.Values[0].(*ast.CompositeLit)
		if !ok {
			t.Fatalf("%s: challengePhases is not a list literal", path)
		}
		for _, elt := range list.Elts {
			sel, ok := elt.(*ast.SelectorExpr)
			if !ok || fmt.Sprint(sel.X) != "v1alpha1" {
				t.Fatalf("%s: challengePhases holds %T, not a v1alpha1.Phase* constant", path, elt)
			}
			value, known := phases[sel.Sel.Name]
			if !known {
				t.Fatalf("%s: challengePhases holds v1alpha1.%s, not a Phase* constant", path, sel.Sel.Name)
			}
			listed = append(listed, value)
		}
		return false
	})
	if !found {
		t.Fatalf("%s declares no challengePhases", path)
	}
	if got, want := sortedUnique(listed), sortedUnique(slices.Collect(maps.Values(phases))); !slices.Equal(got, want) || len(listed) != len(got) {
		t.Errorf("%s's challengePhases lists %v, the hook's phases are %v", challengeSeriesSource, listed, want)
	}
}
