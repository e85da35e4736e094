package sync

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
