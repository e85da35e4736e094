package manifests

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// gatewayComponent is the kustomize component that declares the route child types.
const gatewayComponent = "components/gateway-api/kustomization.yaml"

// declaredChildTypes reads the CompositeController's childResources, as the hook reads them from
// a request's controller.
func declaredChildTypes(t *testing.T) []hooksync.ChildResource {
	content, err := os.ReadFile("compositecontroller.yaml")
	require.NoError(t, err)
	var controller hooksync.CompositeController
	require.NoError(t, yaml.Unmarshal(content, &controller))
	require.NotEmpty(t, controller.Spec.ChildResources)
	return controller.Spec.ChildResources
}

// withGatewayComponent applies the component's patch to childResources. The patch may only append
// child types: anything else would change the base install for everyone.
func withGatewayComponent(t *testing.T, base []hooksync.ChildResource) []hooksync.ChildResource {
	var component struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Patches    []struct {
			Target map[string]string `json:"target"`
			Patch  string            `json:"patch"`
		} `json:"patches"`
	}
	decodeSingleYAML(t, gatewayComponent, &component)
	require.Equal(t, "Component", component.Kind)
	require.Len(t, component.Patches, 1)
	require.Equal(t, map[string]string{"group": "metacontroller.k8s.io", "version": "v1alpha1", "kind": "CompositeController", "name": "challenge-hook"},
		component.Patches[0].Target)
	var ops []struct {
		Op    string
		Path  string
		Value hooksync.ChildResource
	}
	// Not strict: the hook reads apiVersion and resource of each child type, not its updateStrategy.
	require.NoError(t, yaml.Unmarshal([]byte(component.Patches[0].Patch), &ops))
	var added []hooksync.ChildResource
	for _, op := range ops {
		require.Equal(t, "add", op.Op)
		require.Equal(t, "/spec/childResources/-", op.Path)
		added = append(added, op.Value)
	}
	require.Equal(t, childResources(hooksync.ChildKinds(hooksync.GatewayAPIComponent)), added,
		"the hook's table of child kinds (sync/children.go) and the component must name the same types")
	return append(append([]hooksync.ChildResource(nil), base...), added...)
}

func childResources(kinds []hooksync.ChildKind) []hooksync.ChildResource {
	var out []hooksync.ChildResource
	for _, k := range kinds {
		out = append(out, k.ChildResource())
	}
	return out
}

// TestCompositeControllerDeclaresTheChildTable: the base CompositeController declares exactly the
// base types of the hook's table of child kinds (sync/children.go), which decoding, render and the
// route checks read; the Gateway API component adds exactly its own (withGatewayComponent).
func TestCompositeControllerDeclaresTheChildTable(t *testing.T) {
	require.ElementsMatch(t, childResources(hooksync.ChildKinds("")), declaredChildTypes(t))
	withGatewayComponent(t, declaredChildTypes(t))
}

// TestGatewayAPIComponentEnablesRoutes: the base CompositeController declares no Gateway API type
// (it must work on a cluster without those CRDs), and the hook, given a Gateway, refuses to return
// routes under it; with the component applied, an instance exposing HTTP and TLS is built.
func TestGatewayAPIComponentEnablesRoutes(t *testing.T) {
	base := declaredChildTypes(t)
	for _, r := range base {
		require.NotContains(t, r.APIVersion, "gateway.networking.k8s.io", "the base install must not need the Gateway API CRDs")
	}
	template := v1alpha1.DefinitionSpec{
		Containers: []v1alpha1.Container{{Name: "chal", Image: "registry.ctf.example/chal:1", Ports: []v1alpha1.ContainerPort{
			{Name: "http", ContainerPort: 8080}, {Name: "pwn", ContainerPort: 1337}}}},
		Expose: []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}, {Port: 1337, Type: v1alpha1.ExposeTLS}},
	}
	cfg := hooksync.DefaultConfig()
	cfg.Gateway = &hooksync.GatewayRef{Namespace: "gateway-system", Name: "ctf"}
	// The instance's Service is observed: a route is declared only once its backend is.
	service := hooksync.ObservedService{ObservedObject: hooksync.ObservedObject{APIVersion: "v1", Kind: "Service",
		Metadata: hooksync.ObservedMeta{ObjectMeta: hooksync.ObjectMeta{Name: "chal-team1", Namespace: "ctf"}}}}
	sync := func(declared []hooksync.ChildResource) hooksync.Response {
		return hooksync.Sync(hooksync.Request{DeclaredChildTypes: declared, Parent: hooksync.Challenge{
			Metadata: hooksync.ChallengeMeta{Name: "chal-team1", Namespace: "ctf", UID: "00000000-0000-4000-8000-000000000001", Generation: 1},
			Spec:     v1alpha1.ChallengeSpec{Owner: "team-1", Template: &template},
		}, Children: hooksync.ObservedChildren{Services: []hooksync.ObservedService{service}}}, time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), cfg)
	}

	refused := sync(base)
	require.Equal(t, v1alpha1.ReasonGatewayAPINotEnabled, refused.Status.Reason)
	require.Contains(t, refused.Status.Message, filepath.ToSlash(filepath.Join("manifests", filepath.Dir(gatewayComponent))))

	built := sync(withGatewayComponent(t, base))
	require.Equal(t, v1alpha1.PhaseCreating, built.Status.Phase, built.Status.Message)
	kinds := map[string]bool{}
	for _, child := range built.Children {
		out, err := hooksync.EncodeResponse(child)
		require.NoError(t, err)
		var id struct{ Kind string }
		require.NoError(t, yaml.Unmarshal(out, &id))
		kinds[id.Kind] = true
	}
	require.True(t, kinds["HTTPRoute"] && kinds["TLSRoute"] && !kinds["Ingress"], "children: %v", kinds)
}
