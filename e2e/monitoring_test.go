//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// The monitoring component (manifests/components/monitoring) and what hack/monitoring's test
// wrote of its queries.
const (
	monitoringComponent  = "manifests/components/monitoring"
	referencedSeriesFile = "hack/monitoring/referenced-series.txt"
)

// challengePhases are the values of kube_ctf_challenge_status_phase's phase label, as
// docs/monitoring.md lists them (hack/monitoring checks that the platform component's list is
// the hook's phases).
var challengePhases = []string{"None", "Creating", "Running", "Queued", "Error", "Stopped", "Expired", "Terminating", "Deleted"}

// challengeSeriesLabels are the only labels a Challenge series carries: never a host, URL, token
// or flag.
var challengeSeriesLabels = []string{"namespace", "challenge", "owner", "definition", "phase", "reason"}

// TestMonitoring runs the platform component (`challenge-hook platform`, which serves the
// Challenge series) against the control plane as its ServiceAccount, with the rights
// manifests/components/platform grants it in the test's namespace, drives Challenges to Running,
// Error, Stopped and Expired, and checks that its metrics listener serves each Challenge's series
// with the values of the Challenge as stored, only those of its namespace, and no label but the
// documented ones (nothing of an endpoint). Then every series the alerts and the dashboard select
// (referenced-series.txt) must be served, with the labels and values they match on, by the
// platform component, the hook or Metacontroller as they run here.
func TestMonitoring(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "monitoring", podSecurityRestricted)
	platform := startPlatformComponent(ctx, t, c, ns).metricsURL

	def := lifecycleChallenge("web", "ghcr.io/example/web:1.0", "")
	def.SetKind("ChallengeDefinition")
	def.Object["spec"] = template(def)
	createObject(ctx, t, c, ns, def)
	byReference := func(name string) *unstructured.Unstructured {
		chal := lifecycleChallenge(name, "unused", "")
		spec(chal)["definitionRef"] = map[string]any{"name": def.GetName()}
		delete(spec(chal), "template")
		return chal
	}
	stopped := byReference("stopped")
	spec(stopped)["stopped"] = true
	// Nobody uses it: Stopped, reason Idle, 10 s after it runs (the shortest idleTimeout).
	idle := lifecycleChallenge("idle", "ghcr.io/example/pwn:1.0", "")
	template(idle)["idleTimeout"] = "10s"
	instances := []struct {
		chal   *unstructured.Unstructured
		phases []string // reached in this order
	}{
		{byReference("running"), []string{"Running"}},
		{stopped, []string{"Stopped"}},
		{idle, []string{"Running", "Stopped"}},
		{lifecycleChallenge("failing", unpullableImage, ""), []string{"Error"}},
		{lifecycleChallenge("expiring", "ghcr.io/example/pwn:1.0", "12s"), []string{"Running", "Expired"}},
	}
	watches := make([]*challengeWatch, len(instances))
	for i, in := range instances {
		watches[i], _ = startChallenge(ctx, t, c, ns, in.chal)
	}
	for i, in := range instances {
		for _, phase := range in.phases {
			watches[i].phase(t, 90*time.Second, phase)
		}
	}

	// What the component must serve for each Challenge, from the Challenge as stored now (a
	// status may still change, e.g. ErrImagePull to ImagePullBackOff: both are read again).
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the platform component to serve every Challenge's series", func() (bool, error) {
		var want []expectedSample
		var stored []*unstructured.Unstructured
		for _, in := range instances {
			chal := mustGetChallenge(ctx, t, c, ns, in.chal.GetName())
			stored = append(stored, chal)
			want = append(want, challengeSamples(t, chal, challengePhases)...)
		}
		samples, err := scrape(ctx, platform)
		if err != nil {
			return false, err
		}
		problems := challengeSeriesProblems(samples, ns, stored)
		for _, w := range want {
			if problem := w.check(samples); problem != "" {
				problems = append(problems, problem)
			}
		}
		if len(problems) > 0 {
			return false, fmt.Errorf("the platform component's Challenge series:\n  %s", strings.Join(problems, "\n  "))
		}
		return true, nil
	})

	// A sync request over --max-request-bytes, as an owner with too many Challenges makes: the
	// hook counts its 413, the series the alert ChallengeSyncRequestsTooLarge selects.
	postOverTheLimit(ctx, t)

	// Every series the alerts and the dashboard select, as each program serves it now.
	sources := map[string]string{
		"platform":       platform,
		"challenge-hook": "http://" + shared.hook.metricsAddr() + "/metrics",
	}
	// The activity stamper's series are read from the stamper process TestActivityStamper runs.
	t.Log("the activity stamper's series are checked by TestActivityStamper, against the stamper it runs")
	elsewhere := map[string]string{"activity-stamper": "TestActivityStamper"}
	if e2eutil.UnderSimulator() {
		// The simulator serves the series it was written to serve: checking them proves nothing
		// of Metacontroller's.
		t.Log("Metacontroller's series are checked only under a real Metacontroller (METACONTROLLER_BIN): the simulator plays its part")
		elsewhere["metacontroller"] = "a run under a real Metacontroller"
	} else {
		metacontrollerMetrics := os.Getenv("E2E_METACONTROLLER_METRICS")
		if metacontrollerMetrics == "" {
			t.Fatal("E2E_METACONTROLLER_METRICS is not set: run the e2e tests with `make e2e`")
		}
		sources["metacontroller"] = "http://" + metacontrollerMetrics + "/metrics"
	}
	served := map[string][]metricSample{}
	for source, url := range sources {
		samples, err := scrape(ctx, url)
		if err != nil {
			t.Fatalf("scrape %s: %v", source, err)
		}
		served[source] = samples
	}
	checked := checkReferencedSeries(t, served, elsewhere)
	if checked == 0 {
		t.Errorf("%s names no series", referencedSeriesFile)
	}
	t.Logf("the platform component served %d samples; %d series of the alerts and the dashboard checked", len(served["platform"]), checked)
}

// challengeSeriesProblems checks every Challenge series served (kube_ctf_challenge_*): of ns
// alone (the component's --namespaces; the suite's other tests run Challenges elsewhere), with
// the documented labels alone, none of whose values holds anything of an endpoint of the stored
// Challenges (host, URL, token) or their instance ids (the unguessable hosts' basis).
func challengeSeriesProblems(samples []metricSample, ns string, stored []*unstructured.Unstructured) []string {
	var capabilities []string
	for _, chal := range stored {
		if id, _, _ := unstructured.NestedString(chal.Object, "status", "instanceId"); id != "" {
			capabilities = append(capabilities, id)
		}
		endpoints, _, _ := unstructured.NestedSlice(chal.Object, "status", "endpoints")
		for _, raw := range endpoints {
			endpoint, _ := raw.(map[string]any)
			for _, field := range []string{"host", "url", "token"} {
				if v, _ := endpoint[field].(string); v != "" {
					capabilities = append(capabilities, v)
				}
			}
		}
	}
	var problems []string
	for _, s := range samples {
		if !strings.HasPrefix(s.name, "kube_ctf_challenge_") {
			continue
		}
		if s.labels["namespace"] != ns {
			problems = append(problems, fmt.Sprintf("%s of namespace %q is served: the component watches %s alone", s.name, s.labels["namespace"], ns))
		}
		for label, value := range s.labels {
			if !slices.Contains(challengeSeriesLabels, label) {
				problems = append(problems, fmt.Sprintf("%s carries label %s=%q: the Challenge series carry %v alone", s.name, label, value, challengeSeriesLabels))
			}
			for _, capability := range capabilities {
				if strings.Contains(value, capability) {
					problems = append(problems, fmt.Sprintf("%s carries %q (label %s), a player's capability", s.name, capability, label))
				}
			}
		}
	}
	return problems
}

// componentObjects are the Kubernetes objects of the monitoring component's files.
func componentObjects(t *testing.T, files ...string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, file := range files {
		objs, err := readYAMLObjects(filepath.Join(shared.root, monitoringComponent, file))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, objs...)
	}
	return out
}

// expectedSample is a sample the platform component must serve (value set) or must not (absent).
type expectedSample struct {
	name   string
	labels map[string]string
	value  float64
	absent bool
}

func (e expectedSample) check(samples []metricSample) string {
	for _, s := range samples {
		if s.name != e.name || !s.has(e.labels) {
			continue
		}
		switch {
		case e.absent:
			return fmt.Sprintf("%s is served (%v), want none", e, s.value)
		case s.value != e.value:
			return fmt.Sprintf("%s = %v, want %v", e, s.value, e.value)
		}
		return ""
	}
	if e.absent {
		return ""
	}
	return fmt.Sprintf("%s is not served", e)
}

// String is the sample in PromQL's notation: name{label="value",...}, labels in order.
func (e expectedSample) String() string {
	var pairs []string
	for k, v := range e.labels {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(pairs)
	return e.name + "{" + strings.Join(pairs, ",") + "}"
}

// challengeSamples are the series docs/monitoring.md describes for one stored Challenge.
func challengeSamples(t *testing.T, chal *unstructured.Unstructured, phases []string) []expectedSample {
	t.Helper()
	status := func(field string) string {
		v, _, _ := unstructured.NestedString(chal.Object, "status", field)
		return v
	}
	ids := map[string]string{"namespace": chal.GetNamespace(), "challenge": chal.GetName()}
	every := map[string]string{
		"namespace": chal.GetNamespace(), "challenge": chal.GetName(),
		"owner": spec(chal)["owner"].(string),
	}
	if ref, ok := spec(chal)["definitionRef"].(map[string]any); ok {
		every["definition"] = ref["name"].(string)
	}
	with := func(base map[string]string, extra ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(extra); i += 2 {
			out[extra[i]] = extra[i+1]
		}
		return out
	}
	out := []expectedSample{
		{name: "kube_ctf_challenge_created", labels: every, value: float64(chal.GetCreationTimestamp().Unix())},
		{name: "kube_ctf_challenge_status_reason", labels: with(every, "phase", status("phase"), "reason", status("reason")), value: 1},
		{name: "kube_ctf_challenge_status_expires_at", labels: every, value: unixOf(t, status("expiresAt"))},
	}
	for _, phase := range phases {
		value := 0.0
		if phase == status("phase") {
			value = 1
		}
		out = append(out, expectedSample{name: "kube_ctf_challenge_status_phase", labels: with(every, "phase", phase), value: value})
	}
	if readyAt := status("readyAt"); readyAt != "" {
		out = append(out, expectedSample{name: "kube_ctf_challenge_status_ready_at", labels: every, value: unixOf(t, readyAt)})
	} else {
		out = append(out, expectedSample{name: "kube_ctf_challenge_status_ready_at", labels: ids, absent: true})
	}
	return out
}

func unixOf(t *testing.T, rfc3339 string) float64 {
	t.Helper()
	at, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		t.Fatalf("status time %q: %v", rfc3339, err)
	}
	return float64(at.Unix())
}

// metricSample is one line of the Prometheus text format.
type metricSample struct {
	name   string
	labels map[string]string
	value  float64
}

// has says whether the sample carries every label of want with its value.
func (s metricSample) has(want map[string]string) bool {
	for k, v := range want {
		if got, ok := s.labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// checkReferencedSeries checks every line of referenced-series.txt whose program's samples are in
// served: the program serves the series, and each label value the queries match exactly. The
// lines of the programs in elsewhere (program: the test that checks them) are left to that test,
// and Prometheus's own series (up) are not served by a program. It returns how many it checked.
func checkReferencedSeries(t *testing.T, served map[string][]metricSample, elsewhere map[string]string) int {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(shared.root, referencedSeriesFile))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, line := range strings.Split(string(content), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		source, name, matchers := fields[0], fields[1], fields[2:]
		if source == "prometheus" {
			t.Logf("%s is made by Prometheus' scrape, not served by a program: not checked here", name)
			continue
		}
		if _, ok := elsewhere[source]; ok {
			continue
		}
		samples, ok := served[source]
		if !ok {
			t.Errorf("%s: %s is said to come from %q, which this test does not scrape", referencedSeriesFile, name, source)
			continue
		}
		checked++
		// Each matcher comes from some query: each must match some sample (not all the same one:
		// phase="Creating" and phase="Running" are two queries).
		if !anySample(samples, name, "") {
			t.Errorf("%s serves no series %s, which the alerts or the dashboard select (%s)", source, name, referencedSeriesFile)
		}
		for _, m := range matchers {
			if !anySample(samples, name, m) {
				t.Errorf("%s serves no series %s with %s, which the alerts or the dashboard select (%s)", source, name, m, referencedSeriesFile)
			}
		}
	}
	return checked
}

// anySample says whether some sample of name carries matcher: "label" (any value), "label=value",
// or "" (any sample).
func anySample(samples []metricSample, name, matcher string) bool {
	label, value, exact := strings.Cut(matcher, "=")
	for _, s := range samples {
		if s.name != name {
			continue
		}
		if got, ok := s.labels[label]; matcher == "" || ok && (!exact || got == value) {
			return true
		}
	}
	return false
}

// scrape fetches a /metrics page in the Prometheus text format and parses its samples.
func scrape(ctx context.Context, url string) ([]metricSample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	var out []metricSample
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", url, err)
		}
		out = append(out, s)
	}
	return out, lines.Err()
}

// parseSample parses `name{label="value",...} value [timestamp]`, label values escaped with \\,
// \" and \n.
func parseSample(line string) (metricSample, error) {
	s := metricSample{labels: map[string]string{}}
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return s, fmt.Errorf("sample line %q", line)
	}
	s.name, line = line[:end], line[end:]
	if strings.HasPrefix(line, "{") {
		line = line[1:]
		for !strings.HasPrefix(line, "}") {
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				return s, fmt.Errorf("labels of %s: %q", s.name, line)
			}
			label := strings.TrimPrefix(line[:eq], ",")
			var value strings.Builder
			i := eq + 2
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) {
					i++
					if line[i] == 'n' {
						value.WriteByte('\n')
						continue
					}
				}
				value.WriteByte(line[i])
			}
			if i >= len(line) {
				return s, fmt.Errorf("unterminated label value in %s", s.name)
			}
			s.labels[label] = value.String()
			line = strings.TrimPrefix(line[i+1:], ",")
		}
		line = line[1:]
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, fmt.Errorf("%s has no value", s.name)
	}
	value, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value of %s: %w", s.name, err)
	}
	s.value = value
	return s, nil
}

// TestMonitoringComponentAdmitted: the API server accepts the component's objects of Kubernetes'
// own kinds (all but the Prometheus Operator's ServiceMonitors and PrometheusRule, whose CRDs this
// cluster lacks), as server-side dry runs moved to a test namespace. The component runs nothing
// and holds no credential: it has no ServiceAccount, RBAC or workload to admit.
func TestMonitoringComponentAdmitted(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "monitoring-install", podSecurityRestricted)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	kinds := map[string]int{}
	for _, obj := range componentObjects(t, "scrape.yaml", "alerts.yaml") {
		kinds[obj.GetKind()]++
		if obj.GroupVersionKind().Group == "monitoring.coreos.com" {
			continue
		}
		if obj.GetNamespace() != "" {
			obj.SetNamespace(ns)
		}
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if _, err := client.Create(ctx, obj, dryRun); err != nil {
			t.Errorf("dry run of %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	for _, kind := range []string{"Service", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"} {
		if kinds[kind] == 0 {
			t.Errorf("the monitoring component has no %s", kind)
		}
	}
}

// postOverTheLimit sends the suite's hook, with Metacontroller's token, a /sync request larger
// than its default --max-request-bytes, and checks that it answers 413.
func postOverTheLimit(ctx context.Context, t *testing.T) {
	t.Helper()
	token, err := os.ReadFile(suiteTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"parent":{"metadata":{"name":"too-large","namespace":"monitoring"}},"related":"` + strings.Repeat("x", hookMaxRequestBytes) + `"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+shared.hook.addr+"/sync", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a /sync request of %d bytes: HTTP %d, want 413", len(body), resp.StatusCode)
	}
}
