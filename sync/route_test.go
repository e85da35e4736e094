package sync

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// gatewayCase decodes a gateway golden case with its hook flags applied to the golden configuration.
func gatewayCase(t *testing.T, name string) (Request, Config) {
	c := goldenCaseNamed(t, name)
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	cfg := withFlags(t, goldenConfig(t), c.flags)
	require.NotNil(t, cfg.Gateway, "%s serves with a Gateway", name)
	return req, cfg
}

func TestRouteAcceptanceCountsOnlyTheConfiguredGatewayAndCurrentGeneration(t *testing.T) {
	tests := []struct {
		name      string
		change    func(r *ObservedRoute, cfg *Config)
		wantPhase string
		wantIn    string
	}{
		{"accepted", func(*ObservedRoute, *Config) {}, v1alpha1.PhaseRunning, "ready at http://"},
		{"accepted for an older generation of the route", func(r *ObservedRoute, _ *Config) { r.Metadata.Generation = 2 },
			v1alpha1.PhaseCreating, "waiting for Gateway gateway-system/ctf to accept HTTPRoute web-sqli-team42"},
		{"accepted, without observedGeneration", func(r *ObservedRoute, _ *Config) {
			r.Metadata.Generation = 2
			r.Status.Parents[0].Conditions[0].ObservedGeneration = 0
		}, v1alpha1.PhaseRunning, "ready at http://"},
		{"accepted by another Gateway", func(r *ObservedRoute, _ *Config) { r.Status.Parents[0].ParentRef.Name = "other" },
			v1alpha1.PhaseCreating, "waiting for Gateway gateway-system/ctf"},
		{"accepted by a ListenerSet of the same name", func(r *ObservedRoute, _ *Config) { r.Status.Parents[0].ParentRef.Kind = "ListenerSet" },
			v1alpha1.PhaseCreating, "waiting for Gateway gateway-system/ctf"},
		{"parentRef namespace defaults to the route's", func(r *ObservedRoute, cfg *Config) {
			r.Status.Parents[0].ParentRef.Namespace = ""
			cfg.Gateway = &GatewayRef{Namespace: "ctf", Name: "ctf"}
		}, v1alpha1.PhaseRunning, "ready at http://"},
		{"Accepted Unknown", func(r *ObservedRoute, _ *Config) { r.Status.Parents[0].Conditions[0].Status = "Unknown" },
			v1alpha1.PhaseCreating, "waiting for Gateway gateway-system/ctf"},
		{"refused", func(r *ObservedRoute, _ *Config) {
			r.Status.Parents[0].Conditions[0].Status = "False"
			r.Status.Parents[0].Conditions[0].Reason = "NotAllowedByListeners"
		}, v1alpha1.PhaseError, "Gateway gateway-system/ctf refused HTTPRoute web-sqli-team42 (NotAllowedByListeners)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, cfg := gatewayCase(t, "creating-to-running-httproute-accepted")
			require.Len(t, req.Children.HTTPRoutes, 1)
			tt.change(&req.Children.HTTPRoutes[0], &cfg)
			resp := Sync(req, goldenNow, cfg)
			require.Equal(t, tt.wantPhase, resp.Status.Phase, resp.Status.Message)
			require.Contains(t, resp.Status.Message, tt.wantIn)
			if tt.wantPhase != v1alpha1.PhaseRunning {
				require.Empty(t, resp.Status.Endpoints, "an endpoint is given only once the Gateway accepted its route")
			}
		})
	}
}

func TestTLSWithoutGatewayKeepsChildren(t *testing.T) {
	req, cfg := gatewayCase(t, "creating-to-running-tlsroute-accepted")
	cfg.Gateway = nil
	resp := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
	require.Equal(t, v1alpha1.ReasonGatewayAPINotEnabled, resp.Status.Reason)
	require.Contains(t, resp.Status.Message, "--gateway")
	require.Len(t, resp.Children, req.Children.Count(), "every observed child is kept")
}

func TestRouteTypeNotDeclaredKeepsChildren(t *testing.T) {
	req, cfg := gatewayCase(t, "creating-to-running-tlsroute-accepted")
	var declared []ChildResource
	for _, r := range req.DeclaredChildTypes {
		if r.Resource != "tlsroutes" {
			declared = append(declared, r)
		}
	}
	req.DeclaredChildTypes = declared
	resp := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.ReasonGatewayAPINotEnabled, resp.Status.Reason)
	require.Contains(t, resp.Status.Message, "TLSRoute children")
	require.Contains(t, resp.Status.Message, GatewayAPIComponent)
	require.Len(t, resp.Children, req.Children.Count(), "every observed child is kept")
}

func TestParseGatewayRef(t *testing.T) {
	ref, err := ParseGatewayRef("gateway-system/ctf.example")
	require.NoError(t, err)
	require.Equal(t, GatewayRef{Namespace: "gateway-system", Name: "ctf.example"}, ref)
	for _, bad := range []string{"ctf", "/ctf", "gateway-system/", "Gateway/ctf", "a/b/c"} {
		_, err := ParseGatewayRef(bad)
		require.Error(t, err, bad)
	}
}

// routedCase decodes a golden case of a running routed instance with the flags it is served with.
func routedCase(t *testing.T, name string) (Request, Config) {
	c := goldenCaseNamed(t, name)
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	return req, withFlags(t, goldenConfig(t), c.flags)
}

// childKindsIn lists the kinds and names of an answer's children.
func childKindsIn(t *testing.T, resp Response) []string {
	var out []string
	for _, child := range resp.Children {
		obj := decodedChild(t, child)
		out = append(out, obj["kind"].(string)+"/"+obj["metadata"].(map[string]any)["name"].(string))
	}
	return out
}

// routedCases are running instances whose players come through a route: an Ingress, an HTTPRoute,
// a TLSRoute, and the Ingress of an instance of several pods; each with its route's kind, name and
// backend Service.
var routedCases = []struct{ name, kind, route, service string }{
	{"life-4-running-resync-fixed-point", "Ingress", "web-sqli-team42", "web-sqli-team42"},
	{"creating-to-running-httproute-accepted", kindHTTPRoute, "web-sqli-team42", "web-sqli-team42"},
	{"creating-to-running-tlsroute-accepted", kindTLSRoute, "web-sqli-team42", "web-sqli-team42"},
	{"components-5-running-resync-fixed-point", "Ingress", "xss-team7", "xss-team7--web"},
}

// TestRouteOnlyOnceItsOwnServiceIsObserved: a route names its backend Service by name alone, so it
// is declared only once the exposure's own Service is among the instance's observed children
// (those Metacontroller matched to this Challenge), and no endpoint is published before. Without
// its Service observed (another Challenge holds an object of that name, or it is not created yet),
// the route is not declared, so that Metacontroller deletes it.
func TestRouteOnlyOnceItsOwnServiceIsObserved(t *testing.T) {
	for _, tc := range routedCases {
		t.Run(tc.name, func(t *testing.T) {
			req, cfg := routedCase(t, tc.name)
			resp := Sync(req, goldenNow, cfg)
			require.Equal(t, v1alpha1.PhaseRunning, resp.Status.Phase, resp.Status.Message)
			require.Contains(t, childKindsIn(t, resp), tc.kind+"/"+tc.route)

			req.Children.Services = slices.DeleteFunc(req.Children.Services, func(s ObservedService) bool { return s.Metadata.Name == tc.service })
			resp = Sync(req, goldenNow, cfg)
			require.NotContains(t, childKindsIn(t, resp), tc.kind+"/"+tc.route, "the route is declared before its Service is observed")
			require.Contains(t, childKindsIn(t, resp), "Service/"+tc.service, "the Service is declared")
			require.Empty(t, resp.Status.Endpoints)
			require.Equal(t, v1alpha1.PhaseCreating, resp.Status.Phase)
			require.Equal(t, "waiting for Service "+tc.service, resp.Status.Message)
		})
	}
}

// TestEndpointOnlyWhenTheRouteSendsToItsOwnService: an endpoint is published only when the observed
// route sends players to the exposure's own observed Service and nowhere else; a route being
// changed (after an upgrade, a shape change or an edit by hand) publishes nothing until it does.
func TestEndpointOnlyWhenTheRouteSendsToItsOwnService(t *testing.T) {
	ingress := func(change func(spec *networkingv1.IngressSpec)) func(*Request) {
		return func(req *Request) {
			if len(req.Children.Ingresses) > 0 {
				change(&req.Children.Ingresses[0].Spec)
			}
		}
	}
	route := func(change func(refs *[]RouteBackendRef)) func(*Request) {
		return func(req *Request) {
			for _, routes := range [][]ObservedRoute{req.Children.HTTPRoutes, req.Children.TLSRoutes} {
				if len(routes) > 0 {
					change(&routes[0].Spec.Rules[0].BackendRefs)
				}
			}
		}
	}
	changes := []struct {
		name   string
		change func(*Request)
	}{
		{"another Service", func(req *Request) {
			ingress(func(spec *networkingv1.IngressSpec) { spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "a-web" })(req)
			route(func(refs *[]RouteBackendRef) { (*refs)[0].Name = "a-web" })(req)
		}},
		{"a second backend", func(req *Request) {
			ingress(func(spec *networkingv1.IngressSpec) {
				spec.DefaultBackend = &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: "a-web"}}
			})(req)
			route(func(refs *[]RouteBackendRef) { *refs = append(*refs, RouteBackendRef{Name: "a-web"}) })(req)
		}},
		{"a backend that is not a Service", func(req *Request) {
			ingress(func(spec *networkingv1.IngressSpec) { spec.Rules[0].HTTP.Paths[0].Backend.Service = nil })(req)
			route(func(refs *[]RouteBackendRef) { (*refs)[0].Kind = "ServiceImport" })(req)
		}},
		{"no backend", func(req *Request) {
			ingress(func(spec *networkingv1.IngressSpec) { spec.Rules = nil })(req)
			route(func(refs *[]RouteBackendRef) { *refs = nil })(req)
		}},
	}
	for _, tc := range routedCases {
		for _, change := range changes {
			t.Run(tc.name+"/"+change.name, func(t *testing.T) {
				req, cfg := routedCase(t, tc.name)
				change.change(&req)
				resp := Sync(req, goldenNow, cfg)
				require.Empty(t, resp.Status.Endpoints)
				require.Equal(t, v1alpha1.PhaseCreating, resp.Status.Phase)
				require.Equal(t, fmt.Sprintf("waiting for %s %s to route to Service %s alone", tc.kind, tc.route, tc.service), resp.Status.Message)
				require.Contains(t, childKindsIn(t, resp), tc.kind+"/"+tc.route, "the route is declared as it should be")
			})
		}
	}
	t.Run("a Service of another namespace", func(t *testing.T) {
		req, cfg := routedCase(t, "creating-to-running-httproute-accepted")
		req.Children.HTTPRoutes[0].Spec.Rules[0].BackendRefs[0].Namespace = "other-team"
		resp := Sync(req, goldenNow, cfg)
		require.Empty(t, resp.Status.Endpoints)
		require.Contains(t, resp.Status.Message, "to route to Service web-sqli-team42 alone")
	})
}

// TestKeptRoutesSendOnlyToOwnServices: when the hook keeps the children as they are (here, the
// definition is missing), a route whose backend is not among the instance's observed Services is
// left out, so that Metacontroller deletes it; everything else is kept.
func TestKeptRoutesSendOnlyToOwnServices(t *testing.T) {
	req, cfg := routedCase(t, "definition-missing-keeps-children")
	resp := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.ReasonDefinitionNotFound, resp.Status.Reason)
	require.Contains(t, childKindsIn(t, resp), "Ingress/web-sqli-team61")
	require.Len(t, resp.Children, req.Children.Count())

	req.Children.Ingresses[0].Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name = "web-sqli-team61-other"
	resp = Sync(req, goldenNow, cfg)
	require.NotContains(t, childKindsIn(t, resp), "Ingress/web-sqli-team61")
	require.Len(t, resp.Children, req.Children.Count()-1, "only the Ingress is left out")
}
