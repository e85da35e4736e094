package sync

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The pre-pull controller's golden cases are testdata/prepull/<case>/: a case.yaml written by
// hand (prePullCaseFile), and the request.json and response.json `make update` writes from it,
// as for the Challenge hook's cases (testdata/README.md).
const prePullCasesDir = "../testdata/prepull"

// prePullCaseFile is a pre-pull case's input.
type prePullCaseFile struct {
	Description string `json:"description"`
	// Flags are the hook's flags on top of testdata/dev.flags, e.g. a smaller --prepull-max-images.
	Flags []string `json:"flags,omitempty"`
	// Parent is the ChallengeDefinition: metadata that matters and spec.
	Parent map[string]any `json:"parent"`
	// Related are the other definitions the customize hook related (those of the namespaces the
	// hook pre-pulls: metadata and spec); the parent is related too, as Metacontroller relates it.
	Related []map[string]any `json:"related,omitempty"`
	// Children are the observed children: kind and name, and the fields that make the scenario
	// (a DaemonSet's status); the rest is what the hook declared for them.
	Children []map[string]any `json:"children,omitempty"`
	// AppliedWith is what the children were declared for, when not the case's definition: a JSON
	// merge patch of its spec.
	AppliedWith *struct {
		Spec map[string]any `json:"spec"`
	} `json:"appliedWith,omitempty"`
}

// prePullController is the component's CompositeController, as Metacontroller sends it.
func prePullController(t testing.TB) map[string]any {
	return readYAMLObject(t, "../manifests/components/prepull/compositecontroller.yaml")
}

// prePullRequestFromCase is the request Metacontroller sends for a case: the definition as the API
// server stores it, each declared child type keyed "<namespace>/<name>" (empty ones too), each
// child the hook's answer for the definition it was applied for, with the case's fields over it.
func prePullRequestFromCase(t testing.TB, c prePullCaseFile, cfg Config) []byte {
	parent := storedDefinition(c.Parent)
	meta := parent["metadata"].(map[string]any)
	related := []map[string]any{parent}
	for _, def := range c.Related {
		related = append(related, storedDefinition(def))
	}

	applied := deepCopy(parent)
	if c.AppliedWith != nil {
		applied["spec"] = mergeObjects(applied["spec"].(map[string]any), c.AppliedWith.Spec)
	}
	declared := map[string]map[string]any{}
	for _, child := range prePullChildrenOf(t, prePullAnswerTo(t, prePullRequest(t, applied, append([]map[string]any{applied}, related[1:]...), nil), cfg)) {
		declared[fmt.Sprint(child["kind"], "/", mapAt(child, "metadata")["name"])] = child
	}
	return prePullRequest(t, parent, related, func(groups map[string]map[string]any) {
		for _, in := range c.Children {
			kind, name := in["kind"].(string), mapAt(in, "metadata")["name"].(string)
			lastApplied, ok := declared[kind+"/"+name]
			require.True(t, ok, "child %s/%s: the hook never declared it for the case's definition (appliedWith)", kind, name)
			obj := mergeObjects(deepCopy(lastApplied), in)
			childMeta := obj["metadata"].(map[string]any)
			childMeta["labels"] = mergeObjects(mapAt(childMeta, "labels"), map[string]any{"controller-uid": meta["uid"]})
			childMeta["annotations"] = mergeObjects(mapAt(childMeta, "annotations"), map[string]any{LastAppliedAnnotation: string(marshal(t, lastApplied))})
			childMeta["ownerReferences"] = []any{map[string]any{
				"apiVersion": v1alpha1.APIVersion, "kind": "ChallengeDefinition", "name": meta["name"], "uid": meta["uid"],
				"controller": true, "blockOwnerDeletion": true,
			}}
			childMeta["managedFields"] = managedFields(obj, "metacontroller", "kube-controller-manager", meta["creationTimestamp"])
			key := fmt.Sprint(kind, ".", obj["apiVersion"])
			require.Contains(t, groups, key, "the CompositeController declares no %s", key)
			groups[key][fmt.Sprint(childMeta["namespace"], "/", name)] = obj
		}
	})
}

// storedDefinition is a case's definition as the API server stores it.
func storedDefinition(def map[string]any) map[string]any {
	def = deepCopy(def)
	def["apiVersion"], def["kind"] = v1alpha1.APIVersion, "ChallengeDefinition"
	meta := def["metadata"].(map[string]any)
	if _, ok := meta["generation"]; !ok {
		meta["generation"] = 1
	}
	meta["managedFields"] = managedFields(def, "ctf-admin", "metacontroller", meta["creationTimestamp"])
	return def
}

// prePullRequest is a request for parent, with the related definitions, every declared child type
// and what fill adds.
func prePullRequest(t testing.TB, parent map[string]any, related []map[string]any, fill func(map[string]map[string]any)) []byte {
	controller := prePullController(t)
	groups := map[string]map[string]any{}
	for _, r := range controller["spec"].(map[string]any)["childResources"].([]any) {
		r := r.(map[string]any)
		for _, k := range prePullChildKinds {
			if k.APIVersion == r["apiVersion"] && k.Resource == r["resource"] {
				groups[k.Key()] = map[string]any{}
			}
		}
	}
	if fill != nil {
		fill(groups)
	}
	definitions := map[string]any{}
	for _, def := range related {
		meta := def["metadata"].(map[string]any)
		definitions[fmt.Sprint(meta["namespace"], "/", meta["name"])] = def
	}
	return marshal(t, map[string]any{"controller": controller, "parent": parent, "children": groups,
		"related": map[string]any{"ChallengeDefinition." + v1alpha1.APIVersion: definitions}, "finalizing": false})
}

func prePullAnswerTo(t testing.TB, request []byte, cfg Config) []byte {
	req, err := DecodePrePullRequest(request)
	require.NoError(t, err)
	out, err := EncodeResponse(PrePull(req, cfg))
	require.NoError(t, err)
	return out
}

func prePullChildrenOf(t testing.TB, answer []byte) []map[string]any {
	var resp struct {
		Children []map[string]any `json:"children"`
	}
	require.NoError(t, json.Unmarshal(answer, &resp))
	return resp.Children
}

// TestGoldenPrePull writes (with -update) and checks each pre-pull case's request.json from its
// case.yaml and its response.json from the hook's answer, which must be byte-identical when asked
// twice, and a fixed point: fed back as Metacontroller applies it (the children it lists as
// observed, with their last-applied configuration), it answers the same.
func TestGoldenPrePull(t *testing.T) {
	cfg := goldenConfig(t)
	require.NotEmpty(t, cfg.PrePullImage, "testdata/dev.flags sets --prepull-image")
	inputs, err := filepath.Glob(filepath.Join(prePullCasesDir, "*", caseInputFile))
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	for _, input := range inputs {
		dir := filepath.Dir(input)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			content, err := os.ReadFile(input)
			require.NoError(t, err)
			var c prePullCaseFile
			require.NoError(t, yaml.UnmarshalStrict(content, &c), input)
			require.NotEmpty(t, c.Description, "%s says what the case shows", input)
			cfg := withFlags(t, cfg, c.Flags)
			request := prePullRequestFromCase(t, c, cfg)
			answer := prePullAnswerTo(t, request, cfg)
			require.Equal(t, string(answer), string(prePullAnswerTo(t, request, cfg)), "identical requests must give byte-identical answers")
			files := map[string][]byte{"request.json": indent(t, request), "response.json": indent(t, answer)}
			if len(c.Flags) > 0 {
				files[caseFlagsFile] = []byte(strings.Join(c.Flags, " ") + "\n")
			} else {
				_, err := os.Stat(filepath.Join(dir, caseFlagsFile))
				require.True(t, os.IsNotExist(err), "%s has no flags: delete its %s", input, caseFlagsFile)
			}
			for file, want := range files {
				path := filepath.Join(dir, file)
				if *update {
					require.NoError(t, os.WriteFile(path, want, 0o644))
				}
				got, err := os.ReadFile(path)
				require.NoError(t, err, "run `make update` to write it from %s, then read it line by line", input)
				require.Equal(t, string(want), string(got), "%s: run `make update`", path)
			}

			var observed []map[string]any
			for _, child := range prePullChildrenOf(t, answer) {
				observed = append(observed, map[string]any{"kind": child["kind"], "metadata": map[string]any{"name": mapAt(child, "metadata")["name"]}})
			}
			fixed := c
			fixed.Children, fixed.AppliedWith = observed, nil
			if state := prePullState(t, answer); state == v1alpha1.PrePullStateInvalidDefinition {
				fixed.AppliedWith = c.AppliedWith // kept children: declared for the earlier definition
			}
			require.Equal(t, string(indent(t, answer)), string(indent(t, prePullAnswerTo(t, prePullRequestFromCase(t, fixed, cfg), cfg))),
				"fed back as applied, the answer must not change")
		})
	}
}

func prePullState(t testing.TB, answer []byte) string {
	var resp PrePullResponse
	require.NoError(t, json.Unmarshal(answer, &resp))
	require.NotNil(t, resp.Status.PrePull)
	return resp.Status.PrePull.State
}
