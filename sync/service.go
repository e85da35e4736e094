package sync

// serviceType is the type of the instance's Service: the type of its non-HTTP exposures (validation
// makes them agree), or ClusterIP when only an Ingress reaches it.
func serviceType(expose []Expose) string {
	for _, e := range expose {
		if e.Type != ExposeHTTP {
			return e.Type
		}
	}
	return ExposeClusterIP
}

// exposedPort finds the container port an exposure publishes.
func exposedPort(t DefinitionSpec, port int32) ContainerPort {
	for _, c := range t.Containers {
		for _, p := range c.Ports {
			if p.ContainerPort == port {
				return p
			}
		}
	}
	return ContainerPort{ContainerPort: port}
}

// buildService publishes every exposed port; it is nil when the template exposes nothing.
func buildService(in instance) *service {
	if len(in.template.Expose) == 0 {
		return nil
	}
	svc := &service{
		APIVersion: "v1",
		Kind:       "Service",
		Metadata:   in.meta(in.name),
		Spec:       serviceSpec{Type: serviceType(in.template.Expose), Selector: in.selector},
	}
	for _, e := range in.template.Expose {
		p := exposedPort(in.template, e.Port)
		svc.Spec.Ports = append(svc.Spec.Ports, servicePort{Name: portName(p), Port: e.Port, TargetPort: e.Port, Protocol: protocolOf(p)})
	}
	return svc
}

// buildIngress routes the HTTP exposure, if any, from an unguessable per-instance host.
func buildIngress(in instance, cfg Config) *ingress {
	for _, e := range in.template.Expose {
		if e.Type != ExposeHTTP {
			continue
		}
		return &ingress{
			APIVersion: "networking.k8s.io/v1",
			Kind:       "Ingress",
			Metadata:   in.meta(in.name),
			Spec: ingressSpec{
				IngressClassName: cfg.IngressClassName,
				Rules: []ingressRule{{
					Host: httpHost(in, cfg),
					HTTP: httpIngressRuleValue{Paths: []httpIngressPath{{
						Path:     "/",
						PathType: "Prefix",
						Backend:  ingressBackend{Service: ingressServiceBackend{Name: in.name, Port: serviceBackendPort{Number: e.Port}}},
					}}},
				}},
			},
		}
	}
	return nil
}

func httpHost(in instance, cfg Config) string { return in.id + "." + cfg.IngressDomain }
