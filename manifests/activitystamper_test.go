package manifests

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sunstructured "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const activityStamperComponent = "components/activity-stamper"

// activityStamper is what the component ships, decoded.
type activityStamper struct {
	serviceAccount corev1.ServiceAccount
	role           rbacv1.ClusterRole
	binding        rbacv1.RoleBinding // in the one namespace of instances the component names
	deployment     appsv1.Deployment
	service        corev1.Service                        // the headless one, of the gateway Pods
	metricsService corev1.Service                        // the stamper's metrics
	policies       map[string]networkingv1.NetworkPolicy // by name
	admission      admissionregistrationv1.ValidatingAdmissionPolicy
	admissionBind  admissionregistrationv1.ValidatingAdmissionPolicyBinding
	kinds          map[string]int
}

// readActivityStamper decodes the component, and checks that its RoleBinding is in the namespace
// the Deployment's --namespaces names, and that namespace alone: the stamper watches and stamps
// the Services of those namespaces, and may do so in no other.
func readActivityStamper(t *testing.T) activityStamper {
	t.Helper()
	objects, _ := componentObjects(t, activityStamperComponent)
	var s activityStamper
	var services []corev1.Service
	s.kinds = decodeByKind(t, objects, map[string]any{"ServiceAccount": &s.serviceAccount, "ClusterRole": &s.role, "RoleBinding": &s.binding,
		"Deployment": &s.deployment, "Service": &services, "NetworkPolicy": &s.policies,
		"ValidatingAdmissionPolicy": &s.admission, "ValidatingAdmissionPolicyBinding": &s.admissionBind})
	for _, service := range services {
		if service.Spec.ClusterIP == corev1.ClusterIPNone {
			s.service = service
		} else {
			s.metricsService = service
		}
	}
	assert.Equal(t, map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "RoleBinding": 1, "Deployment": 1, "Service": 2,
		"NetworkPolicy": 2, "ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1}, s.kinds)
	assertBoundWhereItWatches(t, s.deployment, []rbacv1.RoleBinding{s.binding})
	return s
}

// username is the API server's name of the stamper: its ServiceAccount's.
func (s activityStamper) username() string {
	return "system:serviceaccount:" + s.serviceAccount.Namespace + ":" + s.serviceAccount.Name
}

// TestActivityStamperRBACIsNarrowest: the stamper's ServiceAccount, and nothing else, is bound to
// a ClusterRole that gets, lists, watches and patches Services, and nothing else: no Challenges (a
// Challenge's status holds the players' capabilities, their TCP tokens and unguessable hosts, and
// the answer to a patch is the whole object: the stamper reads the instance's Service, which
// carries the stamp and the idle timeout, instead), no Secrets, no status, no create or delete, no
// wildcard. It is bound by a RoleBinding in each namespace of instances (those of the platform's
// Challenges, platform-rbac.yaml's), and by no ClusterRoleBinding anywhere in what ships. The
// Deployment runs under that ServiceAccount, with its token (its one credential), and the admission
// policy matches that ServiceAccount's username.
func TestActivityStamperRBACIsNarrowest(t *testing.T) {
	s := readActivityStamper(t)
	assert.Equal(t, map[string][]string{"/services": {"get", "list", "watch", "patch"}}, grantsOf(t, s.role.Rules))
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: s.role.Name}, s.binding.RoleRef)
	stamperSubject := rbacv1.Subject{Kind: "ServiceAccount", Name: s.serviceAccount.Name, Namespace: s.serviceAccount.Namespace}
	assert.Equal(t, []rbacv1.Subject{stamperSubject}, s.binding.Subjects)

	// The namespaces of instances: where the platform's Challenges are, and so their Services.
	platformDocs, err := readYAMLDocuments("platform-rbac.yaml")
	require.NoError(t, err)
	var platformNamespaces []string
	for _, doc := range platformDocs {
		if object := doc.(map[string]any); object["kind"] == "RoleBinding" {
			var binding rbacv1.RoleBinding
			convert(t, object, &binding)
			platformNamespaces = append(platformNamespaces, binding.Namespace)
		}
	}
	require.NotEmpty(t, platformNamespaces)
	assert.Equal(t, platformNamespaces, []string{s.binding.Namespace}, "the stamper is bound where the platform's Challenges are")

	// Nothing that ships binds the stamper's ClusterRole, or its ServiceAccount, cluster-wide.
	assertNotBoundClusterWide(t, s.role.Name, stamperSubject)

	assertRunsWithItsOwnToken(t, s.serviceAccount, s.deployment)
	assert.Empty(t, s.deployment.Spec.Template.Spec.Volumes, "the stamper mounts no Secret")

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

// The instance of the admission tests: team-42's Challenge web-sqli-team42 (the name of its
// Service too), and its instance id, which its Service selects its Pods by.
const (
	stampedChallengeName = "web-sqli-team42"
	stampedInstanceID    = "i5xq3mlk2ab7ndqe"
)

// stampedService is an instance's Service as the API server stores it: the Service the hook
// returns for the Challenge web-sqli-team42 (its labels, the idle-timeout annotation of an
// instance with an idleTimeout, a selector of the instance's Pods, its TCP exposure's port), as
// Metacontroller creates it (its ownerReference to the Challenge, its
// last-applied-configuration annotation) and the API server defaults it (a ClusterIP and what
// comes with it), with another annotation (an organizer's) and the stamp when not "". No
// finalizers, as a ClusterIP Service has none; its metadata.managedFields are
// TestActivityStamperManagedFields'.
func stampedService(stamp string) map[string]any {
	serviceLabels := map[string]any{
		hooksync.LabelManagedBy:  hooksync.ManagedByValue,
		hooksync.LabelChallenge:  stampedChallengeName,
		hooksync.LabelInstance:   stampedInstanceID,
		hooksync.LabelOwner:      "team-42",
		hooksync.LabelDefinition: "web-sqli",
	}
	selector := map[string]any{hooksync.LabelInstance: stampedInstanceID}
	ports := []any{map[string]any{"name": "tcp-1337", "port": int64(43117), "targetPort": int64(1337), "protocol": "TCP"}}
	returned, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": stampedChallengeName, "namespace": "ctf", "labels": serviceLabels,
			"annotations": map[string]any{v1alpha1.AnnotationIdleTimeout: "10m0s"}},
		"spec": map[string]any{"type": "ClusterIP", "selector": selector, "ports": ports}})
	if err != nil {
		panic(err)
	}
	annotations := map[string]any{
		v1alpha1.AnnotationIdleTimeout: "10m0s",
		hooksync.LastAppliedAnnotation: string(returned),
		"example.org/note":             "kept",
	}
	if stamp != "" {
		annotations[v1alpha1.AnnotationLastActivity] = stamp
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{
			"name": stampedChallengeName, "namespace": "ctf",
			"uid": "8d1f6c2e-47a9-4b3e-9c51-2f7e0d6a1b34", "resourceVersion": "48213", "creationTimestamp": "2026-11-27T13:30:02Z",
			"labels":      deepCopy(serviceLabels),
			"annotations": annotations,
			"ownerReferences": []any{map[string]any{"apiVersion": v1alpha1.APIVersion, "kind": "Challenge", "name": stampedChallengeName,
				"uid": "3f1c9a4e-5b7d-4c2a-9e8f-0a1b2c3d4e5f", "controller": true, "blockOwnerDeletion": true}},
		},
		"spec": map[string]any{
			"type": "ClusterIP", "selector": deepCopy(selector), "ports": deepCopy(ports),
			"clusterIP": "10.96.12.7", "clusterIPs": []any{"10.96.12.7"}, "ipFamilies": []any{"IPv4"}, "ipFamilyPolicy": "SingleStack",
			"sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
		},
		"status": map[string]any{"loadBalancer": map[string]any{}},
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
// evaluated as the API server does, on an instance's Service as the API server stores it: the
// stamper's ServiceAccount may move the last-activity stamp forward (or set the first one), to a
// valid RFC 3339 time, and nothing else: no stamp going back or removed or unreadable, no change
// to the spec (selector, ports, type), the labels (the Challenge label Metacontroller relates the
// Service by), another annotation (the idle timeout, Metacontroller's last-applied-configuration),
// the finalizers or the owner references, no create, delete or status write (nor another
// manager's managed fields: TestActivityStamperManagedFields). Other users are not matched. The
// API server's side is TestActivityStamper's admission subtest (e2e).
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
	assert.Equal(t, []string{corev1.GroupName}, rule.APIGroups, "the core group, of Services")
	assert.ElementsMatch(t, []string{"services", "services/status"}, rule.Resources)
	assert.ElementsMatch(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}, rule.Operations)
	var keyed bool
	for _, v := range policy.Spec.Variables {
		keyed = keyed || v.Name == "key" && v.Expression == "'"+v1alpha1.AnnotationLastActivity+"'"
	}
	assert.True(t, keyed, "the policy names the annotation the hook reads")

	stamper := map[string]any{"username": s.username(), "groups": []any{"system:serviceaccounts", "system:authenticated"}}
	metacontroller := map[string]any{"username": "system:serviceaccount:metacontroller:metacontroller"}
	administrator := map[string]any{"username": "kubernetes-admin", "groups": []any{"kubeadm:cluster-admins", "system:authenticated"}}
	update := func(user map[string]any) map[string]any {
		return map[string]any{"operation": "UPDATE", "userInfo": user}
	}
	old := stampedService("2026-11-27T13:40:00Z")
	stamp := func(value string) map[string]any {
		return edited(old, func(m, _ map[string]any) { m["annotations"].(map[string]any)[v1alpha1.AnnotationLastActivity] = value })
	}
	// The Service of a LoadBalancer exposure, with the service controller's finalizer.
	loadBalanced := edited(old, func(m, spec map[string]any) {
		m["finalizers"] = []any{"service.kubernetes.io/load-balancer-cleanup"}
		spec["type"] = "LoadBalancer"
		spec["externalTrafficPolicy"] = "Cluster"
		spec["ports"].([]any)[0].(map[string]any)["nodePort"] = int64(31234)
	})
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
		{"a stamp forward on a LoadBalancer Service, its finalizer kept", update(stamper), edited(loadBalanced, func(m, _ map[string]any) {
			m["annotations"].(map[string]any)[v1alpha1.AnnotationLastActivity] = "2026-11-27T13:45:00Z"
		}), loadBalanced, true, ""},
		{"the first stamp", update(stamper), stampedService("2026-11-27T13:45:00Z"), stampedService(""), true, ""},
		{"a stamp over one the hook cannot read", update(stamper), stampedService("2026-11-27T13:45:00Z"), stampedService("yesterday"), true, ""},
		{"a stamp going back", update(stamper), stamp("2026-11-27T13:39:59Z"), old, false, "never goes back: 2026-11-27T13:39:59Z is earlier than 2026-11-27T13:40:00Z"},
		{"a stamp going back, in another zone", update(stamper), stamp("2026-11-27T14:39:00+01:00"), old, false, "never goes back"},
		{"a stamp that is no time", update(stamper), stamp("soon"), old, false, "must be an RFC 3339 time"},
		{"a stamp without its zone", update(stamper), stamp("2026-11-27T13:45:00"), old, false, "must be an RFC 3339 time"},
		{"a stamp that is no date", update(stamper), stamp("2026-02-31T00:00:00Z"), old, false, `"2026-02-31T00:00:00Z" is no date`},
		{"31 April", update(stamper), stamp("2027-04-31T00:00:00Z"), old, false, "is no date"},
		{"29 February of a year that has none", update(stamper), stamp("2027-02-29T00:00:00Z"), old, false, "is no date"},
		{"29 February of a century that has none", update(stamper), stamp("2100-02-29T00:00:00Z"), old, false, "is no date"},
		{"29 February of a leap year", update(stamper), stamp("2028-02-29T00:00:00Z"), old, true, ""},
		{"29 February of a leap century", update(stamper), stamp("2400-02-29T00:00:00Z"), old, true, ""},
		{"a year past what timestamp() reads, by its offset", update(stamper), stamp("9999-12-31T23:59:59-01:00"), old, false, "is no date"},
		{"a stamp over an old one that is no date", update(stamper), stampedService("2026-11-27T13:45:00Z"), stampedService("2026-02-31T00:00:00Z"), true, ""},
		{"a stamp over an old one before what timestamp() reads", update(stamper), stampedService("2026-11-27T13:45:00Z"), stampedService("0000-06-01T00:00:00Z"), true, ""},
		{"a stamp that is no date over an old one that is no date", update(stamper), stampedService("2026-02-30T00:00:00Z"), stampedService("2026-02-31T00:00:00Z"), false, "is no date"},
		{"the stamp removed", update(stamper), stampedService(""), old, false, "must be an RFC 3339 time"},
		{"the Challenge label changed", update(stamper), edited(stamp("2026-11-27T13:45:00Z"), func(m, _ map[string]any) {
			m["labels"].(map[string]any)[hooksync.LabelChallenge] = "web-sqli-team7"
		}), old, false, "may not change a Service's labels"},
		{"a label added", update(stamper), edited(old, func(m, _ map[string]any) { m["labels"].(map[string]any)["x"] = "y" }), old, false, "may not change a Service's labels"},
		{"the labels removed", update(stamper), edited(old, func(m, _ map[string]any) { delete(m, "labels") }), old, false, "may not change a Service's labels"},
		{"the selector changed, to another instance's Pods", update(stamper), edited(stamp("2026-11-27T13:45:00Z"), func(_, spec map[string]any) {
			spec["selector"].(map[string]any)[hooksync.LabelInstance] = "k2ab7ndqei5xq3ml"
		}), old, false, "may not change a Service's spec"},
		{"a port's target changed", update(stamper), edited(old, func(_, spec map[string]any) {
			spec["ports"].([]any)[0].(map[string]any)["targetPort"] = int64(22)
		}), old, false, "may not change a Service's spec"},
		{"the type changed to NodePort", update(stamper), edited(old, func(_, spec map[string]any) { spec["type"] = "NodePort" }), old, false, "may not change a Service's spec"},
		{"another annotation changed", update(stamper), edited(old, func(m, _ map[string]any) { m["annotations"].(map[string]any)["example.org/note"] = "x" }), old, false, "may change a Service's " + v1alpha1.AnnotationLastActivity + " annotation, and no other"},
		{"another annotation added", update(stamper), edited(old, func(m, _ map[string]any) { m["annotations"].(map[string]any)["example.org/new"] = "x" }), old, false, "may change a Service's " + v1alpha1.AnnotationLastActivity + " annotation, and no other"},
		{"another annotation removed", update(stamper), edited(old, func(m, _ map[string]any) { delete(m["annotations"].(map[string]any), "example.org/note") }), old, false, "may change a Service's " + v1alpha1.AnnotationLastActivity + " annotation, and no other"},
		{"the idle timeout changed", update(stamper), edited(stamp("2026-11-27T13:45:00Z"), func(m, _ map[string]any) {
			m["annotations"].(map[string]any)[v1alpha1.AnnotationIdleTimeout] = "8760h0m0s"
		}), old, false, "may change a Service's " + v1alpha1.AnnotationLastActivity + " annotation, and no other"},
		{"Metacontroller's last-applied-configuration changed", update(stamper), edited(old, func(m, _ map[string]any) {
			m["annotations"].(map[string]any)[hooksync.LastAppliedAnnotation] = "{}"
		}), old, false, "may change a Service's " + v1alpha1.AnnotationLastActivity + " annotation, and no other"},
		{"the load balancer's finalizer removed", update(stamper), edited(loadBalanced, func(m, _ map[string]any) { delete(m, "finalizers") }), loadBalanced, false, "may not change a Service's finalizers"},
		{"a finalizer added", update(stamper), edited(old, func(m, _ map[string]any) { m["finalizers"] = []any{"example.org/hold"} }), old, false, "may not change a Service's finalizers"},
		{"the owner references removed", update(stamper), edited(old, func(m, _ map[string]any) { m["ownerReferences"] = []any{} }), old, false, "may not change a Service's owner references"},
		{"the Challenge no longer its controller", update(stamper), edited(old, func(m, _ map[string]any) {
			m["ownerReferences"].([]any)[0].(map[string]any)["controller"] = false
		}), old, false, "may not change a Service's owner references"},
		{"a create", map[string]any{"operation": "CREATE", "userInfo": stamper}, old, nil, false, "may only update a Service's " + v1alpha1.AnnotationLastActivity + " annotation, not CREATE it"},
		{"a delete", map[string]any{"operation": "DELETE", "userInfo": stamper}, nil, old, false, "not DELETE it"},
		{"a status write", map[string]any{"operation": "UPDATE", "userInfo": stamper, "subResource": "status"},
			edited(old, func(m, _ map[string]any) {}), old, false, "not UPDATE its status"},
		{"Metacontroller changes a label and the selector: not matched", update(metacontroller), edited(old, func(m, spec map[string]any) {
			m["labels"].(map[string]any)["x"] = "y"
			spec["selector"].(map[string]any)["x"] = "y"
		}), old, true, ""},
		{"an administrator moves the stamp back: not matched", update(administrator), stamp("2026-11-27T13:00:00Z"), old, true, ""},
	} {
		matched, admitted, message := admits(t, policy, c.request, c.object, c.old)
		assert.Equal(t, c.request["userInfo"].(map[string]any)["username"] == s.username(), matched, c.what)
		if assert.Equal(t, c.admitted, admitted, "%s: %s", c.what, message) && !admitted {
			assert.Contains(t, message, c.messageSays, c.what)
		}
	}
}

// The API server's field manager for a built-in type (managedfields.NewDefaultFieldManager,
// k8s.io/apimachinery at the API server's version), with the schema of a core v1 Service that
// client-go carries (applyconfigurations.NewTypeConverter: its ports a list keyed by port and
// protocol, its labels and annotations maps by key) and no version conversion: what the API server
// does to a Service's metadata.managedFields on a write, before admission sees it.
type (
	sameVersion         struct{}
	noDefaults          struct{}
	unstructuredCreater struct{}
)

func (sameVersion) Convert(in, out, _ any) error { return fmt.Errorf("no conversion") }
func (sameVersion) ConvertToVersion(in runtime.Object, _ runtime.GroupVersioner) (runtime.Object, error) {
	return in, nil
}
func (sameVersion) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}
func (noDefaults) Default(runtime.Object) {}
func (unstructuredCreater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	u := &k8sunstructured.Unstructured{Object: map[string]any{}}
	u.SetGroupVersionKind(kind)
	return u, nil
}

// serviceGVK is the kind the stamper writes.
var serviceGVK = corev1.SchemeGroupVersion.WithKind("Service")

// serviceFieldManager writes Services as the API server does, each write an update (a create, a
// merge patch, a PUT) by a manager, and returns the object admission sees.
type serviceFieldManager struct {
	t       *testing.T
	manager *managedfields.FieldManager
}

func newServiceFieldManager(t *testing.T) serviceFieldManager {
	scheme := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(scheme))
	fm, err := managedfields.NewDefaultFieldManager(applyconfigurations.NewTypeConverter(scheme), sameVersion{}, noDefaults{},
		unstructuredCreater{}, serviceGVK, serviceGVK.GroupVersion(), "", nil)
	require.NoError(t, err)
	return serviceFieldManager{t: t, manager: fm}
}

// create is a create of object, by manager.
func (f serviceFieldManager) create(object map[string]any, manager string) map[string]any {
	empty := &k8sunstructured.Unstructured{Object: map[string]any{}}
	empty.SetGroupVersionKind(serviceGVK)
	return f.update(empty.Object, func(o map[string]any) {
		for k, v := range deepCopy(object).(map[string]any) {
			o[k] = v
		}
	}, manager)
}

// update is live with edit applied (to a copy, managedFields included, as a merge patch or a PUT
// of the whole object sends them), written by manager.
func (f serviceFieldManager) update(live map[string]any, edit func(object map[string]any), manager string) map[string]any {
	f.t.Helper()
	written := deepCopy(live).(map[string]any)
	edit(written)
	out, err := f.manager.Update(&k8sunstructured.Unstructured{Object: deepCopy(live).(map[string]any)},
		&k8sunstructured.Unstructured{Object: written}, manager)
	require.NoError(f.t, err)
	return out.(*k8sunstructured.Unstructured).Object
}

// apply is a server-side apply of config by manager.
func (f serviceFieldManager) apply(live, config map[string]any, manager string) map[string]any {
	f.t.Helper()
	config = deepCopy(config).(map[string]any)
	config["apiVersion"], config["kind"] = serviceGVK.GroupVersion().String(), serviceGVK.Kind
	out, err := f.manager.Apply(&k8sunstructured.Unstructured{Object: deepCopy(live).(map[string]any)},
		&k8sunstructured.Unstructured{Object: config}, manager, true)
	require.NoError(f.t, err)
	return out.(*k8sunstructured.Unstructured).Object
}

// stampedAt sets the last-activity stamp.
func stampedAt(at string) func(map[string]any) {
	return func(o map[string]any) {
		metadata := o["metadata"].(map[string]any)
		annotations, _ := metadata["annotations"].(map[string]any)
		if annotations == nil {
			annotations = map[string]any{}
			metadata["annotations"] = annotations
		}
		annotations[v1alpha1.AnnotationLastActivity] = at
	}
}

// and is each edit in turn.
func and(edits ...func(map[string]any)) func(map[string]any) {
	return func(o map[string]any) {
		for _, edit := range edits {
			edit(o)
		}
	}
}

// managedFieldsOf is the object's metadata.managedFields.
func managedFieldsOf(object map[string]any) []any {
	entries, _ := object["metadata"].(map[string]any)["managedFields"].([]any)
	return entries
}

// entryOf is the entry of manager and operation, or nil.
func entryOf(object map[string]any, manager, operation string) map[string]any {
	for _, e := range managedFieldsOf(object) {
		if e := e.(map[string]any); e["manager"] == manager && e["operation"] == operation {
			return e
		}
	}
	return nil
}

// withEntries sets metadata.managedFields to edit(the entries sent back as they are).
func withEntries(edit func(entries []any) []any) func(map[string]any) {
	return func(o map[string]any) {
		o["metadata"].(map[string]any)["managedFields"] = edit(managedFieldsOf(o))
	}
}

// forgedEntry is an entry of manager, operation, owning fields.
func forgedEntry(manager, operation string, fields map[string]any) map[string]any {
	return map[string]any{"manager": manager, "operation": operation, "apiVersion": serviceGVK.GroupVersion().String(),
		"time": "2026-11-27T13:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields}
}

// stampField is the stamp as fieldsV1 names it.
const stampField = "f:" + v1alpha1.AnnotationLastActivity

// annotationsOwned is what an entry owns of metadata.annotations (nil: nothing).
func annotationsOwned(entry map[string]any) map[string]any {
	fields, _ := entry["fieldsV1"].(map[string]any)
	metadata, _ := fields["f:metadata"].(map[string]any)
	annotations, _ := metadata["f:annotations"].(map[string]any)
	return annotations
}

// TestActivityStamperManagedFields: the stamper's writes keep every other manager's
// metadata.managedFields entries of a Service as they were and bound its own, evaluated on what
// the API server's field manager makes of each write (its code, run in-process, with the Service's
// schema): a stamp by the stamper that also forges an Apply entry of Metacontroller's owning
// spec.selector, grows its own entry (the ~1 MB that, the Service being a child in every request
// Metacontroller sends for its Challenge, makes that request too large for the hook), adds
// entries, empties the managed fields, removes, rewrites or re-dates another manager's entry, or
// hands the stamp to another is refused; a first stamp, a stamp forward, and a stamp whose
// ownership the API server moved from another writer's entry (an organizer's tool's, written by
// an update or by server-side apply, or kubectl annotate's, as stamp.sh writes) to the stamper's
// are admitted. The API server's side is TestActivityStamper's admission subtest (e2e).
func TestActivityStamperManagedFields(t *testing.T) {
	s := readActivityStamper(t)
	policy := s.admission
	stamper := map[string]any{"username": s.username()}
	const (
		stamperManager = "challenge-hook-activity-stamper" // internal/stamper's field manager: its own name, owning nothing else
		metacontroller = "metacontroller"                  // the creator of the Service, the hook's child
		tool           = "ctf-ops"                         // an organizer's tool, whose field manager owns another annotation
	)
	source, err := os.ReadFile(filepath.Join(repoRoot, "internal/stamper/kube.go"))
	require.NoError(t, err)
	assert.Contains(t, string(source), `FieldManager: "`+stamperManager+`"`, "the stamper writes with a field manager of its own")

	f := newServiceFieldManager(t)
	fresh := edited(stampedService(""), func(m, _ map[string]any) { delete(m["annotations"].(map[string]any), "example.org/note") })
	created := f.create(fresh, metacontroller)
	require.Contains(t, annotationsOwned(entryOf(created, metacontroller, "Update")), "f:"+v1alpha1.AnnotationIdleTimeout,
		"Metacontroller's entry owns the Service it created")
	// The organizer's note, by an update of its tool.
	unstamped := f.update(created, func(o map[string]any) {
		o["metadata"].(map[string]any)["annotations"].(map[string]any)["example.org/note"] = "kept"
	}, tool)
	require.Len(t, managedFieldsOf(unstamped), 2)
	stamped := f.update(unstamped, stampedAt("2026-11-27T13:40:00Z"), stamperManager)
	require.Equal(t, map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{stampField: map[string]any{}}}},
		entryOf(stamped, stamperManager, "Update")["fieldsV1"], "the stamper's entry owns the stamp alone")
	byTool := f.update(unstamped, stampedAt("2026-11-27T13:40:00Z"), tool)
	applied := f.apply(unstamped, map[string]any{"metadata": map[string]any{"name": stampedChallengeName, "namespace": "ctf",
		"annotations": map[string]any{v1alpha1.AnnotationLastActivity: "2026-11-27T13:40:00Z"}}}, tool+"-apply")
	byKubectl := f.update(unstamped, stampedAt("2026-11-27T13:40:00Z"), "kubectl-annotate")
	// A Service without annotations (not one of the hook's, which Metacontroller annotates).
	bare := f.create(edited(fresh, func(m, _ map[string]any) { delete(m, "annotations") }), metacontroller)
	// A writer whose field manager also owns more (the organizer's tool) and 10 update managers
	// before the stamper's first stamp (the API server merges the oldest into one ancient-changes
	// entry): refused, a known limit.
	crowded := unstamped
	for i := range 8 {
		crowded = f.update(crowded, func(o map[string]any) {
			o["metadata"].(map[string]any)["labels"].(map[string]any)[fmt.Sprintf("example.org/l%d", i)] = "x"
		}, fmt.Sprintf("tool-%d", i))
	}
	require.Len(t, managedFieldsOf(crowded), 10)

	forward := stampedAt("2026-11-27T13:45:00Z")
	selectorField := map[string]any{"f:spec": map[string]any{"f:selector": map[string]any{}}}
	inflated := map[string]any{stampField: map[string]any{}}
	for i := range 29000 {
		inflated[fmt.Sprintf("f:example.org/padding-%05d", i)] = map[string]any{}
	}
	for _, c := range []struct {
		what        string
		live        map[string]any
		write       func(map[string]any)
		manager     string
		admitted    bool
		messageSays string
		check       func(t *testing.T, written map[string]any)
	}{
		{"the first stamp", unstamped, stampedAt("2026-11-27T13:40:00Z"), stamperManager, true, "", nil},
		{"the first stamp, creating the annotations", bare, stampedAt("2026-11-27T13:40:00Z"), stamperManager, true, "", func(t *testing.T, w map[string]any) {
			assert.Equal(t, map[string]any{".": map[string]any{}, stampField: map[string]any{}}, annotationsOwned(entryOf(w, stamperManager, "Update")))
		}},
		{"a stamp forward", stamped, forward, stamperManager, true, "", nil},
		{"a stamp taking the stamp from the organizer's tool's entry", byTool, forward, stamperManager, true, "", func(t *testing.T, w map[string]any) {
			assert.Equal(t, map[string]any{"f:example.org/note": map[string]any{}}, annotationsOwned(entryOf(w, tool, "Update")),
				"the API server moved the stamp's ownership, and left the tool its note")
			assert.Contains(t, annotationsOwned(entryOf(byTool, tool, "Update")), stampField)
		}},
		{"a stamp taking the stamp from the tool's applied entry", applied, forward, stamperManager, true, "", func(t *testing.T, w map[string]any) {
			assert.Equal(t, map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{stampField: map[string]any{}}}},
				entryOf(applied, tool+"-apply", "Apply")["fieldsV1"])
			assert.Nil(t, entryOf(w, tool+"-apply", "Apply"), "the stamp was all it applied: the API server dropped the entry")
		}},
		{"a stamp taking the stamp from an organizer's kubectl annotate", byKubectl, forward, stamperManager, true, "", func(t *testing.T, w map[string]any) {
			assert.NotNil(t, entryOf(byKubectl, "kubectl-annotate", "Update"))
			assert.Nil(t, entryOf(w, "kubectl-annotate", "Update"), "the stamp was all it owned: the API server dropped the entry")
		}},
		{"stamp.sh's kubectl annotate taking the stamp from the stamper", stamped, forward, "kubectl-annotate", true, "", nil},
		{"the same stamp, nothing written", stamped, stampedAt("2026-11-27T13:40:00Z"), stamperManager, true, "", nil},

		{"a stamp forging an Apply entry of Metacontroller's owning spec.selector", stamped, and(forward, withEntries(func(e []any) []any {
			return append(e, forgedEntry(metacontroller, "Apply", selectorField))
		})), stamperManager, false, "and no other manager's", func(t *testing.T, w map[string]any) {
			assert.NotNil(t, entryOf(w, metacontroller, "Apply"), "the API server keeps the forged entry: only the policy stands")
		}},
		{"a stamp forging ownership of spec.externalIPs into Metacontroller's entry", stamped, and(forward, withEntries(func(e []any) []any {
			for _, entry := range e {
				if entry := entry.(map[string]any); entry["manager"] == metacontroller {
					entry["fieldsV1"].(map[string]any)["f:spec"].(map[string]any)["f:externalIPs"] = map[string]any{}
				}
			}
			return e
		})), stamperManager, false, "and no other manager's", nil},
		{"a stamp inflating the stamper's own entry", stamped, and(forward, withEntries(func(e []any) []any {
			for _, entry := range e {
				if entry := entry.(map[string]any); entry["manager"] == stamperManager {
					entry["fieldsV1"] = map[string]any{"f:metadata": map[string]any{"f:annotations": inflated}}
				}
			}
			return e
		})), stamperManager, false, "owning the " + v1alpha1.AnnotationLastActivity + " annotation and nothing else", func(t *testing.T, w map[string]any) {
			data, err := json.Marshal(w["metadata"].(map[string]any)["managedFields"])
			require.NoError(t, err)
			assert.Greater(t, len(data), 900_000, "the API server keeps the inflated entry: only the policy stands")
		}},
		{"the first stamp, its entry owning the Challenge label too", unstamped, and(stampedAt("2026-11-27T13:40:00Z"), withEntries(func(e []any) []any {
			return append(e, forgedEntry(stamperManager, "Update", map[string]any{"f:metadata": map[string]any{
				"f:labels": map[string]any{"f:" + hooksync.LabelChallenge: map[string]any{}}}}))
		})), stamperManager, false, "and nothing else", nil},
		// Forged owners of the stamp lose it to a stamp that moves it (the API server drops them):
		// the same stamp keeps them.
		{"an applied entry owning the stamp, with the same stamp", stamped, withEntries(func(e []any) []any {
			return append(e, forgedEntry("other", "Apply", map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{stampField: map[string]any{}}}}))
		}), stamperManager, false, "and no other manager's", nil},
		{"a stamp adding two entries", stamped, and(forward, withEntries(func(e []any) []any {
			return append(e, forgedEntry("x-1", "Update", map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{}}}),
				forgedEntry("x-2", "Update", map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{}}}))
		})), stamperManager, false, "may add one entry to a Service's metadata.managedFields, its own, not 2", nil},
		{"a stamp adding 3,000 applied entries", stamped, and(forward, withEntries(func(e []any) []any {
			for i := range 3000 {
				e = append(e, forgedEntry(fmt.Sprintf("x-%d", i), "Apply", selectorField))
			}
			return e
		})), stamperManager, false, "not 3000", nil},
		{"a stamp emptying the managed fields", stamped, and(forward, withEntries(func([]any) []any { return []any{map[string]any{}} })),
			stamperManager, false, "may not remove another manager's entry from a Service's metadata.managedFields", func(t *testing.T, w map[string]any) {
				assert.Empty(t, managedFieldsOf(w), "the API server strips them all, the writer's too (the live Service has a uid)")
			}},
		{"a stamp removing Metacontroller's entry", stamped, and(forward, withEntries(func(e []any) []any {
			return slices.DeleteFunc(e, func(entry any) bool { return entry.(map[string]any)["manager"] == metacontroller })
		})), stamperManager, false, "may not remove another manager's entry", nil},
		{"a stamp rewriting Metacontroller's entry to own the annotations map alone", stamped, and(forward, withEntries(func(e []any) []any {
			for _, entry := range e {
				if entry := entry.(map[string]any); entry["manager"] == metacontroller {
					entry["fieldsV1"] = map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{".": map[string]any{}}}}
				}
			}
			return e
		})), stamperManager, false, "may not remove another manager's entry", nil},
		{"a stamp re-dating Metacontroller's entry", stamped, and(forward, withEntries(func(e []any) []any {
			for _, entry := range e {
				if entry := entry.(map[string]any); entry["manager"] == metacontroller {
					entry["time"] = "2000-01-01T00:00:00Z"
				}
			}
			return e
		})), stamperManager, false, "and no other manager's", nil},
		{"the same stamp, handed to the tool's entry", stamped, withEntries(func(e []any) []any {
			for _, entry := range e {
				if entry := entry.(map[string]any); entry["manager"] == tool {
					annotationsOwned(entry)[stampField] = map[string]any{}
				}
			}
			return e
		}), stamperManager, false, "and no other manager's", nil},
		{"known limit: a writer whose field manager owns more (the organizer's tool)", unstamped, stampedAt("2026-11-27T13:40:00Z"), tool, false, "and no other manager's", nil},
		{"known limit: the first stamp beside 10 update managers (the oldest merged)", crowded, stampedAt("2026-11-27T13:40:00Z"), stamperManager, false, "", func(t *testing.T, w map[string]any) {
			assert.NotNil(t, entryOf(w, "ancient-changes", "Update"))
		}},
	} {
		written := f.update(c.live, c.write, c.manager)
		matched, admitted, message := admits(t, policy, map[string]any{"operation": "UPDATE", "userInfo": stamper}, written, c.live)
		require.True(t, matched, c.what)
		if assert.Equal(t, c.admitted, admitted, "%s: %s", c.what, message) && !admitted {
			assert.Contains(t, message, c.messageSays, c.what)
		}
		if c.check != nil {
			c.check(t, written)
		}
	}
}

// TestActivityStamperDateIsATime: a stamp the policy takes for a time (its rfc3339 and date
// patterns) is one Go's time.RFC3339 (the hook) and CEL's timestamp() both read, so that the
// policy's comparison never fails to evaluate (which would refuse every later stamp); and of the
// years 1000 to 8999, every day Go reads is one the policy takes: every day of the calendar of
// leap and common years and centuries, at the edges of the offsets, against every month's 28 to 31.
func TestActivityStamperDateIsATime(t *testing.T) {
	s := readActivityStamper(t)
	env, err := cel.NewEnv(cel.Variable("s", cel.StringType))
	require.NoError(t, err)
	compile := func(expression string) cel.Program {
		t.Helper()
		ast, issues := env.Compile(expression)
		require.NoError(t, issues.Err(), expression)
		program, err := env.Program(ast)
		require.NoError(t, err)
		return program
	}
	patterns := map[string]*regexp.Regexp{}
	for _, v := range s.admission.Spec.Variables {
		if v.Name == "rfc3339" || v.Name == "date" {
			out, _, err := compile(v.Expression).Eval(map[string]any{})
			require.NoError(t, err)
			patterns[v.Name] = regexp.MustCompile(out.Value().(string)) // CEL's matches() is RE2, as Go's regexp
		}
	}
	require.Len(t, patterns, 2, "the policy's rfc3339 and date variables")
	timestamp := compile("timestamp(s)")
	taken := 0
	for _, year := range []int{1, 999, 1000, 1600, 1700, 1900, 1904, 1999, 2000, 2024, 2026, 2027, 2028, 2100, 2400, 8996, 8999, 9000, 9999} {
		for month := 0; month <= 13; month++ {
			for day := 0; day <= 32; day++ {
				for _, zone := range []string{"Z", "+23:59", "-23:59"} {
					stamp := fmt.Sprintf("%04d-%02d-%02dT00:00:00%s", year, month, day, zone)
					isTime := patterns["rfc3339"].MatchString(stamp) && patterns["date"].MatchString(stamp)
					_, goErr := time.Parse(time.RFC3339, stamp)
					_, _, celErr := timestamp.Eval(map[string]any{"s": stamp})
					if isTime {
						taken++
						assert.NoError(t, goErr, "%s: taken by the policy, not read by the hook", stamp)
						assert.NoError(t, celErr, "%s: taken by the policy, not read by timestamp()", stamp)
					} else if year >= 1000 && year <= 8999 {
						assert.Error(t, goErr, "%s: read by the hook, refused by the policy", stamp)
					}
				}
			}
		}
	}
	assert.Equal(t, 3*(8*365+7*366), taken, "the days of the 8 common and 7 leap years from 1000 to 8999, in 3 zones")
}

// TestActivityStamperDocumented: the component, its endpoint, its command, its ServiceAccount and
// admission policy (both challenge-hook-activity-stamper) and the annotation it writes are where
// organizers and reviewers read.
func TestActivityStamperDocumented(t *testing.T) {
	for page, wants := range map[string][]string{
		"docs/tcp-gateway.md": {"manifests/components/activity-stamper", "GET /activity", "challenge-hook activity-stamper", v1alpha1.AnnotationLastActivity},
		"docs/platform.md":    {"challenge-hook-activity-stamper", v1alpha1.AnnotationLastActivity},
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
