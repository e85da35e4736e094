package sync

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// gateOf is the Pod's policy gate, nil when it has none.
func gateOf(t *testing.T, pod map[string]any) map[string]any {
	t.Helper()
	inits, _ := pod["spec"].(map[string]any)["initContainers"].([]any)
	if len(inits) == 0 {
		return nil
	}
	require.Len(t, inits, 1)
	return inits[0].(map[string]any)
}

// Every Pod starts with the gate, hardened whatever the template opts out of (here runAsRoot):
// non-root, no privilege escalation, no capability, read-only root, no volume, tiny resources.
// Off, no Pod has it; with a target, the args name it and no node address is read.
func TestPolicyGateContainer(t *testing.T) {
	req := mustDecode(t, goldenCaseNamed(t, "running-run-as-root-opt-out-fixed-point").request)
	cfg := goldenConfig(t)

	gate := gateOf(t, podOf(t, Sync(req, goldenNow, cfg)))
	require.NotNil(t, gate, "on by default")
	assert.Equal(t, PolicyGateContainer, gate["name"])
	assert.Equal(t, ReleaseImage, gate["image"])
	assert.Equal(t, []any{"/challenge-hook", "wait-for-policy"}, gate["command"])
	assert.Equal(t, []any{"--target=$(HOST_IP):10250", "--timeout=1m0s"}, gate["args"])
	assert.Equal(t, map[string]any{"allowPrivilegeEscalation": false, "capabilities": map[string]any{"drop": []any{"ALL"}},
		"readOnlyRootFilesystem": true, "runAsNonRoot": true, "runAsUser": float64(65532), "runAsGroup": float64(65532)}, gate["securityContext"])
	assert.NotContains(t, gate, "volumeMounts")
	assert.Equal(t, map[string]any{"cpu": "100m", "memory": "64Mi", "ephemeral-storage": "8Mi"}, gate["resources"].(map[string]any)["limits"])

	cfg.PolicyGate.Target, cfg.PolicyGate.Image = "10.96.0.20:8080", "registry.example/hook:2"
	gate = gateOf(t, podOf(t, Sync(req, goldenNow, cfg)))
	assert.Equal(t, []any{"--target=10.96.0.20:8080", "--timeout=1m0s"}, gate["args"])
	assert.Equal(t, "registry.example/hook:2", gate["image"])
	assert.NotContains(t, gate, "env", "a configured target needs no node address")

	cfg.PolicyGate.Enabled = false
	assert.Nil(t, gateOf(t, podOf(t, Sync(req, goldenNow, cfg))), "--policy-gate=false")
}

// Every Pod of an instance of several pods has its own gate.
func TestPolicyGateInEveryPodOfSeveral(t *testing.T) {
	resp := Sync(mustDecode(t, goldenCaseNamed(t, "components-running-to-error-db-crash-loop").request), goldenNow, goldenConfig(t))
	pods := 0
	for _, child := range resp.Children {
		if obj := decodedChild(t, child); obj["kind"] == "Pod" {
			pods++
			assert.NotNil(t, gateOf(t, obj), "Pod %v", obj["metadata"].(map[string]any)["name"])
		}
	}
	assert.Equal(t, 3, pods)
}

func mustDecode(t *testing.T, body []byte) Request {
	t.Helper()
	req, err := DecodeRequest(body)
	require.NoError(t, err)
	return req
}

// The gate's own states: running (Creating, waiting for the policy), failed (Error, even while
// the kubelet runs it again, with its termination message inert), passed (the template's
// containers decide again), and an image it cannot pull (ErrImagePull naming the gate's image).
func TestPolicyGateVerdicts(t *testing.T) {
	c := goldenCaseNamed(t, "creating-to-error-policy-gate-not-enforced")
	cfg := goldenConfig(t)
	sync := func(gate corev1.ContainerStatus) v1alpha1.ChallengeStatus {
		req := mustDecode(t, c.request)
		req.Children.Pods[0].Status.InitContainerStatuses = []corev1.ContainerStatus{gate}
		return Sync(req, goldenNow, cfg).Status
	}
	failed := &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "<script>x</script> still answers\x1b[31m"}

	got := sync(corev1.ContainerStatus{Name: PolicyGateContainer, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	assert.Equal(t, [2]string{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting}, [2]string{got.Phase, got.Reason})
	assert.Contains(t, got.Message, "waiting for the NetworkPolicy to be enforced")

	for name, gate := range map[string]corev1.ContainerStatus{
		"terminated":          {Name: PolicyGateContainer, State: corev1.ContainerState{Terminated: failed}},
		"running again":       {Name: PolicyGateContainer, RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, LastTerminationState: corev1.ContainerState{Terminated: failed}},
		"crash loop back-off": {Name: PolicyGateContainer, RestartCount: 2, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: corev1.ContainerState{Terminated: failed}},
	} {
		got := sync(gate)
		assert.Equal(t, [2]string{v1alpha1.PhaseError, v1alpha1.ReasonProgressDeadlineExceeded}, [2]string{got.Phase, got.Reason}, name)
		assert.Contains(t, got.Message, "the NetworkPolicy of Pod web-sqli-team42 is not enforced", name)
		assert.Contains(t, got.Message, "‹script›x‹/script› still answers", name)
		assert.False(t, strings.ContainsAny(got.Message, "<>\x1b"), name)
	}

	got = sync(corev1.ContainerStatus{Name: PolicyGateContainer, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}, LastTerminationState: corev1.ContainerState{Terminated: failed}})
	assert.Equal(t, [2]string{v1alpha1.PhaseCreating, "waiting for the pod to become ready"}, [2]string{got.Phase, got.Message}, "passed, after a failed attempt")

	got = sync(corev1.ContainerStatus{Name: PolicyGateContainer, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}})
	assert.Equal(t, v1alpha1.ReasonErrImagePull, got.Reason)
	assert.Contains(t, got.Message, `container "policy-gate" cannot pull image "`+ReleaseImage+`"`)
}

// No template may name a container policy-gate: its Pod would be invalid.
func TestPolicyGateNameIsReserved(t *testing.T) {
	spec := v1alpha1.DefinitionSpec{Containers: []v1alpha1.Container{{Name: PolicyGateContainer, Image: "x"}}}
	errs := ValidateDefinition(spec, field.NewPath("spec"))
	require.NotEmpty(t, errs)
	assert.Contains(t, errs.ToAggregate().Error(), `spec.containers[0].name: Invalid value: "policy-gate": is reserved for the hook's init container`)
}
