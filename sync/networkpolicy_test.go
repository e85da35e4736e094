package sync

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	networkingapiv1 "k8s.io/api/networking/v1"
	networkingv1 "k8s.io/client-go/applyconfigurations/networking/v1"
)

// TestGoldenNetworkPolicyRulesNamePeers: a rule without from or to admits every address, and a
// port without its protocol makes Metacontroller rewrite the policy on every sync; no policy the
// hook builds for a golden case may hold either. (Children kept as last applied, when the hook
// cannot build the instance, are returned as they are.)
func TestGoldenNetworkPolicyRulesNamePeers(t *testing.T) {
	cfg := goldenConfig(t)
	policies := 0
	for _, c := range goldenCases(t) {
		if strings.HasPrefix(c.name, "customize-") {
			continue
		}
		req, err := DecodeRequest(c.request)
		require.NoError(t, err)
		for _, child := range Sync(req, goldenNow, cfg).Children {
			built, ok := child.(*networkingv1.NetworkPolicyApplyConfiguration)
			if !ok {
				continue
			}
			raw, err := json.Marshal(built)
			require.NoError(t, err)
			var policy networkingapiv1.NetworkPolicy
			require.NoError(t, json.Unmarshal(raw, &policy))
			policies++
			for i, rule := range policy.Spec.Ingress {
				require.NotEmpty(t, rule.From, "%s: ingress[%d] has no from", c.name, i)
				requireProtocols(t, rule.Ports, c.name)
			}
			for i, rule := range policy.Spec.Egress {
				require.NotEmpty(t, rule.To, "%s: egress[%d] has no to", c.name, i)
				requireProtocols(t, rule.Ports, c.name)
			}
		}
	}
	require.NotZero(t, policies)
}

func requireProtocols(t *testing.T, ports []networkingapiv1.NetworkPolicyPort, name string) {
	for _, p := range ports {
		require.NotNil(t, p.Protocol, "%s: port %v has no protocol", name, p.Port)
	}
}

func TestMinimalCover(t *testing.T) {
	got := minimalCover([]string{"10.96.0.0/12", "192.168.0.0/16", "10.0.0.0/8", "10.244.0.0/16", "203.0.113.10/32", "10.0.0.0/8", "172.18.0.0/16"})
	require.Equal(t, []string{"10.0.0.0/8", "172.18.0.0/16", "192.168.0.0/16", "203.0.113.10/32"}, got)
}

// TestHTTPWithoutIngressNamespaceAdmitsNobody: a peer without a namespace selector means the
// policy's own namespace, so an unset ingress controller namespace must leave no rule at all.
func TestHTTPWithoutIngressNamespaceAdmitsNobody(t *testing.T) {
	in := instance{name: "web", namespace: "ctf", template: DefinitionSpec{
		Containers: []Container{{Name: "web", Image: "x", Ports: []ContainerPort{{ContainerPort: 8080}}}},
		Expose:     []Expose{{Port: 8080, Type: ExposeHTTP}},
	}}.withLabels()
	cfg := goldenConfig(t)
	require.Len(t, buildNetworkPolicy(in, cfg).Spec.Ingress, 1)
	cfg.IngressController.Namespace = ""
	require.Empty(t, buildNetworkPolicy(in, cfg).Spec.Ingress)
}
