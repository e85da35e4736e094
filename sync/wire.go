// Package sync is the heart of challenge-hook: a pure function from what Metacontroller observed to
// the children that should exist and the status the Challenge should show. It does no I/O; callers
// decode the request, pass a clock reading and configuration, and encode the response.
package sync

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// Names fixed by the design, shared by manifests, golden files and outside checks.
const (
	LabelPrefix = v1alpha1.Group + "/"

	LabelChallenge  = LabelPrefix + "challenge"
	LabelDefinition = LabelPrefix + "definition"
	LabelOwner      = LabelPrefix + "owner"
	LabelInstance   = LabelPrefix + "instance"
	// LabelComponent names the pod of an instance of several pods that a child belongs to.
	LabelComponent = LabelPrefix + "component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "challenge-hook"

	// AnnotationFlagHash on the Pod changes with the flag (see flagHash).
	AnnotationFlagHash = LabelPrefix + "flag-hash"
	// AnnotationRestartedAt on the Pod is the Challenge's spec.restartedAt: a new value changes the
	// Pod, and Metacontroller (updateStrategy Recreate) replaces it.
	AnnotationRestartedAt = LabelPrefix + "restarted-at"

	// LastAppliedAnnotation is where Metacontroller keeps the child exactly as a hook last returned it.
	LastAppliedAnnotation = wire.LastAppliedAnnotation
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

	// PrePullImage is this hook's image, whose static /pause the pre-pull DaemonSets copy and run
	// in place of each image's own program (package prepull); empty: no pre-pull.
	PrePullImage string

	// PolicyGate holds every instance Pod's containers until its NetworkPolicy is enforced.
	PolicyGate PolicyGate

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
	// DNS selects the cluster DNS Pods, the only in-cluster egress destination (port 53) of the Pods
	// whose template sets dns: true or egress: true.
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

	// TCPGateway is the shared gateway (challenge-hook tcp-gateway) that carries plain TCP to
	// TCP exposures, each reached with a token the hook mints.
	TCPGateway TCPGateway

	// Trust switches: how much the hook believes of a Challenge, whose author (the platform, or a
	// co-tenant in another namespace) is not the organizer who writes ChallengeDefinitions.

	// RefuseInlineTemplates refuses every Challenge with an inline spec.template (InvalidSpec):
	// then only ChallengeDefinitions say which images and commands run.
	RefuseInlineTemplates bool
	// DefinitionNamespaces, when not empty, are the only namespaces a spec.definitionRef may point
	// to: a reference elsewhere is refused (InvalidSpec), and Customize does not even ask
	// Metacontroller for it. Empty: any namespace. They are also the only namespaces whose
	// definitions the pre-pull controller serves (none when empty).
	DefinitionNamespaces []string
	// DefinitionGrants are the only pairs of namespaces across which a spec.definitionRef may
	// point: by default a Challenge uses only the definitions of its own namespace.
	DefinitionGrants []DefinitionGrant

	// PrePullMaxImagesPerDefinition caps the images (containers on every node) of one
	// definition's pre-pull DaemonSet, PrePullMaxImages those of every definition together; a
	// definition over either gets no DaemonSet (TooManyImages).
	PrePullMaxImagesPerDefinition int
	PrePullMaxImages              int
	// MaxInstancesPerOwner is how many instances of one owner in one namespace hold a place (see
	// holdsPlace) at once; the others are Queued, in creation order. Zero: no limit, and the
	// customize hook relates no Challenge to another.
	MaxInstancesPerOwner int
}

// TCPGateway is where players reach TCP exposures and what mints their tokens. The hook never
// talks to the gateway: a token (internal/tcptoken) carries the instance's ClusterIP Service
// address, authenticated with the key both hold.
type TCPGateway struct {
	// Host and Port are the address players connect to with nc (--tcp-gateway-address); an empty
	// Host: no gateway, and a template that exposes a port as TCP is refused.
	Host string
	Port int32
	// Key mints the tokens; shorter than tcptoken.MinKeyBytes: no gateway.
	Key []byte
	// TokenPlaceholder, when Key is empty, is every token instead of a refusal: for `render`
	// without a key, never for a serving hook.
	TokenPlaceholder string
	// Pods selects the gateway's Pods, the only source a TCP exposure admits.
	Pods PodPeer
}

// Configured: the hook can publish TCP exposures (an address, and a key or render's placeholder).
func (g TCPGateway) Configured() bool {
	return g.Host != "" && (len(g.Key) >= tcptoken.MinKeyBytes || g.TokenPlaceholder != "")
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
		PolicyGate:         PolicyGate{Enabled: true, Image: ReleaseImage, Timeout: defaultPolicyGateTimeout},
		TCPGateway:         TCPGateway{Pods: PodPeer{Namespace: "challenge-hook", Labels: map[string]string{"app.kubernetes.io/name": "challenge-hook-tcp-gateway"}}},

		PrePullMaxImagesPerDefinition: defaultPrePullMaxImagesPerDefinition,
		PrePullMaxImages:              defaultPrePullMaxImages,
	}
}

// ReleaseImage is the image of this release of the hook (manifests/kustomization.yaml's, which a
// test keeps equal): the policy gate's by default.
const ReleaseImage = "ghcr.io/challenge-hook/challenge-hook:v0.1.0"

// PolicyGate is the init container that starts every instance Pod: it holds the player's containers
// until, from inside the Pod's network namespace, Target stops answering, that is until the policy
// agent enforces the Pod's NetworkPolicy (which denies Target). Policy agents that learn a Pod from
// its status (the kubelet posts it once the sandbox runs) otherwise let its first packets through.
type PolicyGate struct {
	// Enabled adds the init container to every instance Pod (DefaultConfig: true).
	Enabled bool
	// Image is the hook's image: the init container runs its /challenge-hook wait-for-policy.
	Image string
	// Target is the IPv4 host:port probed: a destination every instance's NetworkPolicy denies and
	// that answers (accepts or refuses) a Pod no policy selects. Empty: the Pod's node
	// (status.hostIP) on the kubelet's port.
	Target string
	// Timeout bounds one attempt: then the init container fails, the instance shows Error, and the
	// kubelet runs it again with its back-off.
	Timeout time.Duration
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
	Ingresses       []ObservedIngress
	HTTPRoutes      []ObservedRoute
	TLSRoutes       []ObservedRoute
	Secrets         []ObservedObject
	// Deployments were the workload before Pods were. The hook never returns one, so
	// Metacontroller deletes them where the CompositeController still lists deployments (the
	// upgrade, see the README).
	Deployments []ObservedObject
}

// Related are the objects the customize hook asked for: the referenced definition and, with a
// per-owner limit, the Challenges of the same owner in the same namespace (the parent itself
// included).
type Related struct {
	Definitions []ChallengeDefinition
	Challenges  []Challenge
}

// ObjectMeta holds the metadata fields the hook reads.
type ObjectMeta = wire.ObjectMeta

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

// ObservedIngress is an Ingress and the Services it sends players to.
type ObservedIngress struct {
	ObservedObject
	Spec networkingv1.IngressSpec `json:"spec"`
}

// ObservedRoute is a Gateway API HTTPRoute or TLSRoute: the Services it sends players to, and its
// status, which says whether each parent Gateway accepted it.
type ObservedRoute struct {
	ObservedObject
	Spec struct {
		Rules []struct {
			BackendRefs []RouteBackendRef `json:"backendRefs"`
		} `json:"rules"`
	} `json:"spec"`
	Status struct {
		Parents []RouteParentStatus `json:"parents"`
	} `json:"status"`
}

// RouteBackendRef is where a route rule sends traffic; group and kind default to a core Service,
// the namespace to the route's.
type RouteBackendRef struct {
	Group     string `json:"group"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
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

// Challenge is the parent as the hook reads it: the API's spec and status (api/v1alpha1), and
// the lean metadata the hook reads instead of metav1.ObjectMeta, which would also decode the
// managed fields and annotations Metacontroller sends (measured: twice the bytes allocated to
// decode a parent, 60% more allocations).
type Challenge struct {
	APIVersion string                   `json:"apiVersion,omitempty"`
	Kind       string                   `json:"kind,omitempty"`
	Metadata   ObjectMeta               `json:"metadata"`
	Spec       v1alpha1.ChallengeSpec   `json:"spec"`
	Status     v1alpha1.ChallengeStatus `json:"status"`
}

// ChallengeDefinition is a related definition as the hook reads it: the API's spec, lean metadata.
type ChallengeDefinition struct {
	APIVersion string                  `json:"apiVersion,omitempty"`
	Kind       string                  `json:"kind,omitempty"`
	Metadata   ObjectMeta              `json:"metadata"`
	Spec       v1alpha1.DefinitionSpec `json:"spec"`
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
// the definition (a definition key, see CheckFlagSubject)? And if not, is it the flag of one of the
// candidate owners (at most MaxFlagCandidates), on the same definition?
type FlagVerification struct {
	Definition string   `json:"definition"`
	Owner      string   `json:"owner"`
	Flag       string   `json:"flag"`
	Candidates []string `json:"candidates,omitempty"`
}

// CustomizeRequest is what Metacontroller sends to the customize hook.
type CustomizeRequest struct {
	Parent Challenge `json:"parent"`
}

// CustomizeResponse lists the related objects the sync hook needs.
type CustomizeResponse struct {
	RelatedResources []RelatedResourceRule `json:"relatedResources"`
}

// RelatedResourceRule selects related objects by name or by labels.
type RelatedResourceRule struct {
	APIVersion    string         `json:"apiVersion"`
	Resource      string         `json:"resource"`
	Namespace     string         `json:"namespace,omitempty"`
	Names         []string       `json:"names,omitempty"`
	LabelSelector *LabelSelector `json:"labelSelector,omitempty"`
}

// LabelSelector selects objects whose labels hold every pair of MatchLabels.
type LabelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}
