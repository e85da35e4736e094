package sync

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
func buildNetworkPolicy(in instance) networkPolicy {
	np := networkPolicy{
		APIVersion: "networking.k8s.io/v1",
		Kind:       "NetworkPolicy",
		Metadata:   in.meta(in.name),
		Spec: networkPolicySpec{
			PodSelector: labelSelector{MatchLabels: in.selector},
			PolicyTypes: []string{"Ingress", "Egress"},
		},
	}
	if len(in.template.Expose) > 0 {
		var ports []networkPolicyPort
		for _, e := range in.template.Expose {
			ports = append(ports, networkPolicyPort{Protocol: protocolOf(exposedPort(in.template, e.Port)), Port: e.Port})
		}
		np.Spec.Ingress = []networkPolicyRule{{Ports: ports}}
	}
	np.Spec.Egress = []networkPolicyRule{{Ports: []networkPolicyPort{{Protocol: "UDP", Port: 53}, {Protocol: "TCP", Port: 53}}}}
	if in.template.Egress {
		except := append([]string(nil), blockedEgressRanges...)
		np.Spec.Egress = append(np.Spec.Egress, networkPolicyRule{To: []networkPolicyPeer{{IPBlock: &ipBlock{CIDR: "0.0.0.0/0", Except: except}}}})
	}
	return np
}
