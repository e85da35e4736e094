package sync

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// validatePods checks the pods of a template of several: each as a Pod of its own (validatePod),
// its name, by which its peers reach it and after which its children are named, and its internal
// ports, which only the other pods it names reach.
func validatePods(pods []v1alpha1.PodTemplate, fldPath *field.Path, templateHasFlag bool, routedCount map[string]int) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateCount(len(pods), v1alpha1.MaxPods, fldPath, "pods")...)
	names := map[string]bool{}
	for _, p := range pods {
		names[p.Name] = true
	}
	seen := map[string]bool{}
	for i, p := range pods {
		podPath := fldPath.Index(i)
		errs = append(errs, validatePodName(p.Name, podPath.Child("name"))...)
		if seen[p.Name] {
			errs = append(errs, field.Duplicate(podPath.Child("name"), p.Name))
		}
		seen[p.Name] = true
		errs = append(errs, validatePod(p.Containers, p.Expose, podPath.Child("containers"), podPath.Child("expose"), templateHasFlag, routedCount)...)
		errs = append(errs, validateInternal(p, pods, names, podPath.Child("internal"))...)
		errs = append(errs, validateSecurity(p.Security, podPath.Child("security"))...)
	}
	return errs
}

// validatePodName: a pod's name is its peers' host name for it and the middle of its children's
// names (<challenge>--<pod>, see ValidateComponentNames), hence a short DNS-1035 label without
// "--", which separates the parts of a child's name (see ComponentSeparator).
func validatePodName(name string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	msgs := validation.IsDNS1035Label(name)
	if len(name) > v1alpha1.MaxPodName {
		msgs = append(msgs, fmt.Sprintf("must be no more than %d characters", v1alpha1.MaxPodName))
	}
	if strings.Contains(name, ComponentSeparator) {
		msgs = append(msgs, fmt.Sprintf("must not contain %q, which separates the parts of its children's names", ComponentSeparator))
	}
	if len(msgs) > 0 {
		return field.ErrorList{field.Invalid(fldPath, name, "peers reach the pod by this name and its children are named after it: "+strings.Join(msgs, "; "))}
	}
	return nil
}

// validatePod checks what one Pod of an instance is built from, in either form: its containers
// (names, ports, each container on its own) and its exposures. routedCount counts the HTTP and TLS
// exposures of the whole instance, across calls.
func validatePod(containers []v1alpha1.Container, expose []v1alpha1.Expose, containersPath, exposePath *field.Path, templateHasFlag bool, routedCount map[string]int) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateCount(len(containers), v1alpha1.MaxContainers, containersPath, "containers")...)
	portProtocol := podPorts(containers)
	containerNames := map[string]bool{}
	portsSeen := map[int32]bool{}
	portNames := map[string]bool{}
	for i, c := range containers {
		containerPath := containersPath.Index(i)
		errs = append(errs, validateContainer(c, containerPath)...)
		if c.Name == PolicyGateContainer {
			errs = append(errs, field.Invalid(containerPath.Child("name"), c.Name, policyGateNameReserved))
		}
		if containerNames[c.Name] {
			errs = append(errs, field.Duplicate(containerPath.Child("name"), c.Name))
		}
		containerNames[c.Name] = true
		for j, p := range c.Ports {
			portPath := containerPath.Child("ports").Index(j)
			if portsSeen[p.ContainerPort] {
				errs = append(errs, field.Duplicate(portPath.Child("containerPort"), p.ContainerPort))
			}
			portsSeen[p.ContainerPort] = true
			if p.Name != "" {
				if portNames[p.Name] {
					errs = append(errs, field.Duplicate(portPath.Child("name"), p.Name))
				}
				portNames[p.Name] = true
			}
		}
		if c.Flag && !templateHasFlag {
			errs = append(errs, field.Forbidden(containerPath.Child("flag"), "the template has no flag to deliver: set flag, or remove flag: true"))
		}
	}
	return append(errs, validateExpose(expose, portProtocol, routedCount, exposePath)...)
}

// podPorts maps each containerPort of a Pod's containers to its protocol; of a port listed twice
// (an error), the first.
func podPorts(containers []v1alpha1.Container) map[int32]string {
	portProtocol := map[int32]string{}
	for _, c := range containers {
		for _, p := range c.Ports {
			if _, taken := portProtocol[p.ContainerPort]; !taken {
				portProtocol[p.ContainerPort] = protocolOf(p)
			}
		}
	}
	return portProtocol
}

// validateInternal checks a pod's internal ports: ports of its own containers, each admitting 1 to
// v1alpha1.MaxInternalFrom other pods of the template by name. names holds every pod name of the
// template.
func validateInternal(pod v1alpha1.PodTemplate, pods []v1alpha1.PodTemplate, names map[string]bool, fldPath *field.Path) field.ErrorList {
	if len(pod.Internal) > v1alpha1.MaxInternal {
		return field.ErrorList{field.TooMany(fldPath, len(pod.Internal), v1alpha1.MaxInternal)}
	}
	var errs field.ErrorList
	portProtocol := podPorts(pod.Containers)
	// The names a from entry may take, in the template's order, for a message.
	var others []string
	for _, p := range pods {
		if p.Name != pod.Name && !slices.Contains(others, p.Name) {
			others = append(others, p.Name)
		}
	}
	seenPorts := map[int32]bool{}
	for i, in := range pod.Internal {
		inPath := fldPath.Index(i)
		portPath := inPath.Child("port")
		if _, ok := portProtocol[in.Port]; !ok {
			errs = append(errs, field.Invalid(portPath, in.Port, "not a containerPort of the pod's containers"))
		} else if seenPorts[in.Port] {
			errs = append(errs, field.Duplicate(portPath, in.Port))
		}
		seenPorts[in.Port] = true
		fromPath := inPath.Child("from")
		switch n := len(in.From); {
		case n == 0:
			errs = append(errs, field.Required(fromPath, fmt.Sprintf("name the 1 to %d other pods that reach this port", v1alpha1.MaxInternalFrom)))
			continue
		case n > v1alpha1.MaxInternalFrom:
			errs = append(errs, field.TooMany(fromPath, n, v1alpha1.MaxInternalFrom))
			continue
		}
		seenFrom := map[string]bool{}
		for j, from := range in.From {
			switch {
			case from == pod.Name:
				errs = append(errs, field.Invalid(fromPath.Index(j), from, "the pod itself: name another pod of the template (a pod always reaches its own ports)"))
			case !names[from]:
				errs = append(errs, field.NotSupported(fromPath.Index(j), from, others))
			case seenFrom[from]:
				errs = append(errs, field.Duplicate(fromPath.Index(j), from))
			}
			seenFrom[from] = true
		}
	}
	return errs
}

func validateSecurity(sec *v1alpha1.Security, fldPath *field.Path) field.ErrorList {
	if sec == nil || sec.RunAsUser == nil {
		return nil
	}
	var errs field.ErrorList
	runAsUser := fldPath.Child("runAsUser")
	if *sec.RunAsUser < 0 {
		errs = append(errs, field.Invalid(runAsUser, *sec.RunAsUser, "negative"))
	}
	if *sec.RunAsUser == 0 && !sec.RunAsRoot {
		errs = append(errs, field.Invalid(runAsUser, *sec.RunAsUser, "that is root: set security.runAsRoot: true to run as root"))
	}
	return errs
}

func validateContainer(c v1alpha1.Container, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(fldPath.Child("name"), c.Name, strings.Join(msgs, "; ")))
	}
	if strings.TrimSpace(c.Image) == "" || strings.ContainsAny(c.Image, " \t\n") {
		errs = append(errs, field.Invalid(fldPath.Child("image"), c.Image, "must be an image reference such as registry.example/chal:1.0"))
	}
	for j, env := range c.Env {
		if msgs := validation.IsEnvVarName(env.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(fldPath.Child("env").Index(j).Child("name"), env.Name, strings.Join(msgs, "; ")))
		}
	}
	for j, p := range c.Ports {
		portPath := fldPath.Child("ports").Index(j)
		errs = append(errs, validatePort(p.ContainerPort, portPath.Child("containerPort"))...)
		if p.Protocol != "" && !validProtocols[p.Protocol] {
			errs = append(errs, field.NotSupported(portPath.Child("protocol"), p.Protocol, []string{"TCP", "UDP", "SCTP"}))
		}
		if p.Name != "" {
			if msgs := validation.IsValidPortName(p.Name); len(msgs) > 0 {
				errs = append(errs, field.Invalid(portPath.Child("name"), p.Name, strings.Join(msgs, "; ")))
			}
		}
	}
	if r := c.Resources; r != nil {
		errs = append(errs, validateResources(*r, fldPath.Child("resources"))...)
	}
	if p := c.ReadinessProbe; p != nil {
		errs = append(errs, validateProbe(*p, fldPath.Child("readinessProbe"))...)
	}
	return errs
}

// resourceNames are the resources a template may set, in the order they are checked.
var resourceNames = []string{"cpu", "ephemeral-storage", "memory"}

func validateResources(r v1alpha1.ResourceRequirements, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	parsed := map[string]map[string]resource.Quantity{}
	// Known names in a fixed order, so that the errors are in the same order on every sync.
	for _, list := range []struct {
		name   string
		values map[string]v1alpha1.Quantity
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		parsed[list.name] = map[string]resource.Quantity{}
		for _, name := range slices.Sorted(maps.Keys(list.values)) {
			if !slices.Contains(resourceNames, name) {
				errs = append(errs, field.NotSupported(fldPath.Child(list.name), name, resourceNames))
				continue
			}
			q, err := resource.ParseQuantity(string(list.values[name]))
			if err != nil {
				errs = append(errs, field.Invalid(fldPath.Child(list.name, name), string(list.values[name]), "not a quantity such as 500m or 256Mi"))
				continue
			}
			parsed[list.name][name] = q
		}
	}
	for _, name := range resourceNames {
		request, hasRequest := parsed["requests"][name]
		limit, hasLimit := parsed["limits"][name]
		if hasRequest && hasLimit && request.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(fldPath.Child("requests", name), string(r.Requests[name]), "above its limit "+string(r.Limits[name])))
		}
	}
	return errs
}

func validateProbe(p v1alpha1.Probe, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	handlers := 0
	if p.TCPSocket != nil {
		handlers++
		errs = append(errs, validatePort(p.TCPSocket.Port, fldPath.Child("tcpSocket", "port"))...)
	}
	if p.HTTPGet != nil {
		handlers++
		errs = append(errs, validatePort(p.HTTPGet.Port, fldPath.Child("httpGet", "port"))...)
		if p.HTTPGet.Path != "" && !strings.HasPrefix(p.HTTPGet.Path, "/") {
			errs = append(errs, field.Invalid(fldPath.Child("httpGet", "path"), p.HTTPGet.Path, "must start with /"))
		}
	}
	if p.Exec != nil {
		handlers++
		if len(p.Exec.Command) == 0 {
			errs = append(errs, field.Required(fldPath.Child("exec", "command"), ""))
		}
	}
	if handlers != 1 {
		errs = append(errs, field.Invalid(fldPath, field.OmitValueType{}, "set exactly one of tcpSocket, httpGet and exec"))
	}
	if p.InitialDelaySeconds < 0 || p.PeriodSeconds < 0 || p.TimeoutSeconds < 0 || p.FailureThreshold < 0 {
		errs = append(errs, field.Invalid(fldPath, field.OmitValueType{}, "seconds and thresholds must not be negative"))
	}
	return errs
}

func validatePort(port int32, fldPath *field.Path) field.ErrorList {
	if port < 1 || port > 65535 {
		return field.ErrorList{field.Invalid(fldPath, port, "not between 1 and 65535")}
	}
	return nil
}

var validProtocols = map[string]bool{"TCP": true, "UDP": true, "SCTP": true}

// validateExpose checks a Pod's exposures; routedCount counts the HTTP and TLS exposures of the
// whole instance (it has one host), across the calls for its pods.
func validateExpose(expose []v1alpha1.Expose, portProtocol map[int32]string, routedCount map[string]int, fldPath *field.Path) field.ErrorList {
	if len(expose) > v1alpha1.MaxExpose {
		return field.ErrorList{field.TooMany(fldPath, len(expose), v1alpha1.MaxExpose)}
	}
	var errs field.ErrorList
	seen := map[int32]bool{}
	serviceType := ""
	for i, e := range expose {
		exposePath := fldPath.Index(i)
		protocol, ok := portProtocol[e.Port]
		switch {
		case !ok:
			errs = append(errs, field.Invalid(exposePath.Child("port"), e.Port, "not a containerPort of any container"))
		case seen[e.Port]:
			errs = append(errs, field.Duplicate(exposePath.Child("port"), e.Port))
		}
		seen[e.Port] = true
		kind, known := exposureKindOf(e.Type)
		switch {
		case !known:
			errs = append(errs, field.NotSupported(exposePath.Child("type"), e.Type, exposureTypes()))
			continue
		case kind.routed:
			// Routed by the instance's one host: one of each type at most.
			routedCount[e.Type]++
			if routedCount[e.Type] > 1 {
				errs = append(errs, field.Invalid(exposePath.Child("type"), e.Type, "at most one "+e.Type+" exposure per instance"))
			}
		default:
			if serviceType != "" && serviceType != e.Type {
				errs = append(errs, field.Invalid(exposePath.Child("type"), e.Type, fmt.Sprintf(
					"%s and %s cannot be mixed: all exposures other than HTTP and TLS share one Service", serviceType, e.Type)))
			}
			serviceType = e.Type
		}
		if (kind.routed || kind.entry == entryTCPGateway) && ok && protocol != "TCP" {
			errs = append(errs, field.Invalid(exposePath.Child("port"), e.Port, fmt.Sprintf("%s needs a TCP port, this one is %s", e.Type, protocol)))
		}
		errs = append(errs, validateExposeFrom(e, kind, exposePath.Child("from"))...)
		errs = append(errs, validateGatewayOptions(e, kind, exposePath)...)
	}
	return errs
}

// validateGatewayOptions checks the TCP gateway's options of an exposure: only a TCP exposure has
// them, and its proof of work fits in a token.
func validateGatewayOptions(e v1alpha1.Expose, kind exposureKind, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if kind.entry != entryTCPGateway {
		if e.ProofOfWorkBits != 0 {
			errs = append(errs, field.Forbidden(fldPath.Child("proofOfWorkBits"), "only TCP exposures pass through the TCP gateway, which poses the puzzle"))
		}
		if e.ProxyProtocol {
			errs = append(errs, field.Forbidden(fldPath.Child("proxyProtocol"), "only TCP exposures pass through the TCP gateway, which sends the PROXY header"))
		}
		return errs
	}
	if e.ProofOfWorkBits < 0 || e.ProofOfWorkBits > tcptoken.MaxProofOfWorkBits {
		errs = append(errs, field.Invalid(fldPath.Child("proofOfWorkBits"), e.ProofOfWorkBits, fmt.Sprintf("not between 0 and %d", tcptoken.MaxProofOfWorkBits)))
	}
	return errs
}

// validateExposeFrom checks the peers of a ClusterIP exposure: its only sources, so it needs at
// least one, and each must say which Pods it means.
func validateExposeFrom(e v1alpha1.Expose, kind exposureKind, fldPath *field.Path) field.ErrorList {
	if kind.entry != entryNamedPeers {
		if len(e.From) > 0 {
			return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf("only ClusterIP exposures name their peers; %s traffic comes from %s", e.Type, kind.source))}
		}
		return nil
	}
	if len(e.From) == 0 || len(e.From) > v1alpha1.MaxExposeFrom {
		return field.ErrorList{field.Invalid(fldPath, len(e.From), fmt.Sprintf(
			"a ClusterIP exposure admits only the Pods it names (an admin bot, a checker): need 1 to %d peers", v1alpha1.MaxExposeFrom))}
	}
	var errs field.ErrorList
	for j, peer := range e.From {
		peerPath := fldPath.Index(j)
		if peer.Namespace == "" && len(peer.PodLabels) == 0 {
			errs = append(errs, field.Required(peerPath, "set namespace, podLabels or both"))
		}
		if peer.Namespace != "" {
			if msgs := validation.IsDNS1123Label(peer.Namespace); len(msgs) > 0 {
				errs = append(errs, field.Invalid(peerPath.Child("namespace"), peer.Namespace, strings.Join(msgs, "; ")))
			}
		}
		labelsPath := peerPath.Child("podLabels")
		if len(peer.PodLabels) > v1alpha1.MaxPeerLabels {
			errs = append(errs, field.TooMany(labelsPath, len(peer.PodLabels), v1alpha1.MaxPeerLabels))
			continue
		}
		// Sorted, so that the errors are in the same order on every sync.
		for _, key := range slices.Sorted(maps.Keys(peer.PodLabels)) {
			if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
				errs = append(errs, field.Invalid(labelsPath, key, "not a valid label key: "+strings.Join(msgs, "; ")))
			}
			if msgs := validation.IsValidLabelValue(string(peer.PodLabels[key])); len(msgs) > 0 {
				errs = append(errs, field.Invalid(labelsPath.Key(key), string(peer.PodLabels[key]), strings.Join(msgs, "; ")))
			}
		}
	}
	return errs
}
