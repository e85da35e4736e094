package sync

import (
	"slices"

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

// buildService publishes a component's exposed ports, and its internal ports to its peers; it is
// nil when the component has neither. Its type is that of the component's exposures, so an
// internal port of a NodePort component gets a node port too, which its NetworkPolicy refuses to
// everyone but its peers.
func buildService(in *instance, c *component) *corev1ac.ServiceApplyConfiguration {
	if len(c.spec.Expose) == 0 && len(c.spec.Internal) == 0 {
		return nil
	}
	spec := corev1ac.ServiceSpec().WithType(corev1.ServiceType(serviceType(c.spec.Expose))).WithSelector(c.selector)
	ports := make([]int32, 0, len(c.spec.Expose)+len(c.spec.Internal))
	for _, e := range c.spec.Expose {
		ports = append(ports, e.Port)
	}
	for _, p := range c.spec.Internal {
		if !slices.Contains(ports, p.Port) {
			ports = append(ports, p.Port)
		}
	}
	for _, port := range ports {
		p := containerPort(c.spec.Containers, port)
		spec.WithPorts(corev1ac.ServicePort().
			WithName(portName(p)).
			WithPort(port).
			WithTargetPort(intstr.FromInt32(port)).
			WithProtocol(corev1.Protocol(protocolOf(p))))
	}
	return corev1ac.Service(c.child, in.namespace).WithLabels(c.labels).WithSpec(spec)
}

// buildIngress routes the HTTP exposure, if any, from an unguessable per-instance host.
func buildIngress(in *instance) *networkingv1ac.IngressApplyConfiguration {
	if e, found := in.exposureOf(v1alpha1.ExposeHTTP); found {
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
