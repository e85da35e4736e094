package sync

import (
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Hardened defaults of every instance's Pod.
const (
	defaultCPURequest    = "50m"
	defaultMemoryRequest = "64Mi"
	defaultCPULimit      = "500m"
	defaultMemoryLimit   = "256Mi"
	// Ephemeral storage (container logs, a writable root filesystem when opted into) is bounded,
	// so that one instance cannot fill the node's disk under its co-tenants.
	defaultEphemeralStorageRequest = "64Mi"
	defaultEphemeralStorageLimit   = "512Mi"
	// progressDeadline is how long a Pod may take to become ready before the instance is an Error.
	progressDeadline = 120 * time.Second
	// defaultTerminationGracePeriod is how long a Pod's processes get after SIGTERM: short, because
	// a player's process that ignores it keeps running until SIGKILL, isolated by a policy that
	// waits for it. A definition may set its own, up to v1alpha1.MaxTerminationGracePeriodSeconds.
	defaultTerminationGracePeriod int64 = 5
	tmpVolumeName                       = "tmp"
	// tmpSizeLimit bounds /tmp, which is memory-backed: it counts in the container's memory limit
	// instead of the node's disk.
	tmpSizeLimit   = "64Mi"
	flagVolumeName = "flag"
	flagFileMode   = 0o444
	// noResolver is the only nameserver of a Pod that may not query DNS (see usesDNS).
	noResolver = "127.0.0.1"
)

// buildPod returns a component's workload: one Pod named after the Challenge (a template of
// containers) or <challenge>-<pod>, which passes Pod Security "restricted" unless the template
// opts out. The CompositeController declares Pods with
// updateStrategy Recreate: Metacontroller deletes and creates the Pod again when this answer
// changes it (a new definition, a new flag through the flag hash annotation, a restart through
// the restarted-at annotation), never otherwise.
func buildPod(in *instance, c *component) *corev1ac.PodApplyConfiguration {
	pod := corev1ac.Pod(c.child, in.namespace).
		WithLabels(c.labels).
		WithSpec(buildPodSpec(in, c).
			WithRestartPolicy(corev1.RestartPolicyAlways).
			WithActiveDeadlineSeconds(activeDeadline(in.template, in.cfg)))
	annotations := map[string]string{}
	if c.mountsFlag {
		annotations[AnnotationFlagHash] = flagHash(in)
	}
	if in.restartedAt != "" {
		annotations[AnnotationRestartedAt] = in.restartedAt
	}
	if len(annotations) > 0 {
		pod.WithAnnotations(annotations)
	}
	return pod
}

// activeDeadline is the kubelet's backstop: it ends the Pod this many seconds after it started,
// even when Metacontroller or the hook is down, or an orphaning delete took the Challenge away. It
// is the instance's maximum lifetime, which no extension passes and which counts from the
// instance's start, never later than the Pod's: the backstop never ends a Pod before its
// instance's deadline. It depends on the template alone, so it never changes the Pod on a resync.
func activeDeadline(t v1alpha1.DefinitionSpec, cfg Config) int64 {
	maxLifetime := cfg.DefaultMaxLifetime
	if d, err := time.ParseDuration(t.MaxLifetime); err == nil && d > 0 {
		maxLifetime = d
	}
	return int64(math.Ceil(maxLifetime.Seconds()))
}

// buildPodSpec is the hardened Pod of an instance. Optional values are set only when the template
// sets them: an empty value the API server drops would differ from the live object on every sync.
func buildPodSpec(in *instance, c *component) *corev1ac.PodSpecApplyConfiguration {
	t := in.template
	pod := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(terminationGracePeriod(t)).
		WithSecurityContext(podSecurityContext(c.spec.Security))
	if t.RuntimeClassName != "" {
		pod.WithRuntimeClassName(t.RuntimeClassName)
	}
	pod.WithHostAliases(in.peerAliases(c)...)
	if !usesDNS(c) {
		// Its NetworkPolicy admits no DNS: a resolver the policy drops would make every lookup
		// wait for its timeouts (seconds for each search domain). Nothing listens on loopback's
		// port 53, so a lookup fails at once; its peers are in /etc/hosts.
		pod.WithDNSPolicy(corev1.DNSNone).WithDNSConfig(corev1ac.PodDNSConfig().WithNameservers(noResolver))
	}
	if in.cfg.PolicyGate.Enabled {
		pod.WithInitContainers(buildPolicyGate(in.cfg.PolicyGate))
	}
	files := buildPodFiles(in, c)
	pod.WithVolumes(files.volumes...)
	for _, ct := range c.spec.Containers {
		pod.WithContainers(buildContainer(t, ct, c.spec.Security, files))
	}
	return pod
}

// terminationGracePeriod is the template's grace period, or the default.
func terminationGracePeriod(t v1alpha1.DefinitionSpec) int64 {
	if t.TerminationGracePeriodSeconds != nil {
		return *t.TerminationGracePeriodSeconds
	}
	return defaultTerminationGracePeriod
}

// podSecurityContext is the Pod's: the runtime's seccomp profile, not root unless the template
// opts out, the template's user if it names one.
func podSecurityContext(security *v1alpha1.Security) *corev1ac.PodSecurityContextApplyConfiguration {
	podSecurity := corev1ac.PodSecurityContext().WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
	if security == nil || !security.RunAsRoot {
		podSecurity.WithRunAsNonRoot(true)
	}
	if security != nil && security.RunAsUser != nil {
		podSecurity.WithRunAsUser(*security.RunAsUser)
	}
	return podSecurity
}

// readOnlyRoot: the containers' root filesystem is read-only unless the template opts out.
func readOnlyRoot(security *v1alpha1.Security) bool {
	return security == nil || security.ReadOnlyRootFilesystem == nil || *security.ReadOnlyRootFilesystem
}

// podFiles are the Pod's volumes and what its containers mount or read from them.
type podFiles struct {
	volumes []*corev1ac.VolumeApplyConfiguration
	// mounts are every container's: the writable /tmp of a read-only root filesystem.
	mounts []*corev1ac.VolumeMountApplyConfiguration
	// flagMount is the flag file of the containers that receive the flag (nil: no flag file).
	flagMount *corev1ac.VolumeMountApplyConfiguration
	// flagEnv is the flag variable of the containers that receive the flag (nil: no variable).
	flagEnv *corev1ac.EnvVarApplyConfiguration
}

// buildPodFiles returns the component's volumes: /tmp with a read-only root filesystem, and the
// flag's Secret where the component receives the flag.
func buildPodFiles(in *instance, c *component) podFiles {
	var files podFiles
	if readOnlyRoot(c.spec.Security) {
		// Most programs need a writable /tmp; it is the only writable path, bounded, and in memory.
		files.volumes = append(files.volumes, corev1ac.Volume().WithName(tmpVolumeName).WithEmptyDir(corev1ac.EmptyDirVolumeSource().
			WithMedium(corev1.StorageMediumMemory).
			WithSizeLimit(resource.MustParse(tmpSizeLimit))))
		files.mounts = append(files.mounts, corev1ac.VolumeMount().WithName(tmpVolumeName).WithMountPath("/tmp"))
	}
	f := in.template.Flag
	if f == nil || !c.mountsFlag {
		return files
	}
	if f.Path != "" {
		base := pathBase(f.Path)
		files.volumes = append(files.volumes, corev1ac.Volume().WithName(flagVolumeName).WithSecret(corev1ac.SecretVolumeSource().
			WithSecretName(in.flagSecretName()).
			WithItems(corev1ac.KeyToPath().WithKey(flagSecretKey).WithPath(base)).
			WithDefaultMode(flagFileMode)))
		files.flagMount = corev1ac.VolumeMount().WithName(flagVolumeName).WithMountPath(f.Path).WithSubPath(base).WithReadOnly(true)
	}
	if f.Env != "" {
		files.flagEnv = corev1ac.EnvVar().WithName(f.Env).WithValueFrom(corev1ac.EnvVarSource().
			WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(in.flagSecretName()).WithKey(flagSecretKey)))
	}
	return files
}

// buildContainer is a hardened container of the template: no privilege escalation unless the
// template allows it, no capabilities, the root filesystem read-only unless the template opts out,
// default resources, a readiness probe, and the flag where it receives it.
func buildContainer(t v1alpha1.DefinitionSpec, ct v1alpha1.Container, security *v1alpha1.Security, files podFiles) *corev1ac.ContainerApplyConfiguration {
	flag := receivesFlag(t, ct)
	mounts := files.mounts
	if flag && files.flagMount != nil {
		mounts = append(slices.Clip(mounts), files.flagMount)
	}
	requests, limits := containerResources(ct.Resources)
	out := corev1ac.Container().
		WithName(ct.Name).
		WithImage(ct.Image).
		WithCommand(ct.Command...).
		WithArgs(ct.Args...).
		WithResources(corev1ac.ResourceRequirements().WithRequests(requests).WithLimits(limits)).
		WithVolumeMounts(mounts...).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(security != nil && security.AllowPrivilegeEscalation).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
			WithReadOnlyRootFilesystem(readOnlyRoot(security)))
	if probe := readinessProbe(ct); probe != nil {
		out.WithReadinessProbe(probe)
	}
	for _, p := range ct.Ports {
		port := corev1ac.ContainerPort().WithContainerPort(p.ContainerPort).WithProtocol(corev1.Protocol(protocolOf(p)))
		if p.Name != "" {
			port.WithName(p.Name)
		}
		out.WithPorts(port)
	}
	for _, e := range ct.Env {
		env := corev1ac.EnvVar().WithName(e.Name)
		if e.Value != "" {
			env.WithValue(e.Value)
		}
		out.WithEnv(env)
	}
	if flag && files.flagEnv != nil {
		out.WithEnv(files.flagEnv)
	}
	return out
}

func pathBase(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// containerResources fills in default requests and limits. Quantities are encoded in the API
// server's canonical form ("0.5" becomes "500m"), which is what it stores: any other spelling would
// differ from the live object on every sync.
func containerResources(r *v1alpha1.ResourceRequirements) (requests, limits corev1.ResourceList) {
	requests = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(defaultCPURequest),
		corev1.ResourceMemory:           resource.MustParse(defaultMemoryRequest),
		corev1.ResourceEphemeralStorage: resource.MustParse(defaultEphemeralStorageRequest),
	}
	limits = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(defaultCPULimit),
		corev1.ResourceMemory:           resource.MustParse(defaultMemoryLimit),
		corev1.ResourceEphemeralStorage: resource.MustParse(defaultEphemeralStorageLimit),
	}
	if r == nil {
		return requests, limits
	}
	for name, value := range r.Requests {
		requests[corev1.ResourceName(name)] = resource.MustParse(string(value))
	}
	for name, value := range r.Limits {
		limits[corev1.ResourceName(name)] = resource.MustParse(string(value))
	}
	// A default must never contradict what the template set: a lone limit below the default
	// request lowers the request; a lone request above the default limit raises the limit.
	for name, request := range requests {
		_, setRequest := r.Requests[string(name)]
		_, setLimit := r.Limits[string(name)]
		limit, hasLimit := limits[name]
		if !hasLimit || setRequest == setLimit || request.Cmp(limit) <= 0 {
			continue
		}
		if setLimit {
			requests[name] = limit
		} else {
			limits[name] = request
		}
	}
	return requests, limits
}

// readinessProbe is the template's probe, or by default a TCP connect to the container's first TCP
// port. Every field the API server would default is written out.
func readinessProbe(c v1alpha1.Container) *corev1ac.ProbeApplyConfiguration {
	p := c.ReadinessProbe
	if p == nil {
		for _, port := range c.Ports {
			if protocolOf(port) == "TCP" {
				return corev1ac.Probe().
					WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromInt32(port.ContainerPort))).
					WithPeriodSeconds(5).WithTimeoutSeconds(1).WithSuccessThreshold(1).WithFailureThreshold(3)
			}
		}
		return nil
	}
	out := corev1ac.Probe().
		WithPeriodSeconds(orDefault(p.PeriodSeconds, 5)).
		WithTimeoutSeconds(orDefault(p.TimeoutSeconds, 1)).
		WithSuccessThreshold(1).
		WithFailureThreshold(orDefault(p.FailureThreshold, 3))
	if p.InitialDelaySeconds != 0 {
		out.WithInitialDelaySeconds(p.InitialDelaySeconds)
	}
	switch {
	case p.TCPSocket != nil:
		out.WithTCPSocket(corev1ac.TCPSocketAction().WithPort(intstr.FromInt32(p.TCPSocket.Port)))
	case p.HTTPGet != nil:
		path := p.HTTPGet.Path
		if path == "" {
			path = "/"
		}
		out.WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromInt32(p.HTTPGet.Port)).WithScheme(corev1.URISchemeHTTP))
	case p.Exec != nil:
		out.WithExec(corev1ac.ExecAction().WithCommand(p.Exec.Command...))
	}
	return out
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}

// peerAliases make a component's Pod resolve each peer it reaches by the peer's name, to the
// ClusterIP of the peer's internal Service: in /etc/hosts, whatever the cluster's DNS and search
// path. The Pod waits for those Services (podPrerequisite); a Service created again with a new
// ClusterIP changes the Pod, which Metacontroller then replaces.
func (in *instance) peerAliases(c *component) []*corev1ac.HostAliasApplyConfiguration {
	var aliases []*corev1ac.HostAliasApplyConfiguration
	for _, p := range c.peers {
		if svc, found := findByName(in.observed.Services, p.peer.internalService()); found && hasClusterIP(svc) {
			aliases = append(aliases, corev1ac.HostAlias().WithIP(svc.Spec.ClusterIP).WithHostnames(p.peer.name))
		}
	}
	return aliases
}

// hasClusterIP: the Service has a virtual IP (not headless, and allocated).
func hasClusterIP(svc ObservedService) bool {
	return svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone
}
