package manifests

import (
	"strings"
	"testing"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// TestCRDSchemaHasTheLimits reads the generated CRDs (make generate) and checks that every limit of
// api/v1alpha1/limits.go (and the TCP token's proof of work), which the hook validates with, stands
// with the same number in the schema the API server admits by: in a ChallengeDefinition's spec and
// in a Challenge's spec.template, and the platform's flag in a Challenge's spec.flag.
func TestCRDSchemaHasTheLimits(t *testing.T) {
	limits := []struct {
		path    string // from the template's schema; "items" steps into a list's or a map's items
		keyword string
		want    int64
	}{
		{"containers", "maxItems", v1alpha1.MaxContainers},
		{"pods", "maxItems", v1alpha1.MaxPods},
		{"pods.items.name", "maxLength", v1alpha1.MaxPodName},
		{"pods.items.containers", "maxItems", v1alpha1.MaxContainers},
		{"pods.items.expose", "maxItems", v1alpha1.MaxExpose},
		{"pods.items.expose.items.from", "maxItems", v1alpha1.MaxExposeFrom},
		{"pods.items.expose.items.from.items.podLabels", "maxProperties", v1alpha1.MaxPeerLabels},
		{"pods.items.internal", "maxItems", v1alpha1.MaxInternal},
		{"pods.items.internal.items.from", "maxItems", v1alpha1.MaxInternalFrom},
		{"pods.items.internal.items.from.items", "maxLength", v1alpha1.MaxPodName},
		{"expose", "maxItems", v1alpha1.MaxExpose},
		{"expose.items.from", "maxItems", v1alpha1.MaxExposeFrom},
		{"expose.items.from.items.podLabels", "maxProperties", v1alpha1.MaxPeerLabels},
		{"expose.items.proofOfWorkBits", "maximum", tcptoken.MaxProofOfWorkBits},
		{"pods.items.expose.items.proofOfWorkBits", "maximum", tcptoken.MaxProofOfWorkBits},
		{"flag.prefix", "maxLength", v1alpha1.MaxFlagPrefix},
		{"flag.value", "maxLength", v1alpha1.MaxFlagValue},
		{"terminationGracePeriodSeconds", "maximum", v1alpha1.MaxTerminationGracePeriodSeconds},
	}
	templates := map[string]map[string]any{
		"ChallengeDefinition spec": crdProperty(t, "crd-challengedefinitions.yaml", "spec"),
		"Challenge spec.template":  crdProperty(t, "crd-challenges.yaml", "spec", "template"),
	}
	if got := crdProperty(t, "crd-challenges.yaml", "spec", "flag")["maxLength"]; got != float64(v1alpha1.MaxFlagValue) {
		t.Errorf("Challenge spec.flag: maxLength is %v in the CRD, the hook's limit is %d", got, v1alpha1.MaxFlagValue)
	}
	for name, template := range templates {
		for _, limit := range limits {
			schema := schemaAt(t, template, limit.path)
			got, ok := schema[limit.keyword].(float64)
			if !ok {
				t.Errorf("%s: %s has no %s, want %d", name, limit.path, limit.keyword, limit.want)
				continue
			}
			if int64(got) != limit.want {
				t.Errorf("%s: %s %s is %v in the CRD, the hook's limit is %d", name, limit.path, limit.keyword, got, limit.want)
			}
		}
	}
}

// schemaAt walks path from schema: a name steps into properties, "items" into items (a list's
// element) or additionalProperties (a map's value).
func schemaAt(t *testing.T, schema map[string]any, path string) map[string]any {
	t.Helper()
	for step := range strings.SplitSeq(path, ".") {
		var next any
		if step == "items" {
			next = schema["items"]
			if next == nil {
				next = schema["additionalProperties"]
			}
		} else {
			properties, _ := schema["properties"].(map[string]any)
			next = properties[step]
		}
		child, ok := next.(map[string]any)
		if !ok {
			t.Fatalf("the schema has no %s (at %s)", path, step)
		}
		schema = child
	}
	return schema
}
