package sync

import (
	"encoding/json"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The pre-pull controller (manifests/components/prepull) is a second CompositeController, on
// ChallengeDefinitions: for each definition it keeps one DaemonSet whose Pods hold every image of
// the definition on every node where instances run, so that an instance starts without a pull and
// the kubelet's image garbage collection never removes an image in use. No program of a challenge
// image ever runs: each container runs the hook image's static /pause, copied into an emptyDir by
// an init container.
const (
	// prePullSuffix names a definition's DaemonSet and NetworkPolicy "<definition>.prepull": a dot
	// no Challenge name has (they are DNS-1035 labels), so no instance's child can take the name.
	prePullSuffix = ".prepull"
	// labelAppComponent tells the pre-pull Pods from the instances of the same definition.
	labelAppComponent = "app.kubernetes.io/component"
	prePullValue      = "prepull"
	// PrePullComponent is the kustomize component that installs the pre-pull controller.
	PrePullComponent = "prepull"

	// pauseInImage is the static pause program in the hook image (Dockerfile, cmd/pause); it
	// copies itself to pauseInstalled with -install.
	pauseInImage   = "/pause"
	pauseDir       = "/challenge-hook-prepull"
	pauseInstalled = pauseDir + "/pause"
	pauseVolume    = "pause"
	// pauseVolumeLimit bounds the emptyDir that holds the copy (1.5 MiB).
	pauseVolumeLimit    = "4Mi"
	pauseInstallName    = "install-pause"
	prePullUID          = 65532
	prePullGracePeriod  = 2
	prePullHistoryLimit = 2

	// The pause program's requests and limits: it sleeps in one blocking system call; its RSS was
	// measured at 2.2 MiB (docs/operating-an-event.md).
	prePullCPURequest    = "1m"
	prePullCPULimit      = "10m"
	prePullMemoryRequest = "4Mi"
	prePullMemoryLimit   = "16Mi"
)

// prePullChildKinds are the pre-pull CompositeController's child types, in the order its answers
// list them (manifests' tests hold the component to it).
var prePullChildKinds = []ChildKind{
	{APIVersion: "apps/v1", Kind: "DaemonSet", Resource: "daemonsets", Component: PrePullComponent},
	{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Resource: "networkpolicies", Component: PrePullComponent},
}

// PrePullChildKinds are the child types of the pre-pull CompositeController, in the order its
// answers list them.
func PrePullChildKinds() []ChildKind { return slices.Clone(prePullChildKinds) }

// PrePullRequest is a decoded sync request of the pre-pull controller: the definition and the
// children Metacontroller observed (its DaemonSet and NetworkPolicy).
type PrePullRequest struct {
	Parent   ChallengeDefinition
	Children []ObservedObject
}

// PrePullResponse is the pre-pull controller's answer.
type PrePullResponse struct {
	Status             v1alpha1.ChallengeDefinitionStatus `json:"status"`
	Children           []any                              `json:"children"`
	ResyncAfterSeconds float64                            `json:"resyncAfterSeconds"`
	Finalized          bool                               `json:"finalized"`
}

// DecodePrePullRequest decodes a pre-pull sync request. As with DecodeRequest, a child type the
// hook does not manage is refused (its children would be deleted), and every error wraps
// ErrBadRequest.
func DecodePrePullRequest(body []byte) (PrePullRequest, error) {
	lists := make([][]ObservedObject, len(prePullChildKinds))
	groups := map[string]groupDecoder{}
	for i, k := range prePullChildKinds {
		groups[k.Key()] = decodeInto(&lists[i], func(o *ObservedObject) string { return o.Metadata.Name })
	}
	var parent *ChallengeDefinition
	// controller and related are read past; finalizing too (there is no finalize hook: owner
	// references delete the children with the definition), once checked to be a boolean.
	err := decodeRequestKeys(body, map[string]func(dec *json.Decoder) error{
		"parent":   func(dec *json.Decoder) error { return decodeParent(dec, &parent) },
		"children": func(dec *json.Decoder) error { return decodeGroups(dec, "children", "child", groups) },
		"finalizing": func(dec *json.Decoder) error {
			var finalizing bool
			if err := dec.Decode(&finalizing); err != nil {
				return badRequest("finalizing: %v", err)
			}
			return nil
		},
	})
	if err != nil {
		return PrePullRequest{}, err
	}
	if parent == nil || parent.Metadata.Name == "" {
		return PrePullRequest{}, badRequest("request has no parent with a metadata.name")
	}
	req := PrePullRequest{Parent: *parent}
	for _, list := range lists {
		slices.SortStableFunc(list, func(a, b ObservedObject) int { return compareMeta(a.Metadata.ObjectMeta, b.Metadata.ObjectMeta) })
		req.Children = append(req.Children, list...)
	}
	return req, nil
}

// PrePull answers for one definition, a pure function of it and cfg.PrePullImage (which must be
// set): its DaemonSet and NetworkPolicy while it wants pre-pull; none once it opts out
// (spec.prePull: false), so that Metacontroller deletes them; and, for a definition the hook
// cannot use, the observed children exactly as they are. An invalid definition keeps its DaemonSet
// because its running instances keep their Pods too (the Challenge hook keeps them): their images
// stay pinned until the definition is fixed, and a typo never makes every node pull again.
func PrePull(req PrePullRequest, cfg Config) PrePullResponse {
	def := req.Parent
	name := prePullName(def.Metadata.Name)
	if def.Spec.PrePull != nil && !*def.Spec.PrePull {
		return prePullAnswer(v1alpha1.PrePullStateDisabled, "spec.prePull is false: no DaemonSet", "", []any{})
	}
	if errs := validatePrePull(def); len(errs) > 0 {
		message := fmt.Sprintf("the images are not pre-pulled until the definition is fixed, and what was pre-pulled stays: %v", errs.ToAggregate())
		return prePullAnswer(v1alpha1.PrePullStateInvalidDefinition, message, "", keptChildren(req.Children))
	}
	images := prePullImages(def.Spec)
	message := fmt.Sprintf("DaemonSet %s pulls and keeps %d image(s) on every node where instances run", name, len(images))
	return prePullAnswer(v1alpha1.PrePullStatePrePulling, message, name, []any{buildPrePullDaemonSet(def, name, images, cfg), buildPrePullNetworkPolicy(def, name)})
}

func prePullAnswer(state, message, daemonSet string, children []any) PrePullResponse {
	return PrePullResponse{
		Status:   v1alpha1.ChallengeDefinitionStatus{PrePull: &v1alpha1.PrePullStatus{State: state, Message: inert(message, maxMessageLength), DaemonSet: daemonSet}},
		Children: children,
	}
}

// validatePrePull is the Challenge hook's check of a definition (ValidateDefinition), and a name
// that fits a label value, as the DaemonSet's selector needs.
func validatePrePull(def ChallengeDefinition) field.ErrorList {
	errs := ValidateDefinition(def.Spec, field.NewPath("spec"))
	if n := len(def.Metadata.Name); n > 63 {
		errs = append(errs, field.TooLong(field.NewPath("metadata", "name"), def.Metadata.Name, 63))
	}
	return errs
}

// prePullImage is one image to pre-pull and the container that pulls it, named after the first
// container of the definition that runs it (pull errors then name what the author wrote): in a
// template of pods, <pod>--<container>, as two pods may have containers of the same name; no pod
// name holds "--", so two pods' containers never get one name (a-b and c, a and b-c).
type prePullImage struct{ container, image string }

// prePullImages are the definition's distinct images, in the order of its containers.
func prePullImages(spec v1alpha1.DefinitionSpec) []prePullImage {
	var out []prePullImage
	add := func(name, image string) {
		if !slices.ContainsFunc(out, func(p prePullImage) bool { return p.image == image }) {
			out = append(out, prePullImage{name, image})
		}
	}
	for _, c := range spec.Containers {
		add(c.Name, c.Image)
	}
	for i, p := range spec.Pods {
		for j, c := range p.Containers {
			name := p.Name + componentSeparator + c.Name
			if len(name) > validation.DNS1123LabelMaxLength {
				name = fmt.Sprintf("pod%d-container%d", i, j) // unique, where the names are too long
			}
			add(name, c.Image)
		}
	}
	return out
}

func prePullLabels(def ChallengeDefinition) map[string]string {
	return map[string]string{LabelDefinition: def.Metadata.Name, labelAppComponent: prePullValue}
}

// buildPrePullDaemonSet is the definition's DaemonSet. Its Pods pass Pod Security "restricted";
// they listen on nothing and their NetworkPolicy admits nothing. No tolerations beyond the ones
// the DaemonSet controller adds: they land on the nodes an instance may land on (instances
// tolerate no taint), with the definition's runtimeClassName, whose scheduling rules apply to both.
// A changed image rolls every node at once (maxSurge 100%): the new Pod pulls while the old one
// still pins the old image, which running instances may use, and replaces it once it runs.
func buildPrePullDaemonSet(def ChallengeDefinition, name string, images []prePullImage, cfg Config) *appsv1ac.DaemonSetApplyConfiguration {
	labels := prePullLabels(def)
	spec := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(prePullGracePeriod).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(prePullUID).
			WithRunAsGroup(prePullUID).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithVolumes(corev1ac.Volume().WithName(pauseVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource().
			WithSizeLimit(resource.MustParse(pauseVolumeLimit))))
	if def.Spec.RuntimeClassName != "" {
		spec.WithRuntimeClassName(def.Spec.RuntimeClassName)
	}
	names := make([]string, 0, len(images))
	for _, img := range images {
		names = append(names, img.container)
	}
	spec.WithInitContainers(pauseContainer(installName(names), cfg.PrePullImage, false).
		WithCommand(pauseInImage, "-install", pauseInstalled))
	for _, img := range images {
		spec.WithContainers(pauseContainer(img.container, img.image, true).WithCommand(pauseInstalled))
	}
	return appsv1ac.DaemonSet(name, def.Metadata.Namespace).
		WithLabels(labels).
		WithSpec(appsv1ac.DaemonSetSpec().
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithRevisionHistoryLimit(prePullHistoryLimit).
			WithUpdateStrategy(appsv1ac.DaemonSetUpdateStrategy().
				WithType(appsv1.RollingUpdateDaemonSetStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDaemonSet().
					WithMaxSurge(intstr.FromString("100%")).
					WithMaxUnavailable(intstr.FromInt32(0)))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(labels).
				WithSpec(spec)))
}

// pauseContainer is a container that runs the pause program, hardened, with tiny resources.
func pauseContainer(name, image string, readOnlyMount bool) *corev1ac.ContainerApplyConfiguration {
	quantities := func(cpu, memory string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}
	}
	mount := corev1ac.VolumeMount().WithName(pauseVolume).WithMountPath(pauseDir)
	if readOnlyMount {
		mount.WithReadOnly(true)
	}
	return corev1ac.Container().
		WithName(name).
		WithImage(image).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(quantities(prePullCPURequest, prePullMemoryRequest)).
			WithLimits(quantities(prePullCPULimit, prePullMemoryLimit))).
		WithVolumeMounts(mount).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
			WithReadOnlyRootFilesystem(true))
}

// installName names the init container so that it differs from every container (names are
// unique across a Pod's init and regular containers, and a definition may use any name).
func installName(taken []string) string {
	name := pauseInstallName
	for i := 0; slices.Contains(taken, name); i++ {
		name = fmt.Sprintf("%s-%d", pauseInstallName, i)
	}
	return name
}

// buildPrePullNetworkPolicy admits nothing to or from the pre-pull Pods: they need no network
// (the kubelet pulls, not the Pod), so a compromised image's code would have none either.
func buildPrePullNetworkPolicy(def ChallengeDefinition, name string) *networkingv1ac.NetworkPolicyApplyConfiguration {
	return networkingv1ac.NetworkPolicy(name, def.Metadata.Namespace).
		WithLabels(prePullLabels(def)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(prePullLabels(def))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
}

// prePullName is the name of a definition's DaemonSet and NetworkPolicy.
func prePullName(definition string) string { return definition + prePullSuffix }
