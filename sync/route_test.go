package sync

import (
	"testing"

	"github.com/stretchr/testify/require"

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
