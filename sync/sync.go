package sync

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// maxMessageLength bounds status and condition messages: they quote user input and kubelet text,
// and a status must stay far below the API server's object size limit.
const maxMessageLength = 1024

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

// truncate cuts s to at most n bytes without splitting a UTF-8 character, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "..."
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func syncChallenge(req Request, now time.Time, cfg Config) Response {
	if req.Finalizing || req.Parent.Metadata.DeletionTimestamp != "" {
		return finalize(req, now)
	}
	parent := req.Parent
	in, prob := resolveInstance(parent, req.Related, cfg)
	if prob == nil {
		prob = routeProblem(in, req.DeclaredChildTypes, cfg)
	}
	timing := &in.template
	if prob != nil {
		timing = prob.template
	}
	started := startedAt(parent, now)
	expires, expired := expiry(parent, deadline(parent, timing, started, cfg), now)
	if expired {
		// Expiry wins over every error: past the deadline the workload goes, whatever else is wrong.
		return expire(req, prob, cfg, started, expires, now)
	}
	if parent.Spec.Stopped {
		return stop(req, in, prob, cfg, started, expires, now)
	}
	if prob != nil {
		return keepChildren(req, *prob, cfg, started, expires, now)
	}

	eps, missing, refused := endpoints(req, in, cfg)
	v, wake := observe(req, in, now, started, eps, missing, refused)
	status := instanceStatus(parent, v, started, expires)
	status.Endpoints = eps
	if v.phase == PhaseRunning && status.ReadyAt == "" {
		status.ReadyAt = formatTime(now)
	}
	status.Conditions = instanceConditions(parent, v, expires, now, cfg, false)
	// Metacontroller wakes the hook at the expiry warning, at expiry, or earlier when the progress
	// deadline comes first.
	return Response{Status: status, Children: desiredChildren(req, in, cfg), ResyncAfterSeconds: nextWake(now, expires, cfg.ExpiryWarning, wake)}
}

// expire answers past the deadline: no workload, so Metacontroller deletes the Pod and everything
// around it but its NetworkPolicy, which stays until the last Pod is gone (see heldIsolation); the
// Challenge stays as the record of the instance. A problem that stands as well (missing or invalid
// definition, invalid spec, no flag key) is named in the message, but keeps nothing else.
func expire(req Request, prob *problem, cfg Config, started, expires, now time.Time) Response {
	parent := req.Parent
	message := fmt.Sprintf("expired at %s and its workload was removed; delete the Challenge to remove its record", formatTime(expires))
	if prob != nil {
		message += fmt.Sprintf(" (also %s: %s)", prob.reason, prob.message)
	}
	v := verdict{PhaseExpired, ReasonExpired, message}
	status := instanceStatus(parent, v, started, expires)
	status.Conditions = instanceConditions(parent, v, expires, now, cfg, true)
	return Response{Status: status, Children: heldIsolation(req)}
}

// instanceStatus is what every answer before deletion says: the verdict, the instance id, and its
// times (startedAt and readyAt never move once set).
func instanceStatus(parent Challenge, v verdict, started, expires time.Time) ChallengeStatus {
	return ChallengeStatus{
		Phase:              v.phase,
		Reason:             v.reason,
		Message:            v.message,
		InstanceID:         instanceID(parent),
		StartedAt:          formatTime(started),
		ReadyAt:            parent.Status.ReadyAt,
		ExpiresAt:          formatTime(expires),
		ObservedGeneration: parent.Metadata.Generation,
	}
}

// desiredChildren are the children of a healthy instance, in a fixed order. The Pod is declared
// only once what it needs is observed (podPrerequisite): its NetworkPolicy, so that it never runs
// a moment unisolated, and its flag Secret. A Pod that stopped for good is left out of this one
// answer, so that Metacontroller deletes it; once it is gone, the next answer has the Pod again and
// Metacontroller creates a fresh one.
func desiredChildren(req Request, in instance, cfg Config) []any {
	var children []any
	pod, found := findByName(req.Children.Pods, in.name)
	if podPrerequisite(req, in) == "" && (!found || !podFinished(pod)) {
		children = append(children, buildPod(in, cfg))
	}
	return append(children, surroundingChildren(in, cfg)...)
}

// podPrerequisite names the first child the instance's Pod waits for, "" when none: the
// NetworkPolicy that selects it (a Pod no policy selects reaches the whole cluster, the metadata
// service and every other instance), then the flag Secret it mounts (without it the Pod fails to
// start with CreateContainerConfigError). Both are in the same answer as the Pod would be, so the
// wait costs one sync, which their creation triggers.
func podPrerequisite(req Request, in instance) string {
	if _, found := findByName(req.Children.NetworkPolicies, in.name); !found {
		return "NetworkPolicy " + in.name
	}
	if in.template.Flag != nil {
		if _, found := findByName(req.Children.Secrets, in.flagSecretName()); !found {
			return "Secret " + in.flagSecretName()
		}
	}
	return ""
}

// heldIsolation is what an instance whose workload goes (expiry, deletion) answers: nothing once
// no Pod of it is observed; while any is, Terminating included (a process that ignores SIGTERM
// runs for its whole grace period), its NetworkPolicy, so that the Pod stays isolated to its last
// moment and the policy goes in the first answer after the last Pod is gone.
func heldIsolation(req Request) []any {
	if len(req.Children.Pods) == 0 {
		return []any{}
	}
	return keptWithIsolation(req, req.Children.NetworkPolicies)
}

// keptWithIsolation returns objs, observed children, exactly as they are, when the hook must not
// change them (it cannot build the instance, or the instance is going), as long as a NetworkPolicy
// of the instance is observed. Without one (deleted by hand, or refused), a Pod would run
// unisolated: Pods are left out, so that Metacontroller deletes them, and while any is observed a
// policy that admits nothing holds it (denyAllPolicy).
func keptWithIsolation(req Request, objs []ObservedObject) []any {
	if len(req.Children.NetworkPolicies) > 0 {
		return keptChildren(objs)
	}
	children := keptChildren(slices.DeleteFunc(slices.Clone(objs), func(obj ObservedObject) bool { return obj.Kind == "Pod" }))
	if len(req.Children.Pods) > 0 {
		children = append(children, denyAllPolicy(req.Parent))
	}
	return children
}

// surroundingChildren are every child but the workload: what reaches it, isolates it and holds its
// flag.
func surroundingChildren(in instance, cfg Config) []any {
	var children []any
	if svc := buildService(in); svc != nil {
		children = append(children, svc)
	}
	if cfg.Gateway == nil {
		if ing := buildIngress(in, cfg); ing != nil {
			children = append(children, ing)
		}
	}
	if route := buildHTTPRoute(in, cfg); route != nil {
		children = append(children, route)
	}
	if route := buildTLSRoute(in, cfg); route != nil {
		children = append(children, route)
	}
	children = append(children, buildNetworkPolicy(in, cfg))
	if sec := buildFlagSecret(in, cfg); sec != nil {
		children = append(children, sec)
	}
	return children
}

// keepChildren answers when the hook cannot build the instance (missing or invalid definition,
// invalid spec, no flag key) before its deadline: every observed child is returned exactly as
// Metacontroller last applied it, so nothing running is deleted or rewritten, the status says what
// to fix, and Metacontroller wakes the hook when the expiry warning begins and at the deadline,
// when the workload goes anyway.
func keepChildren(req Request, prob problem, cfg Config, started, expires, now time.Time) Response {
	parent := req.Parent
	v := verdict{PhaseError, prob.reason, prob.message}
	status := instanceStatus(parent, v, started, expires)
	status.Endpoints = parent.Status.Endpoints
	status.Conditions = instanceConditions(parent, v, expires, now, cfg, false)
	return Response{Status: status, Children: keptWithIsolation(req, req.Children.Objects()), ResyncAfterSeconds: nextWake(now, expires, cfg.ExpiryWarning, time.Time{})}
}

// keptChildren returns observed children exactly as Metacontroller last applied them.
func keptChildren(objs []ObservedObject) []any {
	children := []any{}
	for _, obj := range objs {
		children = append(children, keptChild{obj})
	}
	return children
}

// settledStatus is the status of an instance being deleted: the verdict, and what the previous
// status knew: its times and its ExpiringSoon and Expired conditions.
func settledStatus(parent Challenge, v verdict, now time.Time) ChallengeStatus {
	status := ChallengeStatus{
		Phase:              v.phase,
		Reason:             v.reason,
		Message:            v.message,
		InstanceID:         instanceID(parent),
		StartedAt:          formatTime(startedAt(parent, now)),
		ReadyAt:            parent.Status.ReadyAt,
		ExpiresAt:          parent.Status.ExpiresAt,
		ObservedGeneration: parent.Metadata.Generation,
	}
	current := []Condition{readyCondition(v)}
	for _, conditionType := range []string{ConditionExpiringSoon, ConditionExpired} {
		if prev := findCondition(parent.Status.Conditions, conditionType); prev != nil {
			current = append(current, *prev)
		}
	}
	status.Conditions = conditions(parent.Status.Conditions, parent.Metadata.Generation, now, current...)
	return status
}

func findCondition(conds []Condition, conditionType string) *Condition {
	for i := range conds {
		if conds[i].Type == conditionType {
			return &conds[i]
		}
	}
	return nil
}

// finalize answers while the Challenge is being deleted: no workload, so Metacontroller deletes
// every child but the NetworkPolicy, which goes in the first answer after the last Pod is gone
// (see heldIsolation); finalized only once no child is observed any more.
func finalize(req Request, now time.Time) Response {
	parent := req.Parent
	remaining := req.Children.Count()
	v := verdict{PhaseDeleted, ReasonDeleted, "every child is gone"}
	if remaining > 0 {
		v = verdict{PhaseTerminating, ReasonTerminating, fmt.Sprintf("waiting for %d child object(s) to be deleted", remaining)}
	}
	status := settledStatus(parent, v, now)
	return Response{Status: status, Children: heldIsolation(req), Finalized: remaining == 0}
}

// Customize asks Metacontroller for the related object Sync needs: the referenced definition, unless
// its namespace is not one cfg.DefinitionNamespaces allows. It depends only on the parent's spec
// and identity and the hook's configuration, as Metacontroller caches it (per parent: Sync checks
// the namespace again, so a cached answer from before the flag changed relates nothing it uses).
func Customize(req CustomizeRequest, cfg Config) CustomizeResponse {
	parent := req.Parent
	rules := []RelatedResourceRule{}
	if ref := parent.Spec.DefinitionRef; ref != nil && ref.Name != "" {
		namespace := ref.Namespace
		if namespace == "" {
			namespace = parent.Metadata.Namespace
		}
		if !definitionNamespaceAllowed(cfg, namespace) {
			return CustomizeResponse{RelatedResources: rules} // Sync says why (InvalidSpec)
		}
		rules = append(rules, RelatedResourceRule{
			APIVersion: APIVersion, Resource: "challengedefinitions", Namespace: namespace, Names: []string{ref.Name},
		})
	}
	return CustomizeResponse{RelatedResources: rules}
}
