package sync

// Minimal Kubernetes objects for the children the hook returns. They hold only the fields the hook
// owns: no status, no creationTimestamp, no empty lists or maps (every collection is omitempty), so
// that what the API server stores equals what the hook sends and Metacontroller's three-way merge
// finds nothing to change on the next sync. The typed structs of k8s.io/api would emit
// `creationTimestamp: null`, `resources: {}` and `status: {}` and rewrite every child on every sync.

type childMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type templateMeta struct {
	Labels map[string]string `json:"labels,omitempty"`
}

type labelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type deployment struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   childMeta      `json:"metadata"`
	Spec       deploymentSpec `json:"spec"`
}

type deploymentSpec struct {
	Replicas                int32              `json:"replicas"`
	RevisionHistoryLimit    int32              `json:"revisionHistoryLimit"`
	ProgressDeadlineSeconds int32              `json:"progressDeadlineSeconds"`
	Selector                labelSelector      `json:"selector"`
	Strategy                deploymentStrategy `json:"strategy"`
	Template                podTemplate        `json:"template"`
}

type deploymentStrategy struct {
	Type string `json:"type"`
}

type podTemplate struct {
	Metadata templateMeta `json:"metadata"`
	Spec     podSpec      `json:"spec"`
}

type podSpec struct {
	AutomountServiceAccountToken bool               `json:"automountServiceAccountToken"`
	EnableServiceLinks           bool               `json:"enableServiceLinks"`
	RuntimeClassName             string             `json:"runtimeClassName,omitempty"`
	SecurityContext              podSecurityContext `json:"securityContext"`
	Containers                   []container        `json:"containers"`
	Volumes                      []volume           `json:"volumes,omitempty"`
}

type podSecurityContext struct {
	RunAsNonRoot   *bool          `json:"runAsNonRoot,omitempty"`
	RunAsUser      *int64         `json:"runAsUser,omitempty"`
	SeccompProfile seccompProfile `json:"seccompProfile"`
}

type seccompProfile struct {
	Type string `json:"type"`
}

type container struct {
	Name            string                   `json:"name"`
	Image           string                   `json:"image"`
	Command         []string                 `json:"command,omitempty"`
	Args            []string                 `json:"args,omitempty"`
	Ports           []containerPort          `json:"ports,omitempty"`
	Env             []envVar                 `json:"env,omitempty"`
	Resources       resourceRequirements     `json:"resources"`
	VolumeMounts    []volumeMount            `json:"volumeMounts,omitempty"`
	ReadinessProbe  *probe                   `json:"readinessProbe,omitempty"`
	SecurityContext containerSecurityContext `json:"securityContext"`
}

type containerPort struct {
	Name          string `json:"name,omitempty"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`
}

type envVar struct {
	Name      string        `json:"name"`
	Value     string        `json:"value,omitempty"`
	ValueFrom *envVarSource `json:"valueFrom,omitempty"`
}

type envVarSource struct {
	SecretKeyRef secretKeySelector `json:"secretKeyRef"`
}

type secretKeySelector struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

type resourceRequirements struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
	SubPath   string `json:"subPath,omitempty"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

type probe struct {
	TCPSocket           *tcpSocketAction `json:"tcpSocket,omitempty"`
	HTTPGet             *httpGetAction   `json:"httpGet,omitempty"`
	Exec                *execAction      `json:"exec,omitempty"`
	InitialDelaySeconds int32            `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds       int32            `json:"periodSeconds"`
	TimeoutSeconds      int32            `json:"timeoutSeconds"`
	SuccessThreshold    int32            `json:"successThreshold"`
	FailureThreshold    int32            `json:"failureThreshold"`
}

type tcpSocketAction struct {
	Port int32 `json:"port"`
}

type httpGetAction struct {
	Path   string `json:"path"`
	Port   int32  `json:"port"`
	Scheme string `json:"scheme"`
}

type execAction struct {
	Command []string `json:"command"`
}

type containerSecurityContext struct {
	AllowPrivilegeEscalation bool         `json:"allowPrivilegeEscalation"`
	Capabilities             capabilities `json:"capabilities"`
	ReadOnlyRootFilesystem   bool         `json:"readOnlyRootFilesystem"`
	RunAsNonRoot             *bool        `json:"runAsNonRoot,omitempty"`
}

type capabilities struct {
	Drop []string `json:"drop"`
}

type volume struct {
	Name     string                `json:"name"`
	EmptyDir *emptyDirVolumeSource `json:"emptyDir,omitempty"`
	Secret   *secretVolumeSource   `json:"secret,omitempty"`
}

type emptyDirVolumeSource struct {
	SizeLimit string `json:"sizeLimit"`
}

type secretVolumeSource struct {
	SecretName  string      `json:"secretName"`
	Items       []keyToPath `json:"items"`
	DefaultMode int32       `json:"defaultMode"`
}

type keyToPath struct {
	Key  string `json:"key"`
	Path string `json:"path"`
}

type service struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   childMeta   `json:"metadata"`
	Spec       serviceSpec `json:"spec"`
}

type serviceSpec struct {
	Type     string            `json:"type"`
	Selector map[string]string `json:"selector"`
	Ports    []servicePort     `json:"ports"`
}

type servicePort struct {
	Name       string `json:"name"`
	Port       int32  `json:"port"`
	TargetPort int32  `json:"targetPort"`
	Protocol   string `json:"protocol"`
}

type networkPolicy struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   childMeta         `json:"metadata"`
	Spec       networkPolicySpec `json:"spec"`
}

type networkPolicySpec struct {
	PodSelector labelSelector       `json:"podSelector"`
	PolicyTypes []string            `json:"policyTypes"`
	Ingress     []networkPolicyRule `json:"ingress,omitempty"`
	Egress      []networkPolicyRule `json:"egress,omitempty"`
}

// networkPolicyRule serves both directions; only one of From and To is ever set.
type networkPolicyRule struct {
	From  []networkPolicyPeer `json:"from,omitempty"`
	To    []networkPolicyPeer `json:"to,omitempty"`
	Ports []networkPolicyPort `json:"ports,omitempty"`
}

type networkPolicyPeer struct {
	IPBlock *ipBlock `json:"ipBlock,omitempty"`
}

type ipBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

type networkPolicyPort struct {
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
}

type ingress struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   childMeta   `json:"metadata"`
	Spec       ingressSpec `json:"spec"`
}

type ingressSpec struct {
	IngressClassName string        `json:"ingressClassName,omitempty"`
	Rules            []ingressRule `json:"rules"`
}

type ingressRule struct {
	Host string               `json:"host"`
	HTTP httpIngressRuleValue `json:"http"`
}

type httpIngressRuleValue struct {
	Paths []httpIngressPath `json:"paths"`
}

type httpIngressPath struct {
	Path     string         `json:"path"`
	PathType string         `json:"pathType"`
	Backend  ingressBackend `json:"backend"`
}

type ingressBackend struct {
	Service ingressServiceBackend `json:"service"`
}

type ingressServiceBackend struct {
	Name string             `json:"name"`
	Port serviceBackendPort `json:"port"`
}

type serviceBackendPort struct {
	Number int32 `json:"number"`
}

type secret struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   childMeta         `json:"metadata"`
	Type       string            `json:"type"`
	Data       map[string]string `json:"data"`
}
