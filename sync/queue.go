package sync

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The per-owner limit (--max-instances-per-owner) is computed from the request alone: the
// customize hook relates every Challenge of the parent's owner in its namespace (by the owner
// label, which the admission policy challenge-hook-owner-label keeps equal to spec.owner), so
// each sync sees them all, and their order (those running first, then creation time, then name)
// is the queue. Each Challenge decides
// for itself only: the first MaxInstancesPerOwner of the owner's Challenges that hold a place run,
// the others are Queued. Every related Challenge's change (here: the status its own sync writes when it ends)
// makes Metacontroller sync every Challenge that relates it, so the first queued one starts in
// the sync that follows the end of a running one.

// ownerRelation is the customize rule that relates the parent's owner's Challenges of its
// namespace, the parent included; none when the limit is off, so that Metacontroller neither
// watches Challenges as related objects nor matches each change against every parent.
func ownerRelation(parent Challenge, cfg Config) (RelatedResourceRule, bool) {
	if cfg.MaxInstancesPerOwner == 0 || parent.Spec.Owner == "" {
		return RelatedResourceRule{}, false
	}
	return RelatedResourceRule{
		APIVersion:    v1alpha1.APIVersion,
		Resource:      "challenges",
		Namespace:     parent.Metadata.Namespace,
		LabelSelector: &LabelSelector{MatchLabels: map[string]string{LabelOwner: parent.Spec.Owner}},
	}, true
}

// ownerLabelProblem: with the limit on, a Challenge must carry the owner label equal to its
// spec.owner, or the other Challenges of its owner (which relate theirs by that label) would not
// see it, and it would run beyond the limit unseen. The admission policy
// challenge-hook-owner-label (manifests/challenge-owner-policy.yaml) refuses such a Challenge and
// such a change; one admitted before the policy runs nothing new (keepChildren: a Pod it has is
// kept, none is created), and holds its place where it is seen until its Pods are gone.
func (in *instance) ownerLabelProblem() *problem {
	parent := in.parent
	if in.cfg.MaxInstancesPerOwner == 0 || parent.Metadata.Labels[LabelOwner] == parent.Spec.Owner {
		return nil
	}
	return &problem{v1alpha1.ReasonInvalidSpec, fmt.Sprintf(
		"the hook limits the instances of each owner (--max-instances-per-owner), and counts them by the label %s: set it to spec.owner (%q); until then nothing new runs",
		LabelOwner, parent.Spec.Owner), &in.template}
}

// holdsPlace says whether a related Challenge of the owner counts against the limit: it holds or
// may hold a Pod, or would run were there a place (Queued, Stopped then started again, never
// synced). It reads only what every sync of the owner's Challenges sees the same way (metadata,
// spec and the status the hook wrote), so that they agree on the queue; another Challenge's Pods
// are not in the request, so its status is all there is to judge by, and it counts unless its
// status proves it has no Pod.
//
// A Challenge that ends lets go of its place only once its own sync has answered for the end:
// Metacontroller deletes the children an answer leaves out before it writes the answer's status,
// so a status Terminating (being deleted), Stopped (spec.stopped, or idle) or Expired means its Pod is
// already being deleted. Freeing the place at the deletion, the stop or the deadline itself would
// let the first queued Pod start while the ending one still runs (measured by TestOwnerQueue: a
// third Pod for half a second).
//
// An Error for a reason that keeps the hook from building it (DefinitionNotFound,
// InvalidDefinition, InvalidSpec, FlagKeyMissing, GatewayAPINotEnabled, TCPGatewayNotConfigured)
// keeps every child it has (keepChildren), its Pods included, whatever its phase was before
// (Ready or not): it holds its place as long as its status says status.workloadKept
// (keepsWorkload). Without it, it never had a Pod (an Error from its first sync) or its Pods are
// gone; except one that was Ready once (status.readyAt), as a hook before status.workloadKept
// counted it: its status does not prove that it has no Pod.
func holdsPlace(c Challenge) bool {
	switch phase := c.Status.Phase; {
	case c.Metadata.DeletionTimestamp != "" && (phase == v1alpha1.PhaseTerminating || phase == v1alpha1.PhaseDeleted),
		c.Spec.Stopped && phase == v1alpha1.PhaseStopped,
		phase == v1alpha1.PhaseStopped && c.Status.Reason == v1alpha1.ReasonIdle,
		phase == v1alpha1.PhaseExpired:
		return false
	case phase == v1alpha1.PhaseError && unbuildableReason(c.Status.Reason):
		return mayKeepPod(c.Status)
	}
	return true
}

// mayKeepPod says whether an Error the hook answered without building children may still have a
// Pod: status.workloadKept, or Ready once (a status from before status.workloadKept proves nothing).
func mayKeepPod(status v1alpha1.ChallengeStatus) bool {
	return status.WorkloadKept || status.ReadyAt != ""
}

// keepsWorkload is status.workloadKept of an answer that keeps the children of an instance the
// hook cannot build (keepChildren): a Pod of the instance is observed, or the previous status
// let it run (admitted) and was not already such an answer, so that a Pod created by an answer
// just before is counted even if Metacontroller's cache does not show it yet. It turns false in
// the sync after the last Pod is gone.
func (in *instance) keepsWorkload() bool {
	if len(in.observed.Pods) > 0 {
		return true
	}
	previous := in.parent.Status
	return admitted(in.parent) && !(previous.Phase == v1alpha1.PhaseError && unbuildableReason(previous.Reason))
}

// unbuildableReason: the reasons of an Error the hook answers without building children
// (keepChildren), as opposed to a Pod that fails.
func unbuildableReason(reason string) bool {
	switch reason {
	case v1alpha1.ReasonDefinitionNotFound, v1alpha1.ReasonInvalidDefinition, v1alpha1.ReasonInvalidSpec,
		v1alpha1.ReasonFlagKeyMissing, v1alpha1.ReasonGatewayAPINotEnabled, v1alpha1.ReasonTCPGatewayNotConfigured:
		return true
	}
	return false
}

// queuePlace is where the instance stands in its owner's queue.
type queuePlace struct {
	// waiting: the instance waits for a place (see resolveQueue).
	waiting bool
	// position is 1-based among the owner's Challenges that wait; 0 when the instance may run.
	position int
	// unrelated: the request's related Challenges do not include the parent itself, so
	// Metacontroller's customize answer for it predates the limit (it caches one per parent and
	// generation for up to 20 minutes): the queue is unknown.
	unrelated bool
	// ahead are the names of the owner's Challenges that hold the places, for the message.
	ahead []string
}

// queued says where an instance that could run (not deleted, stopped, expired or unbuildable)
// stands among its owner's Challenges: the parent and its related Challenges of its namespace
// that hold a place (each carries the owner's label; one whose spec.owner says otherwise,
// labelled before the policy, counts too: it holds a place under this label, and nowhere else),
// those already admitted first, then those that wait, each in creation order (compareQueue); the
// first MaxInstancesPerOwner run.
func (in *instance) queued(related []Challenge) queuePlace {
	if in.cfg.MaxInstancesPerOwner == 0 {
		return queuePlace{}
	}
	self := slices.IndexFunc(related, func(c Challenge) bool { return c.Metadata.Name == in.name && c.Metadata.Namespace == in.namespace })
	if self < 0 {
		return queuePlace{unrelated: true}
	}
	contenders := []Challenge{in.parent}
	for i, c := range related {
		if i != self && c.Metadata.Namespace == in.namespace && holdsPlace(c) {
			contenders = append(contenders, c)
		}
	}
	slices.SortFunc(contenders, compareQueue)
	index := slices.IndexFunc(contenders, func(c Challenge) bool { return c.Metadata.Name == in.name })
	if index < in.cfg.MaxInstancesPerOwner {
		return queuePlace{}
	}
	place := queuePlace{position: index - in.cfg.MaxInstancesPerOwner + 1}
	for _, c := range contenders[:in.cfg.MaxInstancesPerOwner] {
		place.ahead = append(place.ahead, c.Metadata.Name)
	}
	return place
}

// compareQueue orders an owner's Challenges for its places: the admitted ones first, so that one
// that runs keeps its place (a stopped instance started again waits behind those that run, rather
// than push the newest back to the queue), then those that wait; each in creation order. When
// more than the limit were admitted (two synced at once, each before the other's status was
// written, or before Metacontroller's cache held the other), the newest of them go back to the
// queue, and the owner is within the limit again after their syncs.
func compareQueue(a, b Challenge) int {
	if aIn, bIn := admitted(a), admitted(b); aIn != bIn {
		if aIn {
			return -1
		}
		return 1
	}
	return compareCreation(a, b)
}

// admitted: the hook's last answer let it run: None (its NetworkPolicy first, then its Pod),
// Creating, Running, an Error of its Pod, or an Error that keeps its Pods (status.workloadKept).
// Queued, Stopped (started again) and a Challenge never synced wait.
func admitted(c Challenge) bool {
	switch c.Status.Phase {
	case v1alpha1.PhaseNone, v1alpha1.PhaseCreating, v1alpha1.PhaseRunning:
		return true
	case v1alpha1.PhaseError:
		return !unbuildableReason(c.Status.Reason) || mayKeepPod(c.Status)
	}
	return false
}

// compareCreation orders Challenges by creation time, then by name: two created in the same second
// (the API server's resolution) are ordered the same way by every sync.
func compareCreation(a, b Challenge) int {
	if c := parseTime(a.Metadata.CreationTimestamp).Compare(parseTime(b.Metadata.CreationTimestamp)); c != 0 {
		return c
	}
	return cmp.Compare(a.Metadata.Name, b.Metadata.Name)
}

// waitInQueue answers for an instance that waits for a place: no Pod (one observed, admitted
// before the queue was known, is removed), everything around it created ahead, as for a stopped
// instance, so that it starts with one sync. Its lifetime runs (see resolveQueue), and expiry
// wins. Metacontroller
// syncs it when a related Challenge changes (its customize manager matches every related object's
// change against each parent's rules, findRelatedParents), so a place freed is seen at once; the
// hook asks to be woken only for its own expiry warning and deadline.
func (in *instance) waitInQueue(place queuePlace) Response {
	var v verdict
	if place.unrelated {
		v = verdict{v1alpha1.PhaseQueued, v1alpha1.ReasonQueued,
			"waiting for Metacontroller to relate the owner's other Challenges (its customize answer for this Challenge predates the hook's --max-instances-per-owner; it asks again within 20 minutes, or when the spec changes)"}
	} else {
		v = verdict{v1alpha1.PhaseQueued, v1alpha1.ReasonQueued, fmt.Sprintf(
			"queued at position %d: the %d place(s) of owner %s are taken by %s; it starts when one of them expires, is stopped or deleted",
			place.position, len(place.ahead), in.owner, strings.Join(place.ahead, ", "))}
	}
	status := in.status(v, nil)
	status.QueuePosition = int32(place.position)
	resync := in.nextWake(time.Time{})
	return Response{Status: status, Children: in.surroundingChildren(), ResyncAfterSeconds: resync}
}

// resolveQueue decides whether an instance that could run waits instead. When the queue is
// unknown (unrelated), one without a Pod waits and one with a Pod keeps running: a stale customize
// answer never stops a player's instance.
//
// The lifetime starts at creation, queued or not: the request holds no trace of when a place
// freed but the instance's own status, so a start at leaving the queue would rest on one status
// write, and a write lost would start the clock again, keeping a workload past the deadline it
// showed. A deadline is a deadline: a queued instance may expire before it ever ran.
func (in *instance) resolveQueue(related []Challenge) {
	in.queue = in.queued(related)
	in.queue.waiting = in.queue.position > 0 || (in.queue.unrelated && len(in.observed.Pods) == 0)
}
