package sync

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
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

// instance is what every child builder needs to know about the Challenge being synced.
type instance struct {
	name                string // the Challenge's name, used for every child except the flag Secret
	namespace           string
	id                  string
	owner               string
	restartedAt         string // spec.restartedAt, the Pod's AnnotationRestartedAt
	definition          string // the referenced definition's name, empty for inline templates
	definitionNamespace string
	template            DefinitionSpec
	labels              map[string]string // see withLabels
	selector            map[string]string
}

func (in instance) flagSecretName() string { return in.name + "-flag" }

// inlineDefinitionPrefix starts the definition key of an inline template.
const inlineDefinitionPrefix = "inline"

// definitionKey identifies the template for dynamic flags: the referenced definition
// "<namespace>/<name>", or for an inline template the Challenge itself, "inline/<namespace>/<name>"
// (a platform verifying such a flag names the Challenge, which it created).
func (in instance) definitionKey() string {
	if in.definition != "" {
		return in.definitionNamespace + "/" + in.definition
	}
	return inlineDefinitionPrefix + "/" + in.namespace + "/" + in.name
}

// withLabels fills in the labels put on every child and on the Pod template, and the selector of
// the instance's Pods (the instance id alone: unique, and it never changes). They are built once
// per sync and shared, read-only, by every child.
func (in instance) withLabels() instance {
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
	return in
}

// portName is the name of a port in the Service and endpoints: the container port's own name, or
// the protocol and number.
func portName(port ContainerPort) string {
	if port.Name != "" {
		return port.Name
	}
	return strings.ToLower(protocolOf(port)) + "-" + itoa(port.ContainerPort)
}

func protocolOf(port ContainerPort) string {
	if port.Protocol == "" {
		return "TCP"
	}
	return port.Protocol
}
