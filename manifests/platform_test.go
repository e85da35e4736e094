package manifests

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const platformComponent = "components/platform"

// platformTokenSecret is rCTF's token: the Secret the component's header tells organizers to
// create, mounted as the component's --rctf-token-file.
const platformTokenSecret = "challenge-hook-rctf-token"

// platformLinkKeySecret is the player page's link key: the Secret the component's header and
// docs/platform.md tell organizers to create, mounted (optional) as --link-key-file.
const platformLinkKeySecret = "challenge-hook-link-key"

// platformShutdown is how long `challenge-hook platform` lets the calls in flight finish after
// SIGTERM (servePlatform's Shutdown timeout).
const platformShutdown = 10 * time.Second

// platformRights are what `challenge-hook platform -h` says the component needs, and nothing else.
var platformRights = map[string][]string{
	v1alpha1.Group + "/challenges":           {"create", "get", "list", "watch", "patch", "delete"},
	v1alpha1.Group + "/challengedefinitions": {"get", "list", "watch"},
}

// platform is what the component ships, decoded.
type platform struct {
	serviceAccount corev1.ServiceAccount
	role           rbacv1.ClusterRole
	bindings       []rbacv1.RoleBinding // one per namespace of the event
	deployment     appsv1.Deployment
	pdb            policyv1.PodDisruptionBudget
	services       map[string]corev1.Service // by name
	policy         networkingv1.NetworkPolicy
	header         string // the comment that opens kustomization.yaml
}

// readPlatform decodes the component: a Component of its files alone, which patches nothing of
// the base, and whose RoleBindings are in the namespaces the Deployment's --namespaces names, and
// those alone (the component watches those, and may act in no other).
func readPlatform(t *testing.T) platform {
	t.Helper()
	objects, header := componentObjects(t, platformComponent)
	p := platform{header: header}
	kinds := decodeByKind(t, objects, map[string]any{"ServiceAccount": &p.serviceAccount, "ClusterRole": &p.role, "RoleBinding": &p.bindings,
		"Deployment": &p.deployment, "PodDisruptionBudget": &p.pdb, "Service": &p.services, "NetworkPolicy": &p.policy})
	assert.Equal(t, map[string]int{"ServiceAccount": 1, "ClusterRole": 1, "RoleBinding": 1, "Deployment": 1,
		"PodDisruptionBudget": 1, "Service": 3, "NetworkPolicy": 1}, kinds)

	assertBoundWhereItWatches(t, p.deployment, p.bindings)
	return p
}

// ports are the component's listeners: rCTF's (--listen), the metrics' (--metrics-listen) and the
// player page's (--page-listen).
func (p platform) ports(t *testing.T) (listen, metrics, page int32) {
	args := p.deployment.Spec.Template.Spec.Containers[0].Args
	return port(t, flagValue(args, "listen")), port(t, flagValue(args, "metrics-listen")), port(t, flagValue(args, "page-listen"))
}

// TestPlatformComponentHoldsThePlatformsRights: the component's ClusterRole grants exactly what
// `challenge-hook platform -h` says it needs, which are the platform's rights
// (manifests/platform-rbac.yaml's ClusterRole): Challenges and ChallengeDefinitions, no Secret
// (flags), Pod or other child, no status, no wildcard. It is bound to the component's
// ServiceAccount alone, by RoleBindings (named apart from every other shipped RoleBinding, so
// that neither replaces the other where both are applied) and by no ClusterRoleBinding anywhere in
// what ships. The Deployment runs under that ServiceAccount with its token, and mounts rCTF's
// token, key "token" of its own Secret, required, as --rctf-token-file, and the player page's link
// keys, keys "key" and "previous" of another Secret of its own, optional: no other Secret.
func TestPlatformComponentHoldsThePlatformsRights(t *testing.T) {
	p := readPlatform(t)
	assert.Equal(t, platformRights, grantsOf(t, p.role.Rules))

	docs, err := readYAMLDocuments("platform-rbac.yaml")
	require.NoError(t, err)
	var platformRole rbacv1.ClusterRole
	for _, doc := range docs {
		if object := doc.(map[string]any); object["kind"] == "ClusterRole" {
			convert(t, object, &platformRole)
		}
	}
	assert.Equal(t, grantsOf(t, platformRole.Rules), grantsOf(t, p.role.Rules), "the component holds other rights than the platform's")
	assert.NotEqual(t, platformRole.Name, p.role.Name, "the component's ClusterRole would replace the organizer's platform's")

	subject := rbacv1.Subject{Kind: "ServiceAccount", Name: p.serviceAccount.Name, Namespace: p.serviceAccount.Namespace}
	for _, binding := range p.bindings {
		assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: p.role.Name}, binding.RoleRef, binding.Name)
		assert.Equal(t, []rbacv1.Subject{subject}, binding.Subjects, binding.Name)
	}

	assertNotBoundClusterWide(t, p.role.Name, subject)
	objects, files := shippedObjects(t)
	roleBindings := map[string][]string{} // namespace/name -> files
	for i, object := range objects {
		if object["kind"] == "RoleBinding" {
			var binding rbacv1.RoleBinding
			convert(t, object, &binding)
			id := binding.Namespace + "/" + binding.Name
			roleBindings[id] = append(roleBindings[id], files[i])
		}
	}
	for id, in := range roleBindings {
		assert.Len(t, in, 1, "RoleBinding %s ships in %v: applying one replaces the other", id, in)
	}

	assertRunsWithItsOwnToken(t, p.serviceAccount, p.deployment)
	pod := p.deployment.Spec.Template.Spec
	container := pod.Containers[0]
	tokenFile := flagValue(container.Args, "rctf-token-file")
	require.NotEmpty(t, tokenFile, "the component has no --rctf-token-file")
	secret, key, optional := mountedSecretFile(pod, container, tokenFile)
	assert.Equal(t, platformTokenSecret, secret, "--rctf-token-file %s", tokenFile)
	assert.Equal(t, "token", key)
	assert.False(t, optional, "the component would start without rCTF's token")
	for flag, wantKey := range map[string]string{"link-key-file": "key", "link-previous-key-file": "previous"} {
		file := flagValue(container.Args, flag)
		require.NotEmpty(t, file, "the component has no --%s", flag)
		linkSecret, key, optional := mountedSecretFile(pod, container, file)
		assert.Equal(t, platformLinkKeySecret, linkSecret, "--%s %s", flag, file)
		assert.Equal(t, wantKey, key, "--%s", flag)
		assert.True(t, optional, "--%s: the component would not start without the player page's key", flag)
	}
	require.Len(t, pod.Volumes, 2, "the component mounts another volume than rCTF's token and the link key")
	for _, hookSecret := range []string{tokenSecret["name"], "challenge-hook-flag-key", "challenge-hook-verify-token", tcpGatewayKeySecret, platformLinkKeySecret} {
		assert.NotEqual(t, hookSecret, secret, "rCTF's token is one of the hook's Secrets, or the link key's")
	}
	for _, hookSecret := range []string{tokenSecret["name"], "challenge-hook-flag-key", "challenge-hook-verify-token", tcpGatewayKeySecret} {
		assert.NotEqual(t, hookSecret, platformLinkKeySecret, "the link key is one of the hook's Secrets")
	}
}

// TestPlatformComponentRunsLikeTheOtherComponents: the hook's image, two replicas (stateless, as
// the hook and the gateway) spread over nodes with a PodDisruptionBudget, GOMEMLIMIT at 90% of the
// memory limit, probes on the metrics port, and a grace period the shutdown fits in; as hardened
// as the hook (TestEveryDeploymentOfTheHookImageIsHardened).
func TestPlatformComponentRunsLikeTheOtherComponents(t *testing.T) {
	p := readPlatform(t)
	hook, hookContainer := hookContainer(t)
	pod := p.deployment.Spec.Template.Spec
	container := pod.Containers[0]
	require.NotEmpty(t, container.Args)
	assert.Equal(t, "platform", container.Args[0], "the component is the hook binary's platform subcommand")
	assert.Equal(t, hookContainer.Image, container.Image)
	assert.Equal(t, int32(2), *p.deployment.Spec.Replicas)
	assert.Equal(t, hook.Spec.Strategy, p.deployment.Spec.Strategy)
	require.Len(t, pod.TopologySpreadConstraints, 1)
	assert.Equal(t, hook.Spec.Template.Spec.TopologySpreadConstraints[0].TopologyKey, pod.TopologySpreadConstraints[0].TopologyKey)
	spread, err := metav1.LabelSelectorAsSelector(pod.TopologySpreadConstraints[0].LabelSelector)
	require.NoError(t, err)
	assert.True(t, spread.Matches(labels.Set(p.deployment.Spec.Template.Labels)), "the spread counts other Pods")

	assertKeepsOneThroughDisruptions(t, p.pdb, p.deployment)
	assertGoMemLimit(t, container)

	ports := map[string]int32{}
	for _, declared := range container.Ports {
		ports[declared.Name] = declared.ContainerPort
	}
	listen, metrics, page := p.ports(t)
	assert.NotEqual(t, listen, metrics, "/metrics on rCTF's port")
	assert.NotContains(t, []int32{listen, metrics}, page, "the player page on rCTF's or the metrics' port")
	assert.Equal(t, map[string]int32{"http": listen, "metrics": metrics, "page": page}, ports)
	for path, probe := range map[string]*corev1.Probe{"/healthz": container.LivenessProbe, "/readyz": container.ReadinessProbe} {
		require.NotNil(t, probe, path)
		require.NotNil(t, probe.HTTPGet, path)
		assert.Equal(t, path, probe.HTTPGet.Path)
		assert.Equal(t, "metrics", probe.HTTPGet.Port.String(), "a probe on rCTF's port, which answers only with the token")
	}
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	assert.Greater(t, time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second, platformShutdown, "the calls in flight are cut short")
}

// TestPlatformComponentServesRCTFInTheCluster: one ClusterIP Service carries rCTF's port alone, at
// the apiUrl the component's header gives rCTF, another the metrics port alone, and a third the
// player page's port alone (the organizer's Ingress routes players to it, as the header shows);
// all select the component's Pods, and only them.
func TestPlatformComponentServesRCTFInTheCluster(t *testing.T) {
	p := readPlatform(t)
	listen, metrics, page := p.ports(t)
	hook, _ := hookContainer(t)
	gw := readTCPGateway(t)
	want := map[string]int32{"challenge-hook-platform": listen, "challenge-hook-platform-metrics": metrics, "challenge-hook-platform-page": page}
	got := map[string]int32{}
	for name, service := range p.services {
		assert.Equal(t, p.deployment.Namespace, service.Namespace, name)
		assert.Equal(t, corev1.ServiceTypeClusterIP, service.Spec.Type, "%s: rCTF and Prometheus are in the cluster", name)
		selector := labels.SelectorFromSet(service.Spec.Selector)
		assert.True(t, selector.Matches(labels.Set(p.deployment.Spec.Template.Labels)), "Service %s does not select the component's Pods", name)
		assert.False(t, selector.Matches(labels.Set(hook.Spec.Template.Labels)), "Service %s selects the hook's Pods", name)
		assert.False(t, selector.Matches(labels.Set(gw.deployment.Spec.Template.Labels)), "Service %s selects the gateway's Pods", name)
		require.Len(t, service.Spec.Ports, 1, name)
		for portName, number := range map[string]int32{"http": listen, "metrics": metrics, "page": page} {
			if service.Spec.Ports[0].TargetPort.String() == portName {
				assert.Equal(t, number, service.Spec.Ports[0].Port, "%s: the Service's port is not the container's", name)
			}
		}
		got[name] = service.Spec.Ports[0].Port
	}
	assert.Equal(t, want, got)

	service := p.services["challenge-hook-platform"]
	apiURL := fmt.Sprintf("apiUrl: http://%s.%s.svc:%d\n", service.Name, service.Namespace, service.Spec.Ports[0].Port)
	assert.Contains(t, p.header, apiURL, "the apiUrl organizers give rCTF is not the component's Service")
	pageBackend := fmt.Sprintf("backend: {service: {name: %s, port: {number: %d}}}", "challenge-hook-platform-page", page)
	assert.Contains(t, p.header, pageBackend, "the Ingress rule the header shows does not reach the page's Service")
}

// TestPlatformComponentPolicy: the component's NetworkPolicy admits to rCTF's port only the Pods
// the hook admits to flag verification (the CTF platform's, by namespace and label), to the
// metrics port only the Prometheus Pods the gateway's policy admits, to the player page's port
// only the ingress controller's Pods (by namespace, the hook's default one, and label), and lets
// the component reach the API server's ports alone (no DNS: the in-cluster client dials an
// address).
func TestPlatformComponentPolicy(t *testing.T) {
	p := readPlatform(t)
	policy := p.policy
	listen, metrics, page := p.ports(t)
	assertPolicySelects(t, policy, p.deployment, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)

	// The CTF platform's Pods, as the hook's policy admits them to flag verification (8081).
	var hookPolicy networkingv1.NetworkPolicy
	decodeManifest(t, "hook-networkpolicy.yaml", &hookPolicy)
	var rctf []networkingv1.NetworkPolicyPeer
	for _, rule := range hookPolicy.Spec.Ingress {
		if len(rule.Ports) == 1 && rule.Ports[0].Port != nil && rule.Ports[0].Port.IntVal == 8081 {
			rctf = rule.From
		}
	}
	require.NotEmpty(t, rctf)
	gw := readTCPGateway(t)

	admitted := map[int32][]networkingv1.NetworkPolicyPeer{}
	for i, rule := range policy.Spec.Ingress {
		require.Len(t, rule.Ports, 1, "ingress rule %d", i)
		require.NotNil(t, rule.Ports[0].Port, "ingress rule %d admits every port", i)
		require.NotEmpty(t, rule.From, "ingress rule %d admits every source", i)
		admitted[rule.Ports[0].Port.IntVal] = append(admitted[rule.Ports[0].Port.IntVal], rule.From...)
	}
	ingressController := []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": hooksync.DefaultConfig().IngressController.Namespace}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "ingress-nginx"}},
	}}
	assert.Equal(t, map[int32][]networkingv1.NetworkPolicyPeer{listen: rctf, metrics: gw.policy.Spec.Ingress[1].From, page: ingressController}, admitted)

	require.NotEmpty(t, policy.Spec.Egress, "egress denied: the component could not reach the API server")
	for i, rule := range policy.Spec.Egress {
		require.NotEmpty(t, rule.Ports, "egress rule %d reaches every port", i)
		for _, to := range rule.Ports {
			require.NotNil(t, to.Port, "egress rule %d reaches every port", i)
			assert.Nil(t, to.EndPort, "egress rule %d reaches a range of ports", i)
			assert.Contains(t, []int32{443, 6443}, to.Port.IntVal, "egress rule %d reaches another port than the API server's", i)
			require.NotNil(t, to.Protocol, "egress rule %d", i)
			assert.Equal(t, corev1.ProtocolTCP, *to.Protocol, "egress rule %d", i)
		}
		require.NotEmpty(t, rule.To, "egress rule %d reaches every address, the internet's included", i)
		for j, peer := range rule.To {
			assert.Nil(t, peer.PodSelector, "egress rule %d peer %d reaches Pods: the API server is named by its address", i, j)
			assert.Nil(t, peer.NamespaceSelector, "egress rule %d peer %d reaches Pods: the API server is named by its address", i, j)
			require.NotNil(t, peer.IPBlock, "egress rule %d peer %d", i, j)
			prefix, err := netip.ParsePrefix(peer.IPBlock.CIDR)
			require.NoError(t, err)
			assert.True(t, prefix.Addr().IsPrivate() && prefix.Bits() >= 8, "egress rule %d peer %d reaches %s, beyond the private ranges where an API server lives", i, j, prefix)
		}
	}
}

// TestPlatformComponentDocumented: what organizers do for the component (create rCTF's token, the
// Secret the Deployment mounts; give rCTF the provider, apiUrl and the token; the component's
// identity and reach) is in the component's header and docs/security.md; what they do for the
// player page (create its link key, the other Secret the Deployment mounts) in the header and
// docs/player-page.md.
func TestPlatformComponentDocumented(t *testing.T) {
	p := readPlatform(t)
	security, err := os.ReadFile(filepath.Join(repoRoot, "docs", "security.md"))
	require.NoError(t, err)
	playerPageDoc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "player-page.md"))
	require.NoError(t, err)
	for where, wants := range map[string][]string{
		filepath.Join(platformComponent, "kustomization.yaml"): {
			"kubectl -n " + p.deployment.Namespace + " create secret generic " + platformTokenSecret + " \\\n" +
				`    --from-literal=token="$(head -c 32 /dev/urandom | base64)"`,
			"name: instancers/docker", "authToken: <the token of the Secret " + platformTokenSecret + ">",
			"rollout restart deployment/" + p.deployment.Name,
			"kubectl -n " + p.deployment.Namespace + " create secret generic " + platformLinkKeySecret + " \\\n" +
				`    --from-literal=key="$(head -c 32 /dev/urandom | base64)"`,
		},
		"docs/player-page.md": {
			"kubectl -n " + p.deployment.Namespace + " create secret generic " + platformLinkKeySecret + ` --from-literal=key="$(head -c 32 /dev/urandom | base64)"`,
			v1alpha1.AnnotationPlayerPage, "--page-origin", "--link-key-file", "--link-previous-key-file", "--page-listen",
		},
		"docs/security.md": {
			"`" + p.serviceAccount.Namespace + "/" + p.serviceAccount.Name + "`",
			"Secret `" + platformTokenSecret + "`", "`manifests/" + platformComponent + "`",
		},
	} {
		content := p.header
		switch where {
		case "docs/security.md":
			content = string(security)
		case "docs/player-page.md":
			content = string(playerPageDoc)
		}
		for _, want := range wants {
			assert.Contains(t, content, want, where)
		}
	}
}
