package sync

import (
	"crypto/sha256"
	"encoding/base32"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// instanceIDLength is the length of an instance id: 16 base32 characters carry 80 bits, enough that
// a player cannot guess another instance's HTTP host.
const instanceIDLength = 16

var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// instanceID is a short, stable and unguessable id for one Challenge. The uid, random and assigned
// by the API server, makes it unguessable; it never changes for the life of the object. It starts
// with a letter, so it is also a valid DNS label.
func instanceID(parent Challenge) string {
	sum := sha256.Sum256([]byte(parent.Metadata.Namespace + "/" + parent.Metadata.Name + "/" + parent.Metadata.UID))
	return "i" + lowerBase32.EncodeToString(sum[:])[:instanceIDLength-1]
}

// instance is one Challenge as this sync sees it, resolved once (resolve): who it is, its
// template, the sync's clock and configuration, its times, what stops the hook from building it,
// and what Metacontroller observed of its children. The phase, the status and every child builder
// read it; none of them computes any of it again.
type instance struct {
	name                string // the Challenge's name, used for every child except the flag Secret
	namespace           string
	id                  string
	owner               string
	restartedAt         string // spec.restartedAt, the Pod's AnnotationRestartedAt
	definition          string // the referenced definition's name, empty for inline templates
	definitionNamespace string
	template            v1alpha1.DefinitionSpec
	labels              map[string]string // see setLabels
	selector            map[string]string

	cfg      Config
	now      time.Time
	parent   Challenge // the previous status is read from it
	observed ObservedChildren
	deleting bool       // the Challenge is being deleted (finalize)
	problem  *problem   // why the hook cannot build the instance; nil when it can
	queue    queuePlace // where it stands among its owner's instances (--max-instances-per-owner)
	started  time.Time  // see startedAt
	expires  time.Time  // see deadline and expiry
	expired  bool
	idle     idleness // see resolveIdleness
	// components are the instance's Pods and what surrounds each (resolveComponents), when
	// problem is nil.
	components []*component
}

// resolve reads the request once into the instance: its identity, its template and what is wrong
// with it (resolveTemplate, routeProblem), its start and deadline, its components with their
// observed Pods and what each Pod waits for.
func resolve(req Request, now time.Time, cfg Config) *instance {
	parent := req.Parent
	in := &instance{
		name:        parent.Metadata.Name,
		namespace:   parent.Metadata.Namespace,
		id:          instanceID(parent),
		owner:       parent.Spec.Owner,
		restartedAt: parent.Spec.RestartedAt,
		cfg:         cfg,
		now:         now,
		parent:      parent,
		observed:    req.Children,
		deleting:    req.Finalizing || parent.Metadata.DeletionTimestamp != "",
		started:     startedAt(parent, now),
	}
	if in.deleting {
		return in // finalize reads the identity, the start and the previous status only
	}
	in.problem = resolveTemplate(in, req.Related)
	if in.problem == nil {
		in.problem = routeProblem(in, req.DeclaredChildTypes)
	}
	if in.problem == nil {
		in.problem = in.ownerLabelProblem()
	}
	timing := &in.template
	if in.problem != nil {
		timing = in.problem.template
	}
	if in.problem == nil && !parent.Spec.Stopped {
		in.resolveQueue(req.Related.Challenges)
	}
	in.expires, in.expired = expiry(parent, timing, in.started, now, cfg)
	in.idle = resolveIdleness(in, timing)
	in.setLabels()
	if in.problem == nil {
		in.resolveComponents()
	}
	return in
}

// inlineDefinitionPrefix starts the definition key of an inline template.
const inlineDefinitionPrefix = "inline"

// definitionKey identifies the template for dynamic flags: the referenced definition
// "<namespace>/<name>", or for an inline template the Challenge itself, "inline/<namespace>/<name>"
// (a platform verifying such a flag names the Challenge, which it created).
func (in *instance) definitionKey() string {
	if in.definition != "" {
		return in.definitionNamespace + "/" + in.definition
	}
	return inlineDefinitionPrefix + "/" + in.namespace + "/" + in.name
}

// setLabels fills in the labels put on every child and on the Pod template, and the selector of
// the instance's Pods (the instance id alone: unique, and it never changes). They are built once
// per sync and shared, read-only, by every child.
func (in *instance) setLabels() {
	in.labels = map[string]string{
		LabelManagedBy: ManagedByValue,
		LabelChallenge: in.name,
		LabelInstance:  in.id,
		LabelOwner:     in.owner,
	}
	if in.definition != "" {
		in.labels[LabelDefinition] = in.definition
	}
	in.selector = map[string]string{LabelInstance: in.id}
}
