package sync

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// ownerWorld is one namespace of one owner's Challenges under a simulated Metacontroller (mcsim),
// synced one at a time in a random order: each sync asks the hook's Customize which objects to
// relate and selects them as Metacontroller does (by name, by label), sends the sync or finalize
// request, and applies the answer (children created, deleted with their Pods lingering
// Terminating for one more request, the status written). Between syncs, what players, the
// platform and organizers do: create Challenges, delete and stop them, use them (a last-activity
// stamp) or let time pass (those unused for the definition's idleTimeout stop, and start again
// when used), lose and restore the definition, point a Challenge at a missing one, lose a Pod, and
// change the owner label as far as the admission policy challenge-hook-owner-label lets them
// (admitsOwnerLabel).
type ownerWorld struct {
	t          *testing.T
	controller mcsim.Controller
	cfg        Config
	now        time.Time
	rand       *rand.Rand
	definition map[string]any // the ChallengeDefinition web-sqli; nil while deleted
	challenges []*worldChallenge
	created    int
	log        []string // what happened, for a failure's message
	// idleStops and restartsAfterIdle count the answers that stopped an instance for idleness and
	// that ran (or queued) one after such a stop.
	idleStops, restartsAfterIdle int
}

type worldChallenge struct {
	name     string
	parent   map[string]any // as the API server stores it, with the status the last answer wrote
	children map[string]any // the request's children map, as Metacontroller observes them
}

const (
	worldNamespace = "ctf"
	worldOwner     = "team-42"
)

func newOwnerWorld(t *testing.T, seed uint64, limit int) *ownerWorld {
	cfg := withFlags(t, goldenConfig(t), []string{fmt.Sprintf("--max-instances-per-owner=%d", limit)})
	w := &ownerWorld{
		t: t, controller: goldenController(t, caseFile{}), cfg: cfg, now: goldenNow,
		rand: rand.New(rand.NewPCG(seed, seed)),
	}
	w.restoreDefinition()
	return w
}

func (w *ownerWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *ownerWorld) restoreDefinition() {
	w.definition = map[string]any{
		"kind":     "ChallengeDefinition",
		"metadata": map[string]any{"name": "web-sqli", "namespace": worldNamespace},
		"spec": map[string]any{
			"containers": []any{map[string]any{
				"name": "web", "image": "registry.ctf.example/web-sqli:1.4.2",
				"ports": []any{map[string]any{"name": "http", "containerPort": 8080}},
			}},
			"expose":      []any{map[string]any{"port": 8080, "type": "NodePort"}},
			"timeout":     "30m",
			"idleTimeout": "1m",
		},
	}
}

// create adds a Challenge of the owner, labelled as given (nil: no owner label).
func (w *ownerWorld) create(label *string) {
	w.created++
	name := fmt.Sprintf("c-%02d", w.created)
	meta := map[string]any{
		"name": name, "namespace": worldNamespace,
		"uid":               fmt.Sprintf("7a1c%04d-1111-4222-8333-444455550000", w.created),
		"creationTimestamp": w.now.Add(time.Duration(w.created) * time.Second).Format(time.RFC3339),
	}
	if label != nil {
		meta["labels"] = map[string]any{LabelOwner: *label}
	}
	parent, err := w.controller.Parent(map[string]any{
		"metadata": meta,
		"spec":     map[string]any{"owner": worldOwner, "definitionRef": map[string]any{"name": "web-sqli"}},
	}, parentCreator)
	require.NoError(w.t, err)
	children, err := w.controller.Children(parent, nil, nil)
	require.NoError(w.t, err)
	w.challenges = append(w.challenges, &worldChallenge{name: name, parent: parent, children: children})
}

func (c *worldChallenge) meta() map[string]any { return c.parent["metadata"].(map[string]any) }
func (c *worldChallenge) spec() map[string]any { return c.parent["spec"].(map[string]any) }

// bumpGeneration: a change of the Challenge's spec, or its deletion: the API server bumps the
// generation for both (registry/generic/registry/store.go, markAsDeleting), which keys
// Metacontroller's cache of the customize answer.
func (c *worldChallenge) bumpGeneration() {
	meta := c.meta()
	meta["generation"] = meta["generation"].(int) + 1
}

// related is the related map Metacontroller sends for c: what the hook's customize answer
// selects among the world's objects, by the rule's namespace and names or labels.
func (w *ownerWorld) related(c *worldChallenge) map[string]any {
	request, err := w.controller.CustomizeRequest(c.parent)
	require.NoError(w.t, err)
	req, err := DecodeCustomizeRequest(request)
	require.NoError(w.t, err)
	var objs []map[string]any
	var groups []string
	for _, rule := range Customize(req, w.cfg).RelatedResources {
		require.Equal(w.t, worldNamespace, rule.Namespace)
		switch rule.Resource {
		case "challengedefinitions":
			groups = append(groups, mcsim.GroupKey("ChallengeDefinition", v1alpha1.APIVersion))
			if w.definition != nil && slices.Contains(rule.Names, "web-sqli") {
				objs = append(objs, w.definition)
			}
		case "challenges":
			groups = append(groups, mcsim.GroupKey("Challenge", v1alpha1.APIVersion))
			require.NotNil(w.t, rule.LabelSelector)
			for _, other := range w.challenges {
				labels, _ := other.meta()["labels"].(map[string]any)
				matches := true
				for k, v := range rule.LabelSelector.MatchLabels {
					if labels[k] != v {
						matches = false
					}
				}
				if matches {
					objs = append(objs, other.parent)
				}
			}
		default:
			w.t.Fatalf("the customize answer relates %s", rule.Resource)
		}
	}
	related, err := w.controller.Related(worldNamespace, objs, groups...)
	require.NoError(w.t, err)
	return related
}

// sync is one request of Metacontroller for c and the answer applied; a finalized Challenge is
// gone.
func (w *ownerWorld) sync(c *worldChallenge) {
	_, deleting := c.meta()["deletionTimestamp"]
	request, err := w.controller.SyncRequest(c.parent, c.children, w.related(c), deleting)
	require.NoError(w.t, err)
	req, err := DecodeRequest(request)
	require.NoError(w.t, err)
	// Deletion never depends on the relation: however many Challenges the owner has, a deleting
	// one's requests carry none of them (nor its definition).
	require.False(w.t, deleting && (len(req.Related.Challenges) > 0 || len(req.Related.Definitions) > 0),
		"the finalize request of %s carries %d related Challenges and %d definitions", c.name, len(req.Related.Challenges), len(req.Related.Definitions))
	resp := Sync(req, w.now, w.cfg)
	answer, err := EncodeResponse(resp)
	require.NoError(w.t, err)
	next, err := mcsim.Apply(request, answer, mcsim.Applied{Create: true, Delete: true, PodsLinger: true, ClusterIPs: true, Now: w.now})
	require.NoError(w.t, err)
	var applied struct {
		Parent   map[string]any `json:"parent"`
		Children map[string]any `json:"children"`
	}
	require.NoError(w.t, json.Unmarshal(next, &applied))
	w.logf("sync %s: %s %s workloadKept=%v, Pods %d", c.name, resp.Status.Phase, resp.Status.Reason, resp.Status.WorkloadKept, len(pods(applied.Children, true)))
	previous, _ := c.parent["status"].(map[string]any)
	if wasIdle := previous["reason"] == v1alpha1.ReasonIdle; resp.Status.Reason == v1alpha1.ReasonIdle && !wasIdle {
		w.idleStops++
	} else if wasIdle && resp.Status.Phase != v1alpha1.PhaseStopped && resp.Status.Phase != v1alpha1.PhaseExpired {
		w.restartsAfterIdle++
	}
	if resp.Finalized {
		w.challenges = slices.DeleteFunc(w.challenges, func(o *worldChallenge) bool { return o == c })
		return
	}
	// The status is the answer's; the rest of the parent is the world's (as written meanwhile).
	c.parent["status"] = applied.Parent["status"]
	c.children = applied.Children
}

// pods are the Pods of a children map; without the Terminating ones unless terminating.
func pods(children map[string]any, terminating bool) []string {
	var out []string
	group, _ := children[mcsim.GroupKey("Pod", "v1")].(map[string]any)
	for _, key := range slices.Sorted(maps.Keys(group)) {
		pod := group[key].(map[string]any)
		if _, ok := pod["metadata"].(map[string]any)["deletionTimestamp"]; ok && !terminating {
			continue
		}
		out = append(out, key)
	}
	return out
}

// ownerPods are the owner's Pods that run (not Terminating).
func (w *ownerWorld) ownerPods() []string {
	var out []string
	for _, c := range w.challenges {
		out = append(out, pods(c.children, false)...)
	}
	return out
}

// admitsOwnerLabel is the admission policy challenge-hook-owner-label
// (manifests/challenge-owner-policy.yaml, evaluated by TestOwnerLabelPolicy and proved against
// the API server by TestOwnerLabelRefusedAtAdmission): an update leaves the owner label equal to
// spec.owner, or as it was.
func admitsOwnerLabel(old, updated *string) bool {
	value := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	return value(updated) == worldOwner || value(updated) == value(old)
}

func (c *worldChallenge) ownerLabel() *string {
	labels, _ := c.meta()["labels"].(map[string]any)
	if v, ok := labels[LabelOwner].(string); ok {
		return &v
	}
	return nil
}

// step is one random event; it returns what happened.
func (w *ownerWorld) step(prePolicy bool) {
	live := w.challenges
	pick := func() *worldChallenge { return live[w.rand.IntN(len(live))] }
	owner, other := worldOwner, "team-7"
	labels := []*string{&owner, &other, nil}
	switch n := w.rand.IntN(100); {
	case n < 8 || len(live) == 0:
		label := &owner
		if prePolicy && w.rand.IntN(3) == 0 {
			label = labels[1+w.rand.IntN(2)] // created before the policy, without it or with another owner's
		}
		w.create(label)
		w.logf("create %s labelled %v", w.challenges[len(w.challenges)-1].name, deref(label))
	case n < 64:
		w.sync(pick())
	case n < 67:
		// Time passes: instances nobody uses go idle (idleTimeout 1m), and later expire.
		w.now = w.now.Add(time.Duration(5+w.rand.IntN(56)) * time.Second)
		w.logf("the clock is %s", w.now.Format(time.TimeOnly))
	case n < 70:
		// Someone uses an instance: its stamp moves on, which starts an idle one again.
		c := pick()
		c.meta()["annotations"] = map[string]any{AnnotationLastActivity: w.now.Format(time.RFC3339)}
		w.logf("%s used at %s", c.name, w.now.Format(time.TimeOnly))
	case n < 74:
		if w.definition != nil {
			w.definition = nil
			w.logf("the definition deleted")
		} else {
			w.restoreDefinition()
			w.logf("the definition restored")
		}
		// Metacontroller syncs every Challenge that relates the definition.
		for _, c := range slices.Clone(w.challenges) {
			w.sync(c)
		}
	case n < 78:
		c := pick()
		ref := c.spec()["definitionRef"].(map[string]any)
		if ref["name"] == "web-sqli" {
			ref["name"] = "web-sqli-missing"
		} else {
			ref["name"] = "web-sqli"
		}
		c.bumpGeneration()
		w.logf("%s points at %s", c.name, ref["name"])
	case n < 84:
		c := pick()
		label := labels[w.rand.IntN(len(labels))]
		if !admitsOwnerLabel(c.ownerLabel(), label) {
			w.logf("%s relabelled %v: refused at admission", c.name, deref(label))
			return
		}
		meta := c.meta()
		if label == nil {
			delete(meta, "labels")
		} else {
			meta["labels"] = map[string]any{LabelOwner: *label}
		}
		w.logf("%s relabelled %v", c.name, deref(label))
		// Its related Challenges see the change.
		for _, o := range slices.Clone(w.challenges) {
			w.sync(o)
		}
	case n < 90:
		c := pick()
		if _, ok := c.meta()["deletionTimestamp"]; !ok {
			c.meta()["deletionTimestamp"] = w.now.Format(time.RFC3339)
			c.bumpGeneration()
			w.logf("%s deleted", c.name)
		}
	case n < 95:
		c := pick()
		stopped, _ := c.spec()["stopped"].(bool)
		c.spec()["stopped"] = !stopped
		c.bumpGeneration()
		w.logf("%s stopped=%v", c.name, !stopped)
	default:
		c := pick()
		group, _ := c.children[mcsim.GroupKey("Pod", "v1")].(map[string]any)
		for key := range group {
			delete(group, key)
			w.logf("%s: Pod %s gone (evicted, deleted by hand)", c.name, key)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}

// TestOwnerNeverHoldsMoreThanTheLimit: with --max-instances-per-owner, whatever happens to an
// owner's Challenges (deleted, stopped, idle and used again, relabelled as far as admission allows, their definition
// deleted or a Challenge pointed at a missing one before it was ever Ready, a Pod lost), the owner
// never has more running Pods than the limit, the moment any answer is applied. Syncs are one at a
// time, each seeing the statuses written before it (two syncs at the same moment may admit one
// too many until the next: see compareQueue). Pre-policy, some Challenges are created without the
// owner label or with another owner's, as the API server admitted them before the policy: they
// run nothing.
func TestOwnerNeverHoldsMoreThanTheLimit(t *testing.T) {
	idleStops, restartsAfterIdle := 0, 0
	defer func() {
		t.Logf("over every seed: %d idle stops, %d answers that ran or queued an instance after one", idleStops, restartsAfterIdle)
		require.Positive(t, idleStops, "no instance went idle: the scenario never exercised the idle clock")
		require.Positive(t, restartsAfterIdle, "no idle instance started again")
	}()
	for seed := range uint64(12) {
		limit := 1 + int(seed%2)
		prePolicy := seed%3 == 0
		t.Run(fmt.Sprintf("seed-%d-limit-%d-prepolicy-%v", seed, limit, prePolicy), func(t *testing.T) {
			w := newOwnerWorld(t, seed, limit)
			most := 0
			for range 300 {
				w.step(prePolicy)
				running := w.ownerPods()
				most = max(most, len(running))
				if len(running) > limit {
					t.Fatalf("owner %s runs %d Pods %v with --max-instances-per-owner=%d; what happened:\n%s",
						worldOwner, len(running), running, limit, joinLast(w.log, 40))
				}
			}
			require.Equal(t, limit, most, "the owner never reached the limit: the scenario ran nothing\n%s", joinLast(w.log, 40))
			idleStops += w.idleStops
			restartsAfterIdle += w.restartsAfterIdle
		})
	}
}

func joinLast(lines []string, n int) string {
	out := ""
	for _, l := range lines[max(0, len(lines)-n):] {
		out += "  " + l + "\n"
	}
	return out
}
