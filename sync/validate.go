package sync

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// validateChallengeSpec checks what the hook reads of the Challenge itself.
func validateChallengeSpec(parent Challenge) field.ErrorList {
	errs := validateChallengeName(parent.Metadata.Name)
	spec, specPath := parent.Spec, field.NewPath("spec")
	errs = append(errs, validateOwner(spec.Owner, specPath.Child("owner"))...)
	const exactlyOne = "set exactly one of spec.definitionRef and spec.template"
	switch {
	case spec.Template == nil && spec.DefinitionRef == nil:
		errs = append(errs, field.Required(specPath, exactlyOne))
	case spec.Template != nil && spec.DefinitionRef != nil:
		errs = append(errs, field.Forbidden(specPath.Child("template"), exactlyOne))
	}
	if ref := spec.DefinitionRef; ref != nil {
		// The name is also the value of the definition label, so it must fit in 63 characters.
		msgs := validation.IsDNS1123Subdomain(ref.Name)
		msgs = append(msgs, validation.IsValidLabelValue(ref.Name)...)
		if len(msgs) > 0 {
			errs = append(errs, field.Invalid(specPath.Child("definitionRef", "name"), ref.Name, strings.Join(msgs, "; ")))
		}
	}
	if spec.Timeout != "" {
		if _, err := parsePositiveDuration(spec.Timeout); err != nil {
			errs = append(errs, field.Invalid(specPath.Child("timeout"), spec.Timeout, err.Error()))
		}
	}
	for _, f := range []struct{ name, value string }{{"expiresAt", spec.ExpiresAt}, {"restartedAt", spec.RestartedAt}} {
		if _, err := time.Parse(time.RFC3339, f.value); f.value != "" && err != nil {
			errs = append(errs, field.Invalid(specPath.Child(f.name), f.value, "not an RFC 3339 time such as 2026-11-01T12:00:00Z"))
		}
	}
	return errs
}

// validateChallengeName checks the Challenge's name, which its children's names are made of.
func validateChallengeName(name string) field.ErrorList {
	if msgs := validation.IsDNS1035Label(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name,
			"children are named after the Challenge, so it must be a DNS-1035 label: "+strings.Join(msgs, "; "))}
	}
	if strings.Contains(name, ComponentSeparator) {
		// The CRD refuses it; a Challenge admitted before keeps what runs until its deadline.
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name, fmt.Sprintf(
			"must not contain %q: the children of an instance of several pods are named <challenge>%s<pod>, which another Challenge's children could be named; create the Challenge again with a name without %q",
			ComponentSeparator, ComponentSeparator, ComponentSeparator))}
	}
	return nil
}

// validateOwner checks spec.owner (at fldPath), which is copied to a label.
func validateOwner(owner string, fldPath *field.Path) field.ErrorList {
	switch {
	case owner == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case len(owner) > validation.LabelValueMaxLength:
		// Not quoted: it may be megabytes long.
		return field.ErrorList{field.TooLong(fldPath, owner, validation.LabelValueMaxLength)}
	}
	if msgs := validation.IsValidLabelValue(owner); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(fldPath, owner, "it is copied to a label, so it must be a valid label value: "+strings.Join(msgs, "; "))}
	}
	return nil
}

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("not a positive duration such as 30m or 1h30m")
	}
	return d, nil
}

var flagPrefixPattern = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

var validProtocols = map[string]bool{"TCP": true, "UDP": true, "SCTP": true}

// ValidateDefinition checks a template, at path (spec of a ChallengeDefinition, spec.template of a
// Challenge). Each error names its field and says what is expected; their order is the same on
// every call, as the status message shows them.
//
// A template is one Pod (containers) or several (pods). Either form is "set" when its list is not
// nil, as for the CRD's has(): an empty list is set, and refused for having no entry.
func ValidateDefinition(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	withPods := spec.Pods != nil
	errs := validateWorkloads(spec, fldPath)
	errs = append(errs, validateLifetime(spec, fldPath)...)
	if withPods && spec.Egress {
		errs = append(errs, field.Forbidden(fldPath.Child("egress"), "with pods, set egress on each pod, not on the template"))
	}
	if withPods && spec.DNS {
		errs = append(errs, field.Forbidden(fldPath.Child("dns"), "with pods, set dns on each pod, not on the template"))
	}
	errs = append(errs, validateFlag(spec, fldPath.Child("flag"))...)
	if spec.RuntimeClassName != "" {
		if msgs := validation.IsDNS1123Subdomain(spec.RuntimeClassName); len(msgs) > 0 {
			errs = append(errs, field.Invalid(fldPath.Child("runtimeClassName"), spec.RuntimeClassName, strings.Join(msgs, "; ")))
		}
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && (*g < 1 || *g > v1alpha1.MaxTerminationGracePeriodSeconds) {
		errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, fmt.Sprintf("not between 1 and %d", v1alpha1.MaxTerminationGracePeriodSeconds)))
	}
	switch {
	case withPods && spec.Security != nil:
		errs = append(errs, field.Forbidden(fldPath.Child("security"), "with pods, set security on each pod, not on the template"))
	case !withPods:
		errs = append(errs, validateSecurity(spec.Security, fldPath.Child("security"))...)
	}
	return errs
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

// validateCount checks that a list has 1 to limit entries of what.
func validateCount(n, limit int, fldPath *field.Path, what string) field.ErrorList {
	switch {
	case n == 0:
		return field.ErrorList{field.Required(fldPath, fmt.Sprintf("need 1 to %d %s", limit, what))}
	case n > limit:
		return field.ErrorList{field.TooMany(fldPath, n, limit)}
	}
	return nil
}

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

// ValidateComponentNames checks that the children of a template of several pods are DNS-1035
// labels: at most 63 characters. Each pod's Pod, Service and NetworkPolicy are named
// <challengeName>--<pod>, and the Service of its internal ports, if it has any,
// <challengeName>--<pod>--internal. A template of one Pod names its children after the Challenge
// alone. fldPath is the template's (spec, spec.template).
func ValidateComponentNames(challengeName string, spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, p := range spec.Pods {
		longest := componentChildName(challengeName, p.Name)
		if len(p.Internal) > 0 {
			longest += internalServiceSuffix
		}
		if len(longest) > validation.DNS1035LabelMaxLength {
			errs = append(errs, field.Invalid(fldPath.Child("pods").Index(i).Child("name"), p.Name, fmt.Sprintf(
				"the pod's children are named after the Challenge and the pod, the longest %s, %d characters: a name is at most %d, so shorten the Challenge's name (%d characters) or the pod's (%d) by %d",
				longest, len(longest), validation.DNS1035LabelMaxLength, len(challengeName), len(p.Name), len(longest)-validation.DNS1035LabelMaxLength)))
		}
	}
	return errs
}

// validDuration parses an optional duration, adding an error when it is set but not a positive
// duration; zero when absent or invalid.
func validDuration(value string, fldPath *field.Path, errs *field.ErrorList) time.Duration {
	if value == "" {
		return 0
	}
	d, err := parsePositiveDuration(value)
	if err != nil {
		*errs = append(*errs, field.Invalid(fldPath, value, err.Error()))
	}
	return d
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

// validateFlag checks the template's flag, and which containers receive it: with pods, those that
// set flag: true, at least one; in a template of one Pod, those, or every container when none does.
// validateWorkloads checks the template's containers (an instance of one Pod) or pods (an instance
// of several) and their exposures.
func validateWorkloads(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	// At most one exposure of each routed type in the whole instance: it has one host.
	routedCount := map[string]int{}
	if spec.Pods == nil {
		return validatePod(spec.Containers, spec.Expose, fldPath.Child("containers"), fldPath.Child("expose"), spec.Flag != nil, routedCount)
	}
	var errs field.ErrorList
	if spec.Containers != nil {
		errs = append(errs, field.Forbidden(fldPath.Child("pods"), "set exactly one of containers (an instance of one Pod) and pods (an instance of several)"))
	}
	errs = append(errs, validatePods(spec.Pods, fldPath.Child("pods"), spec.Flag != nil, routedCount)...)
	if spec.Expose != nil {
		errs = append(errs, field.Forbidden(fldPath.Child("expose"), "with pods, set expose on each pod, not on the template"))
	}
	return errs
}

// validateLifetime checks the template's timeout and maxLifetime: durations, the timeout no longer
// than the cap.
func validateLifetime(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	timeout := validDuration(spec.Timeout, fldPath.Child("timeout"), &errs)
	maxLifetime := validDuration(spec.MaxLifetime, fldPath.Child("maxLifetime"), &errs)
	if timeout > 0 && maxLifetime > 0 && timeout > maxLifetime {
		errs = append(errs, field.Invalid(fldPath.Child("timeout"), spec.Timeout, "longer than maxLifetime "+spec.MaxLifetime))
	}
	return errs
}

func validateFlag(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	flag := spec.Flag
	if flag == nil {
		return nil
	}
	var errs field.ErrorList
	if (flag.Value == "") == !flag.Dynamic {
		errs = append(errs, field.Invalid(fldPath, field.OmitValueType{}, "set exactly one of value and dynamic: true"))
	}
	if flag.Env == "" && flag.Path == "" {
		errs = append(errs, field.Required(fldPath, "set env, path or both, to say how the flag reaches the containers"))
	}
	if spec.Pods != nil && !slices.ContainsFunc(spec.Pods, func(p v1alpha1.PodTemplate) bool {
		return slices.ContainsFunc(p.Containers, func(c v1alpha1.Container) bool { return c.Flag })
	}) {
		errs = append(errs, field.Invalid(fldPath, field.OmitValueType{}, "no container receives it: with pods, set flag: true on each container that receives the flag"))
	}
	if flag.Env != "" {
		errs = append(errs, validateFlagEnv(spec, fldPath.Child("env"))...)
	}
	if flag.Path != "" && !validFlagPath(flag.Path) {
		errs = append(errs, field.Invalid(fldPath.Child("path"), flag.Path, "must be a clean absolute file path such as /flag.txt"))
	}
	if flag.Prefix != "" && !ValidFlagPrefix(flag.Prefix) {
		errs = append(errs, field.Invalid(fldPath.Child("prefix"), flag.Prefix, fmt.Sprintf("at most %d letters, digits or underscores", v1alpha1.MaxFlagPrefix)))
	}
	return errs
}

// validateFlagEnv checks the flag's variable (at env): a valid name that no container sets itself.
func validateFlagEnv(spec v1alpha1.DefinitionSpec, env *field.Path) field.ErrorList {
	name := spec.Flag.Env
	var errs field.ErrorList
	if msgs := validation.IsEnvVarName(name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(env, name, strings.Join(msgs, "; ")))
	}
	setsEnv := func(c v1alpha1.Container) bool {
		return slices.ContainsFunc(c.Env, func(e v1alpha1.EnvVar) bool { return e.Name == name })
	}
	// Any container, receiving the flag or not: which ones do may change with the template,
	// and a variable that means the flag in one container and not in its neighbour misleads.
	for _, c := range spec.Containers {
		if setsEnv(c) {
			errs = append(errs, field.Invalid(env, name, fmt.Sprintf("container %q already sets it", c.Name)))
		}
	}
	for _, p := range spec.Pods {
		for _, c := range p.Containers {
			if setsEnv(c) {
				errs = append(errs, field.Invalid(env, name, fmt.Sprintf("container %q of pod %q already sets it", c.Name, p.Name)))
			}
		}
	}
	return errs
}

// validFlagPath: the flag's file is a clean absolute path, not the root or /tmp (its own mount).
func validFlagPath(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && p != "/" && p != "/tmp"
}
