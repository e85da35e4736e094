package sync

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	networkingapiv1 "k8s.io/api/networking/v1"
	networkingv1 "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// TestGoldenNetworkPolicyRulesNamePeers: a rule without from or to admits every address, and a
// port without its protocol makes Metacontroller rewrite the policy on every sync: no policy the
// hook builds for a golden case may hold either; and its internet egress, if any, leaves out
// every range that is not the internet. (Children kept as last applied, when the hook cannot
// build the instance, are returned as they are.)
func TestGoldenNetworkPolicyRulesNamePeers(t *testing.T) {
	cfg := goldenConfig(t)
	policies, internetEgress := 0, 0
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
				for _, peer := range rule.To {
					if peer.IPBlock != nil {
						requireExceptsNonPublic(t, *peer.IPBlock, c.name)
						internetEgress++
					}
				}
			}
		}
	}
	require.NotZero(t, policies)
	require.NotZero(t, internetEgress, "no golden case has egress: true")
}

// notTheInternet are the IPv4 ranges no instance may reach, written out here from IANA's
// special-purpose registry (and the cloud hosts' endpoints) rather than taken from the builder.
var notTheInternet = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "168.63.129.16/32",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
	"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
}

// requireExceptsNonPublic: an egress ipBlock leaves out every address that is not the public
// internet, whatever the configuration adds.
func requireExceptsNonPublic(t *testing.T, block networkingapiv1.IPBlock, name string) {
	for _, cidr := range notTheInternet {
		want := netip.MustParsePrefix(cidr)
		covered := slices.ContainsFunc(block.Except, func(except string) bool {
			p := netip.MustParsePrefix(except)
			return p.Bits() <= want.Bits() && p.Contains(want.Addr())
		})
		require.True(t, covered, "%s: egress to %s leaves %s reachable (except %v)", name, block.CIDR, cidr, block.Except)
	}
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
	in := &instance{name: "web", namespace: "ctf", template: v1alpha1.DefinitionSpec{
		Containers: []v1alpha1.Container{{Name: "web", Image: "x", Ports: []v1alpha1.ContainerPort{{ContainerPort: 8080}}}},
		Expose:     []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}},
	}, cfg: goldenConfig(t)}
	in.setLabels()
	in.resolveComponents()
	require.Len(t, buildNetworkPolicy(in, in.components[0]).Spec.Ingress, 1)
	in.cfg.IngressController.Namespace = ""
	require.Empty(t, buildNetworkPolicy(in, in.components[0]).Spec.Ingress)
}

// TestRoutedExposuresAdmitOnlyTheGatewayPods: with a Gateway, HTTP and TLS exposures are its routes,
// so their players arrive from its data-plane Pods, never from the ingress controller's; by
// default the Pods a Gateway API implementation labels with the Gateway's name, in its namespace.
func TestRoutedExposuresAdmitOnlyTheGatewayPods(t *testing.T) {
	in := &instance{name: "svc", namespace: "ctf", template: v1alpha1.DefinitionSpec{
		Containers: []v1alpha1.Container{{Name: "svc", Image: "x", Ports: []v1alpha1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 1337}}}},
		Expose:     []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}, {Port: 1337, Type: v1alpha1.ExposeTLS}},
	}}
	in.setLabels()
	in.resolveComponents()
	sources := func(cfg Config) []string {
		in.cfg = cfg
		var out []string
		for _, rule := range buildNetworkPolicy(in, in.components[0]).Spec.Ingress {
			require.Len(t, rule.From, 1)
			peer := rule.From[0]
			out = append(out, fmt.Sprintf("%s from %v %v", rule.Ports[0].Port.String(), peer.NamespaceSelector.MatchLabels, peer.PodSelector.MatchLabels))
		}
		return out
	}
	cfg := goldenConfig(t)
	cfg.Gateway = &GatewayRef{Namespace: "gateway-system", Name: "ctf"}
	require.Equal(t, []string{
		"8080 from map[kubernetes.io/metadata.name:gateway-system] map[gateway.networking.k8s.io/gateway-name:ctf]",
		"1337 from map[kubernetes.io/metadata.name:gateway-system] map[gateway.networking.k8s.io/gateway-name:ctf]",
	}, sources(cfg))

	cfg.GatewayDataPlane = PodPeer{Namespace: "envoy-gateway-system", Labels: map[string]string{"gateway.envoyproxy.io/owning-gateway-name": "ctf"}}
	require.Equal(t, []string{
		"8080 from map[kubernetes.io/metadata.name:envoy-gateway-system] map[gateway.envoyproxy.io/owning-gateway-name:ctf]",
		"1337 from map[kubernetes.io/metadata.name:envoy-gateway-system] map[gateway.envoyproxy.io/owning-gateway-name:ctf]",
	}, sources(cfg))
}

// TestDNSOnlyWhereAsked: a Pod queries the cluster DNS only when its template asks (dns: true) or
// reaches the internet anyway (egress: true), in either form of template, each pod of several on
// its own; any other Pod's policy has no rule to port 53, and its resolver is loopback, where a
// lookup fails at once instead of waiting for a resolver the policy drops.
func TestDNSOnlyWhereAsked(t *testing.T) {
	containers := []v1alpha1.Container{{Name: "app", Image: "x"}}
	for _, tc := range []struct {
		name        string
		template    v1alpha1.DefinitionSpec
		wantDNSPods []string // the components whose policy admits DNS ("" the Pod of a template of containers)
	}{
		{"containers", v1alpha1.DefinitionSpec{Containers: containers}, nil},
		{"containers, dns: true", v1alpha1.DefinitionSpec{Containers: containers, DNS: true}, []string{""}},
		{"containers, egress: true", v1alpha1.DefinitionSpec{Containers: containers, Egress: true}, []string{""}},
		{"pods", v1alpha1.DefinitionSpec{Pods: []v1alpha1.PodTemplate{
			{Name: "web", Containers: containers},
			{Name: "bot", Containers: containers, DNS: true},
			{Name: "fetcher", Containers: containers, Egress: true},
		}}, []string{"bot", "fetcher"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := &instance{name: "chal", namespace: "ctf", template: tc.template, cfg: truthConfig(t)}
			in.setLabels()
			in.resolveComponents()
			var gotDNSPods []string
			for _, c := range in.components {
				dnsRules := 0
				for _, rule := range buildNetworkPolicy(in, c).Spec.Egress {
					if slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPortApplyConfiguration) bool { return p.Port.IntValue() == dnsPort }) {
						dnsRules++
					}
				}
				spec := buildPodSpec(in, c)
				if dnsRules > 0 {
					gotDNSPods = append(gotDNSPods, c.name)
					require.Nil(t, spec.DNSPolicy, "pod %q may query DNS: the cluster's resolver, by default", c.name)
					require.Nil(t, spec.DNSConfig)
					continue
				}
				require.NotNil(t, spec.DNSPolicy, "pod %q has no DNS: its resolver must not be the cluster's", c.name)
				require.Equal(t, "None", string(*spec.DNSPolicy))
				require.Equal(t, []string{"127.0.0.1"}, spec.DNSConfig.Nameservers)
			}
			require.Equal(t, tc.wantDNSPods, gotDNSPods)
		})
	}
}

// truthConfig is the golden configuration plus what a cluster with a public API endpoint and a
// node-local DNS cache would set.
func truthConfig(t *testing.T) Config {
	cfg := goldenConfig(t)
	cfg.APIServerCIDRs = []string{"203.0.113.10/32"}
	cfg.NodeLocalDNS = "169.254.20.10"
	return cfg
}
