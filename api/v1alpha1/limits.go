package v1alpha1

// Limits of a template (DefinitionSpec) and of a Challenge's spec.flag, which the API server's
// schema and the hook's own validation both enforce. The +kubebuilder markers on the fields repeat
// these numbers, as a marker cannot name a Go constant: TestCRDSchemaHasTheLimits
// (manifests/limits_test.go) reads the generated CRDs and fails when a marker and a constant
// disagree.
const (
	// MaxContainers bounds the containers of a Pod (containers, pods[].containers).
	MaxContainers = 8
	// MaxPods bounds the pods of an instance of several.
	MaxPods = 8
	// MaxPodName bounds a pod's name, so that its children's names
	// (<challenge>--<pod>--internal) stay within Kubernetes' limits.
	MaxPodName = 20
	// MaxExpose bounds the exposures of a template or of a pod.
	MaxExpose = 8
	// MaxExposeFrom bounds the peers a ClusterIP exposure admits.
	MaxExposeFrom = 8
	// MaxPeerLabels bounds the labels that select a ClusterIP exposure's peer Pods.
	MaxPeerLabels = 16
	// MaxInternal bounds a pod's internal ports.
	MaxInternal = 16
	// MaxInternalFrom bounds the pods an internal port admits: at most all the others.
	MaxInternalFrom = MaxPods - 1
	// MaxFlagPrefix bounds a dynamic flag's prefix.
	MaxFlagPrefix = 32
	// MaxFlagValue bounds a flag, in characters: a static one (flag.value) and the platform's (a
	// Challenge's spec.flag).
	MaxFlagValue = 1024
	// MaxTerminationGracePeriodSeconds bounds the grace period a template may set: while a Pod
	// terminates its NetworkPolicy stays, and a player keeps a shell that long.
	MaxTerminationGracePeriodSeconds = 30
)
