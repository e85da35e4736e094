package sync

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingapiv1 "k8s.io/api/networking/v1"
	apimetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1 "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1 "k8s.io/client-go/applyconfigurations/networking/v1"
)

// The instance's NetworkPolicy is the wall between a player with a shell in their own instance
// and everything else: other teams' instances, the cluster, the cloud. Every rule names its peers
// (a rule without from or to admits every address), and every port carries its protocol, as the
// API server would default it: Metacontroller's merge replaces each list whole, so a missing
// default would rewrite the policy on every sync.

// privateRanges are the IPv4 ranges a cluster's own networks live in: RFC 1918 and CGNAT. They
// stand in for the Pod CIDRs when none are configured, and are never an egress destination.
var privateRanges = []string{"10.0.0.0/8", "100.64.0.0/10", "172.16.0.0/12", "192.168.0.0/16"}

// nonPublicRanges are never an egress destination either: every range of IANA's IPv4
// special-purpose registry that is not the public internet, multicast and the reserved class E
// (some managed clusters give Pods class-E addresses), and the cloud hosts' own endpoints.
var nonPublicRanges = []string{
	"0.0.0.0/8",        // "this network"
	"127.0.0.0/8",      // loopback
	"169.254.0.0/16",   // link-local: 169.254.169.254 serves cloud credentials on every major cloud
	"168.63.129.16/32", // Azure's WireServer and host DNS, reachable from every Azure VM
	"192.0.0.0/24",     // IETF protocol assignments
	"192.0.2.0/24",     // TEST-NET-1
	"192.88.99.0/24",   // the deprecated 6to4 relay anycast
	"198.18.0.0/15",    // benchmarking, used inside some clouds' and appliances' networks
	"198.51.100.0/24",  // TEST-NET-2
	"203.0.113.0/24",   // TEST-NET-3
	"224.0.0.0/4",      // multicast
	"240.0.0.0/4",      // reserved (class E) and the limited broadcast 255.255.255.255
}

const (
	anyIPv4 = "0.0.0.0/0"
	// namespaceNameLabel is set by the API server on every namespace to its name.
	namespaceNameLabel = "kubernetes.io/metadata.name"
	dnsPort            = 53
	// gatewayNameLabel is set by Gateway API implementations on the Pods they deploy for a Gateway.
	gatewayNameLabel = "gateway.networking.k8s.io/gateway-name"
)

// buildNetworkPolicy selects a component's Pods and admits only what the threat model allows:
//   - ingress on exposed ports only: HTTP from the ingress controller's Pods, NodePort and
//     LoadBalancer from outside the Pod networks, ClusterIP from the peers the template names,
//     TCP from the TCP gateway's Pods;
//     on internal ports from the instance's pods that the template names; never from another
//     instance's Pods;
//   - egress to the internal ports of the instance's pods that admit this one; with dns: true or
//     egress: true to the cluster DNS Pods (and a node-local DNS cache) on port 53; with
//     egress: true to the public internet: never to the cluster's, private, loopback or
//     link-local ranges.
//
// It selects the component's Pod and no other Pod of the instance (policies add up: a Pod two
// policies select gets the rules of both): while the template changes shape, the Pod of one
// shape and the Pods of the other run side by side, each under its own policy only.
func buildNetworkPolicy(in *instance, c *component) *networkingv1.NetworkPolicyApplyConfiguration {
	spec := networkingv1.NetworkPolicySpec().
		WithPodSelector(policyPodSelector(c)).
		WithPolicyTypes(networkingapiv1.PolicyTypeIngress, networkingapiv1.PolicyTypeEgress)
	spec.WithIngress(ingressRules(in, c)...)
	spec.WithEgress(egressRules(in, c)...)
	return networkingv1.NetworkPolicy(c.child, in.namespace).WithLabels(c.labels).WithSpec(spec)
}

// policyPodSelector selects a component's Pods: in a template of pods by the instance and the
// component's name; in a template of containers by the instance, except every Pod that carries a
// component label (the Pods of a template of pods, of the same instance).
func policyPodSelector(c *component) *metav1.LabelSelectorApplyConfiguration {
	selector := metav1.LabelSelector().WithMatchLabels(c.selector)
	if c.name == "" {
		selector.WithMatchExpressions(metav1.LabelSelectorRequirement().WithKey(LabelComponent).WithOperator(apimetav1.LabelSelectorOpDoesNotExist))
	}
	return selector
}

// denyAllPolicy selects the Pods of the Challenge's instance and admits nothing, in or out. It
// stands in for the instance's policy when that is missing while a Pod is observed, and is built
// from the Challenge's identity alone, so that it holds even when the template cannot be read.
func denyAllPolicy(in *instance) *networkingv1.NetworkPolicyApplyConfiguration {
	return networkingv1.NetworkPolicy(in.name, in.namespace).
		WithLabels(map[string]string{LabelManagedBy: ManagedByValue, LabelInstance: in.id}).
		WithSpec(networkingv1.NetworkPolicySpec().
			WithPodSelector(metav1.LabelSelector().WithMatchLabels(map[string]string{LabelInstance: in.id})).
			WithPolicyTypes(networkingapiv1.PolicyTypeIngress, networkingapiv1.PolicyTypeEgress))
}

func ingressRules(in *instance, c *component) []*networkingv1.NetworkPolicyIngressRuleApplyConfiguration {
	var rules []*networkingv1.NetworkPolicyIngressRuleApplyConfiguration
	var outsidePorts []*networkingv1.NetworkPolicyPortApplyConfiguration
	for _, e := range c.spec.Expose {
		port := policyPort(protocolOf(containerPort(c.spec.Containers, e.Port)), e.Port)
		kind, _ := exposureKindOf(e.Type)
		switch kind.entry {
		case entryRouted:
			entry := routedEntry(in.cfg)
			// Without a namespace the peer would mean the policy's own namespace: admit nobody.
			if entry.Namespace == "" {
				continue
			}
			rules = append(rules, networkingv1.NetworkPolicyIngressRule().
				WithFrom(instanceExcludingPeer(entry.Namespace, entry.Labels)).
				WithPorts(port))
		case entryTCPGateway:
			// Only the gateway's Pods, which splice a player in once they presented the token.
			gateway := in.cfg.TCPGateway.Pods
			if gateway.Namespace == "" {
				continue
			}
			rules = append(rules, networkingv1.NetworkPolicyIngressRule().
				WithFrom(instanceExcludingPeer(gateway.Namespace, gateway.Labels)).
				WithPorts(port))
		case entryOutside:
			outsidePorts = append(outsidePorts, port)
		case entryNamedPeers:
			rule := networkingv1.NetworkPolicyIngressRule()
			for _, peer := range e.From {
				rule.WithFrom(instanceExcludingPeer(peer.Namespace, peer.PodLabels))
			}
			if len(rule.From) > 0 {
				rules = append(rules, rule.WithPorts(port))
			}
		}
	}
	if len(outsidePorts) > 0 {
		// Players arrive from outside the cluster, or from a node that forwarded (and SNATed)
		// their connection; never from a Pod address.
		rules = append(rules, networkingv1.NetworkPolicyIngressRule().
			WithFrom(networkingv1.NetworkPolicyPeer().WithIPBlock(
				networkingv1.IPBlock().WithCIDR(anyIPv4).WithExcept(podRanges(in.cfg)...))).
			WithPorts(outsidePorts...))
	}
	for _, p := range c.spec.Internal {
		rule := networkingv1.NetworkPolicyIngressRule()
		for _, from := range p.From {
			if peer := in.sibling(from); peer != nil && peer != c {
				rule.WithFrom(networkingv1.NetworkPolicyPeer().WithPodSelector(metav1.LabelSelector().WithMatchLabels(peer.selector)))
			}
		}
		// A rule without from would admit every source: never returned (validation refuses it first).
		if len(rule.From) > 0 {
			rules = append(rules, rule.WithPorts(policyPort(protocolOf(containerPort(c.spec.Containers, p.Port)), p.Port)))
		}
	}
	return rules
}

func egressRules(in *instance, c *component) []*networkingv1.NetworkPolicyEgressRuleApplyConfiguration {
	var rules []*networkingv1.NetworkPolicyEgressRuleApplyConfiguration
	if usesDNS(c) {
		dns := networkingv1.NetworkPolicyEgressRule().
			WithTo(networkingv1.NetworkPolicyPeer().
				WithNamespaceSelector(namespaceSelector(in.cfg.DNS.Namespace)).
				WithPodSelector(metav1.LabelSelector().WithMatchLabels(in.cfg.DNS.Labels)))
		if in.cfg.NodeLocalDNS != "" {
			dns.WithTo(networkingv1.NetworkPolicyPeer().WithIPBlock(networkingv1.IPBlock().WithCIDR(in.cfg.NodeLocalDNS + "/32")))
		}
		rules = append(rules, dns.WithPorts(policyPort("UDP", dnsPort), policyPort("TCP", dnsPort)))
	}
	for _, p := range c.peers {
		rule := networkingv1.NetworkPolicyEgressRule().
			WithTo(networkingv1.NetworkPolicyPeer().WithPodSelector(metav1.LabelSelector().WithMatchLabels(p.peer.selector)))
		for _, port := range p.ports {
			rule.WithPorts(policyPort(protocolOf(port), port.ContainerPort))
		}
		rules = append(rules, rule)
	}
	if c.spec.Egress {
		rules = append(rules, networkingv1.NetworkPolicyEgressRule().
			WithTo(networkingv1.NetworkPolicyPeer().WithIPBlock(
				networkingv1.IPBlock().WithCIDR(anyIPv4).WithExcept(blockedEgressRanges(in.cfg)...))))
	}
	return rules
}

// usesDNS says whether a component's Pod may query the cluster DNS: when its template asks
// (dns: true) or reaches the internet anyway (egress: true). Without either it has no use for it
// (its peers are in its /etc/hosts), and the cluster resolver, which forwards to the internet,
// would be its way out (DNS tunnelling) and a resolver every instance could flood.
func usesDNS(c *component) bool {
	return c.spec.DNS || c.spec.Egress
}

// routedEntry is where players of an HTTP or TLS exposure come from: with a Gateway every such
// exposure is a route of it, so its data-plane Pods; without one (TLS is refused then) the
// ingress controller's Pods.
func routedEntry(cfg Config) PodPeer {
	if cfg.Gateway == nil {
		return cfg.IngressController
	}
	return gatewayDataPlane(cfg)
}

// gatewayDataPlane selects the Gateway's Pods: as configured, else those that implementations
// following the Gateway API's convention deploy in the Gateway's namespace, labelled with its name.
func gatewayDataPlane(cfg Config) PodPeer {
	peer := cfg.GatewayDataPlane
	if peer.Namespace == "" {
		peer.Namespace = cfg.Gateway.Namespace
	}
	if len(peer.Labels) == 0 {
		peer.Labels = map[string]string{gatewayNameLabel: cfg.Gateway.Name}
	}
	return peer
}

// instanceExcludingPeer selects the Pods of a namespace (empty: the instance's own) by labels,
// except the Pods of any instance: whatever a template or flag names, one instance never admits
// another.
func instanceExcludingPeer[V ~string](namespace string, labels map[string]V) *networkingv1.NetworkPolicyPeerApplyConfiguration {
	matchLabels := make(map[string]string, len(labels))
	for key, value := range labels {
		matchLabels[key] = string(value)
	}
	peer := networkingv1.NetworkPolicyPeer().WithPodSelector(metav1.LabelSelector().
		WithMatchLabels(matchLabels).
		WithMatchExpressions(metav1.LabelSelectorRequirement().WithKey(LabelInstance).WithOperator(apimetav1.LabelSelectorOpDoesNotExist)))
	if namespace != "" {
		peer.WithNamespaceSelector(namespaceSelector(namespace))
	}
	return peer
}

func namespaceSelector(namespace string) *metav1.LabelSelectorApplyConfiguration {
	return metav1.LabelSelector().WithMatchLabels(map[string]string{namespaceNameLabel: namespace})
}

func policyPort(protocol string, port int32) *networkingv1.NetworkPolicyPortApplyConfiguration {
	return networkingv1.NetworkPolicyPort().WithProtocol(corev1.Protocol(protocol)).WithPort(intstr.FromInt32(port))
}

// podRanges are the sources a NodePort or LoadBalancer exposure refuses: the Pod networks, or
// when none are configured every private and CGNAT range, so that no Pod is admitted by default.
func podRanges(cfg Config) []string {
	if len(cfg.PodCIDRs) == 0 {
		return privateRanges
	}
	return minimalCover(cfg.PodCIDRs)
}

// blockedEgressRanges stay unreachable even with egress: true.
func blockedEgressRanges(cfg Config) []string {
	ranges := slices.Concat(privateRanges, nonPublicRanges, cfg.PodCIDRs, cfg.ServiceCIDRs, cfg.NodeCIDRs, cfg.APIServerCIDRs)
	return minimalCover(ranges)
}

// minimalCover drops the prefixes that another one contains and sorts the rest by address, so
// that the except list is short and its order does not depend on the configuration's.
// Unparsable prefixes are kept as they are (the flags refuse them first).
func minimalCover(cidrs []string) []string {
	var prefixes []netip.Prefix
	var unparsed []string
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			unparsed = append(unparsed, c)
			continue
		}
		prefixes = append(prefixes, p.Masked())
	}
	slices.SortFunc(prefixes, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []string
	var last netip.Prefix
	for _, p := range prefixes {
		// Sorted by address then length: a prefix is contained in an earlier one or in none.
		if last.IsValid() && last.Bits() <= p.Bits() && last.Contains(p.Addr()) {
			continue
		}
		out = append(out, p.String())
		last = p
	}
	return append(out, unparsed...)
}
