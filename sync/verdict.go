package sync

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// verdict is the phase the observed children put the instance in, and why.
type verdict struct {
	phase, reason, message string
}

// observe decides the phase of an instance whose children the hook builds: from nothing observed
// (None), through its NetworkPolicies, Pods and routes (Creating, Error), to every Pod ready with
// every endpoint known and every route accepted by the Gateway (Running). wake is when the clock
// alone will change the verdict (a progress deadline), zero if it will not. Of several Pods, the
// first (in template order) that will not become ready without help decides, then the first that
// is not ready yet; a verdict about one pod of several names it.
func (in *instance) observe(endpoints []v1alpha1.Endpoint, missing, refused string) (verdict, time.Time) {
	if in.observed.Count() == 0 {
		if len(in.template.Pods) > 0 {
			return verdict{v1alpha1.PhaseNone, v1alpha1.ReasonPending, "creating the instance's NetworkPolicies and Services first, then its Pods"}, time.Time{}
		}
		return verdict{v1alpha1.PhaseNone, v1alpha1.ReasonPending, "creating the instance's NetworkPolicy first, then its Pod"}, time.Time{}
	}
	verdicts := make([]podVerdict, len(in.components))
	for i, c := range in.components {
		verdicts[i] = in.observePod(c)
	}
	wake := earliestWake(verdicts)
	first := func(stage podStage, phase string) (verdict, bool) { return in.firstPodVerdict(verdicts, stage, phase) }
	if v, found := first(podStarting, v1alpha1.PhaseError); found {
		return v, time.Time{}
	}
	if v, found := first(podStarting, v1alpha1.PhaseCreating); found {
		return v, wake
	}
	if refused != "" {
		// Players cannot reach the instance until the Gateway or the hook's configuration is fixed.
		return verdict{v1alpha1.PhaseError, v1alpha1.ReasonRouteNotAccepted, refused}, time.Time{}
	}
	if v, found := first(podUnready, v1alpha1.PhaseError); found {
		return v, time.Time{}
	}
	if v, found := first(podUnready, v1alpha1.PhaseCreating); found {
		return v, wake
	}
	if missing != "" {
		return verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, "waiting for " + missing}, time.Time{}
	}
	if len(endpoints) == 0 {
		return verdict{v1alpha1.PhaseRunning, v1alpha1.ReasonReady, "ready; the template exposes no port"}, time.Time{}
	}
	return verdict{v1alpha1.PhaseRunning, v1alpha1.ReasonReady, "ready at " + endpoints[0].URL}, time.Time{}
}

// podStage is how far a component's Pod got.
type podStage int

const (
	// podStarting: the Pod is not there yet or is not running its containers as declared (it
	// waits for its policy, is created, replaced or restarted), or failed in a way that needs help.
	podStarting podStage = iota
	// podUnready: the Pod runs but is not ready yet.
	podUnready
	podIsReady
)

// podVerdict is what one component's Pod says of the instance: its verdict unless podIsReady,
// and when the clock alone will change it (zero: never).
type podVerdict struct {
	verdict
	stage podStage
	wake  time.Time
}

// observePod is the verdict of one component's Pod.
func (in *instance) observePod(c *component) podVerdict {
	starting := func(v verdict) podVerdict { return podVerdict{verdict: v, stage: podStarting} }
	pod := c.pod
	if c.waitingFor != "" {
		// The Pod waits for what isolates it, or is removed when that went missing. Creating the
		// policy takes one sync; one that never appears was refused by the API server.
		if c.hasPod {
			return starting(verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, c.waitingFor + " is missing: the Pod is removed until it exists again, so that it never runs unisolated"})
		}
		deadline := in.notReadySince().Add(progressDeadline)
		if !in.now.Before(deadline) {
			return starting(verdict{v1alpha1.PhaseError, v1alpha1.ReasonProgressDeadlineExceeded, fmt.Sprintf(
				"%s does not exist %ds after it was declared, and the Pod is created only after it: the API server may refuse it (see the SyncError events: kubectl describe challenge -n %s %s)",
				c.waitingFor, int(progressDeadline.Seconds()), in.namespace, in.name)})
		}
		return podVerdict{verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, "waiting for " + c.waitingFor + " before creating the Pod, so that it never runs unisolated"}, podStarting, deadline}
	}
	if !c.hasPod {
		return starting(verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, "waiting for the Pod to be created"})
	}
	if pod.Metadata.DeletionTimestamp != "" {
		return starting(verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, fmt.Sprintf(
			"Pod %s is being deleted (replaced after a change, drained or evicted); it is created again once it is gone", pod.Metadata.Name)})
	}
	if restarted := pod.Metadata.Annotations.RestartedAt; restarted != in.restartedAt {
		return starting(verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, fmt.Sprintf(
			"restarting: Pod %s is replaced because spec.restartedAt changed; the host, instance id and flag stay", pod.Metadata.Name)})
	}
	if podFinished(pod) {
		why := inert(string(pod.Status.Phase), maxObservedLength)
		if pod.Status.Reason != "" {
			why += ", " + inert(pod.Status.Reason, maxObservedLength)
		}
		return starting(verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, fmt.Sprintf(
			"Pod %s will not run again (%s%s); it is deleted and created again", pod.Metadata.Name, why, detail(pod.Status.Message))})
	}
	if v, failed := podFailure(in, c); failed {
		return starting(v)
	}
	if podReady(pod) {
		return podVerdict{stage: podIsReady}
	}
	waiting := "waiting for the pod to become ready"
	if gate, found := policyGateStatus(in, pod); found && !policyGatePassed(gate) {
		waiting = fmt.Sprintf("waiting for the NetworkPolicy to be enforced for Pod %s before its containers start (init container %s)", pod.Metadata.Name, PolicyGateContainer)
	}
	since := unreadySince(pod)
	if since.IsZero() {
		return podVerdict{verdict: verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, waiting}, stage: podUnready}
	}
	deadline := since.Add(progressDeadline)
	if !in.now.Before(deadline) {
		return podVerdict{verdict: verdict{v1alpha1.PhaseError, v1alpha1.ReasonProgressDeadlineExceeded, fmt.Sprintf(
			"Pod %s has not been ready for %ds (since %s): check the readiness probe and the containers' logs (kubectl logs -n %s %s)",
			pod.Metadata.Name, int(progressDeadline.Seconds()), formatTime(since), in.namespace, pod.Metadata.Name)}, stage: podUnready}
	}
	return podVerdict{verdict{v1alpha1.PhaseCreating, v1alpha1.ReasonStarting, waiting}, podUnready, deadline}
}

// notReadySince is when the instance last stopped being ready, or started: what a Pod waiting for
// its prerequisites has waited since at most. A running instance whose template changes its pods
// declares the new pods' policies in the same answer that turns it Creating: they count from then,
// not from the instance's start.
func (in *instance) notReadySince() time.Time {
	ready := meta.FindStatusCondition(in.parent.Status.Conditions, ConditionReady)
	switch {
	case ready == nil:
		return in.started
	case ready.Status == metav1.ConditionTrue:
		return in.now // this answer turns it not ready
	case ready.LastTransitionTime.After(in.started):
		return ready.LastTransitionTime.UTC()
	}
	return in.started
}

// podFinished says the Pod will not run again by itself: with restartPolicy Always a Pod ends in
// Failed (or Succeeded) only when the kubelet gives up on it, e.g. it was evicted or its node shut
// down, and the API server never restarts it.
func podFinished(pod ObservedPod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// unreadySince is when the Pod's progress deadline starts counting: its creation, or the moment its
// Ready condition last turned False when that is later. The kubelet sets Ready False when it starts
// the Pod, a few seconds after its creation; a Pod that was ready and lost it (a probe failing for a
// while, a node going NotReady) thus gets the whole deadline again before the instance shows Error,
// instead of an Error at the first blip.
func unreadySince(pod ObservedPod) time.Time {
	since := parseTime(pod.Metadata.CreationTimestamp)
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse {
			if t := c.LastTransitionTime.UTC(); t.After(since) {
				since = t
			}
		}
	}
	return since
}

func podReady(pod ObservedPod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailure finds the first reason, in container order, that the Pod will not become ready
// without help.
func podFailure(in *instance, c *component) (verdict, bool) {
	pod := c.pod
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if v, failed := containerFailure(cs, in, c); failed {
				return v, true
			}
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return verdict{v1alpha1.PhaseError, v1alpha1.ReasonUnschedulable, fmt.Sprintf(
				"pod %s cannot be scheduled%s; free capacity in the cluster or lower resources.requests in the template",
				pod.Metadata.Name, detail(c.Message))}, true
		}
	}
	return verdict{}, false
}

// earliestWake is the earliest time at which one of the pods' verdicts changes by itself (zero:
// none does).
func earliestWake(verdicts []podVerdict) time.Time {
	var wake time.Time
	for _, pv := range verdicts {
		if w := pv.wake; !w.IsZero() && (wake.IsZero() || w.Before(wake)) {
			wake = w
		}
	}
	return wake
}

// firstPodVerdict is the verdict of the first pod (in the components' order) at stage with phase,
// its message naming the pod in an instance of several.
func (in *instance) firstPodVerdict(verdicts []podVerdict, stage podStage, phase string) (verdict, bool) {
	for i, pv := range verdicts {
		if pv.stage == stage && pv.phase == phase {
			if c := in.components[i]; c.name != "" {
				pv.message = "pod " + c.name + ": " + pv.message
			}
			return pv.verdict, true
		}
	}
	return verdict{}, false
}

func containerFailure(cs corev1.ContainerStatus, in *instance, c *component) (verdict, bool) {
	if gate, found := policyGateStatus(in, c.pod); found && cs.Name == gate.Name {
		if v, failed := policyGateFailure(in, c.pod, gate); failed {
			return v, true
		}
	}
	if t := cs.State.Terminated; t != nil && t.Reason == v1alpha1.ReasonOOMKilled {
		return oomKilled(cs.Name, c), true
	}
	// Between two restarts the kubelet may show the exited container as terminated for the
	// whole back-off, and its CrashLoopBackOff only at the next restart: a container that was
	// restarted before and exited with an error again is crash looping all the same.
	if t := cs.State.Terminated; t != nil && t.ExitCode != 0 && cs.RestartCount > 0 {
		return crashLooping(cs, t, in, c), true
	}
	if w := cs.State.Waiting; w != nil {
		return waitingFailure(cs, w, in, c)
	}
	return verdict{}, false
}

// waitingFailure is the verdict on a container the kubelet holds back (w), when it cannot start
// without a change of the template or the image.
func waitingFailure(cs corev1.ContainerStatus, w *corev1.ContainerStateWaiting, in *instance, c *component) (verdict, bool) {
	switch w.Reason {
	case v1alpha1.ReasonErrImagePull, v1alpha1.ReasonImagePullBackOff, "InvalidImageName":
		reason := w.Reason
		if reason == "InvalidImageName" {
			reason = v1alpha1.ReasonErrImagePull
		}
		return verdict{v1alpha1.PhaseError, reason, fmt.Sprintf(
			"container %q cannot pull image %q%s; check the image name and tag, and that the cluster can pull from its registry",
			cs.Name, imageOf(in, c, cs.Name), detail(w.Message))}, true
	case v1alpha1.ReasonCrashLoopBackOff:
		last := cs.LastTerminationState.Terminated
		if last != nil && last.Reason == v1alpha1.ReasonOOMKilled {
			return oomKilled(cs.Name, c), true
		}
		return crashLooping(cs, last, in, c), true
	case v1alpha1.ReasonCreateContainerConfigError, "CreateContainerError":
		hint := "fix the container's configuration in the template"
		if strings.Contains(w.Message, "non-root") || strings.Contains(w.Message, "runAsNonRoot") {
			hint = "the image runs as root: set a non-root USER in the image, or security.runAsUser, or opt out with security.runAsRoot"
		}
		return verdict{v1alpha1.PhaseError, v1alpha1.ReasonCreateContainerConfigError, fmt.Sprintf(
			"container %q cannot be created%s; %s", cs.Name, detail(w.Message), hint)}, true
	}
	return verdict{}, false
}

// crashLooping is the verdict on a container that keeps exiting; last is its last exit, when
// known. The container's termination message is left out: the player writes it (any process in
// the container can write /dev/termination-log), and status is read by platform UIs.
func crashLooping(cs corev1.ContainerStatus, last *corev1.ContainerStateTerminated, in *instance, c *component) verdict {
	what := "it keeps exiting"
	if last != nil {
		what = fmt.Sprintf("it keeps exiting, last with code %d", last.ExitCode)
		if last.Reason != "" {
			what += " (" + inert(last.Reason, maxObservedLength) + ")"
		}
	}
	return verdict{v1alpha1.PhaseError, v1alpha1.ReasonCrashLoopBackOff, fmt.Sprintf(
		"container %q is crash looping: %s; read its logs with kubectl logs -n %s %s -c %s --previous",
		cs.Name, what, in.namespace, c.child, cs.Name)}
}

func oomKilled(containerName string, comp *component) verdict {
	limit := ""
	for _, c := range comp.spec.Containers {
		if c.Name == containerName {
			_, limits := containerResources(c.Resources)
			memory := limits[corev1.ResourceMemory]
			limit = memory.String()
		}
	}
	return verdict{v1alpha1.PhaseError, v1alpha1.ReasonOOMKilled, fmt.Sprintf(
		"container %q was killed for using more than its memory limit %s; raise resources.limits.memory in the template",
		containerName, limit)}
}

// imageOf is a container's image: the template's, or the hook's for the policy gate.
func imageOf(in *instance, comp *component, containerName string) string {
	if in.cfg.PolicyGate.Enabled && containerName == PolicyGateContainer {
		return in.cfg.PolicyGate.Image
	}
	for _, c := range comp.spec.Containers {
		if c.Name == containerName {
			return c.Image
		}
	}
	return ""
}
