package sync

import (
	"fmt"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Sync computes the children that should exist and the status the Challenge should show.
// It is pure: the same request, clock reading and configuration give the same response.
func Sync(req Request, now time.Time, cfg Config) Response {
	resp := syncChallenge(req, now, cfg)
	// Messages quote the template and observed objects; once inert, nothing in them can act as
	// markup or a terminal escape where a platform shows them.
	resp.Status.Message = inert(resp.Status.Message, maxMessageLength)
	for i := range resp.Status.Conditions {
		resp.Status.Conditions[i].Message = inert(resp.Status.Conditions[i].Message, maxMessageLength)
	}
	return resp
}

// syncChallenge resolves the instance once, then answers by its state: being deleted, past its
// deadline, stopped, unbuildable (a problem), idle, waiting for a place (its owner's limit), or
// healthy.
func syncChallenge(req Request, now time.Time, cfg Config) Response {
	in := resolve(req, now, cfg)
	switch {
	case in.deleting:
		return in.finalize()
	case in.expired:
		// Expiry wins over every error: past the deadline the workload goes, whatever else is wrong.
		return in.expire()
	case in.parent.Spec.Stopped:
		return in.stop()
	case in.problem != nil:
		return in.keepChildren()
	case in.idle.idle:
		// Before the queue: an idle instance holds no place, and waits for nothing but use.
		return in.stopIdle()
	case in.queue.waiting:
		return in.waitInQueue(in.queue)
	}
	return in.run()
}

// run answers for a healthy instance: its phase from the observed children, the endpoints known so
// far, and every child that should exist. Metacontroller wakes the hook at the expiry warning, at
// expiry, or earlier when the progress deadline or the idle clock (its warning, its stop) comes
// first.
func (in *instance) run() Response {
	eps, missing, refused := endpoints(in)
	v, progress := in.observe(eps, missing, refused)
	if v.phase == v1alpha1.PhaseRunning && in.parent.Status.ReadyAt == "" {
		// The first Running answer sets readyAt, which is activity: counted in this answer, so
		// that the next one, fed this status, is the same.
		in.idle = in.idle.withActivity(in.now)
	}
	return Response{Status: in.status(v, eps), Children: in.desiredChildren(), ResyncAfterSeconds: in.nextWake(earliest(progress, in.nextIdleWake()))}
}

// expire answers past the deadline: no workload, so Metacontroller deletes the Pod and everything
// around it but its NetworkPolicy, which stays until the last Pod is gone (see heldIsolation); the
// Challenge stays as the record of the instance. A problem that stands as well (missing or invalid
// definition, invalid spec, no flag key) is named in the message, but keeps nothing else.
func (in *instance) expire() Response {
	message := fmt.Sprintf("expired at %s and its workload was removed; delete the Challenge to remove its record", formatTime(in.expires))
	if in.problem != nil {
		message += fmt.Sprintf(" (also %s: %s)", in.problem.reason, in.problem.message)
	}
	return Response{Status: in.status(verdict{v1alpha1.PhaseExpired, v1alpha1.ReasonExpired, message}, nil), Children: in.heldIsolation()}
}

// keepChildren answers when the hook cannot build the instance (missing or invalid definition,
// invalid spec, no flag key) before its deadline: every observed child is returned exactly as
// Metacontroller last applied it, so nothing running is deleted or rewritten, the status says what
// to fix and keeps the endpoints it showed, and Metacontroller wakes the hook when the expiry
// warning begins and at the deadline, when the workload goes anyway. While it may keep a Pod,
// status.workloadKept says so: it holds its owner's place (holdsPlace).
func (in *instance) keepChildren() Response {
	v := verdict{v1alpha1.PhaseError, in.problem.reason, in.problem.message}
	status := in.status(v, in.parent.Status.Endpoints)
	status.WorkloadKept = in.keepsWorkload()
	return Response{
		Status:             status,
		Children:           in.keptWithIsolation(in.observed.Objects()),
		ResyncAfterSeconds: in.nextWake(time.Time{}),
	}
}

// finalize answers while the Challenge is being deleted: no workload, so Metacontroller deletes
// every child but the NetworkPolicy, which goes in the first answer after the last Pod is gone
// (see heldIsolation); finalized only once no child is observed any more.
func (in *instance) finalize() Response {
	remaining := in.observed.Count()
	v := verdict{v1alpha1.PhaseDeleted, v1alpha1.ReasonDeleted, "every child is gone"}
	if remaining > 0 {
		v = verdict{v1alpha1.PhaseTerminating, v1alpha1.ReasonTerminating, fmt.Sprintf("waiting for %d child object(s) to be deleted", remaining)}
	}
	return Response{Status: in.settledStatus(v), Children: in.heldIsolation(), Finalized: remaining == 0}
}

// Customize asks Metacontroller for the related objects Sync needs: the owner's Challenges when
// the hook limits each owner's instances (ownerRelation), and the referenced definition, unless
// the Challenge may not use it (definitionRefRefusal: another namespace than its own that no grant
// names, or one --definition-namespaces leaves out), so that Metacontroller never even sends it. It
// depends only on the parent's spec, identity and deletion and the hook's configuration, as
// Metacontroller caches it (per parent uid and generation: Sync checks again, so a cached answer
// from before the flags changed relates nothing it uses).
//
// A Challenge being deleted relates nothing: finalize reads no related object, and its requests
// then carry none of its owner's Challenges, so that however many the owner has, every finalize
// request fits --max-request-bytes and the deletion finishes. The answer changes as the deletion
// begins, and Metacontroller asks again: the API server bumps the generation when it sets the
// deletionTimestamp (k8s.io/apiserver registry/generic/registry/store.go, markAsDeleting), and the
// generation keys Metacontroller's cache (pkg/controller/common/customize, customizeKey).
func Customize(req CustomizeRequest, cfg Config) CustomizeResponse {
	parent := req.Parent
	rules := []RelatedResourceRule{}
	if parent.Metadata.DeletionTimestamp != "" {
		return CustomizeResponse{RelatedResources: rules}
	}
	if ref := parent.Spec.DefinitionRef; ref != nil && ref.Name != "" {
		namespace := ref.Namespace
		if namespace == "" {
			namespace = parent.Metadata.Namespace
		}
		if definitionRefRefusal(cfg, parent.Metadata.Namespace, namespace) != "" {
			return CustomizeResponse{RelatedResources: rules} // Sync says why (InvalidSpec)
		}
		rules = append(rules, RelatedResourceRule{
			APIVersion: v1alpha1.APIVersion, Resource: "challengedefinitions", Namespace: namespace, Names: []string{ref.Name},
		})
	}
	if rule, ok := ownerRelation(parent, cfg); ok {
		rules = append(rules, rule)
	}
	return CustomizeResponse{RelatedResources: rules}
}
