//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// shardPolicyFile is the sharding component's ValidatingAdmissionPolicy (and its binding): a
// Challenge's shard label is "0", "1" or absent, and never changes.
const shardPolicyFile = "manifests/components/sharding/shard-policy.yaml"

const shardLabel = "ctf.challenge-hook.dev/shard"

// TestShardLabelFixedAtCreation runs the sharding component's policy in the API server: a Challenge
// is created with shard "1", "0" or none, not "2"; once created, its shard label is neither added,
// changed nor removed, while any other change passes. The binding is scoped to the test's
// namespace (the component's binds every Challenge of the cluster, which the other tests share).
func TestShardLabelFixedAtCreation(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "shard", podSecurityRestricted)
	const bindingName = "challenge-hook-shard-e2e"
	applyAdmissionPolicy(ctx, t, c, shardPolicyFile, func(obj *unstructured.Unstructured) {
		if obj.GetKind() != "ValidatingAdmissionPolicyBinding" {
			return
		}
		obj.SetName(bindingName)
		if err := unstructured.SetNestedField(obj.Object, map[string]any{
			"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}},
		}, "spec", "matchResources"); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() {
		binding := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
		_ = c.dyn.Resource(binding).Delete(context.Background(), bindingName, metav1.DeleteOptions{})
	})
	challenges := c.dyn.Resource(chalGVR).Namespace(ns)
	withShard := func(name, shard string) *unstructured.Unstructured {
		chal := validChallenge(name)
		if shard != "" {
			labels := chal.GetLabels()
			labels[shardLabel] = shard
			chal.SetLabels(labels)
		}
		return chal
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// In force once the API server's admission has loaded the binding.
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the shard policy to refuse shard 2", func() (bool, error) {
		_, err := challenges.Create(ctx, withShard("shard-2", "2"), dryRun)
		return apierrors.IsInvalid(err), nil
	})
	for _, shard := range []string{"", "0", "1"} {
		if _, err := challenges.Create(ctx, withShard("shard-ok", shard), dryRun); err != nil {
			t.Errorf("create with shard %q: %v, want admitted", shard, err)
		}
	}
	if _, err := challenges.Create(ctx, withShard("shard-2", "2"), dryRun); err == nil || !strings.Contains(err.Error(), `is "0" or "1"`) {
		t.Errorf("create with shard 2: %v, want refused naming the shards", err)
	}

	for _, shard := range []string{"", "1"} {
		name := "shard-" + map[string]string{"": "none", "1": "one"}[shard]
		if _, err := challenges.Create(ctx, withShard(name, shard), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := func(labels string) error {
			_, err := challenges.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"labels":`+labels+`}}`),
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
		for _, change := range []string{`{"` + shardLabel + `":"0"}`, `{"` + shardLabel + `":"1"}`, `{"` + shardLabel + `":null}`} {
			err := patch(change)
			unchanged := (shard == "" && strings.Contains(change, "null")) || (shard == "1" && strings.Contains(change, `"1"`))
			switch {
			case unchanged && err != nil:
				t.Errorf("%s (shard %q): labels %s change nothing, refused: %v", name, shard, change, err)
			case !unchanged && (err == nil || !strings.Contains(err.Error(), "never")):
				t.Errorf("%s (shard %q): labels %s: %v, want refused: the shard never changes", name, shard, change, err)
			}
		}
		if err := patch(`{"team":"blue"}`); err != nil {
			t.Errorf("%s: another label refused: %v", name, err)
		}
	}
}
