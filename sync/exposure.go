package sync

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
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
)

// exposureKind is what one exposure type means for the children and the status. exposureKinds is
// the one table of them: validation, the Service, the NetworkPolicy and the endpoints read it.
type exposureKind struct {
	name string
	// routed: players reach it by the instance's host through an Ingress or a Gateway route: one
	// per instance, TCP only, and it needs no Service type of its own.
	routed bool
	entry  playerEntry
	// source says where its players come from, for a message.
	source string
	// endpoint is what players connect to, from the observed children, or what is not known yet.
	endpoint func(o observedExposure) where
}

// exposureKinds in the order messages list them.
var exposureKinds = []exposureKind{
	{name: v1alpha1.ExposeNodePort, entry: entryOutside, source: "outside the cluster", endpoint: nodePortEndpoint},
	{name: v1alpha1.ExposeLoadBalancer, entry: entryOutside, source: "outside the cluster", endpoint: loadBalancerEndpoint},
	{name: v1alpha1.ExposeHTTP, routed: true, entry: entryRouted, source: "the ingress controller", endpoint: httpEndpoint},
	{name: v1alpha1.ExposeTLS, routed: true, entry: entryRouted, source: "the Gateway", endpoint: tlsEndpoint},
	{name: v1alpha1.ExposeClusterIP, entry: entryNamedPeers, source: "the Pods it names", endpoint: clusterIPEndpoint},
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

// where players connect: a host and port, and a URL when it is not <protocol>://<host>:<port>; or
// missing, what is not known yet, and refused, why the Gateway refused the route.
type where struct {
	host             string
	port             int32
	url              string
	missing, refused string
}

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
		ep := v1alpha1.Endpoint{Name: portName(port), Protocol: protocolOf(port), Host: w.host, Port: w.port, URL: w.url, Component: e.c.name}
		if ep.URL == "" {
			ep.URL = strings.ToLower(ep.Protocol) + "://" + ep.Host + ":" + itoa(ep.Port)
		}
		out = append(out, ep)
	}
	return out, missing, refused
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
