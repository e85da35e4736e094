package sync

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// serviceType is the type of the instance's Service: the type of its exposures that are not routed
// (validation makes them agree), or ClusterIP when only an Ingress or routes reach it.
func serviceType(expose []v1alpha1.Expose) string {
	for _, e := range expose {
		if kind, _ := exposureKindOf(e.Type); !kind.routed {
			return e.Type
		}
	}
	return v1alpha1.ExposeClusterIP
}

// buildService publishes a component's exposed ports, as the type of its exposures; it is nil
// when the component exposes none. Its internal ports are never on it: a NodePort or
// LoadBalancer Service would publish them too (buildInternalService).
func buildService(in *instance, c *component) *corev1ac.ServiceApplyConfiguration {
	if len(c.spec.Expose) == 0 {
		return nil
	}
	ports := make([]int32, 0, len(c.spec.Expose))
	for _, e := range c.spec.Expose {
		ports = append(ports, e.Port)
	}
	return componentService(in, c, c.child, serviceType(c.spec.Expose), ports)
}

// buildInternalService is the ClusterIP Service of a component's internal ports, which its peers'
// hostAliases point at; nil when it has none. A Service of its own, so that no internal port ever
// gets a node port or a place on a public load balancer, whatever the component exposes.
func buildInternalService(in *instance, c *component) *corev1ac.ServiceApplyConfiguration {
	if len(c.spec.Internal) == 0 {
		return nil
	}
	ports := make([]int32, 0, len(c.spec.Internal))
	for _, p := range c.spec.Internal {
		ports = append(ports, p.Port)
	}
	return componentService(in, c, c.internalService(), v1alpha1.ExposeClusterIP, ports)
}

// componentService is a Service of the given type, selecting the component's Pods, on ports of
// its containers.
func componentService(in *instance, c *component, name, serviceType string, ports []int32) *corev1ac.ServiceApplyConfiguration {
	spec := corev1ac.ServiceSpec().WithType(corev1.ServiceType(serviceType)).WithSelector(c.selector)
	for _, port := range ports {
		p := containerPort(c.spec.Containers, port)
		spec.WithPorts(corev1ac.ServicePort().
			WithName(portName(p)).
			WithPort(port).
			WithTargetPort(intstr.FromInt32(port)).
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

func httpHost(in *instance) string { return in.id + "." + in.cfg.IngressDomain }
