package sync

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The policy gate: an init container of the hook's own image, first in every instance Pod, that
// exits only once the Pod's NetworkPolicy is enforced (see PolicyGate).
const (
	// PolicyGateContainer is the init container's name, which no template may give a container
	// (the CRDs refuse it too, with the same message).
	PolicyGateContainer    = "policy-gate"
	policyGateNameReserved = "is reserved for the hook's init container, which holds the Pod until its NetworkPolicy is enforced"
	// defaultPolicyGateTimeout is one attempt's bound: half the progress deadline, so that a
	// policy agent that is merely slow gets a second attempt before the instance is an Error.
	defaultPolicyGateTimeout = 60 * time.Second
	// policyGateHostIPEnv carries the node's address (status.hostIP) into the default target.
	policyGateHostIPEnv = "HOST_IP"
	// kubeletPort is the default target's port on the node: every node has it, and it answers.
	kubeletPort = "10250"
	// policyGateUID runs the gate as the hook image's own non-root user, whatever the template's.
	policyGateUID int64 = 65532
)

// policyGateTarget is the address the gate probes, as the init container's args spell it.
func policyGateTarget(g PolicyGate) string {
	if g.Target != "" {
		return g.Target
	}
	return "$(" + policyGateHostIPEnv + "):" + kubeletPort
}

// describePolicyGateTarget names the target for a status message.
func describePolicyGateTarget(g PolicyGate) string {
	if g.Target != "" {
		return g.Target + " (--policy-gate-target)"
	}
	return "the node's kubelet port (status.hostIP:" + kubeletPort + ", the default --policy-gate-target)"
}

// buildPolicyGate is the init container: hardened like the player's containers (Pod Security
// "restricted" on its own, whatever the template opts out of), with tiny resources, no volume and
// no token; it only opens TCP connections to its target. Its peak resident set measured 22 MiB,
// most of it the binary's own pages, hence a limit of 64Mi. Its CPU request is the least any
// instance requests (an init container's request counts when the Pod's containers ask for less),
// so it is kept at 5m: a node of 2 CPUs fits 300 instances of a small challenge, and the gate's
// work (a connection attempt every half second) needs less.
func buildPolicyGate(g PolicyGate) *corev1ac.ContainerApplyConfiguration {
	quantities := func(cpu, memory, storage string) corev1.ResourceList {
		return corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse(cpu),
			corev1.ResourceMemory:           resource.MustParse(memory),
			corev1.ResourceEphemeralStorage: resource.MustParse(storage),
		}
	}
	c := corev1ac.Container().
		WithName(PolicyGateContainer).
		WithImage(g.Image).
		WithCommand("/challenge-hook", "wait-for-policy").
		WithArgs("--target="+policyGateTarget(g), "--timeout="+g.Timeout.String()).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(quantities("5m", "16Mi", "1Mi")).
			WithLimits(quantities("100m", "64Mi", "8Mi"))).
		WithSecurityContext(corev1ac.SecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(policyGateUID).
			WithRunAsGroup(policyGateUID).
			WithAllowPrivilegeEscalation(false).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
			WithReadOnlyRootFilesystem(true))
	if g.Target == "" {
		c.WithEnv(corev1ac.EnvVar().WithName(policyGateHostIPEnv).WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithAPIVersion("v1").WithFieldPath("status.hostIP"))))
	}
	return c
}

// policyGateStatus finds the gate's status in the Pod's, when the gate is on.
func policyGateStatus(in *instance, pod ObservedPod) (corev1.ContainerStatus, bool) {
	if !in.cfg.PolicyGate.Enabled {
		return corev1.ContainerStatus{}, false
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if cs.Name == PolicyGateContainer {
			return cs, true
		}
	}
	return corev1.ContainerStatus{}, false
}

// policyGatePassed says the gate exited successfully: the player's containers may run.
func policyGatePassed(cs corev1.ContainerStatus) bool {
	t := cs.State.Terminated
	return t != nil && t.ExitCode == 0
}

// policyGateFailure is the verdict once the gate has failed an attempt (its status says so until
// an attempt succeeds, even while the kubelet runs it again): the player's containers never started.
// The reason is the progress deadline's: the gate gave up waiting for the policy agent, as the
// hook gives up waiting for a policy the API server never creates. The message is the hook's;
// the gate's own termination message (written by the hook's binary before any container of the
// template runs) is quoted bounded and inert.
func policyGateFailure(in *instance, pod ObservedPod, cs corev1.ContainerStatus) (verdict, bool) {
	failed := cs.State.Terminated
	if failed == nil || failed.ExitCode == 0 {
		failed = cs.LastTerminationState.Terminated
	}
	if failed == nil || failed.ExitCode == 0 || policyGatePassed(cs) {
		return verdict{}, false
	}
	g := in.cfg.PolicyGate
	why := detail(failed.Message)
	if why == "" {
		why = fmt.Sprintf(" (exit code %d, %s)", failed.ExitCode, inert(failed.Reason, maxObservedLength))
	}
	return verdict{v1alpha1.PhaseError, v1alpha1.ReasonProgressDeadlineExceeded, fmt.Sprintf(
		"the NetworkPolicy of Pod %s is not enforced: its init container %q waited up to %s for %s to stop answering, so the challenge's containers were not started (the kubelet retries)%s; "+
			"check that the cluster's CNI enforces NetworkPolicy and that every instance's policy denies the target (docs/security.md), or turn the gate off with --policy-gate=false",
		pod.Metadata.Name, PolicyGateContainer, g.Timeout, describePolicyGateTarget(g), why)}, true
}
