package v1alpha1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCRDSchemaHasTheLimits reads the generated CRDs (make generate) and checks that every limit
// the hook validates with stands, with the same number, in the schema the API server admits by:
// in a ChallengeDefinition's spec and in a Challenge's inline spec.template.
func TestCRDSchemaHasTheLimits(t *testing.T) {
	limits := []struct {
		path    string // from the template's schema; "items" steps into a list's or a map's items
		keyword string
		want    int64
	}{
		{"containers", "maxItems", MaxContainers},
		{"pods", "maxItems", MaxPods},
		{"pods.items.name", "maxLength", MaxPodName},
		{"pods.items.containers", "maxItems", MaxContainers},
		{"pods.items.expose", "maxItems", MaxExpose},
		{"pods.items.expose.items.from", "maxItems", MaxExposeFrom},
		{"pods.items.expose.items.from.items.podLabels", "maxProperties", MaxPeerLabels},
		{"pods.items.internal", "maxItems", MaxInternal},
		{"pods.items.internal.items.from", "maxItems", MaxInternalFrom},
		{"pods.items.internal.items.from.items", "maxLength", MaxPodName},
		{"expose", "maxItems", MaxExpose},
		{"expose.items.from", "maxItems", MaxExposeFrom},
		{"expose.items.from.items.podLabels", "maxProperties", MaxPeerLabels},
		{"flag.prefix", "maxLength", MaxFlagPrefix},
		{"terminationGracePeriodSeconds", "maximum", MaxTerminationGracePeriodSeconds},
	}
	templates := map[string]map[string]any{
		"ChallengeDefinition spec": crdSchema(t, "crd-challengedefinitions.yaml", "spec"),
		"Challenge spec.template":  crdSchema(t, "crd-challenges.yaml", "spec.template"),
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

// crdSchema is the OpenAPI schema at path (properties, dot-separated) of the only version of the
// CRD in manifests/file.
func crdSchema(t *testing.T, file, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "manifests", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%s has %d versions, want 1", file, len(crd.Spec.Versions))
	}
	return schemaAt(t, crd.Spec.Versions[0].Schema.OpenAPIV3Schema, path)
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
