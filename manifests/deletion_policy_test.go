package manifests

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	deletionPolicyFile = "challenge-deletion-policy.yaml"
	finalizerPolicy    = "challenge-hook-finalizer"
	// metacontrollerUsername is the ServiceAccount Metacontroller's own manifests
	// (manifests/production) run it as, in the namespace the README asks for.
	metacontrollerUsername = "system:serviceaccount:metacontroller:metacontroller"
)

// protectedPrefix finds the finalizer prefix in the policy's variable "removed".
var protectedPrefix = regexp.MustCompile(`startsWith\('([^']+)'\)`)

// TestFinalizerPolicyCoversEveryCompositeController: the finalizer rule of the deletion policy
// protects the finalizer Metacontroller v4.17.2 puts on Challenges for each CompositeController
// the install and the sharding component declare ("metacontroller.io/compositecontroller-" + its
// name); its binding reads the ConfigMap shipped beside it, which names Metacontroller's
// ServiceAccount as Metacontroller's manifests install it. The API server's side of the rule is
// TestFinalizerRemovalRefused (e2e).
func TestFinalizerPolicyCoversEveryCompositeController(t *testing.T) {
	docs, err := readYAMLDocuments(deletionPolicyFile)
	require.NoError(t, err)
	var (
		policy    *admissionregistrationv1.ValidatingAdmissionPolicy
		binding   *admissionregistrationv1.ValidatingAdmissionPolicyBinding
		configMap *corev1.ConfigMap
	)
	for _, doc := range docs {
		data, err := yaml.Marshal(doc)
		require.NoError(t, err)
		switch doc.(map[string]any)["kind"] {
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			require.NoError(t, yaml.UnmarshalStrict(data, &p))
			if p.Name == finalizerPolicy {
				policy = &p
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			require.NoError(t, yaml.UnmarshalStrict(data, &b))
			if b.Spec.PolicyName == finalizerPolicy {
				binding = &b
			}
		case "ConfigMap":
			configMap = &corev1.ConfigMap{}
			require.NoError(t, yaml.UnmarshalStrict(data, configMap))
		}
	}
	require.NotNil(t, policy, "%s has no ValidatingAdmissionPolicy %s", deletionPolicyFile, finalizerPolicy)
	require.NotNil(t, binding, "%s has no binding of %s", deletionPolicyFile, finalizerPolicy)
	require.NotNil(t, configMap, "%s has no ConfigMap", deletionPolicyFile)

	require.NotNil(t, policy.Spec.ParamKind)
	assert.Equal(t, "ConfigMap", policy.Spec.ParamKind.Kind)
	require.NotNil(t, binding.Spec.ParamRef)
	assert.Equal(t, configMap.Name, binding.Spec.ParamRef.Name)
	assert.Equal(t, configMap.Namespace, binding.Spec.ParamRef.Namespace)
	require.NotNil(t, binding.Spec.ParamRef.ParameterNotFoundAction)
	assert.Equal(t, admissionregistrationv1.DenyAction, *binding.Spec.ParamRef.ParameterNotFoundAction,
		"without its parameter the rule must refuse, not admit, the removal")
	assert.Contains(t, strings.Fields(configMap.Data["usernames"]), metacontrollerUsername)

	var prefix string
	for _, v := range policy.Spec.Variables {
		if v.Name == "removed" {
			if m := protectedPrefix.FindStringSubmatch(v.Expression); m != nil {
				prefix = m[1]
			}
		}
	}
	require.NotEmpty(t, prefix, "the variable removed of %s names no finalizer prefix", finalizerPolicy)
	for _, file := range []string{"compositecontroller.yaml", shardOne} {
		name, _ := mustReadYAML(t, file).(map[string]any)["metadata"].(map[string]any)["name"].(string)
		require.NotEmpty(t, name, "%s: no metadata.name", file)
		finalizer := "metacontroller.io/compositecontroller-" + name
		assert.True(t, strings.HasPrefix(finalizer, prefix), "%s: Metacontroller's finalizer %s is not protected (prefix %q)", file, finalizer, prefix)
	}
}

// mustReadYAML is the single document of a YAML file.
func mustReadYAML(t *testing.T, file string) any {
	t.Helper()
	docs, err := readYAMLDocuments(file)
	require.NoError(t, err)
	require.Len(t, docs, 1, file)
	return docs[0]
}
