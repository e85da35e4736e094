package manifests

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// What the kustomize components under components/ have in common, and the checks they share.

// componentObjects reads a kustomize Component that only adds objects (no patch): its objects, and
// the comment that opens its kustomization.yaml. Its resources are the files beside it, all of them.
func componentObjects(t *testing.T, dir string) (objects []map[string]any, header string) {
	t.Helper()
	var component struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []any    `json:"patches"`
	}
	kustomization := filepath.Join(dir, "kustomization.yaml")
	decodeSingleYAML(t, kustomization, &component)
	require.Equal(t, "Component", component.Kind)
	assert.Empty(t, component.Patches, "%s changes the base or another component", dir)
	onDisk, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	var files []string
	for _, file := range onDisk {
		if base := filepath.Base(file); base != "kustomization.yaml" {
			files = append(files, base)
		}
	}
	assert.ElementsMatch(t, files, component.Resources, "%s: the component's resources are its files", dir)
	objects = resourceObjects(t, dir, component.Resources)
	content, err := os.ReadFile(kustomization)
	require.NoError(t, err)
	for line := range strings.Lines(string(content)) {
		comment, ok := strings.CutPrefix(line, "#")
		if !ok {
			break
		}
		header += strings.TrimPrefix(comment, " ")
	}
	return objects, header
}

// resourceObjects are the objects of a component's resources (files of dir).
func resourceObjects(t *testing.T, dir string, resources []string) (objects []map[string]any) {
	t.Helper()
	for _, resource := range resources {
		docs, err := readYAMLDocuments(filepath.Join(dir, resource))
		require.NoError(t, err)
		for _, doc := range docs {
			objects = append(objects, doc.(map[string]any))
		}
	}
	return objects
}

// decodeByKind decodes each object into the target into names for its kind: a pointer to a typed
// object (the kind's only one), to a slice of them (appended to) or to a map of them by name. It
// returns how many objects of each kind there are, of the kinds it does not decode too.
func decodeByKind(t *testing.T, objects []map[string]any, into map[string]any) map[string]int {
	t.Helper()
	kinds := map[string]int{}
	for _, object := range objects {
		kind, _ := object["kind"].(string)
		kinds[kind]++
		target, ok := into[kind]
		if !ok {
			continue
		}
		v := reflect.ValueOf(target).Elem()
		switch v.Kind() {
		case reflect.Slice, reflect.Map:
			item := reflect.New(v.Type().Elem())
			convert(t, object, item.Interface())
			if v.Kind() == reflect.Slice {
				v.Set(reflect.Append(v, item.Elem()))
				continue
			}
			if v.IsNil() {
				v.Set(reflect.MakeMap(v.Type()))
			}
			name, _ := object["metadata"].(map[string]any)["name"].(string)
			v.SetMapIndex(reflect.ValueOf(name), item.Elem())
		default:
			convert(t, object, target)
		}
	}
	return kinds
}

// grantsOf are the rules' verbs by group/resource; a rule by resource name or of non-resource URLs
// fails the test.
func grantsOf(t *testing.T, rules []rbacv1.PolicyRule) map[string][]string {
	t.Helper()
	granted := map[string][]string{}
	for _, rule := range rules {
		assert.Empty(t, rule.ResourceNames)
		assert.Empty(t, rule.NonResourceURLs)
		for _, group := range rule.APIGroups {
			for _, resource := range rule.Resources {
				granted[group+"/"+resource] = append(granted[group+"/"+resource], rule.Verbs...)
			}
		}
	}
	return granted
}

// assertBoundWhereItWatches: a component that calls the API server names its namespaces in
// --namespaces (empty is every namespace, which a RoleBinding does not cover), and its RoleBindings
// are in those namespaces, one each, and no other.
func assertBoundWhereItWatches(t *testing.T, deployment appsv1.Deployment, bindings []rbacv1.RoleBinding) {
	t.Helper()
	require.Len(t, deployment.Spec.Template.Spec.Containers, 1)
	namespaces := flagValue(deployment.Spec.Template.Spec.Containers[0].Args, "namespaces")
	require.NotEmpty(t, namespaces, "%s watches every namespace: it would need a ClusterRoleBinding", deployment.Name)
	var bound []string
	for _, binding := range bindings {
		bound = append(bound, binding.Namespace)
	}
	assert.NotContains(t, bound, "", "a RoleBinding without a namespace")
	assert.ElementsMatch(t, strings.Split(namespaces, ","), bound,
		"each namespace of %s's --namespaces has its RoleBinding, and each RoleBinding is in one of --namespaces", deployment.Name)
}

// assertNotBoundClusterWide: nothing that ships binds the ClusterRole, or the ServiceAccount,
// cluster-wide, and the ClusterRole is among the shipped objects read.
func assertNotBoundClusterWide(t *testing.T, role string, subject rbacv1.Subject) {
	t.Helper()
	objects, files := shippedObjects(t)
	var roles int
	for i, object := range objects {
		if object["kind"] == "ClusterRole" && object["metadata"].(map[string]any)["name"] == role {
			roles++
		}
		if object["kind"] != "ClusterRoleBinding" {
			continue
		}
		var binding rbacv1.ClusterRoleBinding
		convert(t, object, &binding)
		assert.False(t, binding.RoleRef.Kind == "ClusterRole" && binding.RoleRef.Name == role,
			"%s: ClusterRoleBinding %s grants the ClusterRole %s in every namespace", files[i], binding.Name, role)
		assert.NotContains(t, binding.Subjects, subject, "%s: ClusterRoleBinding %s binds the ServiceAccount %s", files[i], binding.Name, subject.Name)
	}
	assert.Equal(t, 1, roles, "the shipped objects read are those of the component too")
}

// assertRunsWithItsOwnToken: the Deployment's Pods run as the component's ServiceAccount, in its
// namespace, and mount its token by their own choice (the component calls the API server); the
// ServiceAccount mounts it in no other Pod.
func assertRunsWithItsOwnToken(t *testing.T, serviceAccount corev1.ServiceAccount, deployment appsv1.Deployment) {
	t.Helper()
	pod := deployment.Spec.Template.Spec
	assert.Equal(t, serviceAccount.Name, pod.ServiceAccountName)
	assert.Equal(t, serviceAccount.Namespace, deployment.Namespace)
	require.NotNil(t, pod.AutomountServiceAccountToken)
	assert.True(t, *pod.AutomountServiceAccountToken, "%s calls the API server with its token", deployment.Name)
	require.NotNil(t, serviceAccount.AutomountServiceAccountToken)
	assert.False(t, *serviceAccount.AutomountServiceAccountToken, "only %s's Pods mount the token, by their own choice", deployment.Name)
}

// assertPolicySelects: the NetworkPolicy is in the Deployment's namespace, selects its Pods by a
// selector that is not every Pod's, and is of the given types.
func assertPolicySelects(t *testing.T, policy networkingv1.NetworkPolicy, deployment appsv1.Deployment, types ...networkingv1.PolicyType) {
	t.Helper()
	assert.Equal(t, deployment.Namespace, policy.Namespace)
	selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
	require.NoError(t, err)
	assert.False(t, selector.Empty())
	assert.True(t, selector.Matches(labels.Set(deployment.Spec.Template.Labels)), "NetworkPolicy %s does not select %s's Pods", policy.Name, deployment.Name)
	assert.ElementsMatch(t, types, policy.Spec.PolicyTypes)
}

// assertGoMemLimit: the container's GOMEMLIMIT is about 90% of its memory limit, so that the
// garbage collector works harder before the kernel kills the process, and leaves room for what is
// not heap.
func assertGoMemLimit(t *testing.T, container corev1.Container) {
	t.Helper()
	limit, ok := container.Resources.Limits[corev1.ResourceMemory]
	require.True(t, ok, "%s has no memory limit", container.Name)
	goMemLimit := envValue(container, "GOMEMLIMIT")
	value, ok := strings.CutSuffix(goMemLimit, "MiB")
	require.True(t, ok, "%s: GOMEMLIMIT %q: want a value in MiB", container.Name, goMemLimit)
	mib, err := strconv.ParseInt(value, 10, 64)
	require.NoError(t, err)
	ratio := float64(mib<<20) / float64(limit.Value())
	assert.InDelta(t, 0.9, ratio, 0.03, "%s: GOMEMLIMIT %s is %.0f%% of limits.memory %s", container.Name, goMemLimit, 100*ratio, limit.String())
}

// assertKeepsOneThroughDisruptions: the PodDisruptionBudget selects the Deployment's Pods and
// keeps one of them through voluntary disruptions (node drains, cluster upgrades).
func assertKeepsOneThroughDisruptions(t *testing.T, pdb policyv1.PodDisruptionBudget, deployment appsv1.Deployment) {
	t.Helper()
	selector, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, selector.Matches(labels.Set(deployment.Spec.Template.Labels)), "PodDisruptionBudget %s selects other Pods than %s's", pdb.Name, deployment.Name)
	assert.Equal(t, 1, pdb.Spec.MinAvailable.IntValue())
}

// TestEveryDeploymentOfTheHookImageIsHardened: every shipped Deployment that runs the hook's
// image (the hook and each component's subcommand) runs in the hook's namespace (Pod Security
// "restricted") as hardened as the hook: the same container securityContext, the same Pod
// securityContext (its fsGroup, the group of the mounted Secrets, the hook's), no service links,
// requests and limits, a ServiceAccount of its own that mounts no token unless the Pod asks.
func TestEveryDeploymentOfTheHookImageIsHardened(t *testing.T) {
	hook, hookContainer := hookContainer(t)
	hookPod := hook.Spec.Template.Spec.SecurityContext
	require.NotNil(t, hookPod.FSGroup)
	objects, files := shippedObjects(t)
	serviceAccounts := map[string]corev1.ServiceAccount{} // namespace/name
	for _, object := range objects {
		if object["kind"] == "ServiceAccount" {
			var sa corev1.ServiceAccount
			convert(t, object, &sa)
			serviceAccounts[sa.Namespace+"/"+sa.Name] = sa
		}
	}
	hardened := map[string]bool{}
	for i, object := range objects {
		if object["kind"] != "Deployment" {
			continue
		}
		var deployment appsv1.Deployment
		convert(t, object, &deployment)
		pod := deployment.Spec.Template.Spec
		if len(pod.Containers) == 0 || pod.Containers[0].Image != hookContainer.Image {
			continue
		}
		where := files[i] + ": " + deployment.Name
		hardened[deployment.Name] = true
		assert.Equal(t, hook.Namespace, deployment.Namespace, where)
		assert.Empty(t, pod.InitContainers, where)
		for _, container := range pod.Containers {
			assert.Equal(t, hookContainer.SecurityContext, container.SecurityContext, "%s: container %s", where, container.Name)
			for _, resource := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				assert.Contains(t, container.Resources.Requests, resource, "%s: container %s", where, container.Name)
				assert.Contains(t, container.Resources.Limits, resource, "%s: container %s", where, container.Name)
			}
		}
		security := *pod.SecurityContext
		if security.FSGroup != nil || len(pod.Volumes) > 0 {
			assert.Equal(t, hookPod.FSGroup, security.FSGroup, "%s: the group of the mounted Secrets", where)
		}
		security.FSGroup = hookPod.FSGroup
		assert.Equal(t, *hookPod, security, "%s: the Pod's securityContext", where)
		require.NotNil(t, pod.EnableServiceLinks, where)
		assert.False(t, *pod.EnableServiceLinks, where)

		sa, ok := serviceAccounts[deployment.Namespace+"/"+pod.ServiceAccountName]
		if assert.True(t, ok, "%s runs as ServiceAccount %q, which nothing ships", where, pod.ServiceAccountName) {
			require.NotNil(t, sa.AutomountServiceAccountToken, where)
			assert.False(t, *sa.AutomountServiceAccountToken, "%s: ServiceAccount %s mounts its token in every Pod", where, sa.Name)
		}
		require.NotNil(t, pod.AutomountServiceAccountToken, "%s: say whether the Pod needs its token", where)
	}
	for _, name := range []string{"challenge-hook", "challenge-hook-tcp-gateway", "challenge-hook-activity-stamper",
		"challenge-hook-policy-gate-target", "challenge-hook-platform"} {
		assert.True(t, hardened[name], "no Deployment %s of the hook's image read", name)
	}
}
