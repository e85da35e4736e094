package manifests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const (
	ownerLabelComponent  = "components/owner-label"
	ownerLabelPolicyFile = ownerLabelComponent + "/owner-label-policy.yaml"
)

// ownerLabelDefault is the owner-label component's MutatingAdmissionPolicy and its binding.
func ownerLabelDefault(t *testing.T) (admissionregistrationv1.MutatingAdmissionPolicy, admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	t.Helper()
	return policyAndBinding[admissionregistrationv1.MutatingAdmissionPolicy, admissionregistrationv1.MutatingAdmissionPolicyBinding](
		t, ownerLabelPolicyFile, "MutatingAdmissionPolicy")
}

// TestOwnerLabelComponentIsOptIn: the MutatingAdmissionPolicy is a kustomize component of its own,
// and nothing of the base (`kubectl apply -k manifests/`) is one, so that the base still applies
// on clusters older than Kubernetes 1.36, which serve no admissionregistration.k8s.io/v1
// MutatingAdmissionPolicy. The platform docs name the component.
func TestOwnerLabelComponentIsOptIn(t *testing.T) {
	var component struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	decodeSingleYAML(t, filepath.Join(ownerLabelComponent, "kustomization.yaml"), &component)
	assert.Equal(t, "kustomize.config.k8s.io/v1alpha1", component.APIVersion)
	assert.Equal(t, "Component", component.Kind)
	assert.Equal(t, []string{filepath.Base(ownerLabelPolicyFile)}, component.Resources)

	docs, err := readYAMLDocuments("kustomization.yaml")
	require.NoError(t, err)
	resources, _ := docs[0].(map[string]any)["resources"].([]any)
	require.NotEmpty(t, resources)
	for _, resource := range resources {
		objects, err := readYAMLDocuments(resource.(string))
		require.NoError(t, err)
		for _, object := range objects {
			kind := object.(map[string]any)["kind"]
			assert.NotContains(t, []any{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}, kind,
				"%s: the base applies on Kubernetes 1.30 to 1.35, which serve no v1 %s", resource, kind)
		}
	}

	platform, err := os.ReadFile(filepath.Join(repoRoot, "docs", "platform.md"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(platform), "manifests/"+ownerLabelComponent), "docs/platform.md names manifests/%s", ownerLabelComponent)
}

// TestOwnerLabelDefaultPolicy: the component's MutatingAdmissionPolicy matches the creation of
// Challenges only (not an update: the label and spec.owner never change after it), binds every
// namespace, and sets exactly one thing, the label ctf.challenge-hook.dev/owner to spec.owner (an
// apply configuration, which creates the labels map when there is none and keeps every other
// label). Its match conditions, evaluated as the API server does, let it act only on a Challenge
// without that label whose spec.owner is a label value; they agree with the CRD's rules for
// spec.owner, so a spec.owner the CRD refuses adds no label (and the CRD's own message is the
// answer). Then, with the base's ValidatingAdmissionPolicy after it, as admission runs them: a
// Challenge created without the label is admitted with it, and one with another owner's label, or
// an empty one, is refused as before. The API server's side: TestOwnerLabelWrittenOnce (e2e).
func TestOwnerLabelDefaultPolicy(t *testing.T) {
	policy, binding := ownerLabelDefault(t)
	assert.Equal(t, policy.Name, binding.Spec.PolicyName)
	assert.Nil(t, binding.Spec.MatchResources, "the binding covers every namespace")
	assert.Nil(t, binding.Spec.ParamRef)
	assert.Nil(t, policy.Spec.ParamKind)
	assert.Empty(t, policy.Spec.Variables)
	require.NotNil(t, policy.Spec.FailurePolicy)
	assert.Equal(t, admissionregistrationv1.Fail, *policy.Spec.FailurePolicy)
	assert.Equal(t, admissionregistrationv1.NeverReinvocationPolicy, policy.Spec.ReinvocationPolicy)
	require.NotNil(t, policy.Spec.MatchConstraints)
	require.Len(t, policy.Spec.MatchConstraints.ResourceRules, 1)
	rule := policy.Spec.MatchConstraints.ResourceRules[0]
	assert.Empty(t, rule.ResourceNames)
	assert.Equal(t, []string{v1alpha1.Group}, rule.APIGroups)
	assert.Equal(t, []string{"challenges"}, rule.Resources)
	assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, rule.Operations, "creation only")

	// Exactly one mutation: labels[owner] = spec.owner, compared as parsed CEL (spacing and quotes
	// aside).
	require.Len(t, policy.Spec.Mutations, 1)
	mutation := policy.Spec.Mutations[0]
	assert.Equal(t, admissionregistrationv1.PatchTypeApplyConfiguration, mutation.PatchType)
	assert.Nil(t, mutation.JSONPatch)
	require.NotNil(t, mutation.ApplyConfiguration)
	canonical := func(expression string) string {
		env, err := cel.NewEnv()
		require.NoError(t, err)
		ast, issues := env.Parse(expression)
		require.NoError(t, issues.Err(), expression)
		text, err := cel.AstToString(ast)
		require.NoError(t, err)
		return text
	}
	assert.Equal(t,
		canonical(`Object{metadata: Object.metadata{labels: {"`+hooksync.LabelOwner+`": object.spec.owner}}}`),
		canonical(mutation.ApplyConfiguration.Expression),
		"the mutation sets the label %s to spec.owner and nothing else", hooksync.LabelOwner)

	// The match conditions, evaluated with the CEL the validating policies are (admits).
	conditions := admissionregistrationv1.ValidatingAdmissionPolicy{Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
		MatchConditions: policy.Spec.MatchConditions,
	}}
	create := map[string]any{"operation": "CREATE"}
	mutates := func(object map[string]any) bool {
		t.Helper()
		matched, _, _ := admits(t, conditions, create, object, nil)
		return matched
	}
	owned := func(labels map[string]any, owner any) map[string]any {
		chal := challengeWith(labels)
		if owner == nil {
			delete(chal["spec"].(map[string]any), "owner")
		} else {
			chal["spec"].(map[string]any)["owner"] = owner
		}
		return chal
	}

	// Against the CRD's rules for spec.owner: the conditions let the policy act exactly on the
	// owners the CRD admits, which are label values.
	schema := crdProperty(t, "crd-challenges.yaml", "spec", "owner")
	pattern := regexp.MustCompile(schema["pattern"].(string))
	minLength, maxLength := int(schema["minLength"].(float64)), int(schema["maxLength"].(float64))
	for _, owner := range []string{
		"team-42", "a", "9", "Team_7.blue", strings.Repeat("a", 63), strings.Repeat("a", 64), "",
		"-team", "team-", ".team", "team_", "team 42", "team/42", "tëam", "team\n", "a-", "_",
	} {
		crdAdmits := pattern.MatchString(owner) && len(owner) >= minLength && len(owner) <= maxLength
		assert.Equal(t, crdAdmits, mutates(owned(nil, owner)), "spec.owner %q: the policy acts exactly when the CRD admits it", owner)
		if crdAdmits {
			assert.Empty(t, content.IsLabelValue(owner), "spec.owner %q, which the CRD admits, is a label value", owner)
		}
	}
	for what, owner := range map[string]any{"missing": nil, "a number": int64(42), "a list": []any{"team-42"}} {
		assert.False(t, mutates(owned(nil, owner)), "spec.owner %s: no label added, the CRD refuses it", what)
	}
	spec := challengeWith(nil)
	delete(spec, "spec")
	assert.False(t, mutates(spec), "no spec: no label added, the CRD refuses it")

	// Mutating admission, then the base's validating policy, on the object as mutated.
	ownerPolicy, _ := ownerPolicy(t)
	for _, c := range []struct {
		what       string
		labels     map[string]any
		mutated    bool
		wantLabels map[string]any
		admitted   bool
	}{
		{"no labels", nil, true, map[string]any{hooksync.LabelOwner: "team-42"}, true},
		{"an empty labels map", map[string]any{}, true, map[string]any{hooksync.LabelOwner: "team-42"}, true},
		{"other labels only", map[string]any{"team": "blue"}, true, map[string]any{"team": "blue", hooksync.LabelOwner: "team-42"}, true},
		{"the label, right", map[string]any{hooksync.LabelOwner: "team-42"}, false, map[string]any{hooksync.LabelOwner: "team-42"}, true},
		{"another owner's label", map[string]any{hooksync.LabelOwner: "team-7"}, false, map[string]any{hooksync.LabelOwner: "team-7"}, false},
		{"an empty label", map[string]any{hooksync.LabelOwner: ""}, false, map[string]any{hooksync.LabelOwner: ""}, false},
	} {
		object := challengeWith(c.labels)
		mutated := mutates(object)
		if !assert.Equal(t, c.mutated, mutated, "%s: the policy acts", c.what) {
			continue
		}
		if mutated {
			// What the apply configuration does: the one label merged into the map (made if absent).
			metadata := object["metadata"].(map[string]any)
			labels, _ := metadata["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
			}
			labels[hooksync.LabelOwner] = object["spec"].(map[string]any)["owner"]
			metadata["labels"] = labels
		}
		assert.Equal(t, c.wantLabels, object["metadata"].(map[string]any)["labels"], c.what)
		admitted, message := admitsOwner(t, ownerPolicy, "CREATE", object, nil)
		if assert.Equal(t, c.admitted, admitted, "%s: the base's owner policy, after the mutation", c.what) && !admitted {
			assert.Contains(t, message, "equal to its spec.owner", c.what)
		}
	}
}
