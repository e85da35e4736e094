package sync

import (
	"fmt"
	"slices"
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
// deadline, stopped, unbuildable (a problem), waiting for a place (its owner's limit), or healthy.
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
	case in.queue.waiting:
		return in.waitInQueue(in.queue)
	}
	return in.run()
}

// run answers for a healthy instance: its phase from the observed children, the endpoints known so
// far, and every child that should exist. Metacontroller wakes the hook at the expiry warning, at
// expiry, or earlier when the progress deadline comes first.
func (in *instance) run() Response {
	eps, missing, refused := endpoints(in)
	v, progress := in.observe(eps, missing, refused)
	return Response{Status: in.status(v, eps), Children: in.desiredChildren(), ResyncAfterSeconds: in.nextWake(progress)}
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
// warning begins and at the deadline, when the workload goes anyway.
func (in *instance) keepChildren() Response {
	v := verdict{v1alpha1.PhaseError, in.problem.reason, in.problem.message}
	return Response{
		Status:             in.status(v, in.parent.Status.Endpoints),
		Children:           in.keptWithIsolation(in.observed.Objects()),
		ResyncAfterSeconds: in.nextWake(time.Time{}),
	}
}

// desiredChildren are the children of a healthy instance, in a fixed order: each component's Pod,
// then what surrounds them. A Pod is declared only once what it needs is observed
// (podPrerequisite): its NetworkPolicy, so that it never runs a moment unisolated, the flag Secret
// it mounts and the internal Services of the peers it resolves by name. A Pod that stopped for
// good is left out of this one answer, so that Metacontroller deletes it; once it is gone, the
// next answer has the Pod again and Metacontroller creates a fresh one.
func (in *instance) desiredChildren() []any {
	var children []any
	for _, c := range in.components {
		if c.waitingFor == "" && (!c.hasPod || !podFinished(c.pod)) {
			children = append(children, buildPod(in, c))
		}
	}
	return append(children, in.surroundingChildren()...)
}

// heldIsolation is what an instance whose workload goes (expiry, deletion) answers: nothing once
// no Pod of it is observed; while any is, Terminating included (a process that ignores SIGTERM
// runs for its whole grace period), its NetworkPolicy, so that the Pod stays isolated to its last
// moment and the policy goes in the first answer after the last Pod is gone.
func (in *instance) heldIsolation() []any {
	if len(in.observed.Pods) == 0 {
		return []any{}
	}
	return in.keptWithIsolation(in.observed.NetworkPolicies)
}

// keptWithIsolation returns objs, observed children, exactly as they are, when the hook must not
// change them (it cannot build the instance, or the instance is going), as long as each Pod's
// NetworkPolicy (the one of the Pod's name) is observed. A Pod whose policy is missing (deleted by
// hand, or refused) would run unisolated: it is left out, so that Metacontroller deletes it, and
// while it is observed a policy that admits nothing holds every Pod of the instance
// (denyAllPolicy). A route that sends players to anything but the instance's own observed
// Services is left out too, so that Metacontroller deletes it.
func (in *instance) keptWithIsolation(objs []ObservedObject) []any {
	unisolated := slices.ContainsFunc(in.observed.Pods, func(p ObservedPod) bool { return !in.hasPolicy(p.Metadata.Name) })
	children := KeptChildren(slices.DeleteFunc(slices.Clone(objs), func(obj ObservedObject) bool {
		name := obj.Metadata.Name
		switch obj.Kind {
		case "Pod":
			return !in.hasPolicy(name)
		case "NetworkPolicy":
			return unisolated && name == in.name // replaced by denyAllPolicy below
		case "Ingress":
			route, found := findByName(in.observed.Ingresses, name)
			return !in.routesToOwnServices(route, found)
		case kindHTTPRoute:
			route, found := findByName(in.observed.HTTPRoutes, name)
			return !in.routesToOwnServices(route, found)
		case kindTLSRoute:
			route, found := findByName(in.observed.TLSRoutes, name)
			return !in.routesToOwnServices(route, found)
		}
		return false
	}))
	if unisolated {
		children = append(children, denyAllPolicy(in))
	}
	return children
}

// routesToOwnServices: an observed route sends players only to Services observed among the
// instance's children.
func (in *instance) routesToOwnServices(route routeBackends, found bool) bool {
	return found && sendsOnlyTo(route, func(name string) bool {
		_, observed := findByName(in.observed.Services, name)
		return observed
	})
}

// hasPolicy: a NetworkPolicy of this name is observed.
func (in *instance) hasPolicy(name string) bool {
	_, found := findByName(in.observed.NetworkPolicies, name)
	return found
}

// leftoverIsolation keeps, exactly as they are, the observed NetworkPolicies of the observed Pods
// that no component declares any more (the template changed its pods): those Pods are deleted, and
// their policies go in the first answer after they are gone, not with them. The single Pod's
// policy, once the template is one of pods, is kept selecting no Pod of a pod (narrowedPolicy).
func (in *instance) leftoverIsolation() []any {
	var children []any
	for _, p := range in.observed.Pods {
		name := p.Metadata.Name
		if slices.ContainsFunc(in.components, func(c *component) bool { return c.child == name }) {
			continue
		}
		policy, found := findByName(in.observed.NetworkPolicies, name)
		switch {
		case !found:
		case name == in.name:
			children = append(children, narrowedPolicy{policy})
		default:
			children = append(children, keptChild{policy})
		}
	}
	return children
}

// surroundingChildren are every child but the workload: what reaches each component, isolates it
// and holds the flag, and the isolation of Pods no component declares any more.
func (in *instance) surroundingChildren() []any {
	var children []any
	for _, c := range in.components {
		if svc := buildService(in, c); svc != nil {
			children = append(children, svc)
		}
		if svc := buildInternalService(in, c); svc != nil {
			children = append(children, svc)
		}
	}
	if in.cfg.Gateway == nil {
		if ing := buildIngress(in); ing != nil {
			children = append(children, ing)
		}
	}
	if route := buildHTTPRoute(in); route != nil {
		children = append(children, route)
	}
	if route := buildTLSRoute(in); route != nil {
		children = append(children, route)
	}
	for _, c := range in.components {
		children = append(children, buildNetworkPolicy(in, c))
	}
	children = append(children, in.leftoverIsolation()...)
	if sec := buildFlagSecret(in); sec != nil {
		children = append(children, sec)
	}
	return children
}

// KeptChildren returns observed children exactly as Metacontroller last applied them: the answer
// of a hook that must change nothing (the pre-pull controller's too).
func KeptChildren(objs []ObservedObject) []any {
	children := []any{}
	for _, obj := range objs {
		children = append(children, keptChild{obj})
	}
	return children
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
// depends only on the parent's spec and identity and the hook's configuration, as Metacontroller
// caches it (per parent: Sync checks again, so a cached answer from before the flags changed
// relates nothing it uses).
func Customize(req CustomizeRequest, cfg Config) CustomizeResponse {
	parent := req.Parent
	rules := []RelatedResourceRule{}
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
