package manifests

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The policy gate's target (manifests/components/policy-gate-target): the gate takes its silence
// for an enforced policy, so it must answer every Pod that no policy stops, under any load. It
// does so by refusing: nothing listens in its Pods, no policy selects them, the Service sends to a
// port no container declares, and the Pods hold no credential.
func TestPolicyGateTargetListensOnNothingAndNoPolicySelectsIt(t *testing.T) {
	objects, files := shippedObjects(t)
	const component = "components/policy-gate-target/target.yaml"
	var (
		deployment *appsv1.Deployment
		service    *corev1.Service
	)
	for i, object := range objects {
		if files[i] != filepath.FromSlash(component) {
			continue
		}
		switch object["kind"] {
		case "Deployment":
			deployment = &appsv1.Deployment{}
			convert(t, object, deployment)
		case "Service":
			service = &corev1.Service{}
			convert(t, object, service)
		}
	}
	require.NotNil(t, deployment, "%s has no Deployment", component)
	require.NotNil(t, service, "%s has no Service", component)

	pod := deployment.Spec.Template
	require.Len(t, pod.Spec.Containers, 1)
	container := pod.Spec.Containers[0]
	assert.Equal(t, []string{"policy-gate-target"}, container.Args, "the process that checks that nothing listens")
	assert.Empty(t, container.Ports, "a declared port says something listens")
	assert.Empty(t, pod.Spec.InitContainers)
	assert.False(t, *pod.Spec.AutomountServiceAccountToken, "the target needs no credential")
	assert.GreaterOrEqual(t, *deployment.Spec.Replicas, int32(2), "one replica leaves the Service without endpoints in a drain")

	assert.Equal(t, corev1.ServiceTypeClusterIP, service.Spec.Type)
	assert.True(t, labels.SelectorFromSet(service.Spec.Selector).Matches(labels.Set(pod.Labels)), "the Service sends to the target's Pods")
	require.Len(t, service.Spec.Ports, 1)
	assert.Equal(t, int32(9), service.Spec.Ports[0].Port, "the port the docs give CHALLENGE_HOOK_POLICY_GATE_TARGET")

	// No shipped NetworkPolicy selects the target's Pods: one that did could drop what reaches them
	// (a default deny), and the gate would read that silence as every instance's policy.
	for i, object := range objects {
		if object["kind"] != "NetworkPolicy" {
			continue
		}
		var policy networkingv1.NetworkPolicy
		convert(t, object, &policy)
		if policy.Namespace != deployment.Namespace {
			continue
		}
		selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
		require.NoError(t, err)
		assert.False(t, selector.Matches(labels.Set(pod.Labels)), "%s: NetworkPolicy %s selects the policy gate's target", files[i], policy.Name)
	}
}
