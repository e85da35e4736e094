// Package v1alpha1 is the challenge-hook API: the Go types of the Challenge and ChallengeDefinition
// custom resources. Their markers are the CRDs' schemas, validation and CEL rules: `make generate`
// writes manifests/crd-*.yaml from them with controller-gen.
//
// The types carry no DeepCopy methods and are registered in no scheme: the hook decodes and
// encodes them with encoding/json only and never talks to the API server.
//
// +kubebuilder:object:generate=false
// +groupName=ctf.challenge-hook.dev
package v1alpha1

// The API group and version, fixed by the design: manifests, golden files and outside checks agree on them.
const (
	Group   = "ctf.challenge-hook.dev"
	Version = "v1alpha1"
)

// APIVersion is the apiVersion of every object of this package.
const APIVersion = Group + "/" + Version
