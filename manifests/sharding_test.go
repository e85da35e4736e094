package manifests

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

const (
	shardingComponent = "components/sharding/kustomization.yaml"
	shardOne          = "components/sharding/compositecontroller-shard-1.yaml"
	shardLabel        = "ctf.challenge-hook.dev/shard"
)

// shardZeroSelector applies the sharding component's patch to the base CompositeController: its
// label and its parent selector. The patch may touch nothing else of the base.
func shardZeroSelector(t *testing.T) (map[string]string, *metav1.LabelSelector) {
	var component struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Target map[string]string `json:"target"`
			Patch  string            `json:"patch"`
		} `json:"patches"`
	}
	decodeSingleYAML(t, shardingComponent, &component)
	require.Equal(t, "Component", component.Kind)
	require.Len(t, component.Patches, 1)
	require.Equal(t, map[string]string{"group": "metacontroller.k8s.io", "version": "v1alpha1", "kind": "CompositeController", "name": "challenge-hook"},
		component.Patches[0].Target)
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	require.NoError(t, yaml.UnmarshalStrict([]byte(component.Patches[0].Patch), &ops))
	require.Len(t, ops, 2)
	require.Equal(t, "add", ops[0].Op)
	require.Equal(t, "/metadata/labels/ctf.challenge-hook.dev~1shard", ops[0].Path)
	var value string
	require.NoError(t, json.Unmarshal(ops[0].Value, &value))
	require.Equal(t, "add", ops[1].Op)
	require.Equal(t, "/spec/parentResource/labelSelector", ops[1].Path)
	var selector metav1.LabelSelector
	require.NoError(t, json.Unmarshal(ops[1].Value, &selector))
	return map[string]string{shardLabel: value}, &selector
}

// TestShardingComponentPartitionsChallenges: shard 1 is the base CompositeController but for its
// name, its shard label and its parent selector; and every Challenge the shard policy admits (no
// shard label, "0", "1") is synced by exactly one shard, each shard's CompositeController run by
// exactly one Metacontroller (the selectors the component's header gives).
func TestShardingComponentPartitionsChallenges(t *testing.T) {
	var base, one map[string]any
	decodeSingleYAML(t, "compositecontroller.yaml", &base)
	decodeSingleYAML(t, shardOne, &one)

	oneMeta := one["metadata"].(map[string]any)
	assert.Equal(t, "challenge-hook-shard-1", oneMeta["name"])
	oneLabels := oneMeta["labels"].(map[string]any)
	assert.Equal(t, "1", oneLabels[shardLabel])
	parent := one["spec"].(map[string]any)["parentResource"].(map[string]any)
	raw, err := json.Marshal(parent["labelSelector"])
	require.NoError(t, err)
	var oneSelector metav1.LabelSelector
	require.NoError(t, json.Unmarshal(raw, &oneSelector))

	// Nothing else differs from the base: the same hooks, children, resync and status handling.
	delete(parent, "labelSelector")
	delete(oneLabels, shardLabel)
	oneMeta["name"] = "challenge-hook"
	assert.Equal(t, base, one, "%s is the base compositecontroller.yaml but for name, shard label and selector", shardOne)

	zeroLabels, zeroSelector := shardZeroSelector(t)
	parents := map[string]labels.Selector{}
	for name, s := range map[string]*metav1.LabelSelector{"shard 0": zeroSelector, "shard 1": &oneSelector} {
		sel, err := metav1.LabelSelectorAsSelector(s)
		require.NoError(t, err)
		parents[name] = sel
	}
	for _, challengeLabels := range []labels.Set{{}, {shardLabel: "0"}, {shardLabel: "1"}, {"team": "x"}} {
		var matched []string
		for name, sel := range parents {
			if sel.Matches(challengeLabels) {
				matched = append(matched, name)
			}
		}
		assert.Len(t, matched, 1, "Challenge labels %v: synced by %v", challengeLabels, matched)
	}
	assert.True(t, parents["shard 1"].Matches(labels.Set{shardLabel: "1"}))
	assert.True(t, parents["shard 0"].Matches(labels.Set{}), "a Challenge without the label is served (shard 0)")

	// The Metacontrollers' --target-label-selector, as the component's header gives them: each
	// runs exactly one shard's CompositeController, and shard 0's runs an unlabelled one (the
	// pre-pull component's).
	metacontrollers := map[string]string{"shard 0": shardLabel + " notin (1)", "shard 1": shardLabel + "=1"}
	controllers := map[string]labels.Set{"shard 0": zeroLabels, "shard 1": {shardLabel: "1"}, "pre-pull": {}}
	for mc, expr := range metacontrollers {
		sel, err := labels.Parse(expr)
		require.NoError(t, err)
		for cc, ccLabels := range controllers {
			want := cc == mc || (cc == "pre-pull" && mc == "shard 0")
			assert.Equal(t, want, sel.Matches(ccLabels), "Metacontroller %s (%s) runs CompositeController %s", mc, expr, cc)
		}
	}
}
