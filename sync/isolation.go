package sync

import "slices"

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

// KeptChildren returns observed children exactly as Metacontroller last applied them: the answer
// of a hook that must change nothing (the pre-pull controller's too).
func KeptChildren(objs []ObservedObject) []any {
	children := []any{}
	for _, obj := range objs {
		children = append(children, keptChild{obj})
	}
	return children
}
