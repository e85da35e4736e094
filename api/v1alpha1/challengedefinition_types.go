package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The rule on metadata.name has no fieldPath: controller-gen declares metadata as a bare object,
// in which the API server finds no path .metadata.name.

// ChallengeDefinition is the template of a CTF challenge; Challenges run instances of it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:path=challengedefinitions,scope=Namespaced,shortName=chaldef,categories=ctf
// +kubebuilder:metadata:labels="app.kubernetes.io/name=challenge-hook"
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=challenge-hook"
// +kubebuilder:printcolumn:name="Timeout",type=string,JSONPath=`.spec.timeout`
// +kubebuilder:printcolumn:name="MaxLifetime",type=string,JSONPath=`.spec.maxLifetime`
// +kubebuilder:printcolumn:name="IdleTimeout",type=string,JSONPath=`.spec.idleTimeout`,priority=1
// +kubebuilder:printcolumn:name="Expose",type=string,JSONPath=`.spec.expose[0].type`,description="How players reach the first exposed port."
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.containers[0].image`,priority=1
// +kubebuilder:printcolumn:name="Egress",type=boolean,JSONPath=`.spec.egress`,priority=1
// +kubebuilder:printcolumn:name="DNS",type=boolean,JSONPath=`.spec.dns`,priority=1
// +kubebuilder:printcolumn:name="PrePull",type=string,JSONPath=`.status.prePull.state`,priority=1,description="PrePulling, Disabled or InvalidDefinition, with manifests/components/prepull"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name must be at most 63 characters (it is copied into the label ctf.challenge-hook.dev/definition of every instance)"
type ChallengeDefinition struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec DefinitionSpec `json:"spec"`
	// Written by the pre-pull controller (manifests/components/prepull) only; Metacontroller needs
	// the status subresource on a parent.
	//
	// +optional
	Status ChallengeDefinitionStatus `json:"status,omitempty"`
}

// ChallengeDefinitionStatus is the pre-pull controller's answer. It depends on the definition's
// spec alone, never on the DaemonSet's progress: every status write re-syncs each Challenge of the
// definition (Metacontroller watches related objects), so it changes only with the spec.
type ChallengeDefinitionStatus struct {
	// The generation of the spec this status was computed from (set by Metacontroller).
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Whether the definition's images are pre-pulled on every node, and how.
	//
	// +optional
	PrePull *PrePullStatus `json:"prePull,omitempty"`
}

// PrePullStatus says what the pre-pull controller keeps for a definition.
type PrePullStatus struct {
	// One of PrePulling (the DaemonSet is declared), Disabled (spec.prePull is false),
	// InvalidDefinition (the DaemonSet, if any, is kept as it was), NamespaceNotAllowed (the hook
	// pre-pulls only the namespaces of its --definition-namespaces) and TooManyImages (over the
	// hook's caps per definition or in total; no DaemonSet in these two) and Pending (the
	// definitions counted against the total are not known yet; the DaemonSet, if any, is kept).
	State string `json:"state"`
	// What the controller keeps, or what to fix.
	Message string `json:"message"`
	// The DaemonSet that pulls and pins the images, in the definition's namespace.
	//
	// +optional
	DaemonSet string `json:"daemonSet,omitempty"`
}

// DefinitionSpec is the template of an instance: its Pod (one to eight containers) or its pods
// (one to eight, each with its containers), how players reach it, its lifetime, its flag and its
// security opt-outs.
//
// +kubebuilder:validation:XValidation:rule="has(self.containers) != has(self.pods)",message="set exactly one of containers (an instance of one Pod) and pods (an instance of several)"
// +kubebuilder:validation:XValidation:rule="!has(self.pods) || (!has(self.expose) && !has(self.egress) && !has(self.dns) && !has(self.security))",message="with pods, set expose, egress, dns and security on each pod, not on the template"
// +kubebuilder:validation:XValidation:rule="!has(self.pods) || self.pods.map(p, has(p.expose) ? p.expose.filter(e, e.type == 'HTTP').size() : 0).sum() <= 1",message="at most one expose entry of type HTTP in all pods (an instance has one host)",fieldPath=`.pods`
// +kubebuilder:validation:XValidation:rule="!has(self.pods) || self.pods.map(p, has(p.expose) ? p.expose.filter(e, e.type == 'TLS').size() : 0).sum() <= 1",message="at most one expose entry of type TLS in all pods (an instance has one host)",fieldPath=`.pods`
// +kubebuilder:validation:XValidation:rule="!has(self.pods) || self.pods.all(p, !has(p.internal) || p.internal.all(i, i.from.all(f, f != p.name && self.pods.exists(q, q.name == f))))",message="each internal.from must name another pod of the template",fieldPath=`.pods`
// +kubebuilder:validation:XValidation:rule="!has(self.flag) || !has(self.pods) || self.pods.exists(p, p.containers.exists(c, has(c.flag) && c.flag))",message="with pods, set flag: true on each container that receives the flag",fieldPath=`.flag`
// +kubebuilder:validation:XValidation:rule="has(self.flag) || ((!has(self.containers) || self.containers.all(c, !has(c.flag) || !c.flag)) && (!has(self.pods) || self.pods.all(p, p.containers.all(c, !has(c.flag) || !c.flag))))",message="a container asks for the flag (flag: true) but the template has no flag"
// +kubebuilder:validation:XValidation:rule="!has(self.containers) || !has(self.expose) || self.expose.all(e, self.containers.exists(c, has(c.ports) && c.ports.exists(p, p.containerPort == e.port)))",message="every expose.port must be a containerPort of one of the containers",fieldPath=`.expose`
// +kubebuilder:validation:XValidation:rule="!has(self.containers) || !has(self.expose) || self.expose.all(e, !(e.type in ['HTTP', 'TLS', 'TCP']) || self.containers.all(c, !has(c.ports) || c.ports.all(p, p.containerPort != e.port || !has(p.protocol) || p.protocol == 'TCP')))",message="an HTTP, TLS or TCP expose port must be a TCP container port",fieldPath=`.expose`
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || !has(self.maxLifetime) || duration(self.timeout) <= duration(self.maxLifetime)",message="timeout must not exceed maxLifetime",fieldPath=`.timeout`
// +kubebuilder:validation:XValidation:rule="!has(self.containers) || self.containers.all(c, !has(c.ports) || c.ports.all(p, self.containers.filter(d, has(d.ports) && d.ports.exists(q, q.containerPort == p.containerPort)).size() == 1 && c.ports.filter(q, q.containerPort == p.containerPort).size() == 1))",message="each containerPort may appear only once in the Pod (across containers and protocols)",fieldPath=`.containers`
// +kubebuilder:validation:XValidation:rule="!has(self.containers) || self.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.name) || (self.containers.filter(d, has(d.ports) && d.ports.exists(q, has(q.name) && q.name == p.name)).size() == 1 && c.ports.filter(q, has(q.name) && q.name == p.name).size() == 1)))",message="port names must be unique in the Pod",fieldPath=`.containers`
// +kubebuilder:validation:XValidation:rule="!has(self.flag) || !has(self.flag.env) || ((!has(self.containers) || self.containers.all(c, !has(c.env) || c.env.all(e, e.name != self.flag.env))) && (!has(self.pods) || self.pods.all(p, p.containers.all(c, !has(c.env) || c.env.all(e, e.name != self.flag.env)))))",message="flag.env must not name a variable that a container already sets in env",fieldPath=`.flag.env`
type DefinitionSpec struct {
	// The containers of the instance's single Pod; or set pods instead.
	//
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Containers []Container `json:"containers,omitempty"`
	// The pods of an instance of several hosts (a web app, its database, its admin bot; the hosts
	// of a pivot), instead of containers: each its own Pod, Service, NetworkPolicy and exposures.
	// A pod reaches another only on the internal ports that the other admits from it, by the
	// other's name (db, bot). Each pod's expose, egress, dns and security are its own; the lifetime,
	// flag, runtimeClassName and grace period are the instance's.
	//
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Pods []PodTemplate `json:"pods,omitempty"`
	// Which container ports players reach and how. HTTP becomes an Ingress (or, when the hook is
	// given a Gateway, an HTTPRoute) for an unguessable per-instance host <instanceId>.<domain>; TLS
	// becomes a TLSRoute that a Gateway routes by that host as TLS SNI (needs the hook's --gateway);
	// at most one of each, TCP only. All other entries share one type and become one Service:
	// NodePort, LoadBalancer, ClusterIP (for the Pods named in from), or TCP (plain TCP through
	// the shared TCP gateway, reached with the instance's token; needs the hook's --tcp-gateway-*).
	// Empty or absent: the instance is not reachable (e.g. a bot that players never connect to
	// directly).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.port == a.port))",message="each port may be exposed only once"
	// +kubebuilder:validation:XValidation:rule="self.filter(e, e.type == 'HTTP').size() <= 1",message="at most one expose entry may be of type HTTP"
	// +kubebuilder:validation:XValidation:rule="self.filter(e, e.type == 'TLS').size() <= 1",message="at most one expose entry may be of type TLS"
	// +kubebuilder:validation:XValidation:rule="self.all(a, a.type in ['HTTP', 'TLS'] || self.all(b, b.type in ['HTTP', 'TLS'] || b.type == a.type))",message="all expose entries other than HTTP and TLS must have the same type (they become one Service)"
	Expose []Expose `json:"expose,omitempty"`
	// Default lifetime of an instance, a Go duration such as 30m or 1h30m.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="timeout must be a positive duration such as 30m or 1h30m"
	Timeout string `json:"timeout,omitempty"`
	// Hard cap on an instance's lifetime, extensions included; a Go duration such as 2h.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="maxLifetime must be a positive duration such as 2h"
	MaxLifetime string `json:"maxLifetime,omitempty"`
	// Stop an instance nobody used for this long, a Go duration such as 15m: phase Stopped, reason
	// Idle, its Pod removed and everything else kept (host, port, token, flag), as with
	// spec.stopped. Use is the Challenge's ctf.challenge-hook.dev/last-activity annotation (written
	// by the TCP gateway's stamper or the platform), its start, a restart or an extension; a newer
	// stamp starts it again. Absent: never stopped for idleness.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="idleTimeout must be a duration of at least 10s such as 15m"
	IdleTimeout string `json:"idleTimeout,omitempty"`
	// Allow internet egress, and DNS. Cluster-internal, private and link-local ranges stay blocked
	// either way. Default false.
	//
	// +optional
	Egress bool `json:"egress,omitempty"`
	// Allow queries to the cluster DNS (UDP and TCP 53 to the hook's --dns-* Pods and
	// --node-local-dns) without internet egress; egress: true implies it. Default false: the
	// Pod's peers are in its /etc/hosts, its resolver is 127.0.0.1 (a lookup fails at once), and
	// a resolver that forwards to the internet is a way out (DNS tunnelling).
	//
	// +optional
	DNS bool `json:"dns,omitempty"`
	// The flag: a static value, or dynamic (an HMAC per definition and owner, from a key only the
	// hook holds), delivered in an environment variable, a file, or both, to the containers that
	// set flag: true (in a template of one Pod where none does, to every container).
	//
	// +optional
	Flag *Flag `json:"flag,omitempty"`
	// RuntimeClass of the Pod, e.g. gvisor; a DNS-1123 subdomain.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// Opt-outs from the hardened Pod defaults.
	//
	// +optional
	Security *Security `json:"security,omitempty"`
	// Seconds the Pod's processes get after SIGTERM before they are killed (default 5). While a
	// Pod terminates its NetworkPolicy stays, so a player keeps a shell that long: keep it short.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=30
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`
	// Pre-pull the images on every node, where the pre-pull component (manifests/components/prepull)
	// is installed: a DaemonSet pulls them and keeps them from image garbage collection, so that
	// instances start without a pull. Default true; false removes the definition's DaemonSet. Only
	// on a ChallengeDefinition: an inline template refuses it.
	//
	// +optional
	PrePull *bool `json:"prePull,omitempty"`
}

// PodTemplate is one pod of an instance of several: a host of its own.
//
// +kubebuilder:validation:XValidation:rule="!has(self.expose) || self.expose.all(e, self.containers.exists(c, has(c.ports) && c.ports.exists(p, p.containerPort == e.port)))",message="every expose.port must be a containerPort of one of the pod's containers",fieldPath=`.expose`
// +kubebuilder:validation:XValidation:rule="!has(self.expose) || self.expose.all(e, !(e.type in ['HTTP', 'TLS', 'TCP']) || self.containers.all(c, !has(c.ports) || c.ports.all(p, p.containerPort != e.port || !has(p.protocol) || p.protocol == 'TCP')))",message="an HTTP, TLS or TCP expose port must be a TCP container port",fieldPath=`.expose`
// +kubebuilder:validation:XValidation:rule="!has(self.internal) || self.internal.all(i, self.containers.exists(c, has(c.ports) && c.ports.exists(p, p.containerPort == i.port)))",message="every internal.port must be a containerPort of one of the pod's containers",fieldPath=`.internal`
// +kubebuilder:validation:XValidation:rule="self.containers.all(c, !has(c.ports) || c.ports.all(p, self.containers.filter(d, has(d.ports) && d.ports.exists(q, q.containerPort == p.containerPort)).size() == 1 && c.ports.filter(q, q.containerPort == p.containerPort).size() == 1))",message="each containerPort may appear only once in the pod (across containers and protocols)",fieldPath=`.containers`
// +kubebuilder:validation:XValidation:rule="self.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.name) || (self.containers.filter(d, has(d.ports) && d.ports.exists(q, has(q.name) && q.name == p.name)).size() == 1 && c.ports.filter(q, has(q.name) && q.name == p.name).size() == 1)))",message="port names must be unique in the pod",fieldPath=`.containers`
type PodTemplate struct {
	// The pod's name: its peers reach it by this name, and its children are named
	// <challenge>--<name> (the Service of its internal ports <challenge>--<name>--internal). A
	// DNS-1035 label of at most 20 characters, without "--".
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('--')",message="a pod's name must not contain '--': it separates the parts of its children's names (<challenge>--<pod>)"
	Name string `json:"name"`
	// The pod's containers.
	//
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Containers []Container `json:"containers,omitempty"`
	// Which of the pod's container ports players reach and how, as the template's expose: at
	// most one HTTP and one TLS exposure in all pods; the others of a pod share one type.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.port == a.port))",message="each port may be exposed only once"
	// +kubebuilder:validation:XValidation:rule="self.all(a, a.type in ['HTTP', 'TLS'] || self.all(b, b.type in ['HTTP', 'TLS'] || b.type == a.type))",message="all expose entries of a pod other than HTTP and TLS must have the same type (they become one Service)"
	Expose []Expose `json:"expose,omitempty"`
	// The pod's ports that other pods of the same instance reach, and which pods: nothing else
	// of the instance reaches this pod. Another instance's pods never do.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=port
	Internal []InternalPort `json:"internal,omitempty"`
	// Allow this pod internet egress, and DNS, as the template's egress. Default false.
	//
	// +optional
	Egress bool `json:"egress,omitempty"`
	// Allow this pod queries to the cluster DNS without internet egress, as the template's dns.
	// Default false.
	//
	// +optional
	DNS bool `json:"dns,omitempty"`
	// Opt-outs from the hardened Pod defaults, for this pod.
	//
	// +optional
	Security *Security `json:"security,omitempty"`
}

// InternalPort is a port of a pod that other pods of the instance reach.
type InternalPort struct {
	// A containerPort of one of the pod's containers (its protocol is the container port's).
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// The names of the other pods of the instance that reach it.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=20
	From []string `json:"from"`
}

// Container is one container of an instance's Pod.
type Container struct {
	// Container name, a DNS-1123 label, unique in the Pod.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self != 'policy-gate'",message="is reserved for the hook's init container, which holds the Pod until its NetworkPolicy is enforced"
	Name string `json:"name"`
	// Container image reference, e.g. ghcr.io/example/web-sqli:1.0.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^\S+$`
	Image string `json:"image"`
	// Entrypoint override (the image's ENTRYPOINT when empty).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command,omitempty"`
	// Arguments (the image's CMD when empty).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Args []string `json:"args,omitempty"`
	// Literal environment variables.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Env []EnvVar `json:"env,omitempty"`
	// Ports the container listens on.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=containerPort
	// +listMapKey=protocol
	Ports []ContainerPort `json:"ports,omitempty"`
	// Requests and limits by resource name (cpu, memory, ephemeral-storage), as quantity strings
	// (quote numbers: cpu: "1"). The hook applies defaults for what is not set.
	//
	// +optional
	Resources *ResourceRequirements `json:"resources,omitempty"`
	// When the container is ready: exactly one of tcpSocket, httpGet or exec. Default: a TCP
	// connect to the container's first port.
	//
	// +optional
	ReadinessProbe *Probe `json:"readinessProbe,omitempty"`
	// Deliver the instance's flag to this container. With pods, only the containers that set it
	// receive the flag; in a template of one Pod, every container does when none sets it.
	//
	// +optional
	Flag bool `json:"flag,omitempty"`
}

// EnvVar is a literal environment variable.
type EnvVar struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z][-._a-zA-Z0-9]*$`
	Name string `json:"name"`
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value"`
}

// ContainerPort is a port a container listens on.
type ContainerPort struct {
	// An IANA_SVC_NAME: at most 15 lowercase letters, digits and '-', with at least one
	// letter, no leading, trailing or doubled '-'.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.matches('[a-z]') && !self.contains('--')",message="port name must contain at least one letter and no '--' (IANA_SVC_NAME)"
	Name string `json:"name,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ContainerPort int32 `json:"containerPort"`
	// +optional
	// +kubebuilder:default=TCP
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol string `json:"protocol,omitempty"`
}

// ResourceRequirements are quantities by resource name (cpu, memory, ephemeral-storage).
//
// +kubebuilder:validation:XValidation:rule="!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || !isQuantity(self.requests[k]) || !isQuantity(self.limits[k]) || quantity(self.requests[k]).compareTo(quantity(self.limits[k])) <= 0)",message="each resource request must be less than or equal to its limit"
type ResourceRequirements struct {
	// +optional
	// +kubebuilder:validation:MaxProperties=3
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="resource names must be cpu, memory or ephemeral-storage"
	Requests map[string]Quantity `json:"requests,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxProperties=3
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'])",message="resource names must be cpu, memory or ephemeral-storage"
	Limits map[string]Quantity `json:"limits,omitempty"`
}

// Quantity is a Kubernetes quantity as its string, e.g. 250m, 1 or 256Mi: a type of its own so
// that the schema of every value of a resource map carries the check.
//
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:XValidation:rule="isQuantity(self)",message="must be a Kubernetes quantity such as 250m, 1 or 256Mi"
type Quantity string

// Probe is a readiness probe: a TCP connect, an HTTP GET or a command.
//
// +kubebuilder:validation:XValidation:rule="[has(self.tcpSocket), has(self.httpGet), has(self.exec)].filter(x, x).size() == 1",message="readinessProbe must set exactly one of tcpSocket, httpGet or exec"
type Probe struct {
	// +optional
	TCPSocket *TCPSocketAction `json:"tcpSocket,omitempty"`
	// +optional
	HTTPGet *HTTPGetAction `json:"httpGet,omitempty"`
	// +optional
	Exec *ExecAction `json:"exec,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	InitialDelaySeconds int32 `json:"initialDelaySeconds,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	PeriodSeconds int32 `json:"periodSeconds,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	FailureThreshold int32 `json:"failureThreshold,omitempty"`
}

// TCPSocketAction probes by opening a TCP connection.
type TCPSocketAction struct {
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// HTTPGetAction probes with an HTTP GET.
type HTTPGetAction struct {
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path,omitempty"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// ExecAction probes by running a command in the container.
type ExecAction struct {
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command,omitempty"`
}

// Exposure types: how players reach a port.
const (
	ExposeNodePort     = "NodePort"
	ExposeLoadBalancer = "LoadBalancer"
	ExposeHTTP         = "HTTP"
	ExposeTLS          = "TLS"
	ExposeClusterIP    = "ClusterIP"
	// ExposeTCP is plain TCP through the shared TCP gateway (challenge-hook tcp-gateway): one
	// address for the whole event, and a token per exposure that leads to this instance alone.
	ExposeTCP = "TCP"
)

// Expose publishes one container port to players.
//
// +kubebuilder:validation:XValidation:rule="self.type == 'ClusterIP' ? has(self.from) : !has(self.from)",message="a ClusterIP exposure must name its peers in from (nobody else reaches it), and only a ClusterIP exposure may: HTTP traffic comes from the ingress controller, NodePort and LoadBalancer traffic from outside the cluster, TCP traffic from the TCP gateway"
// +kubebuilder:validation:XValidation:rule="self.type == 'TCP' || (!has(self.proofOfWorkBits) && !has(self.proxyProtocol))",message="proofOfWorkBits and proxyProtocol apply only to TCP exposures (the TCP gateway poses the puzzle and sends the PROXY header)"
type Expose struct {
	// A containerPort of one of the containers.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// +kubebuilder:validation:Enum=NodePort;LoadBalancer;HTTP;TLS;ClusterIP;TCP
	Type string `json:"type"`
	// The in-cluster Pods a ClusterIP exposure admits, e.g. an admin bot or a checker; required
	// for ClusterIP and only for ClusterIP. Another instance's Pods are never admitted, whatever
	// the selector.
	//
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	From []ExposePeer `json:"from,omitempty"`
	// TCP only: the difficulty, in bits, of the proof of work the TCP gateway asks of a player
	// before it reads the token (each bit doubles the expected work). Absent or 0: none.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=28
	ProofOfWorkBits int32 `json:"proofOfWorkBits,omitempty"`
	// TCP only: the TCP gateway starts each connection to the instance with a PROXY protocol v2
	// header carrying the player's address, so that the challenge can see it (the challenge
	// must read the header). Default false.
	//
	// +optional
	ProxyProtocol bool `json:"proxyProtocol,omitempty"`
}

// ExposePeer selects Pods by namespace (default: the Challenge's) and labels (default: every Pod
// of the namespace). Another instance's Pod is never selected.
//
// +kubebuilder:validation:XValidation:rule="has(self.namespace) || (has(self.podLabels) && self.podLabels.size() > 0)",message="each from entry must set namespace, podLabels or both"
type ExposePeer struct {
	// Namespace of the peer Pods; default the Challenge's namespace.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
	// Labels the peer Pods carry (all of them); default every Pod of the namespace.
	//
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	PodLabels map[string]LabelValue `json:"podLabels,omitempty"`
}

// LabelValue is a Kubernetes label value: a type of its own so that the schema of every value of
// a label map carries the check.
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
type LabelValue string

// Flag is the secret players hunt for: a static value, one derived per owner, or the one the
// platform gives each instance.
//
// +kubebuilder:validation:XValidation:rule="(has(self.value) ? 1 : 0) + (has(self.dynamic) && self.dynamic ? 1 : 0) + (has(self.platform) && self.platform ? 1 : 0) == 1",message="flag must set exactly one of value, dynamic: true or platform: true"
// +kubebuilder:validation:XValidation:rule="has(self.env) || has(self.path)",message="flag must set env, path or both (where the flag is delivered)"
// +kubebuilder:validation:XValidation:rule="!has(self.prefix) || (has(self.dynamic) && self.dynamic)",message="flag.prefix applies only to dynamic: true flags"
type Flag struct {
	// A static flag.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Value string `json:"value,omitempty"`
	// Derive a per-owner flag <prefix>{<hex>} from the hook's key.
	//
	// +optional
	Dynamic bool `json:"dynamic,omitempty"`
	// The flag is the Challenge's spec.flag, which the platform sets (a platform that mints and
	// verifies its own flags, such as rCTF).
	//
	// +optional
	Platform bool `json:"platform,omitempty"`
	// Prefix of a dynamic flag (letters, digits, underscores); default "flag".
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_]+$`
	Prefix string `json:"prefix,omitempty"`
	// Environment variable that receives the flag, in each container that receives it.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z][-._a-zA-Z0-9]*$`
	Env string `json:"env,omitempty"`
	// Absolute path of a file that receives the flag, in each container that receives it.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^(/[^/]+)+$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('/./') && !self.endsWith('/.') && !self.contains('/../') && !self.endsWith('/..') && self != '/tmp'",message="flag.path must be a clean absolute file path such as /flag.txt (no '.' or '..' segments, not /tmp)"
	Path string `json:"path,omitempty"`
}

// Security holds the opt-outs from the hardened Pod defaults.
//
// +kubebuilder:validation:XValidation:rule="!has(self.runAsUser) || self.runAsUser != 0 || (has(self.runAsRoot) && self.runAsRoot)",message="runAsUser 0 is root: set runAsRoot: true to run as root"
type Security struct {
	// Allow the containers to run as root (drops runAsNonRoot; Pod Security baseline only).
	//
	// +optional
	RunAsRoot bool `json:"runAsRoot,omitempty"`
	// User id of the containers, for images whose default user is root.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	RunAsUser *int64 `json:"runAsUser,omitempty"`
	// Defaults to true; false gives the containers a writable root filesystem.
	//
	// +optional
	ReadOnlyRootFilesystem *bool `json:"readOnlyRootFilesystem,omitempty"`
	// Let setuid binaries raise privileges (setuid challenges); the capabilities stay dropped.
	// Pod Security baseline only.
	//
	// +optional
	AllowPrivilegeEscalation bool `json:"allowPrivilegeEscalation,omitempty"`
}

// PrePullStatus states, so that tools can switch on them.
const (
	PrePullStatePrePulling        = "PrePulling"
	PrePullStateDisabled          = "Disabled"
	PrePullStateInvalidDefinition = "InvalidDefinition"
	// PrePullStateNamespaceNotAllowed: the definition's namespace is not one the hook pre-pulls
	// (--definition-namespaces); no DaemonSet.
	PrePullStateNamespaceNotAllowed = "NamespaceNotAllowed"
	// PrePullStateTooManyImages: the definition has more images than one may pre-pull, or they do
	// not fit beside those of the definitions created before it; no DaemonSet.
	PrePullStateTooManyImages = "TooManyImages"
	// PrePullStatePending: the definitions its images count against are not known yet (a
	// customize answer Metacontroller cached under other hook flags); the DaemonSet, if any, is
	// kept as it was.
	PrePullStatePending = "Pending"
)
