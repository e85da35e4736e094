package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const ownerPolicyFile = "challenge-owner-policy.yaml"

// ownerPolicy is the owner label's ValidatingAdmissionPolicy and its binding.
func ownerPolicy(t *testing.T) (admissionregistrationv1.ValidatingAdmissionPolicy, admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	return policyAndBinding[admissionregistrationv1.ValidatingAdmissionPolicy, admissionregistrationv1.ValidatingAdmissionPolicyBinding](
		t, ownerPolicyFile, "ValidatingAdmissionPolicy")
}

// policyAndBinding reads file's admission policy of kind (ValidatingAdmissionPolicy or
// MutatingAdmissionPolicy) and its binding (kind + "Binding"), strictly, each required: the file
// holds exactly the two, of admissionregistration.k8s.io/v1.
func policyAndBinding[P, B any](t *testing.T, file, kind string) (P, B) {
	t.Helper()
	docs, err := readYAMLDocuments(file)
	require.NoError(t, err)
	require.Len(t, docs, 2, "%s holds the policy and its binding", file)
	var (
		policy       P
		binding      B
		found, bound bool
	)
	for _, doc := range docs {
		data, err := yaml.Marshal(doc)
		require.NoError(t, err)
		object := doc.(map[string]any)
		require.Equal(t, "admissionregistration.k8s.io/v1", object["apiVersion"], "%s: the GA API", file)
		switch object["kind"] {
		case kind:
			require.NoError(t, yaml.UnmarshalStrict(data, &policy))
			found = true
		case kind + "Binding":
			require.NoError(t, yaml.UnmarshalStrict(data, &binding))
			bound = true
		}
	}
	require.True(t, found, "%s has no %s", file, kind)
	require.True(t, bound, "%s has no binding", file)
	return policy, binding
}

// admitsOwner evaluates the policy for a request of operation on object (and oldObject, for an
// UPDATE), as admits does.
func admitsOwner(t *testing.T, policy admissionregistrationv1.ValidatingAdmissionPolicy, operation string, object, oldObject map[string]any) (bool, string) {
	t.Helper()
	matched, admitted, message := admits(t, policy, map[string]any{"operation": operation}, object, oldObject)
	require.True(t, matched, "the policy has no match conditions")
	return admitted, message
}

// admits evaluates the policy's match conditions, variables and validations, in order, as the API
// server's admission does (with the CEL library it compiles them with, cel-go at
// k8s.io/apiserver's version), for request (operation, userInfo, subResource...) on object (nil
// for a DELETE) and oldObject (nil for a CREATE). It returns whether the policy matched the
// request, whether every validation holds, and the message of the first that does not.
func admits(t *testing.T, policy admissionregistrationv1.ValidatingAdmissionPolicy, request, object, oldObject map[string]any) (matched, admitted bool, message string) {
	t.Helper()
	env, err := cel.NewEnv(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("variables", cel.DynType))
	require.NoError(t, err)
	// A missing object is null, as the API server passes it.
	var obj, old any
	if object != nil {
		obj = object
	}
	if oldObject != nil {
		old = oldObject
	}
	eval := func(expression string, vars map[string]any) any {
		t.Helper()
		ast, issues := env.Compile(expression)
		require.NoError(t, issues.Err(), expression)
		program, err := env.Program(ast)
		require.NoError(t, err)
		out, _, err := program.Eval(map[string]any{"object": obj, "oldObject": old, "request": request, "variables": vars})
		require.NoError(t, err, "%s on %v", expression, request)
		return out.Value()
	}
	for _, condition := range policy.Spec.MatchConditions {
		if eval(condition.Expression, nil) != true {
			return false, true, ""
		}
	}
	vars := map[string]any{}
	for _, v := range policy.Spec.Variables {
		vars[v.Name] = eval(v.Expression, vars)
	}
	for _, v := range policy.Spec.Validations {
		if eval(v.Expression, vars) != true {
			message := v.Message
			if v.MessageExpression != "" {
				message = fmt.Sprint(eval(v.MessageExpression, vars))
			}
			return true, false, message
		}
	}
	return true, true, ""
}

// challengeWith is a Challenge of spec.owner team-42 with labels (none when nil) and finalizers.
func challengeWith(labels map[string]any, finalizers ...any) map[string]any {
	metadata := map[string]any{"name": "web-sqli-team42", "namespace": "ctf"}
	if labels != nil {
		metadata["labels"] = labels
	}
	if len(finalizers) > 0 {
		metadata["finalizers"] = finalizers
	}
	return map[string]any{"metadata": metadata, "spec": map[string]any{"owner": "team-42"}}
}

// TestOwnerLabelPolicy: the admission policy challenge-hook-owner-label, evaluated as the API
// server does: a Challenge is created only with its owner label equal to spec.owner, and no
// update changes or removes that label to differ from it; a Challenge admitted before the policy
// with a label that differs may still be updated (Metacontroller's finalizer, the platform's
// patches) while its label stays as it is, or is set right. The API server's side is
// TestOwnerLabelRefusedAtAdmission (e2e).
func TestOwnerLabelPolicy(t *testing.T) {
	policy, binding := ownerPolicy(t)
	assert.Equal(t, policy.Name, binding.Spec.PolicyName)
	assert.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, binding.Spec.ValidationActions)
	assert.Nil(t, binding.Spec.MatchResources, "the binding covers every namespace")
	require.NotNil(t, policy.Spec.FailurePolicy)
	assert.Equal(t, admissionregistrationv1.Fail, *policy.Spec.FailurePolicy)
	require.NotNil(t, policy.Spec.MatchConstraints)
	require.Len(t, policy.Spec.MatchConstraints.ResourceRules, 1)
	rule := policy.Spec.MatchConstraints.ResourceRules[0]
	assert.Equal(t, []string{"challenges"}, rule.Resources, "the main resource: status writes cannot change labels")
	assert.Equal(t, []string{v1alpha1.Group}, rule.APIGroups)
	assert.ElementsMatch(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, rule.Operations)
	for _, v := range policy.Spec.Variables {
		if strings.Contains(v.Expression, "labels[") {
			assert.Contains(t, v.Expression, "'"+hooksync.LabelOwner+"'", "variable %s reads the label the hook relates owners by", v.Name)
		}
	}
	docs, err := readYAMLDocuments("kustomization.yaml")
	require.NoError(t, err)
	resources, _ := docs[0].(map[string]any)["resources"].([]any)
	assert.True(t, slices.Contains(resources, any(ownerPolicyFile)), "kustomization.yaml installs %s", ownerPolicyFile)

	owned := map[string]any{hooksync.LabelOwner: "team-42"}
	other := map[string]any{hooksync.LabelOwner: "team-7"}
	third := map[string]any{hooksync.LabelOwner: "team-9"}
	unrelated := map[string]any{"team": "blue"}
	ownedAndMore := map[string]any{hooksync.LabelOwner: "team-42", "team": "blue"}
	finalizer := "metacontroller.io/compositecontroller-challenge-hook"
	for _, c := range []struct {
		what        string
		operation   string
		object, old map[string]any
		admitted    bool
		messageSays string
	}{
		{"create with the label equal to spec.owner", "CREATE", challengeWith(owned), nil, true, ""},
		{"create without labels", "CREATE", challengeWith(nil), nil, false, "add labels: {" + hooksync.LabelOwner + ": team-42}"},
		{"create without the owner label", "CREATE", challengeWith(unrelated), nil, false, "equal to its spec.owner"},
		{"create with another owner's label", "CREATE", challengeWith(other), nil, false, "equal to its spec.owner"},
		{"create with an empty label", "CREATE", challengeWith(map[string]any{hooksync.LabelOwner: ""}), nil, false, "equal to its spec.owner"},
		{"Metacontroller adds its finalizer", "UPDATE", challengeWith(owned, finalizer), challengeWith(owned), true, ""},
		{"another label added", "UPDATE", challengeWith(ownedAndMore), challengeWith(owned), true, ""},
		{"relabelled to another owner", "UPDATE", challengeWith(other), challengeWith(owned), false, "may not be changed or removed"},
		{"the label removed", "UPDATE", challengeWith(unrelated), challengeWith(ownedAndMore), false, "may not be changed or removed"},
		{"every label removed", "UPDATE", challengeWith(nil), challengeWith(owned), false, "may not be changed or removed"},
		{"the label emptied", "UPDATE", challengeWith(map[string]any{hooksync.LabelOwner: ""}), challengeWith(owned), false, "may not be changed or removed"},
		{"before the policy, another owner's: its finalizer", "UPDATE", challengeWith(other, finalizer), challengeWith(other), true, ""},
		{"before the policy, another owner's: set right", "UPDATE", challengeWith(owned), challengeWith(other), true, ""},
		{"before the policy, another owner's: moved to a third", "UPDATE", challengeWith(third), challengeWith(other), false, "may not be changed or removed"},
		{"before the policy, without one: its finalizer", "UPDATE", challengeWith(nil, finalizer), challengeWith(nil), true, ""},
		{"before the policy, without one: set right", "UPDATE", challengeWith(owned), challengeWith(nil), true, ""},
		{"before the policy, without one: another owner's", "UPDATE", challengeWith(other), challengeWith(nil), false, "may not be changed or removed"},
	} {
		admitted, message := admitsOwner(t, policy, c.operation, c.object, c.old)
		if assert.Equal(t, c.admitted, admitted, c.what) && !admitted {
			assert.Contains(t, message, c.messageSays, c.what)
			assert.Contains(t, message, `spec.owner ("team-42")`, c.what)
		}
	}
}
