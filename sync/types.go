// Package sync is the heart of challenge-hook: a pure function from what Metacontroller observed to
// the children that should exist and the status the Challenge should show. It does no I/O; callers
// decode the request, pass a clock reading and configuration, and encode the response.
package sync

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// API names fixed by the design, shared by manifests, golden files and outside checks.
const (
	Group       = "ctf.challenge-hook.dev"
	Version     = "v1alpha1"
	APIVersion  = Group + "/" + Version
	LabelPrefix = Group + "/"

	LabelChallenge  = LabelPrefix + "challenge"
	LabelDefinition = LabelPrefix + "definition"
	LabelOwner      = LabelPrefix + "owner"
	LabelInstance   = LabelPrefix + "instance"
	LabelManagedBy  = "app.kubernetes.io/managed-by"
	ManagedByValue  = "challenge-hook"

	// AnnotationFlagHash on the Pod changes with the flag (see flagHash).
	AnnotationFlagHash = LabelPrefix + "flag-hash"
	// AnnotationRestartedAt on the Pod is the Challenge's spec.restartedAt: a new value changes the
	// Pod, and Metacontroller (updateStrategy Recreate) replaces it.
	AnnotationRestartedAt = LabelPrefix + "restarted-at"

	// LastAppliedAnnotation is where Metacontroller keeps the child exactly as a hook last returned it.
	LastAppliedAnnotation = "metacontroller.k8s.io/last-applied-configuration"
)

// Config is the hook's configuration: everything the answer depends on besides the request and the clock.
type Config struct {
	// PublicHost is the host players use for NodePort endpoints (a node's public name or address).
	PublicHost string
	// IngressDomain is the parent domain of per-instance HTTP hosts: <instanceId>.<IngressDomain>.
	IngressDomain string
	// IngressClassName is set on Ingress children when not empty.
	IngressClassName string
	// IngressScheme is "http" or "https": the scheme of HTTP endpoint URLs.
	IngressScheme string
	// ClusterDomain is the cluster's DNS suffix, for ClusterIP endpoints.
	ClusterDomain string
	// DefaultTimeout is an instance's lifetime when neither the Challenge nor its definition sets one.
	DefaultTimeout time.Duration
	// DefaultMaxLifetime caps the lifetime, extensions included, when the definition sets no maxLifetime.
	DefaultMaxLifetime time.Duration
	// ExpiryWarning is how long before its deadline an instance's ExpiringSoon condition is True
	// (and the hook asks to be woken then); zero never warns.
	ExpiryWarning time.Duration
	// FlagKey is the HMAC key for dynamic flags; empty means dynamic flags are refused.
	FlagKey []byte
	// DynamicFlagPlaceholder, when FlagKey is empty, is every dynamic flag instead of a refusal: for
	// `render` without a key, never for a serving hook.
	DynamicFlagPlaceholder string

	// Where the cluster's networks and platform Pods are, for each instance's NetworkPolicy.
	// CIDRs are IPv4 prefixes in canonical form (the hook's flags check them).

	// PodCIDRs are the cluster's Pod networks: never an egress destination, and the sources a
	// NodePort or LoadBalancer exposure refuses. Empty: every private and CGNAT range stands in.
	PodCIDRs []string
	// ServiceCIDRs are the cluster's Service networks: never an egress destination.
	ServiceCIDRs []string
	// NodeCIDRs and APIServerCIDRs are the nodes' and the API server's addresses, never an egress
	// destination; needed only where they are public (private ranges are refused anyway).
	NodeCIDRs      []string
	APIServerCIDRs []string
	// DNS selects the cluster DNS Pods, the only in-cluster egress destination (port 53).
	DNS PodPeer
	// NodeLocalDNS is the address of a node-local DNS cache, also allowed on port 53; empty: none.
	NodeLocalDNS string
	// IngressController selects the ingress controller's Pods, the only source of HTTP exposures.
	IngressController PodPeer

	// Gateway, when set, is the Gateway API Gateway that routes players to instances: HTTP exposures
	// become HTTPRoutes attached to it instead of Ingresses, and TLS exposures (which need it)
	// become TLSRoutes.
	Gateway *GatewayRef
	// GatewaySectionName is the listener of the Gateway that HTTPRoutes attach to (empty: every
	// listener that admits them).
	GatewaySectionName string
	// GatewayTLSSectionName is the listener of the Gateway that TLSRoutes attach to (empty: every
	// listener that admits them).
	GatewayTLSSectionName string
	// GatewayTLSPort is the port of the Gateway's TLS listener, the port of TLS endpoints.
	GatewayTLSPort int32
	// GatewayDataPlane selects the Gateway's Pods, the only source of routed exposures when a
	// Gateway is set. Empty namespace: the Gateway's; no labels: the Gateway API's
	// gateway.networking.k8s.io/gateway-name=<name>.
	GatewayDataPlane PodPeer

	// Trust switches: how much the hook believes of a Challenge, whose author (the platform) is
	// not the organizer who writes ChallengeDefinitions. The zero values trust it fully.

	// RefuseInlineTemplates refuses every Challenge with an inline spec.template (InvalidSpec):
	// then only ChallengeDefinitions say which images and commands run.
	RefuseInlineTemplates bool
	// DefinitionNamespaces, when not empty, are the only namespaces a spec.definitionRef may point
	// to: a reference elsewhere is refused (InvalidSpec), and Customize does not even ask
	// Metacontroller for it. Empty: any namespace.
	DefinitionNamespaces []string
}

// PodPeer selects Pods by namespace and, optionally, labels.
type PodPeer struct {
	Namespace string
	Labels    map[string]string
}

// DefaultConfig returns the configuration the binary starts with when nothing is set.
func DefaultConfig() Config {
	return Config{
		PublicHost:         "localhost",
		IngressDomain:      "challenges.localhost",
		IngressScheme:      "http",
		ClusterDomain:      "cluster.local",
		DefaultTimeout:     30 * time.Minute,
		DefaultMaxLifetime: 24 * time.Hour,
		ExpiryWarning:      5 * time.Minute,
		DNS:                PodPeer{Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		IngressController:  PodPeer{Namespace: "ingress-nginx"},
		GatewayTLSPort:     443,
	}
}

// Request is a decoded sync or finalize request: the parent and what Metacontroller observed.
type Request struct {
	Parent     Challenge
	Children   ObservedChildren
	Related    Related
	Finalizing bool

	// DeclaredChildTypes are the child types the CompositeController declares
	// (controller.spec.childResources): a child of another type must not be returned.
	DeclaredChildTypes []ChildResource
}

// ChildResource is one entry of the CompositeController's spec.childResources, as the hook reads it.
type ChildResource struct {
	APIVersion string `json:"apiVersion"`
	Resource   string `json:"resource"`
}

// CompositeController is the part of the request's controller the hook reads.
type CompositeController struct {
	Spec struct {
		ChildResources []ChildResource `json:"childResources"`
	} `json:"spec"`
}

// ObservedChildren are the live children Metacontroller found, each list sorted by namespace and name.
type ObservedChildren struct {
	Pods            []ObservedPod
	Services        []ObservedService
	NetworkPolicies []ObservedObject
	Ingresses       []ObservedObject
	HTTPRoutes      []ObservedRoute
	TLSRoutes       []ObservedRoute
	Secrets         []ObservedObject
	// Deployments were the workload before Pods were. The hook never returns one, so
	// Metacontroller deletes them where the CompositeController still lists deployments (the
	// upgrade, see the README).
	Deployments []ObservedObject
}

// Related are the objects the customize hook asked for: the referenced definition.
type Related struct {
	Definitions []ChallengeDefinition
}

// ObjectMeta holds the metadata fields the hook reads.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	DeletionTimestamp string            `json:"deletionTimestamp,omitempty"`
}

// The observed types below mirror the Kubernetes objects Metacontroller sends, with only the
// fields the hook reads: the decoder skips everything else (managedFields, specs it does not read).

// ObservedObject is what the hook keeps of any observed child: its identity and the configuration
// Metacontroller last applied, which is returned as is when the hook must not change the child.
type ObservedObject struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   ObservedMeta `json:"metadata"`
}

// ObservedMeta is an observed child's metadata and the one annotation the hook reads.
type ObservedMeta struct {
	ObjectMeta
	Annotations ObservedAnnotations `json:"annotations"`
}

// ObservedAnnotations holds the annotations the hook reads: the one in which Metacontroller keeps
// the child exactly as a hook last returned it (JSON), and the Pod's restart.
type ObservedAnnotations struct {
	LastApplied string `json:"metacontroller.k8s.io/last-applied-configuration"`
	// RestartedAt is the restart a Pod was created for (see AnnotationRestartedAt).
	RestartedAt string `json:"ctf.challenge-hook.dev/restarted-at"`
}

// ObservedService adds the allocated node ports and load-balancer addresses, in the Kubernetes
// types.
type ObservedService struct {
	ObservedObject
	Spec   corev1.ServiceSpec   `json:"spec"`
	Status corev1.ServiceStatus `json:"status"`
}

// ObservedRoute is a Gateway API HTTPRoute or TLSRoute: its status says whether each parent
// Gateway accepted it.
type ObservedRoute struct {
	ObservedObject
	Status struct {
		Parents []RouteParentStatus `json:"parents"`
	} `json:"status"`
}

// RouteParentStatus is a route's status for one of its parents.
type RouteParentStatus struct {
	ParentRef struct {
		Group       string `json:"group"`
		Kind        string `json:"kind"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		SectionName string `json:"sectionName"`
	} `json:"parentRef"`
	Conditions []RouteCondition `json:"conditions"`
}

// RouteCondition is a condition of a route's parent status.
type RouteCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// ObservedGeneration is the route generation the Gateway's controller set the condition for.
	ObservedGeneration int64 `json:"observedGeneration"`
}

// GatewayRef names the Gateway that routes players to instances.
type GatewayRef struct {
	Namespace string
	Name      string
}

func (g GatewayRef) String() string { return g.Namespace + "/" + g.Name }

// ObservedPod is the instance's workload: its status, the Kubernetes type, is what the phase is
// computed from.
type ObservedPod struct {
	ObservedObject
	Status corev1.PodStatus `json:"status"`
}

// Challenge is one participant's instance, the parent resource.
type Challenge struct {
	APIVersion string                   `json:"apiVersion,omitempty"`
	Kind       string                   `json:"kind,omitempty"`
	Metadata   ObjectMeta               `json:"metadata"`
	Spec       v1alpha1.ChallengeSpec   `json:"spec"`
	Status     v1alpha1.ChallengeStatus `json:"status"`
}

// ChallengeSpec says which template to run, for whom, and for how long.
type ChallengeSpec struct {
	DefinitionRef *v1alpha1.DefinitionRef  `json:"definitionRef,omitempty"`
	Template      *v1alpha1.DefinitionSpec `json:"template,omitempty"`
	Owner         string                   `json:"owner,omitempty"`
	Timeout       string                   `json:"timeout,omitempty"`
	ExpiresAt     string                   `json:"expiresAt,omitempty"`
	// Stopped removes the workload and keeps the record, host and flag; false starts it again
	// within its lifetime, which keeps running while stopped.
	Stopped bool `json:"stopped,omitempty"`
	// RestartedAt is a time the platform sets (RFC 3339) to restart the Pod: any change replaces it,
	// with the same host, instance id and flag.
	RestartedAt string `json:"restartedAt,omitempty"`
}

// DefinitionRef names a ChallengeDefinition; the namespace defaults to the Challenge's.
type DefinitionRef struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// ChallengeDefinition is the template a challenge author writes once.
type ChallengeDefinition struct {
	APIVersion string                  `json:"apiVersion,omitempty"`
	Kind       string                  `json:"kind,omitempty"`
	Metadata   ObjectMeta              `json:"metadata"`
	Spec       v1alpha1.DefinitionSpec `json:"spec"`
}

// DefinitionSpec is the template of an instance: its Pod, how players reach it, and its lifetime.
type DefinitionSpec struct {
	Containers       []v1alpha1.Container `json:"containers,omitempty"`
	Expose           []v1alpha1.Expose    `json:"expose,omitempty"`
	Timeout          string               `json:"timeout,omitempty"`
	MaxLifetime      string               `json:"maxLifetime,omitempty"`
	Egress           bool                 `json:"egress,omitempty"`
	Flag             *v1alpha1.Flag       `json:"flag,omitempty"`
	RuntimeClassName string               `json:"runtimeClassName,omitempty"`
	Security         *v1alpha1.Security   `json:"security,omitempty"`
	// TerminationGracePeriodSeconds is how long the Pod's processes get after SIGTERM (default 5,
	// at most 30): while a Pod terminates its NetworkPolicy holds, and the player keeps a shell.
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
}

// Container is one container of the instance's Pod.
type Container struct {
	Name           string                         `json:"name"`
	Image          string                         `json:"image"`
	Command        []string                       `json:"command,omitempty"`
	Args           []string                       `json:"args,omitempty"`
	Env            []v1alpha1.EnvVar              `json:"env,omitempty"`
	Ports          []v1alpha1.ContainerPort       `json:"ports,omitempty"`
	Resources      *v1alpha1.ResourceRequirements `json:"resources,omitempty"`
	ReadinessProbe *v1alpha1.Probe                `json:"readinessProbe,omitempty"`
}

// EnvVar is a literal environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ContainerPort is a port a container listens on.
type ContainerPort struct {
	Name          string `json:"name,omitempty"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol,omitempty"`
}

// ResourceRequirements are quantities by resource name (cpu, memory, ephemeral-storage).
type ResourceRequirements struct {
	Requests map[string]v1alpha1.Quantity `json:"requests,omitempty"`
	Limits   map[string]v1alpha1.Quantity `json:"limits,omitempty"`
}

// Quantity is a Kubernetes quantity as its string, e.g. 250m, 1 or 256Mi.
type Quantity string

// Probe is a readiness probe: a TCP connect, an HTTP GET or a command.
type Probe struct {
	TCPSocket           *v1alpha1.TCPSocketAction `json:"tcpSocket,omitempty"`
	HTTPGet             *v1alpha1.HTTPGetAction   `json:"httpGet,omitempty"`
	Exec                *v1alpha1.ExecAction      `json:"exec,omitempty"`
	InitialDelaySeconds int32                     `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds       int32                     `json:"periodSeconds,omitempty"`
	TimeoutSeconds      int32                     `json:"timeoutSeconds,omitempty"`
	FailureThreshold    int32                     `json:"failureThreshold,omitempty"`
}

// TCPSocketAction probes by opening a TCP connection.
type TCPSocketAction struct {
	Port int32 `json:"port"`
}

// HTTPGetAction probes with an HTTP GET.
type HTTPGetAction struct {
	Path string `json:"path,omitempty"`
	Port int32  `json:"port"`
}

// ExecAction probes by running a command in the container.
type ExecAction struct {
	Command []string `json:"command,omitempty"`
}

// Exposure types: how players reach a port.
const (
	ExposeNodePort     = "NodePort"
	ExposeLoadBalancer = "LoadBalancer"
	ExposeHTTP         = "HTTP"
	ExposeTLS          = "TLS"
	ExposeClusterIP    = "ClusterIP"
)

// Expose publishes one container port to players.
type Expose struct {
	Port int32  `json:"port"`
	Type string `json:"type"`
	// From names the in-cluster Pods a ClusterIP exposure admits (an admin bot, a checker); only
	// ClusterIP exposures have it, and they need it.
	From []v1alpha1.ExposePeer `json:"from,omitempty"`
}

// ExposePeer selects Pods by namespace (default: the Challenge's) and labels (default: every Pod
// of the namespace). Another instance's Pod is never selected.
type ExposePeer struct {
	Namespace string                         `json:"namespace,omitempty"`
	PodLabels map[string]v1alpha1.LabelValue `json:"podLabels,omitempty"`
}

// LabelValue is a Kubernetes label value.
type LabelValue string

// Flag is the secret players hunt for: a static value, or one derived per owner.
type Flag struct {
	Value   string `json:"value,omitempty"`
	Dynamic bool   `json:"dynamic,omitempty"`
	// Prefix wraps a dynamic flag: <prefix>{<hex>}; default "flag".
	Prefix string `json:"prefix,omitempty"`
	// Env is the environment variable the flag is delivered in, in every container.
	Env string `json:"env,omitempty"`
	// Path is the file the flag is delivered in, in every container.
	Path string `json:"path,omitempty"`
}

// Security holds the opt-outs from the hardened Pod defaults.
type Security struct {
	RunAsRoot bool `json:"runAsRoot,omitempty"`
	// RunAsUser sets the user id, for images whose default user is root.
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// ReadOnlyRootFilesystem defaults to true; false opts out.
	ReadOnlyRootFilesystem *bool `json:"readOnlyRootFilesystem,omitempty"`
	// AllowPrivilegeEscalation lets setuid binaries raise privileges (setuid challenges).
	AllowPrivilegeEscalation bool `json:"allowPrivilegeEscalation,omitempty"`
}

// Phases of a Challenge.
const (
	PhaseNone        = "None"
	PhaseCreating    = "Creating"
	PhaseRunning     = "Running"
	PhaseError       = "Error"
	PhaseStopped     = "Stopped"
	PhaseExpired     = "Expired"
	PhaseTerminating = "Terminating"
	PhaseDeleted     = "Deleted"
)

// Reasons: a fixed vocabulary, so that UIs can switch on them.
const (
	ReasonPending                    = "Pending"
	ReasonStarting                   = "Starting"
	ReasonReady                      = "Ready"
	ReasonDefinitionNotFound         = "DefinitionNotFound"
	ReasonInvalidDefinition          = "InvalidDefinition"
	ReasonInvalidSpec                = "InvalidSpec"
	ReasonErrImagePull               = "ErrImagePull"
	ReasonImagePullBackOff           = "ImagePullBackOff"
	ReasonCrashLoopBackOff           = "CrashLoopBackOff"
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
	ReasonOOMKilled                  = "OOMKilled"
	ReasonUnschedulable              = "Unschedulable"
	ReasonProgressDeadlineExceeded   = "ProgressDeadlineExceeded"
	ReasonFlagKeyMissing             = "FlagKeyMissing"
	ReasonGatewayAPINotEnabled       = "GatewayAPINotEnabled"
	ReasonRouteNotAccepted           = "RouteNotAccepted"
	ReasonStopped                    = "Stopped"
	ReasonExpired                    = "Expired"
	ReasonTerminating                = "Terminating"
	ReasonDeleted                    = "Deleted"
)

// ChallengeStatus is computed by the hook on every sync.
type ChallengeStatus struct {
	Phase              string              `json:"phase,omitempty"`
	Reason             string              `json:"reason,omitempty"`
	Message            string              `json:"message,omitempty"`
	InstanceID         string              `json:"instanceId,omitempty"`
	Endpoints          []v1alpha1.Endpoint `json:"endpoints,omitempty"`
	StartedAt          string              `json:"startedAt,omitempty"`
	ReadyAt            string              `json:"readyAt,omitempty"`
	ExpiresAt          string              `json:"expiresAt,omitempty"`
	Conditions         []metav1.Condition  `json:"conditions,omitempty"`
	ObservedGeneration int64               `json:"observedGeneration,omitempty"`
}

// Endpoint is what a player connects to.
type Endpoint struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Host     string `json:"host"`
	Port     int32  `json:"port"`
	URL      string `json:"url"`
}

// Response is the sync or finalize answer. Children are encoded in order; each is a child object
// built by the hook or, when the hook must not change a child, its last-applied configuration.
type Response struct {
	Status             v1alpha1.ChallengeStatus `json:"status"`
	Children           []any                    `json:"children"`
	ResyncAfterSeconds float64                  `json:"resyncAfterSeconds"`
	Finalized          bool                     `json:"finalized"`
}

// FlagVerification is a platform's question to POST /flags/verify: is flag owner's dynamic flag on
// the definition (a definition key, see CheckFlagSubject)?
type FlagVerification struct {
	Definition string `json:"definition"`
	Owner      string `json:"owner"`
	Flag       string `json:"flag"`
}

// FlagVerdict is the answer to a FlagVerification.
type FlagVerdict struct {
	Correct bool `json:"correct"`
}

// CustomizeRequest is what Metacontroller sends to the customize hook.
type CustomizeRequest struct {
	Parent Challenge `json:"parent"`
}

// CustomizeResponse lists the related objects the sync hook needs.
type CustomizeResponse struct {
	RelatedResources []RelatedResourceRule `json:"relatedResources"`
}

// RelatedResourceRule selects related objects by name.
type RelatedResourceRule struct {
	APIVersion string   `json:"apiVersion"`
	Resource   string   `json:"resource"`
	Namespace  string   `json:"namespace,omitempty"`
	Names      []string `json:"names,omitempty"`
}
