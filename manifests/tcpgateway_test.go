package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const tcpGatewayComponent = "components/tcp-gateway"

// tcpGatewayKeySecret is the gateway key's Secret: mounted by the gateway and by the hook.
const tcpGatewayKeySecret = "challenge-hook-tcp-gateway-key"

// tcpGateway is what the component ships, decoded.
type tcpGateway struct {
	serviceAccount corev1.ServiceAccount
	deployment     appsv1.Deployment
	pdb            policyv1.PodDisruptionBudget
	services       map[string]corev1.Service // by name
	policy         networkingv1.NetworkPolicy
	kinds          map[string]int
	// hookPatch is the component's JSON patch of the hook's Deployment, applied to the base's.
	hook appsv1.Deployment
}

func readTCPGateway(t *testing.T) tcpGateway {
	t.Helper()
	var component struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Target map[string]string `json:"target"`
			Patch  string            `json:"patch"`
		} `json:"patches"`
	}
	decodeSingleYAML(t, filepath.Join(tcpGatewayComponent, "kustomization.yaml"), &component)
	require.Equal(t, "Component", component.Kind)

	var gw tcpGateway
	gw.kinds = decodeByKind(t, resourceObjects(t, tcpGatewayComponent, component.Resources), map[string]any{
		"ServiceAccount": &gw.serviceAccount, "Deployment": &gw.deployment, "PodDisruptionBudget": &gw.pdb,
		"Service": &gw.services, "NetworkPolicy": &gw.policy})

	// The hook's Deployment with the component's patch: additions only, to the hook's container
	// and Pod (anything else would change the base install for everyone).
	require.Len(t, component.Patches, 1)
	require.Equal(t, map[string]string{"group": "apps", "version": "v1", "kind": "Deployment", "name": "challenge-hook"}, component.Patches[0].Target)
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	require.NoError(t, yaml.UnmarshalStrict([]byte(component.Patches[0].Patch), &ops))
	hook, container := hookContainer(t)
	spec := &hook.Spec.Template.Spec
	for _, op := range ops {
		require.Equal(t, "add", op.Op, op.Path)
		raw, err := yaml.Marshal(op.Value)
		require.NoError(t, err)
		switch op.Path {
		case "/spec/template/spec/containers/0/args/-":
			container.Args = append(container.Args, op.Value.(string))
		case "/spec/template/spec/containers/0/env/-":
			var env corev1.EnvVar
			require.NoError(t, yaml.UnmarshalStrict(raw, &env))
			container.Env = append(container.Env, env)
		case "/spec/template/spec/containers/0/volumeMounts/-":
			var mount corev1.VolumeMount
			require.NoError(t, yaml.UnmarshalStrict(raw, &mount))
			container.VolumeMounts = append(container.VolumeMounts, mount)
		case "/spec/template/spec/volumes/-":
			var volume corev1.Volume
			require.NoError(t, yaml.UnmarshalStrict(raw, &volume))
			spec.Volumes = append(spec.Volumes, volume)
		default:
			t.Fatalf("the component's patch of the hook adds to %s", op.Path)
		}
	}
	spec.Containers[0] = container
	gw.hook = hook
	return gw
}

// mountedSecretFile is the Secret name and key behind file in a Pod's volumes, or "" when no
// Secret volume of the container holds it.
func mountedSecretFile(spec corev1.PodSpec, container corev1.Container, file string) (secret, key string, optional bool) {
	for _, mount := range container.VolumeMounts {
		for _, volume := range spec.Volumes {
			if volume.Name != mount.Name || volume.Secret == nil {
				continue
			}
			for _, item := range volume.Secret.Items {
				if mount.MountPath+"/"+item.Path == file {
					return volume.Secret.SecretName, item.Key, volume.Secret.Optional != nil && *volume.Secret.Optional
				}
			}
		}
	}
	return "", "", false
}

// envValue is the value of the container's environment variable name, or "".
func envValue(container corev1.Container, name string) string {
	for _, env := range container.Env {
		if env.Name == name {
			return env.Value
		}
	}
	return ""
}

// TestTCPGatewayKeyIsOneSecretOfItsOwn: the hook mints tokens with the key the gateway opens them
// with: both mount key "key" of the same Secret, in the hook's namespace, at the file each is
// told to read. That Secret is none of the hook's other credentials (a flag key or a token that
// doubled as the gateway key would be in the gateway's hands). The gateway requires it; the hook
// starts without it (its other exposures keep working).
func TestTCPGatewayKeyIsOneSecretOfItsOwn(t *testing.T) {
	gw := readTCPGateway(t)
	gateway := gw.deployment.Spec.Template.Spec
	require.Len(t, gateway.Containers, 1)
	args := gateway.Containers[0].Args
	require.NotEmpty(t, args)
	assert.Equal(t, "tcp-gateway", args[0], "the gateway is the hook binary's tcp-gateway subcommand")

	keyFile := flagValue(args, "key-file")
	require.NotEmpty(t, keyFile, "the gateway has no --key-file")
	secret, key, optional := mountedSecretFile(gateway, gateway.Containers[0], keyFile)
	assert.Equal(t, tcpGatewayKeySecret, secret, "the gateway's --key-file %s", keyFile)
	assert.Equal(t, "key", key)
	assert.False(t, optional, "the gateway would start without its key")

	hookContainer := gw.hook.Spec.Template.Spec.Containers[0]
	hookKeyFile := flagValue(hookContainer.Args, "tcp-gateway-key-file")
	require.NotEmpty(t, hookKeyFile, "the hook has no --tcp-gateway-key-file")
	secret, key, optional = mountedSecretFile(gw.hook.Spec.Template.Spec, hookContainer, hookKeyFile)
	assert.Equal(t, tcpGatewayKeySecret, secret, "the hook's --tcp-gateway-key-file %s", hookKeyFile)
	assert.Equal(t, "key", key)
	assert.True(t, optional, "the hook would wait for the gateway key, every other instance with it")
	assert.Equal(t, gw.hook.Namespace, gw.deployment.Namespace, "the Secret is read in both namespaces")

	for _, other := range []string{"flag-key-file", "token-file", "verify-token-file"} {
		file := flagValue(hookContainer.Args, other)
		require.NotEmpty(t, file, other)
		assert.NotEqual(t, hookKeyFile, file, "--%s", other)
	}
	for _, volume := range gw.hook.Spec.Template.Spec.Volumes {
		if volume.Projected == nil {
			continue
		}
		for _, source := range volume.Projected.Sources {
			if source.Secret != nil {
				assert.NotEqual(t, tcpGatewayKeySecret, source.Secret.Name, "the gateway key is one of the hook's other credentials")
			}
		}
	}

	// The address players are told: set, as host:port, on the gateway's port.
	address := envValue(hookContainer, "CHALLENGE_HOOK_TCP_GATEWAY_ADDRESS")
	require.NotEmpty(t, address, "the component sets no address for the hook to publish")
	assert.Equal(t, port(t, flagValue(args, "listen")), port(t, address), "the published port is not the gateway's")
}

// TestTCPGatewayRollsOutWithoutLosingPlayers: the gateway dials only the Service CIDRs it is given,
// and a rollout loses no player: a shutdown delay long enough for the readiness probe to take the
// Pod out of the Service (and the load balancer to follow), then the drain, both within the grace
// period.
func TestTCPGatewayRollsOutWithoutLosingPlayers(t *testing.T) {
	gw := readTCPGateway(t)
	pod := gw.deployment.Spec.Template.Spec
	container := pod.Containers[0]
	assert.NotEmpty(t, flagValue(container.Args, "service-cidrs"), "the gateway needs the Service CIDRs to dial")
	require.Greater(t, len(container.Args), 4)
	assert.True(t, strings.HasPrefix(container.Args[4], "--service-cidrs="), "docs/tcp-gateway.md's overlay replaces args/4 with the cluster's Service CIDRs, not %s", container.Args[4])
	delay, err := time.ParseDuration(flagValue(container.Args, "shutdown-delay"))
	require.NoError(t, err, "--shutdown-delay")
	drain := 25 * time.Second // --drain-timeout's default
	if v := flagValue(container.Args, "drain-timeout"); v != "" {
		drain, err = time.ParseDuration(v)
		require.NoError(t, err)
	}
	probe := container.ReadinessProbe
	require.NotNil(t, probe)
	notReadyWithin := time.Duration(probe.PeriodSeconds*probe.FailureThreshold+probe.TimeoutSeconds) * time.Second
	assert.Less(t, 2*notReadyWithin, delay, "the Pod leaves the Service's endpoints (%s) well before the listener closes (%s)", notReadyWithin, delay)
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	assert.Less(t, delay+drain, grace, "the shutdown delay and the drain fit in the grace period")
}

// TestTCPGatewayHoldsNoCredential: the gateway gets no ServiceAccount token and no RBAC, runs as
// hardened as the hook, and its Pods carry the labels the hook's instance policies admit (the
// hook's defaults for --tcp-gateway-namespace and --tcp-gateway-pod-labels).
func TestTCPGatewayHoldsNoCredential(t *testing.T) {
	gw := readTCPGateway(t)
	for _, kind := range []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Secret"} {
		assert.Zero(t, gw.kinds[kind], "the component ships a %s", kind)
	}
	pod := gw.deployment.Spec.Template.Spec
	require.NotNil(t, pod.AutomountServiceAccountToken)
	assert.False(t, *pod.AutomountServiceAccountToken, "the gateway's Pods mount a ServiceAccount token")
	require.NotNil(t, gw.serviceAccount.AutomountServiceAccountToken)
	assert.False(t, *gw.serviceAccount.AutomountServiceAccountToken)
	assert.Equal(t, gw.serviceAccount.Name, pod.ServiceAccountName)
	require.NotNil(t, pod.EnableServiceLinks)
	assert.False(t, *pod.EnableServiceLinks)

	hook, hookContainer := hookContainer(t)
	assert.Equal(t, hook.Spec.Template.Spec.SecurityContext, pod.SecurityContext, "the Pod's securityContext differs from the hook's")
	assert.Equal(t, hookContainer.SecurityContext, pod.Containers[0].SecurityContext, "the container's securityContext differs from the hook's")
	assert.Equal(t, hook.Spec.Template.Spec.TopologySpreadConstraints[0].TopologyKey, pod.TopologySpreadConstraints[0].TopologyKey)

	assert.Equal(t, int32(2), *gw.deployment.Spec.Replicas)
	assert.False(t, pod.Containers[0].Resources.Limits.Cpu().IsZero(), "no CPU limit")
	assertGoMemLimit(t, pod.Containers[0])

	cfg := hooksync.DefaultConfig()
	assert.Equal(t, cfg.TCPGateway.Pods.Namespace, gw.deployment.Namespace, "the instances admit the gateway's Pods in another namespace")
	admitted, err := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchLabels: cfg.TCPGateway.Pods.Labels})
	require.NoError(t, err)
	assert.False(t, admitted.Empty())
	assert.True(t, admitted.Matches(labels.Set(gw.deployment.Spec.Template.Labels)), "the instances admit Pods labelled %v, not the gateway's", cfg.TCPGateway.Pods.Labels)

	assertKeepsOneThroughDisruptions(t, gw.pdb, gw.deployment)
}

// TestTCPGatewayServesPlayersOnOnePortAndMetricsInside: one LoadBalancer Service carries the
// player port alone (externalTrafficPolicy Local: the player's address is the source the
// per-address limits count); metrics and probes are on a port of their own, which only a
// ClusterIP Service carries.
func TestTCPGatewayServesPlayersOnOnePortAndMetricsInside(t *testing.T) {
	gw := readTCPGateway(t)
	container := gw.deployment.Spec.Template.Spec.Containers[0]
	playerPort, metricsPort := port(t, flagValue(container.Args, "listen")), port(t, flagValue(container.Args, "metrics-listen"))
	websocketPort := port(t, flagValue(container.Args, "websocket-listen"))
	assert.NotEqual(t, playerPort, metricsPort)
	ports := map[string]int32{}
	for _, p := range container.Ports {
		ports[p.Name] = p.ContainerPort
	}
	assert.Equal(t, map[string]int32{"tcp": playerPort, "websocket": websocketPort, "metrics": metricsPort}, ports)
	for _, probe := range []*corev1.Probe{container.LivenessProbe, container.ReadinessProbe} {
		require.NotNil(t, probe)
		require.NotNil(t, probe.HTTPGet)
		assert.Equal(t, "metrics", probe.HTTPGet.Port.String(), "a probe on the player port")
	}
	assert.Equal(t, "/healthz", container.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "/readyz", container.ReadinessProbe.HTTPGet.Path)

	var balancers int
	for name, service := range gw.services {
		selector := labels.SelectorFromSet(service.Spec.Selector)
		assert.True(t, selector.Matches(labels.Set(gw.deployment.Spec.Template.Labels)), "Service %s selects other Pods", name)
		var targets []string
		for _, p := range service.Spec.Ports {
			targets = append(targets, p.TargetPort.String())
		}
		switch service.Spec.Type {
		case corev1.ServiceTypeLoadBalancer:
			balancers++
			assert.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, service.Spec.ExternalTrafficPolicy, "Service %s", name)
			assert.Equal(t, []string{"tcp", "websocket"}, targets, "the load balancer carries more than the player ports")
			assert.Equal(t, playerPort, service.Spec.Ports[0].Port, "the public port is not the one the hook publishes")
		case corev1.ServiceTypeClusterIP:
			assert.Equal(t, []string{"metrics"}, targets, "Service %s", name)
		default:
			t.Errorf("Service %s of type %s", name, service.Spec.Type)
		}
	}
	assert.Equal(t, 1, balancers, "one load balancer for the whole event")
}

// TestTCPGatewayPolicy: the gateway's NetworkPolicy admits anyone to the player port, only the
// Prometheus Pods the hook's metrics policy admits to the metrics port, and lets the gateway reach
// the Pods of instances only (no address block, no Pod outside an instance, no DNS).
func TestTCPGatewayPolicy(t *testing.T) {
	gw := readTCPGateway(t)
	policy := gw.policy
	container := gw.deployment.Spec.Template.Spec.Containers[0]
	playerPort, metricsPort := port(t, flagValue(container.Args, "listen")), port(t, flagValue(container.Args, "metrics-listen"))
	websocketPort := port(t, flagValue(container.Args, "websocket-listen"))
	assertPolicySelects(t, policy, gw.deployment, networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)

	// The Prometheus peer of the hook's metrics policy (the monitoring component's scrape.yaml).
	docs, err := readYAMLDocuments(filepath.Join("components/monitoring", "scrape.yaml"))
	require.NoError(t, err)
	var prometheus []networkingv1.NetworkPolicyPeer
	for _, doc := range docs {
		if object := doc.(map[string]any); object["kind"] == "NetworkPolicy" {
			var hookMetrics networkingv1.NetworkPolicy
			convert(t, object, &hookMetrics)
			prometheus = hookMetrics.Spec.Ingress[0].From
		}
	}
	require.NotEmpty(t, prometheus)

	admitted := map[int32]string{}
	for i, rule := range policy.Spec.Ingress {
		require.Len(t, rule.Ports, 1, "ingress rule %d", i)
		require.NotNil(t, rule.Ports[0].Port, "ingress rule %d admits every port", i)
		p := rule.Ports[0].Port.IntVal
		switch p {
		case playerPort, websocketPort:
			assert.Empty(t, rule.From, "the player port %d admits only some sources", p)
			admitted[p] = "anyone"
		case metricsPort:
			assert.Equal(t, prometheus, rule.From, "the metrics port admits others than Prometheus")
			admitted[p] = "prometheus"
		default:
			t.Errorf("ingress rule %d admits port %d", i, p)
		}
	}
	assert.Equal(t, map[int32]string{playerPort: "anyone", websocketPort: "anyone", metricsPort: "prometheus"}, admitted)

	require.NotEmpty(t, policy.Spec.Egress)
	instance := labels.Set{hooksync.LabelInstance: "i5xq3mlk2ab7ndqe"}
	for i, rule := range policy.Spec.Egress {
		require.NotEmpty(t, rule.To, "egress rule %d reaches everything", i)
		for j, peer := range rule.To {
			assert.Nil(t, peer.IPBlock, "egress rule %d peer %d reaches addresses", i, j)
			require.NotNil(t, peer.PodSelector, "egress rule %d peer %d reaches every Pod", i, j)
			pods, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
			require.NoError(t, err)
			assert.True(t, pods.Matches(instance), "egress rule %d peer %d misses instances", i, j)
			assert.False(t, pods.Matches(labels.Set(gw.deployment.Spec.Template.Labels)), "egress rule %d peer %d reaches the gateway", i, j)
			assert.False(t, pods.Matches(labels.Set{"k8s-app": "kube-dns"}), "egress rule %d peer %d reaches DNS", i, j)
			assert.False(t, pods.Matches(labels.Set{}), "egress rule %d peer %d reaches Pods outside any instance", i, j)
		}
	}
}

// TestTCPGatewayDocumented: the organizer's steps the component needs are where organizers read:
// the Secret's name, the address variable and the component in docs/tcp-gateway.md, which the
// README links to.
func TestTCPGatewayDocumented(t *testing.T) {
	content, err := os.ReadFile(filepath.Join(repoRoot, "docs", "tcp-gateway.md"))
	require.NoError(t, err)
	for _, want := range []string{tcpGatewayKeySecret, "CHALLENGE_HOOK_TCP_GATEWAY_ADDRESS", "manifests/components/tcp-gateway"} {
		assert.True(t, strings.Contains(string(content), want), "docs/tcp-gateway.md does not mention %s", want)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "(docs/tcp-gateway.md"), "the README does not link to docs/tcp-gateway.md")
}
