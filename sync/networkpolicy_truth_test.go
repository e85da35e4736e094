package sync

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mattfenwick/cyclonus/pkg/matcher"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingapiv1 "k8s.io/api/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The truth table: a model cluster whose instances' NetworkPolicies are the hook's own answers,
// judged by an independent NetworkPolicy engine (cyclonus's matcher), for every path a player or
// the platform could take to or from an instance. Each row's verdict is the engine's; the test
// also checks it against the threat model (expectedVerdict), row by row, and that the table holds
// every denial and every legitimate path the threat model names.

const truthTablePath = "../testdata/networkpolicy-truth-table.txt"

// peer is one endpoint of the model cluster: a Pod (namespace and labels) or an address outside
// every Pod.
type peer struct {
	name      string
	ip        string
	namespace string // empty: not a Pod
	labels    map[string]string
	role      role
	exposure  *truthExposure    // the instance's exposure, for instance Pods (nil: none)
	egress    bool              // the instance's template asks for internet egress
	dns       bool              // the instance's template asks for DNS (dns: true)
	ports     []port            // the ports a platform peer is tried on as a destination
	instance  string            // the Challenge an instance Pod belongs to
	component string            // the pod's name, in an instance of several pods
	internal  map[port][]string // the pod's internal ports and the pods of its instance they admit
}

type role int

const (
	roleInstance role = iota
	roleIngressController
	roleTCPGateway
	roleChecker
	roleOtherPod
	roleClusterDNS
	roleNodeLocalDNS
	rolePlayer      // a player's machine on the internet
	roleNode        // a node: kubelet, NodePorts, and the source of forwarded (SNAT) traffic
	roleAPIServer   // the API server's endpoint, private or public
	roleServiceIP   // a Service ClusterIP (the kubernetes Service)
	roleMetadata    // 169.254.169.254
	rolePrivateHost // another host on a private or CGNAT network
	roleNonPublic   // an address IANA reserves, multicast or class E: never the public internet
	rolePublicHost  // any host on the internet
)

type truthExposure struct {
	typ      string
	port     int32
	protocol string
}

// port is a destination port and protocol.
type port struct {
	number   int32
	protocol string
}

func (p port) String() string { return fmt.Sprintf("%d/%s", p.number, p.protocol) }

// target is a destination of the table: a peer and one of its ports.
type target struct {
	peer peer
	port port
}

// modelInstances are two teams' instances of each exposure type: team-a without egress, team-b
// with it. Each is built by Sync from a Challenge, as Metacontroller would send it.
var modelExposures = []truthExposure{
	{v1alpha1.ExposeHTTP, 8080, "TCP"},
	{v1alpha1.ExposeNodePort, 1337, "TCP"},
	{v1alpha1.ExposeLoadBalancer, 4000, "UDP"},
	{v1alpha1.ExposeClusterIP, 80, "TCP"},
	{v1alpha1.ExposeTCP, 2222, "TCP"},
}

const (
	checkerNamespace = "ctf-bots"
	checkerApp       = "checker"
)

// modelPolicies syncs each model instance and returns its Pod (as a peer) and its NetworkPolicy,
// both read from the encoded answer, as the API server would receive them.
func modelPolicies(t *testing.T, cfg Config) ([]peer, []*networkingapiv1.NetworkPolicy) {
	var instances []peer
	var policies []*networkingapiv1.NetworkPolicy
	for teamIndex, team := range []string{"team-a", "team-b"} {
		for i, e := range modelExposures {
			name := strings.ToLower(e.typ) + "-" + team
			expose := v1alpha1.Expose{Port: e.port, Type: e.typ}
			if e.typ == v1alpha1.ExposeClusterIP {
				expose.From = []v1alpha1.ExposePeer{{Namespace: checkerNamespace, PodLabels: map[string]v1alpha1.LabelValue{"app": checkerApp}}}
			}
			parent := Challenge{
				Metadata: ChallengeMeta{Name: name, Namespace: "ctf", UID: fmt.Sprintf("00000000-0000-0000-0000-%012d", teamIndex*10+i), Generation: 1},
				Spec: v1alpha1.ChallengeSpec{Owner: team, Template: &v1alpha1.DefinitionSpec{
					Containers: []v1alpha1.Container{{Name: "app", Image: "registry.ctf.example/" + name + ":1",
						Ports: []v1alpha1.ContainerPort{{ContainerPort: e.port, Protocol: e.protocol}}}},
					Expose: []v1alpha1.Expose{expose},
					Egress: team == "team-b",
				}},
			}
			resp := secondAnswer(t, Request{Parent: parent}, goldenNow, cfg)
			require.NotEqual(t, v1alpha1.PhaseError, resp.Status.Phase, resp.Status.Message)
			body, err := EncodeResponse(resp)
			require.NoError(t, err)
			podLabels, policy := podAndPolicy(t, body)
			policies = append(policies, policy)
			exposure := e
			instances = append(instances, peer{
				name: fmt.Sprintf("%s/%s (egress: %t)", team, strings.ToLower(e.typ), team == "team-b"),
				ip:   fmt.Sprintf("10.244.%d.%d", 3+teamIndex, 11+i), namespace: "ctf", labels: podLabels,
				role: roleInstance, exposure: &exposure, egress: team == "team-b", instance: name,
			})
		}
		components, componentPolicies := modelComponents(t, cfg, team, teamIndex)
		instances, policies = append(instances, components...), append(policies, componentPolicies...)
	}
	return instances, policies
}

// modelComponents syncs a team's instance of three pods, as the golden cases components-* have it:
// web (HTTP on 8080, which bot reaches too), db (5432, which web reaches), bot (no port, dns: true:
// a browser that resolves names), and returns its Pods (as peers) and their NetworkPolicies.
func modelComponents(t *testing.T, cfg Config, team string, teamIndex int) ([]peer, []*networkingapiv1.NetworkPolicy) {
	name := "xss-" + team
	container := func(name string, ports ...int32) []v1alpha1.Container {
		c := v1alpha1.Container{Name: name, Image: "registry.ctf.example/xss-" + name + ":1"}
		for _, p := range ports {
			c.Ports = append(c.Ports, v1alpha1.ContainerPort{ContainerPort: p, Protocol: "TCP"})
		}
		return []v1alpha1.Container{c}
	}
	parent := Challenge{
		Metadata: ChallengeMeta{Name: name, Namespace: "ctf", UID: fmt.Sprintf("00000000-0000-0000-0001-%012d", teamIndex), Generation: 1},
		Spec: v1alpha1.ChallengeSpec{Owner: team, Template: &v1alpha1.DefinitionSpec{Pods: []v1alpha1.PodTemplate{
			{Name: "web", Containers: container("app", 8080), Expose: []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}},
				Internal: []v1alpha1.InternalPort{{Port: 8080, From: []string{"bot"}}}},
			{Name: "db", Containers: container("postgres", 5432), Internal: []v1alpha1.InternalPort{{Port: 5432, From: []string{"web"}}}},
			{Name: "bot", Containers: container("chrome"), DNS: true},
		}}},
	}
	resp := answerWithEveryPod(t, Request{Parent: parent}, goldenNow, cfg)
	require.NotEqual(t, v1alpha1.PhaseError, resp.Status.Phase, resp.Status.Message)
	body, err := EncodeResponse(resp)
	require.NoError(t, err)
	var answer struct {
		Children []json.RawMessage `json:"children"`
	}
	require.NoError(t, json.Unmarshal(body, &answer))
	var peers []peer
	var policies []*networkingapiv1.NetworkPolicy
	for _, p := range parent.Spec.Template.Pods {
		podLabels, policy := childrenNamed(t, answer.Children, componentChildName(name, p.Name))
		policies = append(policies, policy)
		pr := peer{
			name: fmt.Sprintf("%s/xss %s", team, p.Name), ip: fmt.Sprintf("10.244.%d.%d", 5+teamIndex, 11+len(peers)),
			namespace: "ctf", labels: podLabels, role: roleInstance, instance: name, component: p.Name,
			internal: map[port][]string{}, egress: p.Egress, dns: p.DNS,
		}
		if p.DNS {
			pr.name += " (dns: true)"
		}
		for _, e := range p.Expose {
			pr.exposure = &truthExposure{e.Type, e.Port, "TCP"}
		}
		for _, i := range p.Internal {
			pr.internal[port{i.Port, "TCP"}] = i.From
		}
		peers = append(peers, pr)
	}
	return peers, policies
}

// childrenNamed finds, among encoded children, the labels of the Pod and the NetworkPolicy named name.
func childrenNamed(t *testing.T, children []json.RawMessage, name string) (map[string]string, *networkingapiv1.NetworkPolicy) {
	var labels map[string]string
	var policy *networkingapiv1.NetworkPolicy
	for _, raw := range children {
		var child struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(raw, &child))
		switch {
		case child.Metadata.Name != name:
		case child.Kind == "Pod":
			labels = child.Metadata.Labels
		case child.Kind == "NetworkPolicy":
			policy = &networkingapiv1.NetworkPolicy{}
			require.NoError(t, json.Unmarshal(raw, policy))
		}
	}
	require.NotEmpty(t, labels, "no Pod %s", name)
	require.NotNil(t, policy, "no NetworkPolicy %s", name)
	return labels, policy
}

// podAndPolicy finds, in an encoded sync answer, the labels of the instance's Pod (on a Pod
// child, or the Pod template of a Deployment) and its NetworkPolicy.
func podAndPolicy(t *testing.T, body []byte) (map[string]string, *networkingapiv1.NetworkPolicy) {
	var resp struct {
		Children []json.RawMessage `json:"children"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	var labels map[string]string
	var policy *networkingapiv1.NetworkPolicy
	for _, raw := range resp.Children {
		var child struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec struct {
				Template struct {
					Metadata struct {
						Labels map[string]string `json:"labels"`
					} `json:"metadata"`
				} `json:"template"`
			} `json:"spec"`
		}
		require.NoError(t, json.Unmarshal(raw, &child))
		switch child.Kind {
		case "Pod":
			labels = child.Metadata.Labels
		case "Deployment":
			labels = child.Spec.Template.Metadata.Labels
		case "NetworkPolicy":
			policy = &networkingapiv1.NetworkPolicy{}
			require.NoError(t, json.Unmarshal(raw, policy))
		}
	}
	require.NotEmpty(t, labels, "no Pod or Deployment child")
	require.NotNil(t, policy, "no NetworkPolicy child")
	return labels, policy
}

func namespaceLabels(namespace string) map[string]string {
	return map[string]string{namespaceNameLabel: namespace}
}

// platformPeers are everything else in and around the model cluster (Pod CIDR 10.244.0.0/16,
// Service CIDR 10.96.0.0/12, nodes on 172.18.0.0/16).
var platformPeers = []peer{
	{name: "ingress-controller", ip: "10.244.1.10", namespace: "ingress-nginx", labels: map[string]string{"app.kubernetes.io/name": "ingress-nginx"}, role: roleIngressController, ports: []port{{443, "TCP"}}},
	{name: "tcp-gateway", ip: "10.244.1.20", namespace: "challenge-hook", labels: map[string]string{"app.kubernetes.io/name": "challenge-hook-tcp-gateway"}, role: roleTCPGateway, ports: []port{{1337, "TCP"}}},
	{name: "other pod (challenge-hook)", ip: "10.244.1.21", namespace: "challenge-hook", labels: map[string]string{"app.kubernetes.io/name": "challenge-hook"}, role: roleOtherPod, ports: []port{{8080, "TCP"}}},
	{name: "checker (admin bot)", ip: "10.244.2.20", namespace: checkerNamespace, labels: map[string]string{"app": checkerApp}, role: roleChecker, ports: []port{{8080, "TCP"}}},
	{name: "other pod (ctf-bots)", ip: "10.244.2.21", namespace: checkerNamespace, labels: map[string]string{"app": "scoreboard"}, role: roleOtherPod, ports: []port{{8080, "TCP"}}},
	{name: "other pod (default)", ip: "10.244.2.30", namespace: "default", labels: map[string]string{"app": "grafana"}, role: roleOtherPod, ports: []port{{8080, "TCP"}}},
	{name: "kube-dns", ip: "10.244.0.10", namespace: "kube-system", labels: map[string]string{"k8s-app": "kube-dns"}, role: roleClusterDNS, ports: []port{{53, "UDP"}, {53, "TCP"}, {9153, "TCP"}}},
	{name: "node-local-dns 169.254.20.10", ip: "169.254.20.10", role: roleNodeLocalDNS, ports: []port{{53, "UDP"}, {53, "TCP"}}},
	{name: "player 198.51.100.7", ip: "198.51.100.7", role: rolePlayer},
	{name: "node 172.18.0.3", ip: "172.18.0.3", role: roleNode, ports: []port{{10250, "TCP"}, {31337, "TCP"}}},
	{name: "api-server 172.18.0.2", ip: "172.18.0.2", role: roleAPIServer, ports: []port{{6443, "TCP"}}},
	{name: "api-server 203.0.113.10 (public)", ip: "203.0.113.10", role: roleAPIServer, ports: []port{{443, "TCP"}}},
	{name: "kubernetes service 10.96.0.1", ip: "10.96.0.1", role: roleServiceIP, ports: []port{{443, "TCP"}}},
	{name: "metadata 169.254.169.254", ip: "169.254.169.254", role: roleMetadata, ports: []port{{80, "TCP"}}},
	{name: "private host 192.168.1.10", ip: "192.168.1.10", role: rolePrivateHost, ports: []port{{22, "TCP"}}},
	{name: "cgnat host 100.64.0.1", ip: "100.64.0.1", role: rolePrivateHost, ports: []port{{22, "TCP"}}},
	{name: "azure wireserver 168.63.129.16", ip: "168.63.129.16", role: roleMetadata, ports: []port{{80, "TCP"}, {32526, "TCP"}}},
	{name: "class-e pod 240.0.0.5", ip: "240.0.0.5", role: roleNonPublic, ports: []port{{8080, "TCP"}}},
	{name: "benchmarking host 198.18.0.1", ip: "198.18.0.1", role: roleNonPublic, ports: []port{{22, "TCP"}}},
	{name: "multicast 224.0.0.251", ip: "224.0.0.251", role: roleNonPublic, ports: []port{{5353, "UDP"}}},
	{name: "this network 0.1.2.3", ip: "0.1.2.3", role: roleNonPublic, ports: []port{{80, "TCP"}}},
	{name: "public host 93.184.216.34", ip: "93.184.216.34", role: rolePublicHost, ports: []port{{443, "TCP"}}},
	{name: "public dns 8.8.8.8", ip: "8.8.8.8", role: rolePublicHost, ports: []port{{53, "UDP"}, {53, "TCP"}}},
}

// instancePorts are the ports each instance Pod is tried on: its exposed port, its internal ports,
// an unexposed one and, for a UDP exposure, the same number on TCP (a port admits only its own
// protocol).
func instancePorts(p peer) []port {
	var ports []port
	if e := p.exposure; e != nil {
		ports = append(ports, port{e.port, e.protocol})
	}
	for _, pt := range slices.SortedFunc(maps.Keys(p.internal), func(a, b port) int { return int(a.number - b.number) }) {
		if !slices.Contains(ports, pt) {
			ports = append(ports, pt)
		}
	}
	ports = append(ports, port{22, "TCP"})
	if e := p.exposure; e != nil && e.protocol == "UDP" {
		ports = append(ports, port{e.port, "TCP"})
	}
	return ports
}

// isSource says whether a platform peer is tried as the source of connections to instances: the
// Pods, the player, a node (forwarding NodePort traffic) and a host on a private network.
func isSource(p peer) bool {
	switch p.role {
	case roleIngressController, roleTCPGateway, roleChecker, roleOtherPod, rolePlayer, roleNode, rolePrivateHost:
		return true
	}
	return false
}

// expectedVerdict is the threat model, written independently of the policy builder: whether a
// connection must be allowed, and why.
func expectedVerdict(src peer, dst target) (bool, string) {
	if dst.peer.role == roleInstance {
		e := dst.peer.exposure
		switch {
		case src.role == roleInstance && src.instance != dst.peer.instance:
			return false, "another instance"
		case src.role == roleInstance && slices.Contains(dst.peer.internal[dst.port], src.component):
			return true, "pod of the same instance on an internal port that admits it"
		case src.role == roleInstance:
			return false, "pod of the same instance on a port, or from a pod, the definition does not name"
		case e == nil || dst.port != port{e.port, e.protocol}:
			return false, "not the exposed port"
		case e.typ == v1alpha1.ExposeHTTP && src.role == roleIngressController:
			return true, "HTTP through the ingress controller"
		case e.typ == v1alpha1.ExposeHTTP:
			return false, "HTTP only through the ingress controller"
		case (e.typ == v1alpha1.ExposeNodePort || e.typ == v1alpha1.ExposeLoadBalancer) && src.namespace == "":
			return true, "player from outside the Pod networks"
		case e.typ == v1alpha1.ExposeNodePort || e.typ == v1alpha1.ExposeLoadBalancer:
			return false, "in-cluster Pod on a NodePort/LoadBalancer exposure"
		case e.typ == v1alpha1.ExposeTCP && src.role == roleTCPGateway:
			return true, "TCP through the TCP gateway"
		case e.typ == v1alpha1.ExposeTCP:
			return false, "TCP only through the TCP gateway"
		case e.typ == v1alpha1.ExposeClusterIP && src.role == roleChecker:
			return true, "ClusterIP peer the definition names"
		default:
			return false, "ClusterIP from anything the definition does not name"
		}
	}
	// Egress from an instance.
	switch dst.peer.role {
	case roleClusterDNS, roleNodeLocalDNS:
		switch {
		case dst.port.number != dnsPort:
			return false, "cluster DNS Pod off port 53"
		case src.egress:
			return true, "DNS to the cluster resolver with egress: true"
		case src.dns:
			return true, "DNS to the cluster resolver with dns: true"
		}
		return false, "DNS without dns: true or egress: true"
	case roleAPIServer, roleServiceIP:
		return false, "API server"
	case roleNode:
		return false, "node (kubelet, NodePorts)"
	case roleMetadata:
		return false, "cloud metadata service"
	case rolePrivateHost:
		return false, "private or CGNAT network"
	case roleNonPublic:
		return false, "special-purpose, multicast or class E address"
	case rolePublicHost:
		if src.egress {
			return true, "public internet with egress: true"
		}
		return false, "public internet without egress: true"
	default:
		return false, "in-cluster Pod"
	}
}

// requiredReasons are the rows the threat model needs in the table: every denial and every
// legitimate path, each at least once.
var requiredReasons = []string{
	"another instance",
	"pod of the same instance on an internal port that admits it",
	"pod of the same instance on a port, or from a pod, the definition does not name",
	"not the exposed port",
	"HTTP through the ingress controller",
	"HTTP only through the ingress controller",
	"TCP through the TCP gateway",
	"TCP only through the TCP gateway",
	"player from outside the Pod networks",
	"in-cluster Pod on a NodePort/LoadBalancer exposure",
	"ClusterIP peer the definition names",
	"ClusterIP from anything the definition does not name",
	"DNS to the cluster resolver with egress: true",
	"DNS to the cluster resolver with dns: true",
	"DNS without dns: true or egress: true",
	"cluster DNS Pod off port 53",
	"API server",
	"node (kubelet, NodePorts)",
	"cloud metadata service",
	"private or CGNAT network",
	"special-purpose, multicast or class E address",
	"public internet with egress: true",
	"public internet without egress: true",
	"in-cluster Pod",
}

func trafficPeer(p peer) *matcher.TrafficPeer {
	tp := &matcher.TrafficPeer{IP: p.ip}
	if p.namespace != "" {
		tp.Internal = &matcher.InternalPeer{Namespace: p.namespace, NamespaceLabels: namespaceLabels(p.namespace), PodLabels: p.labels}
	}
	return tp
}

type truthRow struct {
	src     peer
	dst     target
	allowed bool
	reason  string
}

// truthTable judges every connection from an instance to anything, and from anything to an
// instance, with the engine.
func truthTable(t *testing.T) []truthRow {
	instances, policies := modelPolicies(t, truthConfig(t))
	engine := matcher.BuildNetworkPolicies(true, policies)
	var targets []target
	for _, p := range instances {
		for _, pt := range instancePorts(p) {
			targets = append(targets, target{p, pt})
		}
	}
	for _, p := range platformPeers {
		for _, pt := range p.ports {
			targets = append(targets, target{p, pt})
		}
	}
	var rows []truthRow
	for _, src := range append(append([]peer(nil), instances...), platformPeers...) {
		for _, dst := range targets {
			if src.name == dst.peer.name || (src.role != roleInstance && (dst.peer.role != roleInstance || !isSource(src))) {
				continue // a Pod to itself, or no instance involved: no policy of ours applies
			}
			result := engine.IsTrafficAllowed(&matcher.Traffic{
				Source: trafficPeer(src), Destination: trafficPeer(dst.peer),
				ResolvedPort: int(dst.port.number), Protocol: corev1.Protocol(dst.port.protocol),
			})
			_, reason := expectedVerdict(src, dst)
			rows = append(rows, truthRow{src: src, dst: dst, allowed: result.IsAllowed(), reason: reason})
		}
	}
	return rows
}

func formatTruthTable(rows []truthRow) string {
	var b strings.Builder
	b.WriteString("# NetworkPolicy truth table: the hook's policies for two teams' instances of each exposure, and\n")
	b.WriteString("# of three pods (web: HTTP 8080, reached by bot; db: 5432, reached by web; bot, dns: true),\n")
	b.WriteString("# judged by cyclonus's matcher. Regenerate with go test ./sync -run TestNetworkPolicyTruthTable -update.\n")
	b.WriteString("# Pod CIDR 10.244.0.0/16, Service CIDR 10.96.0.0/12, nodes 172.18.0.0/16, --api-server-cidrs=203.0.113.10/32,\n")
	b.WriteString("# --node-local-dns=169.254.20.10; instances in namespace ctf, team-a without egress, team-b with it; the TCP\n")
	b.WriteString("# gateway's Pods in namespace challenge-hook, app.kubernetes.io/name=challenge-hook-tcp-gateway (the defaults).\n")
	b.WriteString("# source | destination | port | verdict | threat model\n")
	srcWidth, dstWidth := 0, 0
	for _, r := range rows {
		srcWidth = max(srcWidth, len(r.src.name))
		dstWidth = max(dstWidth, len(r.dst.peer.name))
	}
	for _, r := range rows {
		verdict := "deny"
		if r.allowed {
			verdict = "allow"
		}
		fmt.Fprintf(&b, "%-*s -> %-*s %-9s %-5s  %s\n", srcWidth, r.src.name, dstWidth, r.dst.peer.name, r.dst.port, verdict, r.reason)
	}
	return b.String()
}

func TestNetworkPolicyTruthTable(t *testing.T) {
	rows := truthTable(t)
	seen := map[string]bool{}
	for _, r := range rows {
		want, reason := expectedVerdict(r.src, r.dst)
		seen[reason] = true
		if r.allowed != want {
			t.Errorf("%s -> %s %s: allowed=%t, the threat model says %t (%s)", r.src.name, r.dst.peer.name, r.dst.port, r.allowed, want, reason)
		}
	}
	for _, reason := range requiredReasons {
		require.True(t, seen[reason], "the table has no row for %q", reason)
	}

	got := formatTruthTable(rows)
	if *update {
		require.NoError(t, os.WriteFile(truthTablePath, []byte(got), 0o644))
	}
	want, err := os.ReadFile(truthTablePath)
	require.NoError(t, err, "run go test ./sync -run TestNetworkPolicyTruthTable -update, then read it line by line")
	require.Equal(t, string(want), got)
}

// TestTruthTableEngineSeesAnOpenPolicy proves the engine can say allow where the hook's policy
// says deny: with the instances' ingress rules stripped of their peers (the policy before this
// hook named them), a Pod that is no platform component reaches a NodePort instance directly.
// Without it, a table of denials could come from an engine that denies everything.
func TestTruthTableEngineSeesAnOpenPolicy(t *testing.T) {
	instances, policies := modelPolicies(t, truthConfig(t))
	src := platformPeers[slices.IndexFunc(platformPeers, func(p peer) bool { return p.name == "other pod (default)" })]
	dst := instances[1]
	require.Equal(t, v1alpha1.ExposeNodePort, dst.exposure.typ)
	traffic := &matcher.Traffic{
		Source: trafficPeer(src), Destination: trafficPeer(dst),
		ResolvedPort: int(dst.exposure.port), Protocol: corev1.Protocol(dst.exposure.protocol),
	}
	require.False(t, matcher.BuildNetworkPolicies(true, policies).IsTrafficAllowed(traffic).IsAllowed())
	for _, p := range policies {
		for i := range p.Spec.Ingress {
			p.Spec.Ingress[i].From = nil
		}
	}
	require.True(t, matcher.BuildNetworkPolicies(true, policies).IsTrafficAllowed(traffic).IsAllowed(),
		"%s -> %s through an ingress rule without peers", src.name, dst.name)
}
