package sync

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// caseFile is a golden case's one input, testdata/<case>/case.yaml (testdata/README.md says how to
// write one). It holds what a reviewer needs to read the case; what Metacontroller and the API
// server add mechanically is filled in by requestFromCase.
type caseFile struct {
	// Description says what the case shows.
	Description string `json:"description"`
	// Flags are the hook's flags on top of testdata/dev.flags, e.g. a Gateway.
	Flags []string `json:"flags,omitempty"`
	// Component is a kustomize component of manifests/components applied to the CompositeController.
	Component string `json:"component,omitempty"`
	// ChildResources replace the CompositeController's, for an older one (the upgrade case).
	ChildResources []any `json:"childResources,omitempty"`
	Finalizing     bool  `json:"finalizing,omitempty"`
	// Parent is the Challenge: metadata that matters, spec and previous status.
	Parent map[string]any `json:"parent"`
	// Related are the objects the customize hook related: ChallengeDefinitions unless a kind says otherwise.
	Related []map[string]any `json:"related,omitempty"`
	// Children are the observed children, with only the fields the hook reads or that make the
	// scenario real; the rest is what the hook declared for them (see appliedChildren).
	Children []map[string]any `json:"children,omitempty"`
	// AppliedWith is what the hook declared the children for, where it is not the case's parent,
	// related objects and flags: JSON merge patches (RFC 7386) of the parent's spec and of the
	// related objects (by kind and name; a missing one is added), and the flags then.
	AppliedWith *struct {
		Spec    map[string]any   `json:"spec,omitempty"`
		Related []map[string]any `json:"related,omitempty"`
		Flags   *[]string        `json:"flags,omitempty"`
	} `json:"appliedWith,omitempty"`
}

const (
	caseInputFile = "case.yaml"
	// caseFlagsFile holds a case's flags for whoever serves its request.json (make run, the
	// replay and e2e tests); requestFromCase writes it from the case's flags.
	caseFlagsFile = "hook.flags"
	// parentFinalizer is the finalizer Metacontroller puts on a parent when it has a finalize hook.
	parentFinalizer = "metacontroller.io/compositecontroller-challenge-hook"
)

func readCaseFile(t testing.TB, dir string) caseFile {
	content, err := os.ReadFile(filepath.Join(dir, caseInputFile))
	require.NoError(t, err)
	var c caseFile
	require.NoError(t, yaml.UnmarshalStrict(content, &c), "%s/%s", dir, caseInputFile)
	require.NotEmpty(t, c.Description, "%s/%s says what the case shows", dir, caseInputFile)
	return c
}

// compositeController is manifests/compositecontroller.yaml as Metacontroller sends it, with a
// component's patches applied (only "add" to /spec/childResources/-, all the components do).
func compositeController(t testing.TB, component string) map[string]any {
	controller := readYAMLObject(t, "../manifests/compositecontroller.yaml")
	if component == "" {
		return controller
	}
	var kustomization struct {
		Patches []struct {
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	content, err := os.ReadFile(filepath.Join("../manifests/components", component, "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(content, &kustomization))
	spec := controller["spec"].(map[string]any)
	for _, p := range kustomization.Patches {
		var ops []struct {
			Op    string         `json:"op"`
			Path  string         `json:"path"`
			Value map[string]any `json:"value"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(p.Patch), &ops))
		for _, op := range ops {
			require.Equal(t, "add /spec/childResources/-", op.Op+" "+op.Path, "component %s: a patch the golden cases cannot apply", component)
			spec["childResources"] = append(spec["childResources"].([]any), op.Value)
		}
	}
	return controller
}

func readYAMLObject(t testing.TB, path string) map[string]any {
	content, err := os.ReadFile(path)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, yaml.Unmarshal(content, &obj), path)
	return obj
}

// kindByResource and apiVersionByKind read the table of child kinds, Legacy ones included.
func kindByResource(t testing.TB, apiVersion, resource string) ChildKind {
	for _, k := range childKinds {
		if k.APIVersion == apiVersion && k.Resource == resource {
			return k
		}
	}
	require.Failf(t, "unknown child resource", "%s %s", apiVersion, resource)
	return ChildKind{}
}

func apiVersionByKind(t testing.TB, kind string) string {
	if kind == "ChallengeDefinition" || kind == "Challenge" {
		return v1alpha1.APIVersion
	}
	for _, k := range childKinds {
		if k.Kind == kind {
			return k.APIVersion
		}
	}
	require.Failf(t, "unknown kind", "%s", kind)
	return ""
}

// requestFromCase is the request Metacontroller sends for a case: the CompositeController, the
// parent as the API server stores it (managedFields included), every declared child type (empty ones too) keyed
// "<namespace>/<name>" as a v2 hook receives them, and the related objects. A customize case gets
// a customize request.
func requestFromCase(t testing.TB, name string, c caseFile, cfg Config) []byte {
	controller := compositeController(t, c.Component)
	if c.ChildResources != nil {
		controller["spec"].(map[string]any)["childResources"] = c.ChildResources
	}
	parent := storedParent(c.Parent)
	if strings.HasPrefix(name, "customize-") {
		return marshal(t, map[string]any{"controller": controller, "parent": parent})
	}
	return marshal(t, map[string]any{
		"controller": controller,
		"parent":     parent,
		"children":   observedChildren(t, controller, parent, c.Children, appliedChildren(t, c, controller, parent, cfg)),
		"related":    withOwnersChallenges(relatedObjects(t, parent, c.Related), parent, withFlags(t, cfg, c.Flags)),
		"finalizing": c.Finalizing,
	})
}

func marshal(t testing.TB, v any) []byte {
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return out
}

// storedParent is the Challenge with what the API server and Metacontroller add: apiVersion and
// kind, generation 1 unless said, Metacontroller's finalizer.
func storedParent(in map[string]any) map[string]any {
	parent := deepCopy(in)
	parent["apiVersion"], parent["kind"] = v1alpha1.APIVersion, "Challenge"
	meta := parent["metadata"].(map[string]any)
	if _, ok := meta["generation"]; !ok {
		meta["generation"] = 1
	}
	meta["finalizers"] = []any{parentFinalizer}
	meta["managedFields"] = managedFields(parent, "ctf-platform", "metacontroller", meta["creationTimestamp"])
	return parent
}

// statusManagers are who writes each kind's status, for its managedFields.
var statusManagers = map[string]string{
	"Challenge": "metacontroller", "Pod": "kubelet", "Service": "service-controller", "Ingress": "ingress-nginx",
	"HTTPRoute": "gateway-controller", "TLSRoute": "gateway-controller", "Deployment": "kube-controller-manager",
}

// managedFields is what the API server records of who set an object's fields, as Metacontroller
// sends it (the hook reads none of it, but it is much of a request's size): the manager of
// everything but the status, and the status subresource's.
func managedFields(obj map[string]any, manager, statusManager string, at any) []any {
	owned := map[string]any{}
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "status":
		case "metadata":
			owned[k] = map[string]any{}
			for _, field := range []string{"labels", "annotations", "ownerReferences"} {
				if v, ok := v.(map[string]any)[field]; ok {
					owned[k].(map[string]any)[field] = v
				}
			}
		default:
			owned[k] = v
		}
	}
	entry := func(manager string, fields any) map[string]any {
		return map[string]any{"manager": manager, "operation": "Update", "apiVersion": obj["apiVersion"], "time": at, "fieldsType": "FieldsV1", "fieldsV1": fields}
	}
	out := []any{entry(manager, fieldsV1(owned))}
	if status, ok := obj["status"]; ok {
		status := entry(statusManager, fieldsV1(map[string]any{"status": status}))
		status["subresource"] = "status"
		out = append(out, status)
	}
	return out
}

// fieldsV1 is a value's fields in the API server's FieldsV1 form: "f:<key>" for each key, a list
// or a value as {}.
func fieldsV1(v any) map[string]any {
	out := map[string]any{}
	if m, ok := v.(map[string]any); ok {
		for k, v := range m {
			out["f:"+k] = fieldsV1(v)
		}
	}
	return out
}

// relatedObjects groups the related objects as Metacontroller does. A Challenge with a
// definitionRef has the ChallengeDefinition group its customize answer asked for, empty when the
// definition is missing.
func relatedObjects(t testing.TB, parent map[string]any, related []map[string]any) map[string]any {
	groups := map[string]any{}
	if _, ref := parent["spec"].(map[string]any)["definitionRef"]; ref {
		groups["ChallengeDefinition."+v1alpha1.APIVersion] = map[string]any{}
	}
	namespace := parent["metadata"].(map[string]any)["namespace"]
	for _, in := range related {
		obj := deepCopy(in)
		if _, ok := obj["kind"]; !ok {
			obj["kind"] = "ChallengeDefinition"
		}
		obj["apiVersion"] = apiVersionByKind(t, obj["kind"].(string))
		meta := obj["metadata"].(map[string]any)
		if _, ok := meta["namespace"]; !ok {
			meta["namespace"] = namespace
		}
		key := fmt.Sprint(obj["kind"], ".", obj["apiVersion"])
		if groups[key] == nil {
			groups[key] = map[string]any{}
		}
		groups[key].(map[string]any)[fmt.Sprint(meta["namespace"], "/", meta["name"])] = obj
	}
	return groups
}

// withOwnersChallenges is related with what the customize answer's owner rule
// (--max-instances-per-owner, see ownerRelation) makes Metacontroller send: every Challenge of the
// namespace with the parent's owner label, the parent itself included, each as the API server
// stores it (the case's related Challenges are written like its parent). Without the limit it is
// related unchanged.
func withOwnersChallenges(related, parent map[string]any, cfg Config) map[string]any {
	if cfg.MaxInstancesPerOwner == 0 {
		return related
	}
	key := "Challenge." + v1alpha1.APIVersion
	challenges, _ := related[key].(map[string]any)
	group := map[string]any{}
	for name, obj := range challenges {
		group[name] = storedParent(obj.(map[string]any))
	}
	meta := parent["metadata"].(map[string]any)
	if labels, _ := meta["labels"].(map[string]any); labels[LabelOwner] == parent["spec"].(map[string]any)["owner"] {
		group[fmt.Sprint(meta["namespace"], "/", meta["name"])] = parent
	}
	related[key] = group
	return related
}

// observedChildren are the case's children as Metacontroller observes them: each one the object
// the hook declared for it (applied, by kind and name), its last-applied configuration, with the
// case's fields over it; in the parent's namespace, owned by it and labelled with its uid
// (generateSelector). Every type the CompositeController declares has a group.
func observedChildren(t testing.TB, controller, parent map[string]any, children []map[string]any, applied map[string]map[string]any) map[string]any {
	groups := map[string]any{}
	for _, r := range controller["spec"].(map[string]any)["childResources"].([]any) {
		resource := r.(map[string]any)
		groups[kindByResource(t, resource["apiVersion"].(string), resource["resource"].(string)).Key()] = map[string]any{}
	}
	parentMeta := parent["metadata"].(map[string]any)
	for _, in := range children {
		kind := in["kind"].(string)
		name := in["metadata"].(map[string]any)["name"].(string)
		obj := map[string]any{}
		lastApplied, declared := applied[kind+"/"+name]
		if declared {
			obj = deepCopy(lastApplied)
		}
		obj = mergeObjects(obj, in)
		obj["apiVersion"] = apiVersionByKind(t, kind)
		meta := obj["metadata"].(map[string]any)
		meta["namespace"] = parentMeta["namespace"]
		meta["labels"] = mergeObjects(mapAt(meta, "labels"), map[string]any{"controller-uid": parentMeta["uid"]})
		meta["ownerReferences"] = []any{map[string]any{
			"apiVersion": v1alpha1.APIVersion, "kind": "Challenge", "name": parentMeta["name"], "uid": parentMeta["uid"],
			"controller": true, "blockOwnerDeletion": true,
		}}
		if declared {
			meta["annotations"] = mergeObjects(mapAt(meta, "annotations"), map[string]any{LastAppliedAnnotation: string(marshal(t, lastApplied))})
		}
		meta["managedFields"] = managedFields(obj, "metacontroller", statusManagers[kind], parentMeta["creationTimestamp"])
		key := fmt.Sprint(kind, ".", obj["apiVersion"])
		group, ok := groups[key].(map[string]any)
		require.True(t, ok, "child %s/%s: the CompositeController declares no %s", kind, name, key)
		group[fmt.Sprint(meta["namespace"], "/", name)] = obj
	}
	return groups
}

// appliedChildren are the objects the hook declared for the case's children when Metacontroller
// created them, by kind and name: its answer once the first answer's children exist (the Pod
// waits for its NetworkPolicy), at the parent's creation, for the parent and related objects as
// they were then (the case's, or its appliedWith).
func appliedChildren(t testing.TB, c caseFile, controller, stored map[string]any, cfg Config) map[string]map[string]any {
	// Declared at its creation, so neither deleted nor stopped (a stopped instance has no Pod).
	parent := deepCopy(stored)
	delete(parent, "status")
	delete(parent["metadata"].(map[string]any), "deletionTimestamp")
	delete(parent["spec"].(map[string]any), "stopped")
	related, flags := c.Related, c.Flags
	if w := c.AppliedWith; w != nil {
		parent["spec"] = mergeObjects(parent["spec"].(map[string]any), w.Spec)
		related = patchedObjects(related, w.Related)
		if w.Flags != nil {
			flags = *w.Flags
		}
	}
	created, err := time.Parse(time.RFC3339, parent["metadata"].(map[string]any)["creationTimestamp"].(string))
	require.NoError(t, err)
	first := map[string]any{
		"controller": controller, "parent": parent, "related": relatedObjects(t, parent, related), "finalizing": false,
		"children": observedChildren(t, controller, parent, nil, nil),
	}
	applying := goldenCase{name: "applied", request: marshal(t, first), flags: flags}
	body := answerAt(t, applying, cfg, created)
	out := map[string]map[string]any{}
	// A Pod waits for its NetworkPolicy, and in an instance of several pods for the Services of
	// the peers it resolves by name: each round is one more answer applied, until every child
	// of the instance has been declared.
	for range 3 {
		next := withAllocatedServiceIPs(t, applyAnswer(t, applying.request, body, applied{create: true, delete: true}), c.Children)
		applying = applying.with(next)
		body = answerAt(t, applying, cfg, created)
		var resp struct {
			Children []map[string]any `json:"children"`
		}
		require.NoError(t, json.Unmarshal(body, &resp))
		for _, child := range resp.Children {
			out[fmt.Sprint(child["kind"], "/", child["metadata"].(map[string]any)["name"])] = child
		}
	}
	return out
}

// withAllocatedServiceIPs gives each observed Service of request what the API server allocates at
// its creation: the spec of the case's Service of the same name (its ClusterIP, node ports), or
// else a ClusterIP of its own.
func withAllocatedServiceIPs(t testing.TB, request []byte, children []map[string]any) []byte {
	var req map[string]any
	require.NoError(t, json.Unmarshal(request, &req))
	services, _ := mapAt(req, "children")[ChildKind{APIVersion: "v1", Kind: "Service"}.Key()].(map[string]any)
	for i, key := range slices.Sorted(maps.Keys(services)) {
		obj := services[key].(map[string]any)
		spec := mapAt(obj, "spec")
		for _, child := range children {
			if child["kind"] == "Service" && mapAt(child, "metadata")["name"] == mapAt(obj, "metadata")["name"] {
				spec = mergeObjects(spec, mapAt(child, "spec"))
			}
		}
		if spec["clusterIP"] == nil {
			spec["clusterIP"] = fmt.Sprintf("10.96.0.%d", 10+i)
		}
		obj["spec"] = spec
	}
	return marshal(t, req)
}

// patchedObjects are objs with each patch merged into the object of the same kind and name, or
// added.
func patchedObjects(objs, patches []map[string]any) []map[string]any {
	identity := func(obj map[string]any) string { return fmt.Sprint(obj["kind"], "/", mapAt(obj, "metadata")["name"]) }
	out := slices.Clone(objs)
	for _, patch := range patches {
		i := slices.IndexFunc(out, func(obj map[string]any) bool { return identity(obj) == identity(patch) })
		if i < 0 {
			out = append(out, patch)
			continue
		}
		out[i] = mergeObjects(out[i], patch)
	}
	return out
}

// mergeObjects is over merged into base as a JSON merge patch (RFC 7386): objects merge key by
// key, null deletes, anything else replaces.
func mergeObjects(base, over map[string]any) map[string]any {
	out := deepCopy(base)
	for k, v := range over {
		switch v := v.(type) {
		case nil:
			delete(out, k)
		case map[string]any:
			out[k] = mergeObjects(mapAt(out, k), v)
		default:
			out[k] = v
		}
	}
	return out
}

func mapAt(obj map[string]any, key string) map[string]any {
	m, _ := obj[key].(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

func deepCopy(obj map[string]any) map[string]any {
	out := maps.Clone(obj)
	if out == nil {
		out = map[string]any{}
	}
	for k, v := range out {
		if m, ok := v.(map[string]any); ok {
			out[k] = deepCopy(m)
		}
	}
	return out
}

// TestGoldenRequests: each case's request.json and hook.flags are what its case.yaml makes;
// `make update` writes them before the other golden tests read them.
func TestGoldenRequests(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("..", "testdata", "*", caseInputFile))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	cfg := goldenConfig(t)
	for _, input := range inputs {
		dir := filepath.Dir(input)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			c := readCaseFile(t, dir)
			files := map[string][]byte{"request.json": indent(t, requestFromCase(t, name, c, cfg))}
			if len(c.Flags) > 0 {
				files[caseFlagsFile] = []byte(strings.Join(c.Flags, " ") + "\n")
			}
			for file, want := range files {
				path := filepath.Join(dir, file)
				if *update {
					require.NoError(t, os.WriteFile(path, want, 0o644))
				}
				got, err := os.ReadFile(path)
				require.NoError(t, err, "run `make update` to write it from %s", input)
				require.Equal(t, string(want), string(got), "%s is written from %s: run `make update`", path, input)
			}
			if len(c.Flags) == 0 {
				_, err := os.Stat(filepath.Join(dir, caseFlagsFile))
				require.True(t, os.IsNotExist(err), "%s has no flags: delete its %s", input, caseFlagsFile)
			}
		})
	}
}
