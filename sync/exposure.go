package sync

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// playerEntry is where players' traffic to an exposure enters the instance: what its NetworkPolicy
// admits on the exposed port.
type playerEntry int

const (
	// entryRouted: the ingress controller's or the Gateway's Pods, which route by host.
	entryRouted playerEntry = iota
	// entryOutside: addresses outside the Pod networks (players, and nodes forwarding for them).
	entryOutside
	// entryNamedPeers: the Pods the exposure's from names (an admin bot, a checker).
	entryNamedPeers
	// entryTCPGateway: the TCP gateway's Pods, which splice a player's connection to the
	// instance once it presented the instance's token.
	entryTCPGateway
)

// exposureKind is what one exposure type means for the children and the status. exposureKinds is
// the one table of them: validation, the Service, the NetworkPolicy and the endpoints read it.
type exposureKind struct {
	name string
	// routed: players reach it by the instance's host through an Ingress or a Gateway route: one
	// per instance, TCP only, and it needs no Service type of its own.
	routed bool
	// serviceType is the type of the Service of its pod, for the types that are not routed.
	serviceType corev1.ServiceType
	entry       playerEntry
	// source says where its players come from, for a message.
	source string
	// endpoint is what players connect to, from the observed children, or what is not known yet.
	endpoint func(o observedExposure) where
}

// exposureKinds in the order messages list them.
var exposureKinds = []exposureKind{
	{name: v1alpha1.ExposeNodePort, serviceType: corev1.ServiceTypeNodePort, entry: entryOutside, source: "outside the cluster", endpoint: nodePortEndpoint},
	{name: v1alpha1.ExposeLoadBalancer, serviceType: corev1.ServiceTypeLoadBalancer, entry: entryOutside, source: "outside the cluster", endpoint: loadBalancerEndpoint},
	{name: v1alpha1.ExposeHTTP, routed: true, entry: entryRouted, source: "the ingress controller", endpoint: httpEndpoint},
	{name: v1alpha1.ExposeTLS, routed: true, entry: entryRouted, source: "the Gateway", endpoint: tlsEndpoint},
	{name: v1alpha1.ExposeClusterIP, serviceType: corev1.ServiceTypeClusterIP, entry: entryNamedPeers, source: "the Pods it names", endpoint: clusterIPEndpoint},
	{name: v1alpha1.ExposeTCP, serviceType: corev1.ServiceTypeClusterIP, entry: entryTCPGateway, source: "the TCP gateway", endpoint: tcpEndpoint},
}

func exposureKindOf(exposeType string) (exposureKind, bool) {
	for _, k := range exposureKinds {
		if k.name == exposeType {
			return k, true
		}
	}
	return exposureKind{}, false
}

// exposureTypes lists the types, for a message.
func exposureTypes() []string {
	names := make([]string, len(exposureKinds))
	for i, k := range exposureKinds {
		names[i] = k.name
	}
	return names
}

// observedExposure is one exposure and what the hook observed that tells where players reach it.
type observedExposure struct {
	in         *instance
	expose     exposed
	svc        ObservedService
	hasService bool
}

// where players connect: a host and port, a URL when it is not <protocol>://<host>:<port>, the
// command when it is not nc's, and the TCP gateway's token and WebSocket URL; or missing, what is not known yet, and
// refused, why the Gateway refused the route.
type where struct {
	host             string
	port             int32
	url              string
	command          string
	token            string
	webSocketURL     string
	missing, refused string
}

// httpHost is the instance's host for HTTP and TLS exposures: <instance id>.<IngressDomain>.
func httpHost(in *instance) string { return in.id + "." + in.cfg.IngressDomain }

func httpEndpoint(o observedExposure) where {
	if o.in.cfg.Gateway != nil {
		route, found := findByName(o.in.observed.HTTPRoutes, o.in.name)
		if pending := backendPending(o, kindHTTPRoute, route, found); pending != "" {
			return where{missing: pending}
		}
		if a := acceptance(route, kindHTTPRoute, o.in); !a.accepted {
			return where{missing: a.pending, refused: a.refused}
		}
	} else {
		ingress, found := findByName(o.in.observed.Ingresses, o.in.name)
		if pending := backendPending(o, "Ingress", ingress, found); pending != "" {
			return where{missing: pending}
		}
	}
	w := where{host: httpHost(o.in), port: 80}
	if o.in.cfg.IngressScheme == "https" {
		w.port = 443
	}
	w.url = o.in.cfg.IngressScheme + "://" + w.host + "/"
	w.command = w.url // what a player pastes: into a browser
	return w
}

func tlsEndpoint(o observedExposure) where {
	route, found := findByName(o.in.observed.TLSRoutes, o.in.name)
	if pending := backendPending(o, kindTLSRoute, route, found); pending != "" {
		return where{missing: pending}
	}
	if a := acceptance(route, kindTLSRoute, o.in); !a.accepted {
		return where{missing: a.pending, refused: a.refused}
	}
	w := where{host: httpHost(o.in), port: o.in.cfg.GatewayTLSPort}
	w.url = "tls://" + w.host + ":" + itoa(w.port)
	// TLS by SNI: plain nc cannot speak it.
	w.command = "ncat --ssl " + w.host + " " + itoa(w.port)
	return w
}

func nodePortEndpoint(o observedExposure) where {
	nodePort := observedNodePort(o.svc, o.expose.Port)
	if !o.hasService || nodePort == 0 {
		return where{missing: "a node port"}
	}
	return where{host: o.in.cfg.PublicHost, port: nodePort}
}

func loadBalancerEndpoint(o observedExposure) where {
	host := loadBalancerHost(o.svc.Status.LoadBalancer.Ingress)
	if !o.hasService || host == "" {
		return where{missing: "a load balancer address"}
	}
	return where{host: host, port: o.expose.Port}
}

func clusterIPEndpoint(o observedExposure) where {
	if !o.hasService {
		return where{missing: "the Service"}
	}
	return where{host: o.expose.c.child + "." + o.in.namespace + ".svc." + o.in.cfg.ClusterDomain, port: o.expose.Port}
}

// tcpEndpoint is the TCP gateway's address and the token that leads to the exposure's port of the
// instance's own Service, once that Service is observed among the instance's children with its
// ClusterIP and the exposure's port: a token minted earlier would name an address that is not
// (yet) the instance's.
func tcpEndpoint(o observedExposure) where {
	service := o.expose.c.child
	if !o.hasService || !hasClusterIP(o.svc) {
		return where{missing: "the ClusterIP of Service " + service}
	}
	servicePort := tcpServicePorts(o.in, o.expose.c)[o.expose.Port]
	if !slices.ContainsFunc(o.svc.Spec.Ports, func(p corev1.ServicePort) bool {
		return p.Port == servicePort && p.TargetPort.IntValue() == int(o.expose.Port) && p.Protocol == corev1.ProtocolTCP
	}) {
		return where{missing: fmt.Sprintf("port %d of Service %s", servicePort, service)}
	}
	ip, err := netip.ParseAddr(o.svc.Spec.ClusterIP)
	if err != nil || !ip.Is4() {
		return where{missing: fmt.Sprintf("an IPv4 ClusterIP of Service %s (the TCP gateway reaches IPv4 ClusterIPs only)", service)}
	}
	gateway := o.in.cfg.TCPGateway
	token := gateway.TokenPlaceholder
	if len(gateway.Key) > 0 {
		if refused := outsideServiceCIDRs(ip, o.in.cfg.ServiceCIDRs, service); refused != "" {
			return where{refused: refused}
		}
		token, err = tcptoken.Mint(gateway.Key, tcptoken.Target{
			Service:         netip.AddrPortFrom(ip, uint16(servicePort)),
			ProofOfWorkBits: uint8(o.expose.ProofOfWorkBits),
			ProxyProtocol:   o.expose.ProxyProtocol,
		})
		if err != nil {
			// Validation bounds everything Mint checks: only a key shorter than the flags allow.
			return where{missing: "a TCP gateway token (" + err.Error() + ")"}
		}
	}
	w := where{host: gateway.Host, port: gateway.Port, token: token}
	if gateway.WebSocketURL != "" {
		// The same token opens the same port over the gateway's WebSocket listener.
		w.webSocketURL = gateway.WebSocketURL + token
	}
	return w
}

// outsideServiceCIDRs says why no token is minted for ip, Service's ClusterIP, when it is outside
// the cluster's Service CIDRs ("" when inside): a token opens the address it names to whoever
// holds it, and an address outside (the gateway's own loopback, a metadata address, a node) is
// no instance's. The gateway refuses such a token too; the hook does not mint it.
func outsideServiceCIDRs(ip netip.Addr, serviceCIDRs []string, service string) string {
	if len(serviceCIDRs) == 0 {
		return "the hook has no --service-cidrs, and mints TCP gateway tokens only for ClusterIPs inside them: set --service-cidrs " +
			"to the cluster's Service CIDRs (the API server's --service-cluster-ip-range) and restart the hook"
	}
	for _, cidr := range serviceCIDRs {
		if prefix, err := netip.ParsePrefix(cidr); err == nil && prefix.Contains(ip) {
			return ""
		}
	}
	return fmt.Sprintf("the ClusterIP %s of Service %s is outside --service-cidrs (%s), and the hook mints TCP gateway tokens only for addresses inside them: "+
		"set --service-cidrs to the cluster's Service CIDRs (the API server's --service-cluster-ip-range) and restart the hook", ip, service, strings.Join(serviceCIDRs, ","))
}

// endpoints lists what players connect to, in exposure order, from the observed Services, Ingress
// and routes. missing names the first endpoint not known yet ("" when all are known); refused is
// why the Gateway refused a route ("" when none is refused).
func endpoints(in *instance) (out []v1alpha1.Endpoint, missing, refused string) {
	for _, e := range in.exposures() {
		svc, hasService := findByName(in.observed.Services, e.c.child)
		kind, _ := exposureKindOf(e.Type)
		w := kind.endpoint(observedExposure{in: in, expose: e, svc: svc, hasService: hasService})
		if w.missing != "" || w.refused != "" {
			missing, refused = firstOf(missing, w.missing), firstOf(refused, w.refused)
			continue
		}
		port := containerPort(e.c.spec.Containers, e.Port)
		ep := v1alpha1.Endpoint{Name: portName(port), Protocol: protocolOf(port), Host: w.host, Port: w.port, URL: w.url, Command: w.command, Token: w.token, WebSocketURL: w.webSocketURL, Component: e.c.name}
		if ep.URL == "" {
			ep.URL = strings.ToLower(ep.Protocol) + "://" + ep.Host + ":" + itoa(ep.Port)
		}
		if ep.Command == "" {
			ep.Command = netcatCommand(ep.Protocol, ep.Host, ep.Port)
		}
		if !shellSafe(ep.Command) {
			// A host from an observed object (a load balancer's) that a shell would read as more
			// than a word: no line to paste.
			ep.Command = ""
		}
		out = append(out, ep)
	}
	return out, missing, refused
}

// netcatCommand is the line that connects to host and port over protocol.
func netcatCommand(protocol, host string, port int32) string {
	switch protocol {
	case "UDP":
		return "nc -u " + host + " " + itoa(port)
	case "SCTP":
		return "ncat --sctp " + host + " " + itoa(port)
	}
	return "nc " + host + " " + itoa(port)
}

// shellSafe: the command's words hold only what host names, addresses, ports, URLs and options
// are made of, so that pasting it runs what it says.
func shellSafe(command string) bool {
	return command != "" && !strings.ContainsFunc(command, func(r rune) bool {
		return !(r == ' ' || r == '.' || r == '-' || r == ':' || r == '/' ||
			'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	})
}

func firstOf(current, next string) string {
	if current != "" {
		return current
	}
	return next
}

func observedNodePort(svc ObservedService, port int32) int32 {
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return p.NodePort
		}
	}
	return 0
}

func loadBalancerHost(ingress []corev1.LoadBalancerIngress) string {
	for _, i := range ingress {
		if i.IP != "" {
			return i.IP
		}
		if i.Hostname != "" {
			return i.Hostname
		}
	}
	return ""
}
