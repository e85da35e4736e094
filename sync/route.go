package sync

import (
	"fmt"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1ac "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Gateway API routes: with a Gateway configured, HTTP exposures become HTTPRoutes and TLS exposures
// TLSRoutes, each for the instance's unguessable host <instanceId>.<domain>.

const (
	gatewayGroup      = "gateway.networking.k8s.io"
	gatewayAPIVersion = gatewayGroup + "/v1"
	kindHTTPRoute     = "HTTPRoute"
	kindTLSRoute      = "TLSRoute"

	// GatewayAPIComponent is the kustomize component that declares the route child types.
	GatewayAPIComponent = "manifests/components/gateway-api"
)

// routeKinds are the route types the instance needs, in the order they are returned.
func routeKinds(in *instance) []ChildKind {
	needs := map[string]bool{
		kindHTTPRoute: in.cfg.Gateway != nil && hasExposure(in.template, v1alpha1.ExposeHTTP),
		kindTLSRoute:  hasExposure(in.template, v1alpha1.ExposeTLS),
	}
	var kinds []ChildKind
	for _, k := range ChildKinds(GatewayAPIComponent) {
		if needs[k.Kind] {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// hasExposure: the template, or one of its pods, exposes a port as exposeType.
func hasExposure(t v1alpha1.DefinitionSpec, exposeType string) bool {
	isType := func(e v1alpha1.Expose) bool { return e.Type == exposeType }
	return slices.ContainsFunc(t.Expose, isType) ||
		slices.ContainsFunc(t.Pods, func(p v1alpha1.PodTemplate) bool { return slices.ContainsFunc(p.Expose, isType) })
}

// routeProblem refuses an instance whose routes the hook cannot return: a TLS exposure without a
// Gateway, or a route type the CompositeController does not declare. Metacontroller would fail
// the whole sync on an undeclared child type; the hook instead keeps the children as they are and
// says what to apply.
func routeProblem(in *instance, declared []ChildResource) *problem {
	if in.cfg.Gateway == nil && hasExposure(in.template, v1alpha1.ExposeTLS) {
		return &problem{v1alpha1.ReasonGatewayAPINotEnabled,
			"the template exposes a port as TLS, which needs a Gateway API Gateway: start the hook with --gateway <namespace>/<name> (see docs/gateway-api.md)", &in.template}
	}
	for _, kind := range routeKinds(in) {
		if !slices.Contains(declared, kind.ChildResource()) {
			return &problem{v1alpha1.ReasonGatewayAPINotEnabled, fmt.Sprintf(
				"the instance needs %s children, but the CompositeController does not declare %s %s: install the Gateway API CRDs and apply the kustomize component %s",
				kind.Kind, kind.APIVersion, kind.Resource, kind.Component), &in.template}
		}
	}
	return nil
}

// parentRef attaches a route to the configured Gateway, with every field the API server would
// default written out: Metacontroller's merge would otherwise see a difference on every sync.
func parentRef(cfg Config, sectionName string) *gatewayv1ac.ParentReferenceApplyConfiguration {
	ref := gatewayv1ac.ParentReference().
		WithGroup(gatewayGroup).
		WithKind("Gateway").
		WithNamespace(gatewayv1.Namespace(cfg.Gateway.Namespace)).
		WithName(gatewayv1.ObjectName(cfg.Gateway.Name))
	if sectionName != "" {
		ref.WithSectionName(gatewayv1.SectionName(sectionName))
	}
	return ref
}

// serviceBackend is the exposure's Service port, defaults written out as for parentRef.
func serviceBackend(e exposed) *gatewayv1ac.BackendRefApplyConfiguration {
	return gatewayv1ac.BackendRef().WithGroup("").WithKind("Service").WithName(gatewayv1.ObjectName(e.c.child)).WithPort(e.Port).WithWeight(1)
}

// buildHTTPRoute routes the HTTP exposure, when a Gateway is configured, from the instance's host,
// once its Service is observed (routedExposure).
func buildHTTPRoute(in *instance) *gatewayv1ac.HTTPRouteApplyConfiguration {
	e, found := in.routedExposure(v1alpha1.ExposeHTTP)
	if in.cfg.Gateway == nil || !found {
		return nil
	}
	rule := gatewayv1ac.HTTPRouteRule().
		WithMatches(gatewayv1ac.HTTPRouteMatch().WithPath(gatewayv1ac.HTTPPathMatch().WithType(gatewayv1.PathMatchPathPrefix).WithValue("/"))).
		WithBackendRefs(gatewayv1ac.HTTPBackendRef().WithGroup("").WithKind("Service").
			WithName(gatewayv1.ObjectName(e.c.child)).WithPort(e.Port).WithWeight(1))
	spec := gatewayv1ac.HTTPRouteSpec().
		WithParentRefs(parentRef(in.cfg, in.cfg.GatewaySectionName)).
		WithHostnames(gatewayv1.Hostname(httpHost(in))).
		WithRules(rule)
	return gatewayv1ac.HTTPRoute(in.name, in.namespace).WithLabels(in.labels).WithSpec(spec)
}

// buildTLSRoute routes the TLS exposure by SNI host to the instance's Service port, once that
// Service is observed (routedExposure). Whether the Gateway terminates TLS or passes it through is
// its listener's business.
func buildTLSRoute(in *instance) *gatewayv1ac.TLSRouteApplyConfiguration {
	e, found := in.routedExposure(v1alpha1.ExposeTLS)
	if in.cfg.Gateway == nil || !found {
		return nil
	}
	spec := gatewayv1ac.TLSRouteSpec().
		WithParentRefs(parentRef(in.cfg, in.cfg.GatewayTLSSectionName)).
		WithHostnames(gatewayv1.Hostname(httpHost(in))).
		WithRules(gatewayv1ac.TLSRouteRule().WithBackendRefs(serviceBackend(e)))
	return gatewayv1ac.TLSRoute(in.name, in.namespace).WithLabels(in.labels).WithSpec(spec)
}

// routeAcceptance is what the configured Gateway said about an observed route: accepted, not yet
// (pending is the wait, naming the Gateway), or refused (the Gateway's reason and message).
type routeAcceptance struct {
	accepted         bool
	pending, refused string
}

// acceptance reads an observed route's status for the configured Gateway. A condition set for an
// older generation of the route does not count: the Gateway has not seen the route as it is. One
// without observedGeneration (optional in metav1.Condition) is taken as current.
func acceptance(route ObservedRoute, kind string, in *instance) routeAcceptance {
	what := fmt.Sprintf("%s %s", kind, in.name)
	waiting := routeAcceptance{pending: fmt.Sprintf("Gateway %s to accept %s", in.cfg.Gateway, what)}
	for _, parent := range route.Status.Parents {
		if !isConfiguredGateway(parent, route, in.cfg) {
			continue
		}
		for _, c := range parent.Conditions {
			if c.Type != "Accepted" || (c.ObservedGeneration != 0 && c.ObservedGeneration < route.Metadata.Generation) {
				continue
			}
			switch c.Status {
			case "True":
				return routeAcceptance{accepted: true}
			case "False":
				return routeAcceptance{refused: fmt.Sprintf("Gateway %s refused %s (%s)%s; fix the Gateway's listeners (allowed routes, hostnames, protocol) or the hook's --gateway flags",
					in.cfg.Gateway, what, c.Reason, detail(c.Message))}
			}
		}
	}
	return waiting
}

// routedExposure is the instance's exposure of a routed type (HTTP, TLS) once its route may be
// declared: when the exposure's own Service is observed among the instance's children, which
// are only the objects Metacontroller matched to this Challenge. A route names its backend
// Service by name alone; declared earlier, it could send players to an object of that name that
// is not the instance's.
func (in *instance) routedExposure(exposeType string) (exposed, bool) {
	e, found := in.exposureOf(exposeType)
	if !found {
		return exposed{}, false
	}
	_, observed := findByName(in.observed.Services, e.c.child)
	return e, observed
}

// routeBackends is an observed Ingress, HTTPRoute or TLSRoute as far as where it sends players.
type routeBackends interface {
	// backendServices are the names of the Services it sends players to; ok is false when it
	// sends them nowhere, or to anything but a Service of its own namespace.
	backendServices() (names []string, ok bool)
}

func (i ObservedIngress) backendServices() ([]string, bool) {
	backends := []networkingv1.IngressBackend{}
	if b := i.Spec.DefaultBackend; b != nil {
		backends = append(backends, *b)
	}
	for _, rule := range i.Spec.Rules {
		if rule.HTTP != nil {
			for _, path := range rule.HTTP.Paths {
				backends = append(backends, path.Backend)
			}
		}
	}
	names := make([]string, 0, len(backends))
	for _, b := range backends {
		if b.Service == nil {
			return nil, false
		}
		names = append(names, b.Service.Name)
	}
	return names, len(names) > 0
}

func (r ObservedRoute) backendServices() ([]string, bool) {
	var names []string
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if b.Group != "" || (b.Kind != "" && b.Kind != "Service") || (b.Namespace != "" && b.Namespace != r.Metadata.Namespace) {
				return nil, false
			}
			names = append(names, b.Name)
		}
	}
	return names, len(names) > 0
}

// sendsOnlyTo: an observed route sends players somewhere, and only to Services that allowed
// accepts.
func sendsOnlyTo(route routeBackends, allowed func(service string) bool) bool {
	names, ok := route.backendServices()
	return ok && !slices.ContainsFunc(names, func(name string) bool { return !allowed(name) })
}

// backendPending is what a routed exposure's endpoint waits for, "" when nothing: the exposure's
// own Service, observed among the instance's children, then its observed route (kind), which
// sends players to that Service and nowhere else. Until then no endpoint is published: it would
// name a host that leads to another object, or nowhere.
func backendPending(o observedExposure, kind string, route routeBackends, routeFound bool) string {
	service := o.expose.c.child
	switch {
	case !o.hasService:
		return "Service " + service
	case !routeFound:
		return "the " + kind
	case !sendsOnlyTo(route, func(name string) bool { return name == service }):
		return fmt.Sprintf("%s %s to route to Service %s alone", kind, o.in.name, service)
	}
	return ""
}

// isConfiguredGateway says whether a route's parent status is the configured Gateway's: group and
// kind default to the Gateway's, the namespace to the route's.
func isConfiguredGateway(parent RouteParentStatus, route ObservedRoute, cfg Config) bool {
	ref := parent.ParentRef
	namespace := ref.Namespace
	if namespace == "" {
		namespace = route.Metadata.Namespace
	}
	return (ref.Group == "" || ref.Group == gatewayGroup) && (ref.Kind == "" || ref.Kind == "Gateway") &&
		namespace == cfg.Gateway.Namespace && ref.Name == cfg.Gateway.Name
}

// ParseGatewayRef parses <namespace>/<name>, the form of the --gateway flag.
func ParseGatewayRef(s string) (GatewayRef, error) {
	namespace, name, found := strings.Cut(s, "/")
	if !found {
		return GatewayRef{}, fmt.Errorf("%q is not <namespace>/<name>, such as gateway-system/ctf", s)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return GatewayRef{}, fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return GatewayRef{}, fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	return GatewayRef{Namespace: namespace, Name: name}, nil
}
