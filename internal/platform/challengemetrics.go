package platform

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The Challenge series: one set per Challenge of the watched namespaces, computed at each scrape
// from the watches' cache (no API call). The hook is stateless and cannot count live instances;
// the component that already watches every Challenge of the event serves them, so that nothing
// else (monitoring) needs a credential that reads the Challenges, whose status holds the players'
// tokens and unguessable hosts.
//
// Labels on every series:
//
//	namespace    the Challenge's namespace
//	challenge    the Challenge's name (one instance)
//	owner        spec.owner: the user or team the instance belongs to
//	definition   spec.definitionRef.name: the ChallengeDefinition it runs; empty (absent in
//	             Prometheus) for an inline spec.template
//
// and nothing else of the Challenge: never an endpoint's host, URL or token, nor a flag. Series
// (all gauges):
//
//	kube_ctf_challenge_created             metadata.creationTimestamp, Unix seconds
//	kube_ctf_challenge_status_phase        {phase} 1 for status.phase, 0 for the other phases of
//	                                       challengePhases; none before the hook's first status
//	kube_ctf_challenge_status_reason       {phase, reason} always 1: status.phase and status.reason
//	kube_ctf_challenge_status_ready_at     status.readyAt, Unix seconds: when the instance first
//	                                       became Running (it never moves); none before
//	kube_ctf_challenge_status_expires_at   status.expiresAt, Unix seconds: when the workload goes
//
// The names and labels are those docs/monitoring.md documents, which the alerts and the dashboard
// of manifests/components/monitoring select (hack/monitoring reads them from this file). The
// prefix kube_ctf_challenge_ keeps them apart from other CRDs named Challenge (cert-manager's).

// challengePhases are the values of kube_ctf_challenge_status_phase's phase label: every phase
// the hook writes (hack/monitoring checks that against api/v1alpha1's Phase constants).
var challengePhases = []string{
	v1alpha1.PhaseNone, v1alpha1.PhaseCreating, v1alpha1.PhaseRunning, v1alpha1.PhaseQueued, v1alpha1.PhaseError,
	v1alpha1.PhaseStopped, v1alpha1.PhaseExpired, v1alpha1.PhaseTerminating, v1alpha1.PhaseDeleted,
}

// ChallengeLister lists the Challenges the series describe.
type ChallengeLister interface {
	// Challenges are every Challenge known, of every namespace watched.
	Challenges() []*v1alpha1.Challenge
}

// Challenges implements ChallengeLister: the Challenges of the watches' cache; none until every
// watch has listed, so that a replica that starts never serves part of the event (a count of
// instances that drops, and comes back).
func (k *Kube) Challenges() []*v1alpha1.Challenge {
	for _, informer := range k.challenges {
		if !informer.HasSynced() {
			return nil
		}
	}
	var out []*v1alpha1.Challenge
	for _, informer := range k.challenges {
		for _, obj := range informer.GetStore().List() {
			if c, ok := obj.(*v1alpha1.Challenge); ok {
				out = append(out, c)
			}
		}
	}
	return out
}

// ChallengeCollector serves the Challenge series of a ChallengeLister at each scrape.
type ChallengeCollector struct {
	challenges                                 ChallengeLister
	created, phase, reason, readyAt, expiresAt *prometheus.Desc
}

// NewChallengeCollector describes the Challenges of challenges; register it on the component's
// metrics registry.
func NewChallengeCollector(challenges ChallengeLister) *ChallengeCollector {
	// The label names are literals, each call its own: hack/monitoring reads them from here.
	return &ChallengeCollector{
		challenges: challenges,
		created: prometheus.NewDesc("kube_ctf_challenge_created",
			"Unix creation time of the Challenge (metadata.creationTimestamp).",
			[]string{"namespace", "challenge", "owner", "definition"}, nil),
		phase: prometheus.NewDesc("kube_ctf_challenge_status_phase",
			"The Challenge's status.phase (1 for the current phase, 0 for the others).",
			[]string{"namespace", "challenge", "owner", "definition", "phase"}, nil),
		reason: prometheus.NewDesc("kube_ctf_challenge_status_reason",
			"The Challenge's status.phase and status.reason, always 1.",
			[]string{"namespace", "challenge", "owner", "definition", "phase", "reason"}, nil),
		readyAt: prometheus.NewDesc("kube_ctf_challenge_status_ready_at",
			"Unix time the instance first became Running (status.readyAt).",
			[]string{"namespace", "challenge", "owner", "definition"}, nil),
		expiresAt: prometheus.NewDesc("kube_ctf_challenge_status_expires_at",
			"Unix time the instance's workload is removed (status.expiresAt).",
			[]string{"namespace", "challenge", "owner", "definition"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *ChallengeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.created, c.phase, c.reason, c.readyAt, c.expiresAt} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ChallengeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, chal := range c.challenges.Challenges() {
		c.collect(ch, chal)
	}
}

// collect sends one Challenge's series.
func (c *ChallengeCollector) collect(ch chan<- prometheus.Metric, chal *v1alpha1.Challenge) {
	var definition string
	if ref := chal.Spec.DefinitionRef; ref != nil {
		definition = ref.Name
	}
	labels := []string{chal.Namespace, chal.Name, chal.Spec.Owner, definition}
	with := func(extra ...string) []string { return append(append([]string(nil), labels...), extra...) }
	gauge := func(desc *prometheus.Desc, value float64, labelValues []string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, value, labelValues...)
	}
	gauge(c.created, float64(chal.CreationTimestamp.Unix()), labels)
	status := chal.Status
	if status.Phase != "" { // the hook has answered
		for _, phase := range challengePhases {
			value := 0.0
			if phase == status.Phase {
				value = 1
			}
			gauge(c.phase, value, with(phase))
		}
		gauge(c.reason, 1, with(status.Phase, status.Reason))
	}
	if at, ok := unixSeconds(status.ReadyAt); ok {
		gauge(c.readyAt, at, labels)
	}
	if at, ok := unixSeconds(status.ExpiresAt); ok {
		gauge(c.expiresAt, at, labels)
	}
}

// unixSeconds is an RFC 3339 time in whole Unix seconds; false when absent or not a time.
func unixSeconds(rfc3339 string) (float64, bool) {
	at, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		return 0, false
	}
	return float64(at.Unix()), true
}
