package sync

import (
	"crypto/sha256"
	"encoding/binary"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// serviceType is the type of the instance's Service: the one of its exposures that are not routed
// (validation makes them agree; TCP exposures' is ClusterIP), or ClusterIP when only an Ingress or
// routes reach it.
func serviceType(expose []v1alpha1.Expose) corev1.ServiceType {
	for _, e := range expose {
		if kind, _ := exposureKindOf(e.Type); !kind.routed && kind.serviceType != "" {
			return kind.serviceType
		}
	}
	return corev1.ServiceTypeClusterIP
}

// servicePort is a port of a Service and the container port it sends to.
type servicePort struct {
	port, target int32
}

// buildService publishes a component's exposed ports, as the type of its exposures; it is nil
// when the component exposes none. Its internal ports are never on it: a NodePort or
// LoadBalancer Service would publish them too (buildInternalService). A TCP exposure's Service
// port is derived from the Challenge's identity (tcpServicePorts), every other one is the
// container port. With an idleTimeout it carries AnnotationIdleTimeout, and players' activity is
// stamped on it.
func buildService(in *instance, c *component) *corev1ac.ServiceApplyConfiguration {
	if len(c.spec.Expose) == 0 {
		return nil
	}
	tcpPorts := tcpServicePorts(in, c)
	ports := make([]servicePort, 0, len(c.spec.Expose))
	for _, e := range c.spec.Expose {
		port := e.Port
		if e.Type == v1alpha1.ExposeTCP {
			port = tcpPorts[e.Port]
		}
		ports = append(ports, servicePort{port: port, target: e.Port})
	}
	svc := componentService(in, c, c.child, serviceType(c.spec.Expose), ports)
	if in.idle.timeout > 0 {
		// The writers of its last-activity stamp read the Services alone: this says how often a
		// stamp matters to the idle clock.
		svc.WithAnnotations(map[string]string{AnnotationIdleTimeout: in.idle.timeout.String()})
	}
	return svc
}

// The Service ports of TCP exposures are drawn from this range, 40,000 wide (the wider, the less
// likely a stale token's port is drawn again), above the ports challenges commonly listen on,
// which other exposures of the same Service keep as their container's.
const (
	tcpServicePortMin   = 20000
	tcpServicePortCount = 40000 // up to 59999
)

// tcpServicePorts maps each TCP exposure of a component (by container port) to its Service port:
// a hash of the Challenge's uid, the pod's name and the container port, in
// [tcpServicePortMin, tcpServicePortMin+tcpServicePortCount), the next free one up (wrapping) when
// another port of the Service holds it, in expose order. A token names the Service's ClusterIP and
// this port: when a deleted instance's ClusterIP goes to another instance's Service, its old
// token leads there only if that Service also has the same port, which a new uid (the same
// Challenge name created again included) draws afresh.
func tcpServicePorts(in *instance, c *component) map[int32]int32 {
	out := map[int32]int32{}
	taken := map[int32]bool{}
	for _, e := range c.spec.Expose {
		if e.Type != v1alpha1.ExposeTCP {
			taken[e.Port] = true
		}
	}
	for _, e := range c.spec.Expose {
		if e.Type != v1alpha1.ExposeTCP {
			continue
		}
		sum := sha256.Sum256([]byte("challenge-hook tcp service port\x00" + in.parent.Metadata.UID + "\x00" + c.name + "\x00" + itoa(e.Port)))
		offset := binary.BigEndian.Uint64(sum[:8]) % tcpServicePortCount
		port := int32(tcpServicePortMin + offset)
		for taken[port] {
			offset = (offset + 1) % tcpServicePortCount
			port = int32(tcpServicePortMin + offset)
		}
		taken[port] = true
		out[e.Port] = port
	}
	return out
}

// buildInternalService is the ClusterIP Service of a component's internal ports, which its peers'
// hostAliases point at; nil when it has none. A Service of its own, so that no internal port ever
// gets a node port or a place on a public load balancer, whatever the component exposes.
func buildInternalService(in *instance, c *component) *corev1ac.ServiceApplyConfiguration {
	if len(c.spec.Internal) == 0 {
		return nil
	}
	ports := make([]servicePort, 0, len(c.spec.Internal))
	for _, p := range c.spec.Internal {
		ports = append(ports, servicePort{port: p.Port, target: p.Port})
	}
	return componentService(in, c, c.internalService(), corev1.ServiceTypeClusterIP, ports)
}

// componentService is a Service of the given type, selecting the component's Pods, on ports of
// its containers.
func componentService(in *instance, c *component, name string, serviceType corev1.ServiceType, ports []servicePort) *corev1ac.ServiceApplyConfiguration {
	spec := corev1ac.ServiceSpec().WithType(serviceType).WithSelector(c.selector)
	for _, port := range ports {
		p := containerPort(c.spec.Containers, port.target)
		spec.WithPorts(corev1ac.ServicePort().
			WithName(portName(p)).
			WithPort(port.port).
			WithTargetPort(intstr.FromInt32(port.target)).
			WithProtocol(corev1.Protocol(protocolOf(p))))
	}
	return corev1ac.Service(name, in.namespace).WithLabels(c.labels).WithSpec(spec)
}

// buildIngress routes the HTTP exposure, if any, from an unguessable per-instance host, once its
// Service is observed (routedExposure).
func buildIngress(in *instance) *networkingv1ac.IngressApplyConfiguration {
	if e, found := in.routedExposure(v1alpha1.ExposeHTTP); found {
		backend := networkingv1ac.IngressBackend().WithService(networkingv1ac.IngressServiceBackend().
			WithName(e.c.child).
			WithPort(networkingv1ac.ServiceBackendPort().WithNumber(e.Port)))
		spec := networkingv1ac.IngressSpec().WithRules(networkingv1ac.IngressRule().
			WithHost(httpHost(in)).
			WithHTTP(networkingv1ac.HTTPIngressRuleValue().WithPaths(networkingv1ac.HTTPIngressPath().
				WithPath("/").
				WithPathType(networkingv1.PathTypePrefix).
				WithBackend(backend))))
		if in.cfg.IngressClassName != "" {
			spec.WithIngressClassName(in.cfg.IngressClassName)
		}
		return networkingv1ac.Ingress(in.name, in.namespace).WithLabels(in.labels).WithSpec(spec)
	}
	return nil
}
