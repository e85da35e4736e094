package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// The Expires and Idle At columns are strings, not dates: kubectl prints a future date column as "<invalid>"
// (it renders dates as an age), and an instance's expiry and idle stop are in the future while they matter.
// The rule on metadata.name has no fieldPath: controller-gen declares metadata as a bare object,
// in which the API server finds no path .metadata.name.

// Challenge is one participant's private, short-lived instance of a CTF challenge.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=challenges,scope=Namespaced,shortName=chal,categories=ctf
// +kubebuilder:metadata:labels="app.kubernetes.io/name=challenge-hook"
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=challenge-hook"
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoints[0].url`
// +kubebuilder:printcolumn:name="Expires",type=string,JSONPath=`.status.expiresAt`
// +kubebuilder:printcolumn:name="Last Activity",type=date,JSONPath=`.status.lastActivityAt`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Idle At",type=string,JSONPath=`.status.idleAt`,priority=1
// +kubebuilder:printcolumn:name="Definition",type=string,JSONPath=`.spec.definitionRef.name`,priority=1
// +kubebuilder:printcolumn:name="WebSocket",type=string,JSONPath=`.status.endpoints[0].webSocketURL`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label of at most 63 characters (lowercase letters, digits and '-', starting with a letter): the instance's Service is named after it"
// +kubebuilder:validation:XValidation:rule="!self.metadata.name.contains('--')",message="metadata.name must not contain '--': the children of an instance of several pods are named <challenge>--<pod>, and no Challenge may be named like another's child"
type Challenge struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ChallengeSpec `json:"spec"`
	// +optional
	Status ChallengeStatus `json:"status"`
}

// ChallengeSpec says which template to run, for whom, and for how long.
//
// +kubebuilder:validation:XValidation:rule="has(self.definitionRef) != has(self.template)",message="spec must set exactly one of definitionRef or template"
// +kubebuilder:validation:XValidation:rule="!has(self.template) || !has(self.template.prePull)",message="template.prePull applies to ChallengeDefinitions only: an inline template is never pre-pulled",fieldPath=`.template.prePull`
// +kubebuilder:validation:XValidation:rule="!has(self.template) || has(self.flag) == (has(self.template.flag) && has(self.template.flag.platform) && self.template.flag.platform)",message="with an inline template, spec.flag is set exactly when the template's flag says platform: true (the platform's flag)",fieldPath=`.flag`
type ChallengeSpec struct {
	// The ChallengeDefinition to run. Its namespace defaults to the Challenge's.
	//
	// +optional
	DefinitionRef *DefinitionRef `json:"definitionRef,omitempty"`
	// An inline template, the same as a ChallengeDefinition's spec.
	//
	// +optional
	Template *DefinitionSpec `json:"template,omitempty"`
	// The user or team the instance belongs to; a label value (at most 63 characters:
	// letters, digits, '-', '_', '.', starting and ending with a letter or digit).
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.owner is immutable (the flag and the instance derive from it); create a new Challenge"
	Owner string `json:"owner,omitempty"`
	// The flag the platform gives this instance, for a template whose flag says platform: true
	// (required then, refused otherwise): delivered into the instance where the template's flag
	// says (env, path), never in the status. Whoever can read the Challenge can read it. A new
	// value restarts the instance's Pod with it.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Flag string `json:"flag,omitempty"`
	// Lifetime override, a Go duration such as 30m or 1h30m; capped by the template's
	// maxLifetime.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="timeout must be a positive duration such as 30m or 1h30m"
	Timeout string `json:"timeout,omitempty"`
	// When the instance expires, RFC 3339 (e.g. 2026-11-01T13:00:00Z). The platform
	// extends an instance by patching it; capped by maxLifetime.
	//
	// +optional
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	ExpiresAt string `json:"expiresAt,omitempty"`
	// true removes the instance's Pod and keeps everything else (the record, instance id,
	// host, Service, flag): phase Stopped. false (or absent) starts it again, within its
	// lifetime: the clock keeps running while stopped, and expiry wins.
	//
	// +optional
	Stopped bool `json:"stopped,omitempty"`
	// A time the platform sets, RFC 3339 (e.g. the time of the player's click): each new
	// value restarts the instance's Pod; the host, instance id and flag stay.
	//
	// +optional
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	RestartedAt string `json:"restartedAt,omitempty"`
}

// DefinitionRef names a ChallengeDefinition; the namespace defaults to the Challenge's. Another
// namespace than the Challenge's is used only where the hook's --definition-grants names the pair.
type DefinitionRef struct {
	// A DNS-1123 subdomain of at most 63 characters (ChallengeDefinition names are
	// copied into a label).
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Namespace of the ChallengeDefinition, a DNS-1123 label. Another namespace than the
	// Challenge's is used only where the hook's --definition-grants names the pair.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace,omitempty"`
}

// Phases of a Challenge.
const (
	PhaseNone     = "None"
	PhaseCreating = "Creating"
	PhaseRunning  = "Running"
	// PhaseQueued: the owner already runs as many instances as the hook allows
	// (--max-instances-per-owner); it starts, in creation order, when one of them ends.
	PhaseQueued      = "Queued"
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
	ReasonTCPGatewayNotConfigured    = "TCPGatewayNotConfigured"
	ReasonQueued                     = "Queued"
	ReasonStopped                    = "Stopped"
	// ReasonIdle: phase Stopped because nobody used the instance for its template's idleTimeout.
	ReasonIdle        = "Idle"
	ReasonExpired     = "Expired"
	ReasonTerminating = "Terminating"
	ReasonDeleted     = "Deleted"
)

// ChallengeStatus is computed by the hook on every sync.
type ChallengeStatus struct {
	// None, Creating, Running, Queued, Error, Stopped, Expired, Terminating or Deleted.
	//
	// +optional
	Phase string `json:"phase,omitempty"`
	// One machine word from a fixed vocabulary (e.g. Ready, ImagePullBackOff).
	//
	// +optional
	Reason string `json:"reason,omitempty"`
	// One sentence a player or organizer can act on.
	//
	// +optional
	Message string `json:"message,omitempty"`
	// Short deterministic id of the instance, the basis of its unguessable host.
	//
	// +optional
	InstanceID string `json:"instanceId,omitempty"`
	// What the player connects to.
	//
	// +optional
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	StartedAt string `json:"startedAt,omitempty"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	ReadyAt string `json:"readyAt,omitempty"`
	// +optional
	// +kubebuilder:validation:Format=date-time
	ExpiresAt string `json:"expiresAt,omitempty"`
	// The last use of the instance the hook knows of, with an idleTimeout: its newest
	// ctf.challenge-hook.dev/last-activity stamp, its start, restart or extension, whichever is
	// latest; it never moves back. Absent while Queued or stopped by spec.stopped, when the idle
	// clock does not run.
	//
	// +optional
	// +kubebuilder:validation:Format=date-time
	LastActivityAt string `json:"lastActivityAt,omitempty"`
	// When the instance stops for idleness unless it is used before: lastActivityAt plus the
	// template's idleTimeout. Present exactly when lastActivityAt is, and moves only with it, so
	// that a UI can say "stopping at 12:40 unless used" and a stamper knows how long a stamp
	// holds.
	//
	// +optional
	// +kubebuilder:validation:Format=date-time
	IdleAt string `json:"idleAt,omitempty"`
	// The instance's place in its owner's queue while Queued, 1 for the next to start.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	QueuePosition int32 `json:"queuePosition,omitempty"`
	// True while the instance is in Error for a problem that keeps the hook from building it
	// (a missing or invalid definition, an invalid spec...) and its Pods may still run: the hook
	// keeps what runs, so the instance holds its place among its owner's instances until its
	// Pods are gone.
	//
	// +optional
	WorkloadKept bool `json:"workloadKept,omitempty"`
	// Ready, ExpiringSoon and Expired; IdleSoon with an idleTimeout.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Endpoint is what a player connects to.
type Endpoint struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Host     string `json:"host"`
	Port     int32  `json:"port"`
	URL      string `json:"url"`
	// The line a player pastes: nc <host> <port> (nc -u for UDP), ncat --ssl <host> <port> for
	// TLS, the URL for HTTP. For TCP the same nc line, then the token at the gateway's prompt.
	//
	// +optional
	Command string `json:"command,omitempty"`
	// TCP only: what the player types at the TCP gateway's prompt to reach this instance's
	// port. The same for the instance's whole life (stopped, started, restarted, extended);
	// it leads nowhere else.
	//
	// +optional
	Token string `json:"token,omitempty"`
	// TCP only, when the hook is given the gateway's WebSocket URL (--tcp-gateway-websocket-url):
	// the same way in over a WebSocket, <that URL><token>, for players whose network passes only
	// HTTPS and for the player page's terminal (one WebSocket carries one TCP stream in binary
	// frames: wsrx connect <url>, websocat -b <url>). It holds the token: a capability, as the
	// token is.
	//
	// +optional
	WebSocketURL string `json:"webSocketURL,omitempty"`
	// The pod it reaches, in an instance of several pods.
	//
	// +optional
	Component string `json:"component,omitempty"`
}
