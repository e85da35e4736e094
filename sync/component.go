package sync

import (
	"maps"
	"slices"
	"strings"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Child names. Two instances' children must never share a kind and a name: Metacontroller would
// give the object to one of them, and the other would route its players to it (a route names its
// backend Service by name). The hook sees one Challenge at a time, so the names alone keep them
// apart:
//   - a template of containers: Pod, Service, NetworkPolicy, Ingress, HTTPRoute and TLSRoute are
//     named <challenge>;
//   - a template of pods: each pod's Pod, exposure Service and NetworkPolicy <challenge>--<pod>,
//     its internal Service <challenge>--<pod>--internal; the routes <challenge>;
//   - the flag Secret, the only Secret, <challenge>-flag; the policy that stands in for a missing
//     one (denyAllPolicy) <challenge>.
//
// Neither a Challenge's name nor a pod's contains "--" (the CRDs refuse it, and the hook refuses
// it in objects admitted before: validateChallengeSpec, validatePodName), a Challenge's name ends
// with a letter or digit and a pod's starts with a letter. So a name without "--" is a Challenge's
// own; in one with "--", the first "--" ends the Challenge's name and the second, if any, ends the
// pod's: every name is one instance's and one child's (TestChildNamesNeverCollide). The pre-pull
// controller's children ("<definition>.prepull") hold a dot, which no Challenge name has.
const (
	// ComponentSeparator joins the parts of a child's name (and of a pre-pull container's,
	// <pod>--<container>).
	ComponentSeparator    = "--"
	internalServiceSuffix = ComponentSeparator + "internal"
)

// component is one Pod of an instance and what is built around it: its Services, its
// NetworkPolicy and its exposures. A template of containers is one component named after the
// Challenge, as instances were before templates had pods; a template of pods has one per pod,
// named <challenge>--<pod>. A component's Pod, exposure Service and NetworkPolicy share its child
// name, so that every Pod's policy is found by the Pod's name, whatever the template says
// (keptWithIsolation).
type component struct {
	name     string // the pod's name in a template of pods; "" for a template of containers
	child    string // the name of its Pod, exposure Service and NetworkPolicy
	spec     v1alpha1.PodTemplate
	labels   map[string]string // the instance's labels, and the component's
	selector map[string]string // its Pods: the instance id, and the component's name

	peers      []peerPorts // the components it reaches (reachedPeers)
	mountsFlag bool        // a container of its Pod receives the flag (receivesFlag)

	pod        ObservedPod // the component's observed Pod, when hasPod
	hasPod     bool
	waitingFor string // see podPrerequisite
}

// resolveComponents splits the template into its components, with what was observed of each.
func (in *instance) resolveComponents() {
	t := in.template
	if len(t.Pods) == 0 {
		in.components = []*component{{
			child:    in.name,
			spec:     v1alpha1.PodTemplate{Containers: t.Containers, Expose: t.Expose, Egress: t.Egress, DNS: t.DNS, Security: t.Security},
			labels:   in.labels,
			selector: in.selector,
		}}
	} else {
		for _, p := range t.Pods {
			labels := maps.Clone(in.labels)
			labels[LabelComponent] = p.Name
			in.components = append(in.components, &component{
				name:     p.Name,
				child:    componentChildName(in.name, p.Name),
				spec:     p,
				labels:   labels,
				selector: map[string]string{LabelInstance: in.id, LabelComponent: p.Name},
			})
		}
	}
	for _, c := range in.components {
		c.peers = in.reachedPeers(c)
		c.mountsFlag = slices.ContainsFunc(c.spec.Containers, func(ct v1alpha1.Container) bool { return receivesFlag(t, ct) })
		c.pod, c.hasPod = findByName(in.observed.Pods, c.child)
		c.waitingFor = podPrerequisite(in, c)
	}
}

// componentChildName names the Pod, exposure Service and NetworkPolicy of a pod of the template.
func componentChildName(challenge, pod string) string {
	return challenge + ComponentSeparator + pod
}

// internalService names the ClusterIP Service of a component's internal ports, the one its peers
// reach it through (see buildInternalService).
func (c *component) internalService() string { return c.child + internalServiceSuffix }

// sibling finds the component of the instance named name.
func (in *instance) sibling(name string) *component {
	for _, c := range in.components {
		if c.name == name {
			return c
		}
	}
	return nil
}

// reachedPeers are the other components c may connect to, in template order, each with the ports
// of theirs that admit c: what its egress admits and the names its Pod resolves.
func (in *instance) reachedPeers(c *component) []peerPorts {
	var out []peerPorts
	for _, s := range in.components {
		var ports []v1alpha1.ContainerPort
		for _, p := range s.spec.Internal {
			if slices.Contains(p.From, c.name) {
				ports = append(ports, containerPort(s.spec.Containers, p.Port))
			}
		}
		if len(ports) > 0 {
			out = append(out, peerPorts{s, ports})
		}
	}
	return out
}

// peerPorts is a component and the ports of it that another component reaches.
type peerPorts struct {
	peer  *component
	ports []v1alpha1.ContainerPort
}

// containerPort finds the container port numbered port among containers.
func containerPort(containers []v1alpha1.Container, port int32) v1alpha1.ContainerPort {
	for _, c := range containers {
		for _, p := range c.Ports {
			if p.ContainerPort == port {
				return p
			}
		}
	}
	return v1alpha1.ContainerPort{ContainerPort: port}
}

// exposed is one exposure of the instance and the component whose port it publishes.
type exposed struct {
	c *component
	v1alpha1.Expose
}

// exposures are every exposure of the instance, in the order of its components.
func (in *instance) exposures() []exposed {
	var out []exposed
	for _, c := range in.components {
		for _, e := range c.spec.Expose {
			out = append(out, exposed{c, e})
		}
	}
	return out
}

// exposureOf finds the instance's exposure of a type (HTTP and TLS: at most one per instance).
func (in *instance) exposureOf(exposeType string) (exposed, bool) {
	for _, e := range in.exposures() {
		if e.Type == exposeType {
			return e, true
		}
	}
	return exposed{}, false
}

// receivesFlag says whether a container gets the instance's flag: in a template of pods, those
// that ask (flag: true); in a template of containers, those that ask, or every one when none does.
func receivesFlag(t v1alpha1.DefinitionSpec, c v1alpha1.Container) bool {
	switch {
	case t.Flag == nil:
		return false
	case c.Flag || len(t.Pods) > 0:
		return c.Flag
	}
	return !slices.ContainsFunc(t.Containers, func(c v1alpha1.Container) bool { return c.Flag })
}

// portName is the name of a port in the Service and endpoints: the container port's own name, or
// the protocol and number.
func portName(port v1alpha1.ContainerPort) string {
	if port.Name != "" {
		return port.Name
	}
	return strings.ToLower(protocolOf(port)) + "-" + itoa(port.ContainerPort)
}

func protocolOf(port v1alpha1.ContainerPort) string {
	if port.Protocol == "" {
		return "TCP"
	}
	return port.Protocol
}

// podPrerequisite names the first child a component's Pod waits for, "" when none: the
// NetworkPolicy that selects it (a Pod no policy selects reaches the whole cluster, the metadata
// service and every other instance), then the flag Secret it mounts (without it the Pod fails to
// start with CreateContainerConfigError), then the Service of each peer it reaches, whose
// ClusterIP its hostAliases name. Each is in the same answer as the Pod would be, so the wait
// costs one sync, which their creation triggers.
func podPrerequisite(in *instance, c *component) string {
	if _, found := findByName(in.observed.NetworkPolicies, c.child); !found {
		return "NetworkPolicy " + c.child
	}
	if c.mountsFlag {
		if _, found := findByName(in.observed.Secrets, in.flagSecretName()); !found {
			return "Secret " + in.flagSecretName()
		}
	}
	for _, p := range c.peers {
		if svc, found := findByName(in.observed.Services, p.peer.internalService()); !found || !hasClusterIP(svc) {
			return "Service " + p.peer.internalService()
		}
	}
	return ""
}
