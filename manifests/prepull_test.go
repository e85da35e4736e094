package manifests

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/prepull"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const prePullComponent = "components/prepull"

// TestPrePullComponentDeclaresItsChildTable: the pre-pull CompositeController declares exactly the
// types the hook's pre-pull answers hold (package prepull), on ChallengeDefinitions, and calls the
// hook's /prepull/sync with the same service as the base controller.
func TestPrePullComponentDeclaresItsChildTable(t *testing.T) {
	type childResource struct {
		hooksync.ChildResource
		UpdateStrategy struct {
			Method string `json:"method"`
		} `json:"updateStrategy"`
	}
	var cc struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			ParentResource      hooksync.ChildResource `json:"parentResource"`
			ChildResources      []childResource        `json:"childResources"`
			GenerateSelector    bool                   `json:"generateSelector"`
			ResyncPeriodSeconds int                    `json:"resyncPeriodSeconds"`
			Hooks               map[string]struct {
				Version string `json:"version"`
				Webhook struct {
					Path          string         `json:"path"`
					Service       map[string]any `json:"service"`
					Timeout       string         `json:"timeout"`
					Authorization map[string]any `json:"authorization"` // TestNothingIsServedWithoutACredential
				} `json:"webhook"`
			} `json:"hooks"`
		} `json:"spec"`
	}
	decodeSingleYAML(t, filepath.Join(prePullComponent, "compositecontroller.yaml"), &cc)
	require.Equal(t, hooksync.ChildResource{APIVersion: v1alpha1.APIVersion, Resource: "challengedefinitions"}, cc.Spec.ParentResource)
	var declared []hooksync.ChildResource
	for _, r := range cc.Spec.ChildResources {
		declared = append(declared, r.ChildResource)
		require.Equal(t, "InPlace", r.UpdateStrategy.Method, "%s: a changed definition must update its children", r.Resource)
	}
	require.Equal(t, childResources(prepull.ChildKinds()), declared)
	// No finalize hook: owner references delete the children with the definition. The customize
	// hook relates the definitions whose images count against --prepull-max-images: without it,
	// each definition would be counted alone and the total never held (v2: a namespaced parent may
	// relate objects of other namespaces).
	require.Len(t, cc.Spec.Hooks, 2, "a sync and a customize hook")
	for hook, path := range map[string]string{"sync": "/prepull/sync", "customize": "/prepull/customize"} {
		require.Equal(t, path, cc.Spec.Hooks[hook].Webhook.Path, hook)
		require.Equal(t, "v2", cc.Spec.Hooks[hook].Version, hook)
		require.Equal(t, map[string]any{"name": "challenge-hook", "namespace": "challenge-hook", "port": float64(80)}, cc.Spec.Hooks[hook].Webhook.Service, hook)
	}
}

// TestDefinitionStatusRequiredFieldsAreAlwaysSent: the pre-pull answer's status passes the CRD's
// schema whatever the hook leaves empty.
func TestDefinitionStatusRequiredFieldsAreAlwaysSent(t *testing.T) {
	status := crdProperty(t, "crd-challengedefinitions.yaml", "status")
	for _, problem := range requiredButOmitted("ChallengeDefinition.status", status, reflect.TypeFor[v1alpha1.ChallengeDefinitionStatus]()) {
		t.Error(problem)
	}
}
