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
)

// problem is why the hook cannot build an instance: a reason from the fixed vocabulary and a
// message that says what to fix. The hook then keeps the children exactly as they are, until the
// instance's deadline.
type problem struct {
	reason  string
	message string
	// template is the template found before the problem, if any: its timeout and maxLifetime still
	// give the instance's deadline (see deadline).
	template *DefinitionSpec
}

// resolveTemplate finds the instance's template (inline, or the related ChallengeDefinition) and
// checks everything the children are built from. The API server's schema and CEL rules refuse most
// mistakes at admission; these checks are the hook's own, because it must not trust its input.
func resolveTemplate(in *instance, related Related) *problem {
	parent, cfg := in.parent, in.cfg
	if err := validateChallengeSpec(parent); err != nil {
		return &problem{ReasonInvalidSpec, err.Error(), nil}
	}
	if parent.Spec.Template != nil {
		if cfg.RefuseInlineTemplates {
			// No template for the deadline either: a refused template does not choose how long
			// the children it may already have keep running.
			return &problem{ReasonInvalidSpec,
				"spec.template: this hook refuses inline templates (--inline-templates=false): reference a ChallengeDefinition with spec.definitionRef instead", nil}
		}
		in.template = *parent.Spec.Template
		if err := ValidateDefinition(in.template); err != nil {
			return &problem{ReasonInvalidSpec, "spec.template: " + err.Error(), &in.template}
		}
	} else {
		ref := *parent.Spec.DefinitionRef
		if ref.Namespace == "" {
			ref.Namespace = parent.Metadata.Namespace
		}
		if !definitionNamespaceAllowed(cfg, ref.Namespace) {
			return &problem{ReasonInvalidSpec, fmt.Sprintf(
				"spec.definitionRef: namespace %q is not one this hook takes ChallengeDefinitions from (--definition-namespaces=%s): reference a definition in one of those",
				ref.Namespace, strings.Join(cfg.DefinitionNamespaces, ",")), nil}
		}
		def, found := findDefinition(related.Definitions, ref)
		if !found {
			return &problem{ReasonDefinitionNotFound, fmt.Sprintf(
				"ChallengeDefinition %s/%s not found: create it, or fix spec.definitionRef", ref.Namespace, ref.Name), nil}
		}
		in.definition, in.definitionNamespace = ref.Name, ref.Namespace
		in.template = def.Spec
		if err := ValidateDefinition(in.template); err != nil {
			return &problem{ReasonInvalidDefinition, fmt.Sprintf("ChallengeDefinition %s/%s: %v", ref.Namespace, ref.Name, err), &in.template}
		}
	}
	if flag := in.template.Flag; flag != nil && flag.Dynamic && len(cfg.FlagKey) == 0 && cfg.DynamicFlagPlaceholder == "" {
		return &problem{ReasonFlagKeyMissing,
			"the template asks for a dynamic flag but the hook has no flag key: give it one (--flag-key-file; in-cluster, the Secret challenge-hook-flag-key) and restart the hook", &in.template}
	}
	return nil
}

// definitionNamespaceAllowed says whether a definitionRef may point to namespace: any, unless
// cfg.DefinitionNamespaces lists the allowed ones.
func definitionNamespaceAllowed(cfg Config, namespace string) bool {
	return len(cfg.DefinitionNamespaces) == 0 || slices.Contains(cfg.DefinitionNamespaces, namespace)
}

func findDefinition(defs []ChallengeDefinition, ref DefinitionRef) (ChallengeDefinition, bool) {
	for _, def := range defs {
		if def.Metadata.Name == ref.Name && (def.Metadata.Namespace == ref.Namespace || def.Metadata.Namespace == "") {
			return def, true
		}
	}
	return ChallengeDefinition{}, false
}

func validateChallengeSpec(parent Challenge) error {
	if errs := validation.IsDNS1035Label(parent.Metadata.Name); len(errs) > 0 {
		return fmt.Errorf("metadata.name %q: children are named after the Challenge, so it must be a DNS-1035 label: %s",
			parent.Metadata.Name, strings.Join(errs, "; "))
	}
	spec := parent.Spec
	if spec.Owner == "" {
		return errors.New("spec.owner is required")
	}
	if len(spec.Owner) > validation.LabelValueMaxLength {
		return fmt.Errorf("spec.owner is %d characters long; it is copied to a label, so at most %d", len(spec.Owner), validation.LabelValueMaxLength)
	}
	if errs := validation.IsValidLabelValue(spec.Owner); len(errs) > 0 {
		return fmt.Errorf("spec.owner %q must be a valid label value: %s", spec.Owner, strings.Join(errs, "; "))
	}
	if (spec.Template == nil) == (spec.DefinitionRef == nil) {
		return errors.New("set exactly one of spec.definitionRef and spec.template")
	}
	if ref := spec.DefinitionRef; ref != nil {
		// The name is also the value of the definition label, so it must fit in 63 characters.
		errs := validation.IsDNS1123Subdomain(ref.Name)
		errs = append(errs, validation.IsValidLabelValue(ref.Name)...)
		if len(errs) > 0 {
			return fmt.Errorf("spec.definitionRef.name %q: %s", ref.Name, strings.Join(errs, "; "))
		}
	}
	if spec.Timeout != "" {
		if _, err := parsePositiveDuration(spec.Timeout); err != nil {
			return fmt.Errorf("spec.timeout: %w", err)
		}
	}
	for _, field := range [][2]string{{"expiresAt", spec.ExpiresAt}, {"restartedAt", spec.RestartedAt}} {
		if _, err := time.Parse(time.RFC3339, field[1]); field[1] != "" && err != nil {
			return fmt.Errorf("spec.%s %q is not an RFC 3339 time such as 2026-11-01T12:00:00Z", field[0], field[1])
		}
	}
	return nil
}

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration such as 30m or 1h30m", s)
	}
	return d, nil
}

// Limits shared with the CRD schema.
const (
	maxContainers = 8
	maxExpose     = 8
	maxExposeFrom = 8
	maxPeerLabels = 16
	maxFlagPrefix = 32
)

var flagPrefixPattern = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

var validProtocols = map[string]bool{"TCP": true, "UDP": true, "SCTP": true}

// ValidateDefinition checks a template. The error names the field and says what is expected.
func ValidateDefinition(spec DefinitionSpec) error {
	if len(spec.Containers) == 0 || len(spec.Containers) > maxContainers {
		return fmt.Errorf("containers: need 1 to %d containers, got %d", maxContainers, len(spec.Containers))
	}
	portProtocol := map[int32]string{}
	containerNames := map[string]bool{}
	portNames := map[string]bool{}
	for i, c := range spec.Containers {
		field := fmt.Sprintf("containers[%d]", i)
		if err := validateContainer(c, field); err != nil {
			return err
		}
		if containerNames[c.Name] {
			return fmt.Errorf("%s.name: %q is used twice", field, c.Name)
		}
		containerNames[c.Name] = true
		for j, p := range c.Ports {
			if _, taken := portProtocol[p.ContainerPort]; taken {
				return fmt.Errorf("%s.ports[%d]: port %d is used twice in the Pod", field, j, p.ContainerPort)
			}
			portProtocol[p.ContainerPort] = protocolOf(p)
			if p.Name != "" {
				if portNames[p.Name] {
					return fmt.Errorf("%s.ports[%d].name: %q is used twice in the Pod", field, j, p.Name)
				}
				portNames[p.Name] = true
			}
		}
	}
	if err := validateExpose(spec.Expose, portProtocol); err != nil {
		return err
	}
	var timeout, maxLifetime time.Duration
	var err error
	if spec.Timeout != "" {
		if timeout, err = parsePositiveDuration(spec.Timeout); err != nil {
			return fmt.Errorf("timeout: %w", err)
		}
	}
	if spec.MaxLifetime != "" {
		if maxLifetime, err = parsePositiveDuration(spec.MaxLifetime); err != nil {
			return fmt.Errorf("maxLifetime: %w", err)
		}
	}
	if timeout > 0 && maxLifetime > 0 && timeout > maxLifetime {
		return fmt.Errorf("timeout %s is longer than maxLifetime %s", spec.Timeout, spec.MaxLifetime)
	}
	if err := validateFlag(spec.Flag, spec.Containers); err != nil {
		return err
	}
	if spec.RuntimeClassName != "" {
		if errs := validation.IsDNS1123Subdomain(spec.RuntimeClassName); len(errs) > 0 {
			return fmt.Errorf("runtimeClassName %q: %s", spec.RuntimeClassName, strings.Join(errs, "; "))
		}
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && (*g < 1 || *g > maxTerminationGracePeriod) {
		return fmt.Errorf("terminationGracePeriodSeconds: %d is not between 1 and %d", *g, maxTerminationGracePeriod)
	}
	if sec := spec.Security; sec != nil && sec.RunAsUser != nil {
		if *sec.RunAsUser < 0 {
			return fmt.Errorf("security.runAsUser: %d is negative", *sec.RunAsUser)
		}
		if *sec.RunAsUser == 0 && !sec.RunAsRoot {
			return errors.New("security.runAsUser: 0 is root; set security.runAsRoot: true to run as root")
		}
	}
	return nil
}

func validateContainer(c Container, field string) error {
	if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
		return fmt.Errorf("%s.name %q: %s", field, c.Name, strings.Join(errs, "; "))
	}
	if strings.TrimSpace(c.Image) == "" || strings.ContainsAny(c.Image, " \t\n") {
		return fmt.Errorf("%s.image %q: must be an image reference such as registry.example/chal:1.0", field, c.Image)
	}
	for j, env := range c.Env {
		if errs := validation.IsEnvVarName(env.Name); len(errs) > 0 {
			return fmt.Errorf("%s.env[%d].name %q: %s", field, j, env.Name, strings.Join(errs, "; "))
		}
	}
	for j, p := range c.Ports {
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			return fmt.Errorf("%s.ports[%d].containerPort: %d is not between 1 and 65535", field, j, p.ContainerPort)
		}
		if p.Protocol != "" && !validProtocols[p.Protocol] {
			return fmt.Errorf("%s.ports[%d].protocol: %q is not TCP, UDP or SCTP", field, j, p.Protocol)
		}
		if p.Name != "" {
			if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
				return fmt.Errorf("%s.ports[%d].name %q: %s", field, j, p.Name, strings.Join(errs, "; "))
			}
		}
	}
	if r := c.Resources; r != nil {
		if err := validateResources(*r, field+".resources"); err != nil {
			return err
		}
	}
	if p := c.ReadinessProbe; p != nil {
		if err := validateProbe(*p, field+".readinessProbe"); err != nil {
			return err
		}
	}
	return nil
}

// resourceNames are the resources a template may set, in the order they are checked.
var resourceNames = []string{"cpu", "ephemeral-storage", "memory"}

func validateResources(r ResourceRequirements, field string) error {
	// Known names in a fixed order, so that the first error reported is the same on every sync.
	for _, list := range []struct {
		name   string
		values map[string]string
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		known := 0
		for _, name := range resourceNames {
			value, ok := list.values[name]
			if !ok {
				continue
			}
			known++
			if _, err := resource.ParseQuantity(value); err != nil {
				return fmt.Errorf("%s.%s.%s: %q is not a quantity such as 500m or 256Mi", field, list.name, name, value)
			}
		}
		if known < len(list.values) {
			for _, name := range slices.Sorted(maps.Keys(list.values)) {
				if !slices.Contains(resourceNames, name) {
					return fmt.Errorf("%s.%s: %q is not cpu, memory or ephemeral-storage", field, list.name, name)
				}
			}
		}
	}
	for _, name := range resourceNames {
		request, hasRequest := r.Requests[name]
		limit, hasLimit := r.Limits[name]
		if !hasRequest || !hasLimit {
			continue
		}
		requested, limited := resource.MustParse(request), resource.MustParse(limit)
		if requested.Cmp(limited) > 0 {
			return fmt.Errorf("%s: the %s request %s is above its limit %s", field, name, request, limit)
		}
	}
	return nil
}

func validateProbe(p Probe, field string) error {
	handlers := 0
	if p.TCPSocket != nil {
		handlers++
		if err := validatePort(p.TCPSocket.Port, field+".tcpSocket.port"); err != nil {
			return err
		}
	}
	if p.HTTPGet != nil {
		handlers++
		if err := validatePort(p.HTTPGet.Port, field+".httpGet.port"); err != nil {
			return err
		}
		if p.HTTPGet.Path != "" && !strings.HasPrefix(p.HTTPGet.Path, "/") {
			return fmt.Errorf("%s.httpGet.path %q must start with /", field, p.HTTPGet.Path)
		}
	}
	if p.Exec != nil {
		handlers++
		if len(p.Exec.Command) == 0 {
			return fmt.Errorf("%s.exec.command must not be empty", field)
		}
	}
	if handlers != 1 {
		return fmt.Errorf("%s: set exactly one of tcpSocket, httpGet and exec", field)
	}
	if p.InitialDelaySeconds < 0 || p.PeriodSeconds < 0 || p.TimeoutSeconds < 0 || p.FailureThreshold < 0 {
		return fmt.Errorf("%s: seconds and thresholds must not be negative", field)
	}
	return nil
}

func validatePort(port int32, field string) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("%s: %d is not between 1 and 65535", field, port)
	}
	return nil
}

func validateExpose(expose []Expose, portProtocol map[int32]string) error {
	if len(expose) > maxExpose {
		return fmt.Errorf("expose: at most %d entries, got %d", maxExpose, len(expose))
	}
	seen := map[int32]bool{}
	serviceType := ""
	routedCount := map[string]int{}
	for i, e := range expose {
		field := fmt.Sprintf("expose[%d]", i)
		protocol, ok := portProtocol[e.Port]
		if !ok {
			return fmt.Errorf("%s.port: %d is not a containerPort of any container", field, e.Port)
		}
		if seen[e.Port] {
			return fmt.Errorf("%s.port: %d is exposed twice", field, e.Port)
		}
		seen[e.Port] = true
		kind, known := exposureKindOf(e.Type)
		switch {
		case !known:
			return fmt.Errorf("%s.type: %q is not %s", field, e.Type, exposureTypeNames())
		case kind.routed:
			// Routed by the instance's one host: one of each type at most.
			routedCount[e.Type]++
			if routedCount[e.Type] > 1 {
				return fmt.Errorf("%s: at most one %s exposure per instance", field, e.Type)
			}
			if protocol != "TCP" {
				return fmt.Errorf("%s: %s needs a TCP port, port %d is %s", field, e.Type, e.Port, protocol)
			}
		default:
			if serviceType != "" && serviceType != e.Type {
				return fmt.Errorf("%s.type: %s and %s cannot be mixed: all exposures other than HTTP and TLS share one Service", field, serviceType, e.Type)
			}
			serviceType = e.Type
		}
		if err := validateExposeFrom(e, kind, field); err != nil {
			return err
		}
	}
	return nil
}

// validateExposeFrom checks the peers of a ClusterIP exposure: its only sources, so it needs at
// least one, and each must say which Pods it means.
func validateExposeFrom(e Expose, kind exposureKind, field string) error {
	if kind.entry != entryNamedPeers {
		if len(e.From) > 0 {
			return fmt.Errorf("%s.from: only ClusterIP exposures name their peers; %s traffic comes from %s", field, e.Type, kind.source)
		}
		return nil
	}
	if len(e.From) == 0 || len(e.From) > maxExposeFrom {
		return fmt.Errorf("%s.from: a ClusterIP exposure admits only the Pods it names (an admin bot, a checker): need 1 to %d peers, got %d",
			field, maxExposeFrom, len(e.From))
	}
	for j, peer := range e.From {
		peerField := fmt.Sprintf("%s.from[%d]", field, j)
		if peer.Namespace == "" && len(peer.PodLabels) == 0 {
			return fmt.Errorf("%s: set namespace, podLabels or both", peerField)
		}
		if peer.Namespace != "" {
			if errs := validation.IsDNS1123Label(peer.Namespace); len(errs) > 0 {
				return fmt.Errorf("%s.namespace %q: %s", peerField, peer.Namespace, strings.Join(errs, "; "))
			}
		}
		if len(peer.PodLabels) > maxPeerLabels {
			return fmt.Errorf("%s.podLabels: at most %d labels, got %d", peerField, maxPeerLabels, len(peer.PodLabels))
		}
		// Sorted, so that the first error reported is the same on every sync.
		for _, key := range slices.Sorted(maps.Keys(peer.PodLabels)) {
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				return fmt.Errorf("%s.podLabels: key %q: %s", peerField, key, strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(peer.PodLabels[key]); len(errs) > 0 {
				return fmt.Errorf("%s.podLabels[%q]: value %q: %s", peerField, key, peer.PodLabels[key], strings.Join(errs, "; "))
			}
		}
	}
	return nil
}

func validateFlag(flag *Flag, containers []Container) error {
	if flag == nil {
		return nil
	}
	if (flag.Value == "") == !flag.Dynamic {
		return errors.New("flag: set exactly one of value and dynamic: true")
	}
	if flag.Env == "" && flag.Path == "" {
		return errors.New("flag: set env, path or both, to say how the flag reaches the containers")
	}
	if flag.Env != "" {
		if errs := validation.IsEnvVarName(flag.Env); len(errs) > 0 {
			return fmt.Errorf("flag.env %q: %s", flag.Env, strings.Join(errs, "; "))
		}
		for _, c := range containers {
			for _, env := range c.Env {
				if env.Name == flag.Env {
					return fmt.Errorf("flag.env %q: container %q already sets it", flag.Env, c.Name)
				}
			}
		}
	}
	if flag.Path != "" {
		if !path.IsAbs(flag.Path) || path.Clean(flag.Path) != flag.Path || flag.Path == "/" || flag.Path == "/tmp" {
			return fmt.Errorf("flag.path %q must be a clean absolute file path such as /flag.txt", flag.Path)
		}
	}
	if flag.Prefix != "" && !ValidFlagPrefix(flag.Prefix) {
		return fmt.Errorf("flag.prefix %q: at most %d letters, digits or underscores", flag.Prefix, maxFlagPrefix)
	}
	return nil
}
