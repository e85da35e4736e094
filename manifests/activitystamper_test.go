package manifests

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const activityStamperComponent = "components/activity-stamper"

// activityStamper is what the component ships, decoded.
type activityStamper struct {
	serviceAccount corev1.ServiceAccount
	role           rbacv1.ClusterRole
	binding        rbacv1.ClusterRoleBinding
	deployment     appsv1.Deployment
	service        corev1.Service                        // the headless one, of the gateway Pods
	metricsService corev1.Service                        // the stamper's metrics
	policies       map[string]networkingv1.NetworkPolicy // by name
	admission      admissionregistrationv1.ValidatingAdmissionPolicy
	admissionBind  admissionregistrationv1.ValidatingAdmissionPolicyBinding
	kinds          map[string]int
}

func readActivityStamper(t *testing.T) activityStamper {
	t.Helper()
	var component struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []any    `json:"patches"`
	}
	decodeSingleYAML(t, filepath.Join(activityStamperComponent, "kustomization.yaml"), &component)
	require.Equal(t, "Component", component.Kind)
	assert.Empty(t, component.Patches, "the component changes nothing of the base or the gateway")
	onDisk, err := filepath.Glob(filepath.Join(activityStamperComponent, "*.yaml"))
	require.NoError(t, err)
	var files []string
	for _, file := range onDisk {
		if base := filepath.Base(file); base != "kustomization.yaml" {
			files = append(files, base)
		}
	}
	assert.ElementsMatch(t, files, component.Resources, "the component's resources are its files")

	s := activityStamper{policies: map[string]networkingv1.NetworkPolicy{}, kinds: map[string]int{}}
	for _, resource := range component.Resources {
		docs, err := readYAMLDocuments(filepath.Join(activityStamperComponent, resource))
		require.NoError(t, err)
		for _, doc := range docs {
			object := doc.(map[string]any)
			kind, _ := object["kind"].(string)
			s.kinds[kind]++
			switch kind {
			case "ServiceAccount":
				convert(t, object, &s.serviceAccount)
			case "ClusterRole":
				convert(t, object, &s.role)
			case "ClusterRoleBinding":
				convert(t, object, &s.binding)
			case "Deployment":
				convert(t, object, &s.deployment)
			case "Service":
				var service corev1.Service
				convert(t, object, &service)
				if service.Spec.ClusterIP == corev1.ClusterIPNone {
					s.service = service
				} else {
					s.metricsService = service
				}
			case "NetworkPolicy":
				var policy networkingv1.NetworkPolicy
				convert(t, object, &policy)
				s.policies[policy.Name] = policy
			case "ValidatingAdmissionPolicy":
				convert(t, object, &s.admission)
			case "ValidatingAdmissionPolicyBinding":
				convert(t, object, &s.admissionBind)
			}
		}
	}
	assert.Equal(t, map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Deployment": 1, "Service": 2,
		"NetworkPolicy": 2, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1}, s.kinds)
	return s
}

// username is the API server's name of the stamper: its ServiceAccount's.
func (s activityStamper) username() string {
	return "system:serviceaccount:" + s.serviceAccount.Namespace + ":" + s.serviceAccount.Name
}

// TestActivityStamperRBACIsNarrowest: the stamper's ServiceAccount, and nothing else, is bound to
// a ClusterRole that reads and patches Challenges and lists and watches Services: no Secrets, no
// status, no create or delete, no wildcard; the Deployment runs under that ServiceAccount, with its
// token (its one credential), and the admission policy matches that ServiceAccount's username.
func TestActivityStamperRBACIsNarrowest(t *testing.T) {
	s := readActivityStamper(t)
	granted := map[string][]string{}
	for _, rule := range s.role.Rules {
		assert.Empty(t, rule.ResourceNames)
		assert.Empty(t, rule.NonResourceURLs)
		for _, group := range rule.APIGroups {
			for _, resource := range rule.Resources {
				granted[group+"/"+resource] = append(granted[group+"/"+resource], rule.Verbs...)
			}
		}
	}
	assert.Equal(t, map[string][]string{
		v1alpha1.Group + "/challenges": {"get", "list", "watch", "patch"},
		"/services":                    {"list", "watch"},
	}, granted)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: s.role.Name}, s.binding.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: s.serviceAccount.Name, Namespace: s.serviceAccount.Namespace}}, s.binding.Subjects)

	pod := s.deployment.Spec.Template.Spec
	assert.Equal(t, s.serviceAccount.Name, pod.ServiceAccountName)
	assert.Equal(t, s.serviceAccount.Namespace, s.deployment.Namespace)
	require.NotNil(t, pod.AutomountServiceAccountToken)
	assert.True(t, *pod.AutomountServiceAccountToken, "the stamper needs its token")
	require.NotNil(t, s.serviceAccount.AutomountServiceAccountToken)
	assert.False(t, *s.serviceAccount.AutomountServiceAccountToken, "only the stamper's Pods mount the token, by their own choice")
	assert.Empty(t, pod.Volumes, "the stamper mounts no Secret")

	require.Len(t, s.admission.Spec.MatchConditions, 1)
	assert.Contains(t, s.admission.Spec.MatchConditions[0].Expression, "'"+s.username()+"'")
}

// TestActivityStamperRunsLikeTheOtherComponents: one replica of the hook's image, as hardened as
// the hook (securityContext), with limits and GOMEMLIMIT at 90% of the memory limit; it finds the
// gateways by the component's headless Service, which selects every gateway Pod, ready or not, on
// the gateways' metrics port, where GET /activity is.
func TestActivityStamperRunsLikeTheOtherComponents(t *testing.T) {
	s := readActivityStamper(t)
	gw := readTCPGateway(t)
	hook, hookContainer := hookContainer(t)
	pod := s.deployment.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	container := pod.Containers[0]
	assert.Equal(t, "activity-stamper", container.Args[0])
	assert.Equal(t, hookContainer.Image, container.Image)
	assert.Equal(t, int32(1), *s.deployment.Spec.Replicas)
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, s.deployment.Spec.Strategy.Type, "two stampers at once in a rollout")
	assert.Equal(t, hook.Spec.Template.Spec.SecurityContext, pod.SecurityContext)
	assert.Equal(t, hookContainer.SecurityContext, container.SecurityContext)
	require.NotNil(t, pod.EnableServiceLinks)
	assert.False(t, *pod.EnableServiceLinks)
	limits := container.Resources.Limits
	assert.False(t, limits.Memory().IsZero(), "no memory limit")
	assert.False(t, limits.Cpu().IsZero(), "no CPU limit")
	assert.False(t, container.Resources.Requests.Cpu().IsZero(), "no CPU request")
	assert.Equal(t, "115MiB", envValue(container, "GOMEMLIMIT"))
	assert.Equal(t, int64(128<<20), limits.Memory().Value(), "GOMEMLIMIT is 90%% of limits.memory")
	assert.Equal(t, ":8082", flagValue(container.Args, "metrics-listen"))
	require.NotNil(t, container.ReadinessProbe)
	assert.Equal(t, "/readyz", container.ReadinessProbe.HTTPGet.Path)

	gateways := flagValue(container.Args, "gateways")
	host, _, err := net.SplitHostPort(gateways)
	require.NoError(t, err)
	assert.Equal(t, s.service.Name+"."+s.service.Namespace+".svc", host, "--gateways names the headless Service")
	assert.Equal(t, gw.deployment.Namespace, s.service.Namespace)
	assert.Equal(t, "None", s.service.Spec.ClusterIP, "headless: the name resolves to every gateway Pod")
	assert.True(t, s.service.Spec.PublishNotReadyAddresses, "a draining gateway still reports its sessions")
	assert.True(t, labels.SelectorFromSet(s.service.Spec.Selector).Matches(labels.Set(gw.deployment.Spec.Template.Labels)), "the Service selects the gateway's Pods")
	gatewayContainer := gw.deployment.Spec.Template.Spec.Containers[0]
	metricsPort := port(t, flagValue(gatewayContainer.Args, "metrics-listen"))
	require.Len(t, s.service.Spec.Ports, 1)
	assert.Equal(t, port(t, gateways), s.service.Spec.Ports[0].Port)
	assert.Equal(t, metricsPort, s.service.Spec.Ports[0].Port)
	for _, p := range gatewayContainer.Ports {
		if p.Name == s.service.Spec.Ports[0].TargetPort.StrVal {
			assert.Equal(t, metricsPort, p.ContainerPort, "the Service's target port is the gateway's metrics port")
		}
	}
}

// TestActivityStamperMetricsAreScraped: a ClusterIP Service carries the stamper's metrics port
// (--metrics-listen) alone, to the stamper's Pods alone, and the monitoring component's
// ServiceMonitor for the stamper selects that Service, and no other of the component, on that
// port; the stamper's NetworkPolicy admits Prometheus to it (TestActivityStamperPolicies).
func TestActivityStamperMetricsAreScraped(t *testing.T) {
	s := readActivityStamper(t)
	gw := readTCPGateway(t)
	container := s.deployment.Spec.Template.Spec.Containers[0]
	metricsPort := port(t, flagValue(container.Args, "metrics-listen"))
	require.Len(t, container.Ports, 1)
	assert.Equal(t, corev1.ContainerPort{Name: "metrics", ContainerPort: metricsPort, Protocol: corev1.ProtocolTCP}, container.Ports[0])

	service := s.metricsService
	require.NotEmpty(t, service.Name, "the component has no metrics Service")
	assert.Equal(t, s.deployment.Namespace, service.Namespace)
	assert.Equal(t, corev1.ServiceTypeClusterIP, service.Spec.Type)
	selector := labels.SelectorFromSet(service.Spec.Selector)
	assert.True(t, selector.Matches(labels.Set(s.deployment.Spec.Template.Labels)), "the metrics Service does not select the stamper's Pods")
	assert.False(t, selector.Matches(labels.Set(gw.deployment.Spec.Template.Labels)), "the metrics Service selects the gateway's Pods")
	require.Len(t, service.Spec.Ports, 1)
	assert.Equal(t, "metrics", service.Spec.Ports[0].Name)
	assert.Equal(t, metricsPort, service.Spec.Ports[0].Port)
	assert.Equal(t, "metrics", service.Spec.Ports[0].TargetPort.String())

	docs, err := readYAMLDocuments(filepath.Join("components/monitoring", "scrape.yaml"))
	require.NoError(t, err)
	var monitors int
	for _, doc := range docs {
		object := doc.(map[string]any)
		if object["kind"] != "ServiceMonitor" {
			continue
		}
		var monitor serviceMonitor
		convert(t, object, &monitor)
		selector, err := metav1.LabelSelectorAsSelector(&monitor.Spec.Selector)
		require.NoError(t, err)
		assert.False(t, selector.Matches(labels.Set(s.service.Labels)), "ServiceMonitor %s scrapes the gateways' headless Service", monitor.Metadata.Name)
		if !selector.Matches(labels.Set(service.Labels)) {
			continue
		}
		monitors++
		assert.Equal(t, service.Namespace, monitor.Metadata.Namespace, "ServiceMonitor %s looks in another namespace", monitor.Metadata.Name)
		require.Len(t, monitor.Spec.Endpoints, 1, monitor.Metadata.Name)
		assert.Equal(t, service.Spec.Ports[0].Name, monitor.Spec.Endpoints[0].Port, monitor.Metadata.Name)
		assert.Nil(t, monitor.Spec.Endpoints[0].TargetPort, "%s scrapes a port by number", monitor.Metadata.Name)
	}
	assert.Equal(t, 1, monitors, "one ServiceMonitor selects the stamper's metrics Service")
}

// TestActivityStamperPolicies: the stamper's Pods, and no other Pod, reach the gateway Pods'
// metrics port beside the Prometheus the gateway's own policy admits (a policy added to it, on
// that port alone); the stamper's own metrics admit only Prometheus.
func TestActivityStamperPolicies(t *testing.T) {
	s := readActivityStamper(t)
	gw := readTCPGateway(t)
	gatewayPods := labels.Set(gw.deployment.Spec.Template.Labels)
	stamperPods := labels.Set(s.deployment.Spec.Template.Labels)
	metricsPort := port(t, flagValue(gw.deployment.Spec.Template.Spec.Containers[0].Args, "metrics-listen"))
	var toGateway, toStamper int
	for name, policy := range s.policies {
		assert.Equal(t, s.deployment.Namespace, policy.Namespace, name)
		selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
		require.NoError(t, err)
		assert.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, policy.Spec.PolicyTypes, "%s: ingress only, added to the others", name)
		require.Len(t, policy.Spec.Ingress, 1, name)
		rule := policy.Spec.Ingress[0]
		require.Len(t, rule.Ports, 1, name)
		assert.Equal(t, metricsPort, rule.Ports[0].Port.IntVal, name)
		require.Len(t, rule.From, 1, name)
		peer := rule.From[0]
		assert.Nil(t, peer.IPBlock, name)
		switch {
		case selector.Matches(gatewayPods):
			toGateway++
			assert.Nil(t, peer.NamespaceSelector, "%s: the stamper's namespace, the policy's", name)
			require.NotNil(t, peer.PodSelector, name)
			from, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			require.NoError(t, err)
			assert.True(t, from.Matches(stamperPods), "%s does not admit the stamper", name)
			assert.False(t, from.Matches(gatewayPods), "%s admits the gateways", name)
			assert.False(t, from.Matches(labels.Set(gw.deployment.Spec.Template.Labels)), name)
			hook, _ := hookContainer(t)
			assert.False(t, from.Matches(labels.Set(hook.Spec.Template.Labels)), "%s admits the hook", name)
			assert.False(t, from.Matches(labels.Set{hooksync.LabelInstance: "i5xq3mlk2ab7ndqe"}), "%s admits instances", name)
		case selector.Matches(stamperPods):
			toStamper++
			assert.Equal(t, gw.policy.Spec.Ingress[1].From, rule.From, "%s admits others than the gateway's Prometheus", name)
		default:
			t.Errorf("NetworkPolicy %s selects neither the gateways nor the stamper", name)
		}
	}
	assert.Equal(t, 1, toGateway)
	assert.Equal(t, 1, toStamper)
}

// stampedChallenge is a Challenge of the platform's, with labels, a finalizer, an owner
// reference and annotations: the stamp (when not "") and another.
func stampedChallenge(stamp string) map[string]any {
	annotations := map[string]any{"example.org/note": "kept"}
	if stamp != "" {
		annotations[hooksync.AnnotationLastActivity] = stamp
	}
	return map[string]any{
		"metadata": map[string]any{
			"name": "web-sqli-team42", "namespace": "ctf",
			"labels":          map[string]any{hooksync.LabelOwner: "team-42"},
			"annotations":     annotations,
			"finalizers":      []any{"metacontroller.io/compositecontroller-challenge-hook"},
			"ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "event", "uid": "1"}},
		},
		"spec": map[string]any{"owner": "team-42", "definitionRef": map[string]any{"name": "web-sqli"}, "timeout": "30m"},
	}
}

// edited is a deep copy of object with edit applied.
func edited(object map[string]any, edit func(metadata, spec map[string]any)) map[string]any {
	c := deepCopy(object).(map[string]any)
	edit(c["metadata"].(map[string]any), c["spec"].(map[string]any))
	return c
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, e := range v {
			c[k] = deepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, e := range v {
			c[i] = deepCopy(e)
		}
		return c
	}
	return v
}

// TestActivityStamperAdmissionPolicy: the admission policy challenge-hook-activity-stamper,
// evaluated as the API server does: the stamper's ServiceAccount may move the last-activity stamp
// forward (or set the first one), to a valid RFC 3339 time, and nothing else: no stamp going back
// or removed or unreadable, no change to the spec, labels, another annotation, finalizers or
// owner references, no create, delete or status write. Other users are not matched. The API
// server's side is TestActivityStamperAdmission (e2e).
func TestActivityStamperAdmissionPolicy(t *testing.T) {
	s := readActivityStamper(t)
	policy := s.admission
	assert.Equal(t, policy.Name, s.admissionBind.Spec.PolicyName)
	assert.Equal(t, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}, s.admissionBind.Spec.ValidationActions)
	assert.Nil(t, s.admissionBind.Spec.MatchResources, "the binding covers every namespace")
	require.NotNil(t, policy.Spec.FailurePolicy)
	assert.Equal(t, admissionregistrationv1.Fail, *policy.Spec.FailurePolicy)
	require.Len(t, policy.Spec.MatchConstraints.ResourceRules, 1)
	rule := policy.Spec.MatchConstraints.ResourceRules[0]
	assert.Equal(t, []string{v1alpha1.Group}, rule.APIGroups)
	assert.ElementsMatch(t, []string{"challenges", "challenges/status"}, rule.Resources)
	assert.ElementsMatch(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}, rule.Operations)
	var keyed bool
	for _, v := range policy.Spec.Variables {
		keyed = keyed || v.Name == "key" && v.Expression == "'"+hooksync.AnnotationLastActivity+"'"
	}
	assert.True(t, keyed, "the policy names the annotation the hook reads")

	stamper := map[string]any{"username": s.username(), "groups": []any{"system:serviceaccounts", "system:authenticated"}}
	platform := map[string]any{"username": "system:serviceaccount:ctf:ctf-platform"}
	update := func(user map[string]any) map[string]any {
		return map[string]any{"operation": "UPDATE", "userInfo": user}
	}
	old := stampedChallenge("2026-11-27T13:40:00Z")
	stamp := func(value string) map[string]any {
		return edited(old, func(m, _ map[string]any) { m["annotations"].(map[string]any)[hooksync.AnnotationLastActivity] = value })
	}
	for _, c := range []struct {
		what        string
		request     map[string]any
		object, old map[string]any
		admitted    bool
		messageSays string
	}{
		{"a stamp forward", update(stamper), stamp("2026-11-27T13:45:00Z"), old, true, ""},
		{"the same stamp", update(stamper), stamp("2026-11-27T13:40:00Z"), old, true, ""},
		{"a stamp forward, to the nanosecond, in another zone", update(stamper), stamp("2026-11-27T14:40:00.5+01:00"), old, true, ""},
		{"the first stamp", update(stamper), stampedChallenge("2026-11-27T13:45:00Z"), stampedChallenge(""), true, ""},
		{"a stamp over one the hook cannot read", update(stamper), stampedChallenge("2026-11-27T13:45:00Z"), stampedChallenge("yesterday"), true, ""},
		{"a stamp going back", update(stamper), stamp("2026-11-27T13:39:59Z"), old, false, "never goes back: 2026-11-27T13:39:59Z is earlier than 2026-11-27T13:40:00Z"},
		{"a stamp going back, in another zone", update(stamper), stamp("2026-11-27T14:39:00+01:00"), old, false, "never goes back"},
		{"a stamp that is no time", update(stamper), stamp("soon"), old, false, "must be an RFC 3339 time"},
		{"a stamp without its zone", update(stamper), stamp("2026-11-27T13:45:00"), old, false, "must be an RFC 3339 time"},
		{"the stamp removed", update(stamper), stampedChallenge(""), old, false, "must be an RFC 3339 time"},
		{"a label changed", update(stamper), edited(stamp("2026-11-27T13:45:00Z"), func(m, _ map[string]any) { m["labels"].(map[string]any)[hooksync.LabelOwner] = "team-7" }), old, false, "labels"},
		{"a label added", update(stamper), edited(old, func(m, _ map[string]any) { m["labels"].(map[string]any)["x"] = "y" }), old, false, "labels"},
		{"the labels removed", update(stamper), edited(old, func(m, _ map[string]any) { delete(m, "labels") }), old, false, "labels"},
		{"the spec changed", update(stamper), edited(stamp("2026-11-27T13:45:00Z"), func(_, s map[string]any) { s["timeout"] = "2h" }), old, false, "spec"},
		{"stopped", update(stamper), edited(old, func(_, s map[string]any) { s["stopped"] = true }), old, false, "spec"},
		{"another annotation changed", update(stamper), edited(old, func(m, _ map[string]any) { m["annotations"].(map[string]any)["example.org/note"] = "x" }), old, false, "and no other"},
		{"another annotation added", update(stamper), edited(old, func(m, _ map[string]any) { m["annotations"].(map[string]any)["example.org/new"] = "x" }), old, false, "and no other"},
		{"another annotation removed", update(stamper), edited(old, func(m, _ map[string]any) { delete(m["annotations"].(map[string]any), "example.org/note") }), old, false, "and no other"},
		{"the finalizer removed", update(stamper), edited(old, func(m, _ map[string]any) { delete(m, "finalizers") }), old, false, "finalizers"},
		{"a finalizer added", update(stamper), edited(old, func(m, _ map[string]any) { m["finalizers"] = append(m["finalizers"].([]any), "x/y") }), old, false, "finalizers"},
		{"the owner references changed", update(stamper), edited(old, func(m, _ map[string]any) { m["ownerReferences"] = []any{} }), old, false, "owner references"},
		{"a create", map[string]any{"operation": "CREATE", "userInfo": stamper}, old, nil, false, "not CREATE it"},
		{"a delete", map[string]any{"operation": "DELETE", "userInfo": stamper}, nil, old, false, "not DELETE it"},
		{"a status write", map[string]any{"operation": "UPDATE", "userInfo": stamper, "subResource": "status"},
			edited(old, func(m, _ map[string]any) {}), old, false, "not UPDATE its status"},
		{"the platform changes a label: not matched", update(platform), edited(old, func(m, _ map[string]any) { m["labels"].(map[string]any)["x"] = "y" }), old, true, ""},
		{"the platform moves the stamp back: not matched", update(platform), stamp("2026-11-27T13:00:00Z"), old, true, ""},
	} {
		matched, admitted, message := admits(t, policy, c.request, c.object, c.old)
		assert.Equal(t, c.request["userInfo"].(map[string]any)["username"] == s.username(), matched, c.what)
		if assert.Equal(t, c.admitted, admitted, "%s: %s", c.what, message) && !admitted {
			assert.Contains(t, message, c.messageSays, c.what)
		}
	}
}

// TestActivityStamperDocumented: the component, its endpoint and its rights are where organizers
// and reviewers read.
func TestActivityStamperDocumented(t *testing.T) {
	for page, wants := range map[string][]string{
		"docs/tcp-gateway.md": {"manifests/components/activity-stamper", "GET /activity", "challenge-hook activity-stamper"},
		"docs/platform.md":    {"challenge-hook-activity-stamper", "idleAt"},
		"docs/security.md":    {"challenge-hook-activity-stamper"},
		"docs/threats.md":     {"activity stamper"},
	} {
		content, err := os.ReadFile(filepath.Join(repoRoot, page))
		require.NoError(t, err)
		for _, want := range wants {
			assert.Contains(t, string(content), want, page)
		}
	}
}
