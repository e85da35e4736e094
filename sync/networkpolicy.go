package sync

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
)

// blockedEgressRanges stay unreachable even with egress: true: the cluster's own networks, other
// private ranges, loopback, and link-local (169.254.169.254 serves cloud credentials).
var blockedEgressRanges = []string{
	"10.0.0.0/8",
	"100.64.0.0/10",
	"127.0.0.0/8",
	"169.254.0.0/16",
	"172.16.0.0/12",
	"192.168.0.0/16",
}

// buildNetworkPolicy admits players only on exposed ports and lets the instance out only for DNS,
// and to the public internet when the template asks for egress. Every rule list is replaced whole
// by Metacontroller's merge, so each port carries its protocol explicitly, as the API server would
// default it; without it the policy would be rewritten on every sync.
func buildNetworkPolicy(in instance) *networkingv1ac.NetworkPolicyApplyConfiguration {
	spec := networkingv1ac.NetworkPolicySpec().
		WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(in.selector)).
		WithPolicyTypes(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress)
	if len(in.template.Expose) > 0 {
		rule := networkingv1ac.NetworkPolicyIngressRule()
		for _, e := range in.template.Expose {
			rule.WithPorts(networkPolicyPort(protocolOf(exposedPort(in.template, e.Port)), e.Port))
		}
		spec.WithIngress(rule)
	}
	spec.WithEgress(networkingv1ac.NetworkPolicyEgressRule().WithPorts(networkPolicyPort("UDP", 53), networkPolicyPort("TCP", 53)))
	if in.template.Egress {
		spec.WithEgress(networkingv1ac.NetworkPolicyEgressRule().WithTo(networkingv1ac.NetworkPolicyPeer().
			WithIPBlock(networkingv1ac.IPBlock().WithCIDR("0.0.0.0/0").WithExcept(blockedEgressRanges...))))
	}
	return networkingv1ac.NetworkPolicy(in.name, in.namespace).WithLabels(in.labels).WithSpec(spec)
}

func networkPolicyPort(protocol string, port int32) *networkingv1ac.NetworkPolicyPortApplyConfiguration {
	return networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.Protocol(protocol)).WithPort(intstr.FromInt32(port))
}
