package manifests

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// repoRoot is the repository's top directory; tests run in the package directory.
const repoRoot = ".."

// TestCompositeControllerCopyIsIdentical guards the copy kustomize needs: it refuses ../ paths, so
// manifests/ carries its own copy of the top-level compositecontroller.yaml.
func TestCompositeControllerCopyIsIdentical(t *testing.T) {
	top, err := os.ReadFile(filepath.Join(repoRoot, "compositecontroller.yaml"))
	require.NoError(t, err)
	local, err := os.ReadFile("compositecontroller.yaml")
	require.NoError(t, err)
	if !bytes.Equal(top, local) {
		t.Fatal("manifests/compositecontroller.yaml differs from compositecontroller.yaml; " +
			"edit the top-level file and run: cp compositecontroller.yaml manifests/")
	}
}

// TestEveryYAMLFileParses parses every YAML document in the repository, so that a broken sample,
// manifest or test fixture fails here rather than in a cluster.
func TestEveryYAMLFileParses(t *testing.T) {
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, entry fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if entry.IsDir() {
			// .cache and bin are build outputs (git-ignored; .cache may hold the module cache with
			// third-party YAML); fuzz corpora are not YAML documents even when named so.
			switch rel {
			case ".git", ".cache", "bin", "testdata/fuzz":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".yaml") || strings.HasSuffix(rel, ".yml") {
			files = append(files, rel)
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, files, "compositecontroller.yaml", "the walk must reach the repository root")
	require.Contains(t, files, "manifests/kustomization.yaml")

	for _, file := range files {
		docs, err := readYAMLDocuments(filepath.Join(repoRoot, file))
		if !assert.NoError(t, err) {
			continue
		}
		// Kubernetes objects: every document needs apiVersion and kind. *.test.yaml beside them are
		// not objects but their tests (promtool's rule tests of manifests/components/monitoring).
		if !strings.HasPrefix(file, "manifests/") && !strings.HasPrefix(file, "examples/") && file != "compositecontroller.yaml" ||
			strings.HasSuffix(file, ".test.yaml") {
			continue
		}
		for i, doc := range docs {
			object, ok := doc.(map[string]any)
			if !assert.Truef(t, ok, "%s document %d is not a mapping", file, i+1) {
				continue
			}
			assert.NotEmptyf(t, object["apiVersion"], "%s document %d has no apiVersion", file, i+1)
			assert.NotEmptyf(t, object["kind"], "%s document %d has no kind", file, i+1)
		}
	}
}

// appliedSeparately are the manifests users apply themselves, after editing them: the platform's
// RBAC names the platform's identity and namespace, which `kubectl apply -k manifests/` cannot know.
var appliedSeparately = map[string]bool{"platform-rbac.yaml": true}

// TestKustomizationListsEveryManifest keeps kustomization.yaml and the directory in step: a
// manifest left out of resources would silently never be applied.
func TestKustomizationListsEveryManifest(t *testing.T) {
	docs, err := readYAMLDocuments("kustomization.yaml")
	require.NoError(t, err)
	require.Len(t, docs, 1)
	var listed []string
	for _, resource := range docs[0].(map[string]any)["resources"].([]any) {
		listed = append(listed, resource.(string))
	}
	sort.Strings(listed)

	onDisk, err := filepath.Glob("*.yaml")
	require.NoError(t, err)
	var want []string
	for _, file := range onDisk {
		if file != "kustomization.yaml" && !appliedSeparately[file] {
			want = append(want, file)
		}
	}
	sort.Strings(want)
	assert.Equal(t, want, listed)
}

// TestStatusRequiredFieldsAreAlwaysSent: the hook writes the whole status; a property the schema
// requires but Go omits when empty would make the API server refuse the status update.
func TestStatusRequiredFieldsAreAlwaysSent(t *testing.T) {
	status := crdProperty(t, "crd-challenges.yaml", "status")
	for _, problem := range requiredButOmitted("Challenge.status", status, reflect.TypeFor[v1alpha1.ChallengeStatus]()) {
		t.Error(problem)
	}
}

// TestExamplesPassHookValidation: the samples the API server admits (see the CRDs) must also pass
// the hook's own checks, or a user copying them would get an InvalidSpec instance.
func TestExamplesPassHookValidation(t *testing.T) {
	var definition v1alpha1.ChallengeDefinition
	decodeSingleYAML(t, filepath.Join(repoRoot, "examples", "definition.yaml"), &definition)
	assert.Empty(t, hooksync.ValidateDefinition(definition.Spec, field.NewPath("spec")), "examples/definition.yaml")

	var tlsDefinition v1alpha1.ChallengeDefinition
	decodeSingleYAML(t, filepath.Join(repoRoot, "examples", "definition-tls.yaml"), &tlsDefinition)
	assert.Empty(t, hooksync.ValidateDefinition(tlsDefinition.Spec, field.NewPath("spec")), "examples/definition-tls.yaml")

	var inline v1alpha1.Challenge
	decodeSingleYAML(t, filepath.Join(repoRoot, "examples", "inline.yaml"), &inline)
	require.NotNil(t, inline.Spec.Template, "examples/inline.yaml must carry spec.template")
	assert.Empty(t, hooksync.ValidateDefinition(*inline.Spec.Template, field.NewPath("spec", "template")), "examples/inline.yaml")
}

func decodeSingleYAML(t *testing.T, path string, into any) {
	t.Helper()
	content, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(content, into), path)
}

// readYAMLDocuments splits a file on lines that are exactly "---" and parses each non-empty
// document strictly (duplicate keys are errors).
func readYAMLDocuments(path string) ([]any, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var docs []any
	for i, part := range splitYAMLDocuments(string(content)) {
		jsonDoc, err := yaml.YAMLToJSONStrict([]byte(part))
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", path, i+1, err)
		}
		var doc any
		if err := yaml.Unmarshal(jsonDoc, &doc); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", path, i+1, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	return docs, nil
}

func splitYAMLDocuments(content string) []string {
	var parts []string
	var current strings.Builder
	for line := range strings.Lines(content) {
		if strings.TrimRight(line, "\r\n") == "---" {
			parts = append(parts, current.String())
			current.Reset()
			continue
		}
		current.WriteString(line)
	}
	return append(parts, current.String())
}

// crdProperty returns the schema at openAPIV3Schema.properties.<path...> of the CRD's only version.
func crdProperty(t *testing.T, file string, path ...string) map[string]any {
	t.Helper()
	docs, err := readYAMLDocuments(file)
	require.NoError(t, err)
	require.Len(t, docs, 1, file)
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	raw, err := yaml.Marshal(docs[0])
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &crd))
	require.Len(t, crd.Spec.Versions, 1, file)
	schema := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, name := range path {
		properties, _ := schema["properties"].(map[string]any)
		next, ok := properties[name].(map[string]any)
		require.Truef(t, ok, "%s has no property %q", file, strings.Join(path, "."))
		schema = next
	}
	return schema
}

// jsonFields returns the JSON names of a struct's fields and whether each is omitted when empty.
func jsonFields(structType reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for field := range structType.Fields() {
		name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
		if name == "-" || !field.IsExported() {
			continue
		}
		if name == "" {
			name = field.Name
		}
		fields[name] = field
	}
	return fields
}

// requiredButOmitted lists properties the schema requires that Go leaves out when empty.
func requiredButOmitted(path string, schema map[string]any, goType reflect.Type) []string {
	for goType.Kind() == reflect.Pointer || goType.Kind() == reflect.Slice {
		goType = goType.Elem()
		if items, ok := schema["items"].(map[string]any); ok {
			schema = items
			path += "[]"
		}
	}
	if goType.Kind() != reflect.Struct {
		return nil
	}
	fields := jsonFields(goType)
	properties, _ := schema["properties"].(map[string]any)
	var problems []string
	required, _ := schema["required"].([]any)
	for _, name := range required {
		field, ok := fields[name.(string)]
		if ok && strings.Contains(field.Tag.Get("json"), ",omitempty") {
			problems = append(problems, fmt.Sprintf("%s.%s: required by the schema but omitempty in Go", path, name))
		}
	}
	for _, name := range sortedKeys(fields) {
		if property, ok := properties[name].(map[string]any); ok {
			problems = append(problems, requiredButOmitted(path+"."+name, property, fields[name].Type)...)
		}
	}
	return problems
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}

// TestPlatformRBACIsLeastPrivilege: the platform may run instances through Challenges and read
// definitions, and nothing else: no Secrets (flags), no children, no status, no wildcard, and it
// is bound in one namespace.
func TestPlatformRBACIsLeastPrivilege(t *testing.T) {
	docs, err := readYAMLDocuments("platform-rbac.yaml")
	require.NoError(t, err)
	type rule struct {
		APIGroups []string `json:"apiGroups"`
		Resources []string `json:"resources"`
		Verbs     []string `json:"verbs"`
	}
	granted := map[string][]string{}
	kinds := map[string]int{}
	for _, doc := range docs {
		raw, err := yaml.Marshal(doc)
		require.NoError(t, err)
		var obj struct {
			Kind  string `json:"kind"`
			Rules []rule `json:"rules"`
		}
		require.NoError(t, yaml.Unmarshal(raw, &obj))
		kinds[obj.Kind]++
		for _, r := range obj.Rules {
			for _, group := range r.APIGroups {
				for _, resource := range r.Resources {
					key := group + "/" + resource
					granted[key] = append(granted[key], r.Verbs...)
				}
			}
		}
	}
	assert.Equal(t, map[string]int{"ClusterRole": 1, "ServiceAccount": 1, "RoleBinding": 1}, kinds,
		"one role, an example identity, and a namespaced binding (no ClusterRoleBinding)")
	assert.Equal(t, map[string][]string{
		v1alpha1.Group + "/challenges":           {"create", "get", "list", "watch", "patch", "delete"},
		v1alpha1.Group + "/challengedefinitions": {"get", "list", "watch"},
	}, granted)
}

// decodeManifest decodes the only document of a manifest into a typed object.
func decodeManifest(t *testing.T, file string, into any) {
	t.Helper()
	docs, err := readYAMLDocuments(file)
	require.NoError(t, err)
	require.Len(t, docs, 1, file)
	raw, err := yaml.Marshal(docs[0])
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, into), file)
}

// hookContainer is the hook's container in hook-deployment.yaml.
func hookContainer(t *testing.T) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	var deployment appsv1.Deployment
	decodeManifest(t, "hook-deployment.yaml", &deployment)
	containers := deployment.Spec.Template.Spec.Containers
	require.Len(t, containers, 1)
	return deployment, containers[0]
}

// flagValue is the value of --name=value in args, or "".
func flagValue(args []string, name string) string {
	for _, arg := range args {
		if value, ok := strings.CutPrefix(arg, "--"+name+"="); ok {
			return value
		}
	}
	return ""
}

// TestEachCallerReachesOnlyItsOwnPort: Metacontroller calls the hooks on one port, the platform
// verifies flags on another, each with its own token; the hook's NetworkPolicy admits Metacontroller
// to the first only and the platform to the second only, and the Deployment and Service agree on
// the ports.
func TestEachCallerReachesOnlyItsOwnPort(t *testing.T) {
	deployment, container := hookContainer(t)
	ports := map[string]int32{}
	for _, p := range container.Ports {
		ports[p.Name] = p.ContainerPort
	}
	assert.Equal(t, map[string]int32{"http": 8080, "verify": 8081, "metrics": 8082}, ports)
	assert.Equal(t, ":8080", flagValue(container.Args, "listen"))
	assert.Equal(t, ":8081", flagValue(container.Args, "verify-listen"))
	assert.Equal(t, ":8082", flagValue(container.Args, "metrics-listen"))

	// The verification token comes from its own optional Secret, never the Metacontroller token's.
	verifyTokenFile := flagValue(container.Args, "verify-token-file")
	require.NotEmpty(t, verifyTokenFile, "the Deployment serves flag verification once its Secret exists")
	assert.NotEqual(t, flagValue(container.Args, "token-file"), verifyTokenFile)
	var mounted bool
	for _, mount := range container.VolumeMounts {
		if !strings.HasPrefix(verifyTokenFile, mount.MountPath+"/") {
			continue
		}
		for _, volume := range deployment.Spec.Template.Spec.Volumes {
			if volume.Name != mount.Name || volume.Projected == nil {
				continue
			}
			for _, source := range volume.Projected.Sources {
				if s := source.Secret; s != nil && s.Name == "challenge-hook-verify-token" {
					require.NotNil(t, s.Optional)
					assert.True(t, *s.Optional, "the hook starts without the Secret")
					for _, item := range s.Items {
						mounted = mounted || mount.MountPath+"/"+item.Path == verifyTokenFile
					}
				}
			}
		}
	}
	assert.True(t, mounted, "--verify-token-file %s is not the Secret challenge-hook-verify-token's key", verifyTokenFile)

	var service corev1.Service
	decodeManifest(t, "hook-service.yaml", &service)
	servicePorts := map[int32]string{}
	for _, p := range service.Spec.Ports {
		servicePorts[p.Port] = p.TargetPort.String()
	}
	assert.Equal(t, map[int32]string{80: "http", 8081: "verify", 8082: "metrics"}, servicePorts)

	var policy networkingv1.NetworkPolicy
	decodeManifest(t, "hook-networkpolicy.yaml", &policy)
	assert.Equal(t, deployment.Spec.Template.Labels[`app.kubernetes.io/name`], policy.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"])
	assert.Contains(t, policy.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
	assert.Empty(t, policy.Spec.Egress, "the hook calls nothing")
	admitted := map[string][]string{} // caller -> ports
	for i, rule := range policy.Spec.Ingress {
		require.NotEmpty(t, rule.From, "ingress rule %d admits every source", i)
		require.NotEmpty(t, rule.Ports, "ingress rule %d admits every port", i)
		var rulePorts []string
		for _, p := range rule.Ports {
			require.NotNil(t, p.Port, "ingress rule %d admits every port", i)
			rulePorts = append(rulePorts, p.Port.String())
		}
		for _, peer := range rule.From {
			require.Nil(t, peer.IPBlock, "ingress rule %d admits addresses", i)
			require.NotNil(t, peer.NamespaceSelector, "ingress rule %d: a peer without a namespace is the policy's own namespace", i)
			caller := peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]
			if peer.PodSelector != nil && len(peer.PodSelector.MatchLabels) > 0 {
				caller += "/" + peer.PodSelector.MatchLabels["app.kubernetes.io/name"]
			}
			admitted[caller] = append(admitted[caller], rulePorts...)
		}
	}
	assert.Equal(t, map[string][]string{
		"metacontroller":   {"8080"},
		"ctf/ctf-platform": {"8081"}, // the platform's Pods, not every Pod of its namespace
	}, admitted)
}

// TestGOMEMLIMITFollowsTheMemoryLimit: the hook's GOMEMLIMIT is about 90% of its container's
// memory limit, so that the garbage collector works harder before the kernel kills the hook, and
// leaves room for what is not heap. cmd/challenge-hook's TestMaximalConcurrentLoadFitsTheMemoryLimit
// runs the maximal concurrent load under both.
func TestGOMEMLIMITFollowsTheMemoryLimit(t *testing.T) {
	_, container := hookContainer(t)
	assertGoMemLimit(t, container)
}

// TestReleaseImageIsTheShippedImage: the policy gate's default image (sync.ReleaseImage) is the
// image kustomization.yaml ships, so that an install runs the gate of its own release.
func TestReleaseImageIsTheShippedImage(t *testing.T) {
	docs, err := readYAMLDocuments("kustomization.yaml")
	require.NoError(t, err)
	require.Len(t, docs, 1)
	images := docs[0].(map[string]any)["images"].([]any)
	require.Len(t, images, 1)
	image := images[0].(map[string]any)
	assert.Equal(t, hooksync.ReleaseImage, fmt.Sprintf("%s:%s", image["name"], image["newTag"]))
}
