package sync

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// Names fixed by the design, shared by manifests, golden files and outside checks.
const (
	LabelPrefix = v1alpha1.Group + "/"

	LabelChallenge  = v1alpha1.LabelChallenge
	LabelDefinition = LabelPrefix + "definition"
	LabelOwner      = v1alpha1.LabelOwner
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
	// AnnotationLastActivity on the Challenge or one of its Services is the last time someone used
	// the instance, RFC 3339, written by whoever sees its traffic (the platform on the Challenge,
	// the TCP gateway's stamper on the Service); with an idleTimeout, an instance without activity
	// for that long is stopped (see idle.go).
	AnnotationLastActivity = v1alpha1.AnnotationLastActivity
	// AnnotationIdleTimeout on the instance's Services is its idleTimeout, for the writers of
	// AnnotationLastActivity that read Services alone (the stamper).
	AnnotationIdleTimeout = v1alpha1.AnnotationIdleTimeout

	// LastAppliedAnnotation is where Metacontroller keeps the child exactly as a hook last returned it.
	LastAppliedAnnotation = wire.LastAppliedAnnotation
)

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
	// upgrade, see docs/operations.md, "Upgrading").
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
// the child exactly as a hook last returned it (JSON), the Pod's restart and a Service's last
// activity.
type ObservedAnnotations struct {
	LastApplied string `json:"metacontroller.k8s.io/last-applied-configuration"`
	// RestartedAt is the restart a Pod was created for (see AnnotationRestartedAt).
	RestartedAt string `json:"ctf.challenge-hook.dev/restarted-at"`
	// LastActivity is a Service's stamp (see AnnotationLastActivity).
	LastActivity string `json:"ctf.challenge-hook.dev/last-activity"`
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
	Metadata   ChallengeMeta            `json:"metadata"`
	Spec       v1alpha1.ChallengeSpec   `json:"spec"`
	Status     v1alpha1.ChallengeStatus `json:"status"`
}

// ChallengeMeta is a Challenge's metadata and the one annotation the hook reads of it.
type ChallengeMeta struct {
	Name              string               `json:"name,omitempty"`
	Namespace         string               `json:"namespace,omitempty"`
	UID               string               `json:"uid,omitempty"`
	Generation        int64                `json:"generation,omitempty"`
	Labels            map[string]string    `json:"labels,omitempty"`
	Annotations       ChallengeAnnotations `json:"annotations"`
	CreationTimestamp string               `json:"creationTimestamp,omitempty"`
	DeletionTimestamp string               `json:"deletionTimestamp,omitempty"`
}

// ChallengeAnnotations holds the Challenge's annotations the hook reads: its last activity (see
// AnnotationLastActivity).
type ChallengeAnnotations struct {
	LastActivity string `json:"ctf.challenge-hook.dev/last-activity,omitempty"`
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
