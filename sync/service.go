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

// exposedPort finds the container port an exposure publishes.
func exposedPort(t v1alpha1.DefinitionSpec, port int32) v1alpha1.ContainerPort {
	for _, c := range t.Containers {
		for _, p := range c.Ports {
			if p.ContainerPort == port {
				return p
			}
		}
	}
	return v1alpha1.ContainerPort{ContainerPort: port}
}

// buildService publishes every exposed port; it is nil when the template exposes nothing.
func buildService(in *instance) *corev1ac.ServiceApplyConfiguration {
	if len(in.template.Expose) == 0 {
		return nil
	}
	spec := corev1ac.ServiceSpec().WithType(corev1.ServiceType(serviceType(in.template.Expose))).WithSelector(in.selector)
	for _, e := range in.template.Expose {
		p := exposedPort(in.template, e.Port)
		spec.WithPorts(corev1ac.ServicePort().
			WithName(portName(p)).
			WithPort(e.Port).
			WithTargetPort(intstr.FromInt32(e.Port)).
			WithProtocol(corev1.Protocol(protocolOf(p))))
	}
	return corev1ac.Service(in.name, in.namespace).WithLabels(in.labels).WithSpec(spec)
}

// buildIngress routes the HTTP exposure, if any, from an unguessable per-instance host.
func buildIngress(in *instance) *networkingv1ac.IngressApplyConfiguration {
	for _, e := range in.template.Expose {
		if e.Type != v1alpha1.ExposeHTTP {
			continue
		}
		backend := networkingv1ac.IngressBackend().WithService(networkingv1ac.IngressServiceBackend().
			WithName(in.name).
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
