// Package prepull is the pre-pull controller (manifests/components/prepull): a second
// CompositeController, on ChallengeDefinitions, served by the same hook (POST /prepull/sync,
// /prepull/customize). Like package sync it is pure: request and configuration in, answer out.
package prepull

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	"github.com/challenge-hook/challenge-hook/internal/wire"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
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
	// Component is the kustomize component that installs the pre-pull controller.
	Component = "prepull"

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
var prePullChildKinds = []hooksync.ChildKind{
	{APIVersion: "apps/v1", Kind: "DaemonSet", Resource: "daemonsets", Component: Component},
	{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Resource: "networkpolicies", Component: Component},
}

// ChildKinds are the child types of the pre-pull CompositeController, in the order its answers
// list them.
func ChildKinds() []hooksync.ChildKind { return slices.Clone(prePullChildKinds) }

// Request is a decoded sync request of the pre-pull controller: the definition, the children
// Metacontroller observed (its DaemonSet and NetworkPolicy), and the definitions of the namespaces
// the hook pre-pulls (Customize), whose images count against the total.
type Request struct {
	Parent   hooksync.ChallengeDefinition
	Children []hooksync.ObservedObject
	Related  []hooksync.ChallengeDefinition
}

// CustomizeRequest is a decoded customize request of the pre-pull controller.
type CustomizeRequest struct {
	Parent hooksync.ChallengeDefinition
}

// Response is the pre-pull controller's answer.
type Response struct {
	Status             v1alpha1.ChallengeDefinitionStatus `json:"status"`
	Children           []any                              `json:"children"`
	ResyncAfterSeconds float64                            `json:"resyncAfterSeconds"`
	Finalized          bool                               `json:"finalized"`
}

// DecodeRequest decodes a pre-pull sync request. As with sync.DecodeRequest, a child type the
// hook does not manage is refused (its children would be deleted), and every error wraps
// sync.ErrBadRequest.
func DecodeRequest(body []byte) (Request, error) {
	lists := make([][]hooksync.ObservedObject, len(prePullChildKinds))
	groups := map[string]wire.GroupDecoder{}
	for i, k := range prePullChildKinds {
		groups[k.Key()] = wire.DecodeInto(&lists[i], func(o *hooksync.ObservedObject) string { return o.Metadata.Name })
	}
	var parent *hooksync.ChallengeDefinition
	var related []hooksync.ChallengeDefinition
	relatedGroups := map[string]wire.GroupDecoder{
		"ChallengeDefinition." + v1alpha1.APIVersion: wire.DecodeInto(&related, func(d *hooksync.ChallengeDefinition) string { return d.Metadata.Name }),
	}
	// controller is read past; finalizing too (there is no finalize hook: owner references delete
	// the children with the definition), once checked to be a boolean.
	err := wire.DecodeRequestKeys(body, map[string]func(dec *json.Decoder) error{
		"parent":   func(dec *json.Decoder) error { return wire.DecodeParent(dec, &parent) },
		"children": func(dec *json.Decoder) error { return wire.DecodeGroups(dec, "children", "child", groups) },
		"related":  func(dec *json.Decoder) error { return wire.DecodeGroups(dec, "related", "related", relatedGroups) },
		"finalizing": func(dec *json.Decoder) error {
			var finalizing bool
			if err := dec.Decode(&finalizing); err != nil {
				return wire.BadRequest("finalizing: %v", err)
			}
			return nil
		},
	})
	if err != nil {
		return Request{}, err
	}
	if parent == nil || parent.Metadata.Name == "" {
		return Request{}, wire.BadRequest("request has no parent with a metadata.name")
	}
	slices.SortStableFunc(related, func(a, b hooksync.ChallengeDefinition) int { return wire.CompareMeta(a.Metadata, b.Metadata) })
	req := Request{Parent: *parent, Related: related}
	for _, list := range lists {
		slices.SortStableFunc(list, func(a, b hooksync.ObservedObject) int {
			return wire.CompareMeta(a.Metadata.ObjectMeta, b.Metadata.ObjectMeta)
		})
		req.Children = append(req.Children, list...)
	}
	return req, nil
}

// Sync answers for one definition, a pure function of it, the definitions related with it and
// cfg (whose PrePullImage must be set): its DaemonSet and NetworkPolicy while it wants pre-pull and
// fits the caps; none once it opts out (spec.prePull: false), outside the namespaces the organizer
// named, or over a cap, so that Metacontroller deletes them (never a DaemonSet of some of its
// images); and, for a definition the hook cannot use, the observed children exactly as they are.
// An invalid definition keeps its DaemonSet because its running instances keep their Pods too (the
// Challenge hook keeps them): their images stay pinned until the definition is fixed, and a typo
// never makes every node pull again.
//
// A DaemonSet is a container per image on every node, a cost every team's instances share, so only
// the organizer's namespaces (--definition-namespaces) claim it, and within them the definitions
// take the --prepull-max-images the nodes hold in the order they were created.
func Sync(req Request, cfg hooksync.Config) Response {
	def := req.Parent
	name := prePullName(def.Metadata.Name)
	if !slices.Contains(cfg.DefinitionNamespaces, def.Metadata.Namespace) {
		return prePullAnswer(v1alpha1.PrePullStateNamespaceNotAllowed, prePullNamespaceRefusal(def.Metadata.Namespace, cfg), "", []any{})
	}
	if !wantsPrePull(def) {
		return prePullAnswer(v1alpha1.PrePullStateDisabled, "spec.prePull is false: no DaemonSet", "", []any{})
	}
	if errs := validatePrePull(def); len(errs) > 0 {
		message := fmt.Sprintf("the images are not pre-pulled until the definition is fixed, and what was pre-pulled stays: %v", errs.ToAggregate())
		return prePullAnswer(v1alpha1.PrePullStateInvalidDefinition, message, "", hooksync.KeptChildren(req.Children))
	}
	if !slices.ContainsFunc(req.Related, func(d hooksync.ChallengeDefinition) bool { return sameDefinition(d, def) }) {
		// Customize relates every definition of the parent's namespace, the parent
		// included: without it, the related list is a customize answer Metacontroller cached under
		// other flags (for up to 20 minutes, per generation), and the total cannot be counted.
		message := fmt.Sprintf("waiting for Metacontroller to relate the definitions of %s, whose images count against --prepull-max-images "+
			"(its customize answer for this definition predates the hook's flags; it asks again within 20 minutes, or when the definition changes); what was pre-pulled stays",
			strings.Join(cfg.DefinitionNamespaces, ","))
		return prePullAnswer(v1alpha1.PrePullStatePending, message, "", hooksync.KeptChildren(req.Children))
	}
	images := prePullImages(def.Spec)
	if len(images) > cfg.PrePullMaxImagesPerDefinition {
		message := fmt.Sprintf("not pre-pulled: %d distinct images, more than the %d per definition the hook's --prepull-max-images-per-definition allows "+
			"(each is a container on every node): share images between containers, or raise the flag", len(images), cfg.PrePullMaxImagesPerDefinition)
		return prePullAnswer(v1alpha1.PrePullStateTooManyImages, message, "", []any{})
	}
	if before, fits := prePullBudget(req, cfg); !fits {
		message := fmt.Sprintf("not pre-pulled: the definitions of %s created before it pre-pull %d images on every node, and its %d would pass the %d "+
			"the hook's --prepull-max-images allows: raise the flag, or opt a definition out with spec.prePull: false",
			strings.Join(cfg.DefinitionNamespaces, ","), before, len(images), cfg.PrePullMaxImages)
		return prePullAnswer(v1alpha1.PrePullStateTooManyImages, message, "", []any{})
	}
	message := fmt.Sprintf("DaemonSet %s pulls and keeps %d image(s) on every node where instances run", name, len(images))
	return prePullAnswer(v1alpha1.PrePullStatePrePulling, message, name, []any{buildPrePullDaemonSet(def, name, images, cfg), buildPrePullNetworkPolicy(def, name)})
}

func wantsPrePull(def hooksync.ChallengeDefinition) bool {
	return def.Spec.PrePull == nil || *def.Spec.PrePull
}

// prePullNamespaceRefusal says why a definition of namespace is not pre-pulled.
func prePullNamespaceRefusal(namespace string, cfg hooksync.Config) string {
	named := "none set"
	if len(cfg.DefinitionNamespaces) > 0 {
		named = strings.Join(cfg.DefinitionNamespaces, ",")
	}
	return fmt.Sprintf("not pre-pulled: namespace %q is not one of the hook's --definition-namespaces (%s); a pre-pull DaemonSet runs on every node, "+
		"so only the namespaces the organizer names there have their definitions pre-pulled", namespace, named)
}

// prePullBudget says how many images the definitions pre-pulled before req's parent take on every
// node, and whether the parent's fit beside them under cfg.PrePullMaxImages. The definitions of
// the allowed namespaces (the related ones, the parent as it is now) that want pre-pull, are valid
// and fit the per-definition cap take the budget in creation order (then namespace and name),
// each one that fits what is left: a new definition never takes the place of an older one.
func prePullBudget(req Request, cfg hooksync.Config) (before int, fits bool) {
	parent := req.Parent
	defs := slices.DeleteFunc(slices.Clone(req.Related), func(d hooksync.ChallengeDefinition) bool { return sameDefinition(d, parent) })
	defs = append(defs, parent)
	slices.SortStableFunc(defs, func(a, b hooksync.ChallengeDefinition) int {
		return cmp.Or(cmp.Compare(a.Metadata.CreationTimestamp, b.Metadata.CreationTimestamp), wire.CompareMeta(a.Metadata, b.Metadata))
	})
	used := 0
	for _, d := range defs {
		if !slices.Contains(cfg.DefinitionNamespaces, d.Metadata.Namespace) || !wantsPrePull(d) || len(validatePrePull(d)) > 0 {
			continue
		}
		n := len(prePullImages(d.Spec))
		if sameDefinition(d, parent) {
			return used, used+n <= cfg.PrePullMaxImages
		}
		if n <= cfg.PrePullMaxImagesPerDefinition && used+n <= cfg.PrePullMaxImages {
			used += n
		}
	}
	return used, false // unreachable: the parent is in defs
}

// sameDefinition: a and b are the same ChallengeDefinition (by namespace and name).
func sameDefinition(a, b hooksync.ChallengeDefinition) bool {
	return a.Metadata.Namespace == b.Metadata.Namespace && a.Metadata.Name == b.Metadata.Name
}

// Customize asks Metacontroller for what Sync counts against the total: every definition
// of the namespaces the hook pre-pulls, for a definition of one of them; nothing for another.
func Customize(req CustomizeRequest, cfg hooksync.Config) hooksync.CustomizeResponse {
	rules := []hooksync.RelatedResourceRule{}
	if slices.Contains(cfg.DefinitionNamespaces, req.Parent.Metadata.Namespace) {
		for _, ns := range cfg.DefinitionNamespaces {
			rules = append(rules, hooksync.RelatedResourceRule{APIVersion: v1alpha1.APIVersion, Resource: "challengedefinitions", Namespace: ns})
		}
	}
	return hooksync.CustomizeResponse{RelatedResources: rules}
}

// DecodeCustomizeRequest decodes a customize request of the pre-pull controller.
func DecodeCustomizeRequest(body []byte) (CustomizeRequest, error) {
	var parent *hooksync.ChallengeDefinition
	err := wire.DecodeRequestKeys(body, map[string]func(dec *json.Decoder) error{
		"parent": func(dec *json.Decoder) error { return wire.DecodeParent(dec, &parent) },
	})
	if err != nil {
		return CustomizeRequest{}, err
	}
	if parent == nil || parent.Metadata.Name == "" {
		return CustomizeRequest{}, wire.BadRequest("request has no parent with a metadata.name")
	}
	return CustomizeRequest{Parent: *parent}, nil
}

func prePullAnswer(state, message, daemonSet string, children []any) Response {
	return Response{
		Status:   v1alpha1.ChallengeDefinitionStatus{PrePull: &v1alpha1.PrePullStatus{State: state, Message: hooksync.StatusMessage(message), DaemonSet: daemonSet}},
		Children: children,
	}
}

// validatePrePull is the Challenge hook's check of a definition (sync.ValidateDefinition), and a name
// that fits a label value, as the DaemonSet's selector needs.
func validatePrePull(def hooksync.ChallengeDefinition) field.ErrorList {
	errs := hooksync.ValidateDefinition(def.Spec, field.NewPath("spec"))
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

// prePullImages are the definition's distinct images, in the order of its containers, each
// container name unique: <pod>-<container> of two pods can be the same (a-b/c and a/b-c), and then
// the later one, like a name too long for a container, gets a numbered one (uniqueContainerName).
func prePullImages(spec v1alpha1.DefinitionSpec) []prePullImage {
	var out []prePullImage
	var taken []string
	add := func(name, image string) {
		if slices.ContainsFunc(out, func(p prePullImage) bool { return p.image == image }) {
			return
		}
		name = uniqueContainerName(name, taken)
		taken = append(taken, name)
		out = append(out, prePullImage{name, image})
	}
	for _, c := range spec.Containers {
		add(c.Name, c.Image)
	}
	for i, p := range spec.Pods {
		for j, c := range p.Containers {
			name := p.Name + hooksync.ComponentSeparator + c.Name
			if len(name) > validation.DNS1123LabelMaxLength {
				name = fmt.Sprintf("pod%d-container%d", i, j)
			}
			add(name, c.Image)
		}
	}
	return out
}

// uniqueContainerName is name, or name-1, name-2, ... (shortened to fit a container name), the
// first that taken does not hold.
func uniqueContainerName(name string, taken []string) string {
	candidate := name
	for i := 1; slices.Contains(taken, candidate); i++ {
		suffix := "-" + strconv.Itoa(i)
		candidate = strings.TrimRight(name[:min(len(name), validation.DNS1123LabelMaxLength-len(suffix))], "-") + suffix
	}
	return candidate
}

func prePullLabels(def hooksync.ChallengeDefinition) map[string]string {
	return map[string]string{hooksync.LabelDefinition: def.Metadata.Name, labelAppComponent: prePullValue}
}

// buildPrePullDaemonSet is the definition's DaemonSet. Its Pods pass Pod Security "restricted";
// they listen on nothing and their NetworkPolicy admits nothing. No tolerations beyond the ones
// the DaemonSet controller adds: they land on the nodes an instance may land on (instances
// tolerate no taint), with the definition's runtimeClassName, whose scheduling rules apply to both.
// A changed image rolls every node at once (maxSurge 100%): the new Pod pulls while the old one
// still pins the old image, which running instances may use, and replaces it once it runs.
func buildPrePullDaemonSet(def hooksync.ChallengeDefinition, name string, images []prePullImage, cfg hooksync.Config) *appsv1ac.DaemonSetApplyConfiguration {
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
func buildPrePullNetworkPolicy(def hooksync.ChallengeDefinition, name string) *networkingv1ac.NetworkPolicyApplyConfiguration {
	return networkingv1ac.NetworkPolicy(name, def.Metadata.Namespace).
		WithLabels(prePullLabels(def)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(prePullLabels(def))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
}

// prePullName is the name of a definition's DaemonSet and NetworkPolicy.
func prePullName(definition string) string { return definition + prePullSuffix }
