//go:build e2e

package e2e

import (
	"context"
	"maps"
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

// ownerLabelDefaultFile is the owner-label component's MutatingAdmissionPolicy (and its binding):
// a Challenge created without the owner label gets it, equal to spec.owner.
const ownerLabelDefaultFile = "manifests/components/owner-label/owner-label-policy.yaml"

// TestOwnerLabelWrittenOnce runs the owner-label component's MutatingAdmissionPolicy in the API
// server, with the base's ValidatingAdmissionPolicy challenge-hook-owner-label after it, both
// bound to the test's namespace only (the component's binding covers every namespace, and
// TestOwnerLabelRefusedAtAdmission needs a Challenge without the label refused in its own); the
// base's first, waited for until it refuses a Challenge without the label, then the component's,
// waited for until that Challenge is admitted with the label.
// A Challenge created without the owner label (no labels at all, or other labels only) is stored
// with the label equal to its spec.owner, its other labels kept; so is one created by server-side
// apply, and a later apply of the same field manager that leaves the label out keeps it (the
// policy's addition belongs to no field manager).
// A Challenge created with another owner's label, or an empty one, is refused, not corrected:
// mutating admission runs first, but the policy adds the label only where there is none
// (its match condition), so the label as sent reaches the validating policy, which refuses it.
// A spec.owner that is no label value is refused by the CRD alone (the policy adds no label
// then, so no error about metadata.labels). The policy matches CREATE only: removing the label
// afterwards is still refused by the validating policy. Skipped on an API server without
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (before Kubernetes 1.36).
func TestOwnerLabelWrittenOnce(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	mapGK := schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}
	if _, err := c.mapper.RESTMapping(mapGK, "v1"); err != nil {
		t.Skipf("the API server serves no admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (Kubernetes 1.36+): %v", err)
	}
	ns := c.createNamespace(ctx, t, "ownerlabel-once", podSecurityRestricted)
	const (
		validatingBinding = "challenge-hook-owner-label-e2e-once"
		mutatingBinding   = "challenge-hook-owner-label-default-e2e"
	)
	inNamespace := map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}}
	scope := func(kind, name string) func(*unstructured.Unstructured) {
		return func(obj *unstructured.Unstructured) {
			if obj.GetKind() != kind {
				return
			}
			obj.SetName(name)
			if err := unstructured.SetNestedField(obj.Object, inNamespace, "spec", "matchResources"); err != nil {
				t.Fatal(err)
			}
		}
	}
	challenges := c.dyn.Resource(chalGVR).Namespace(ns)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// validChallenge's spec.owner is team-1, with labels set to labels (none when nil).
	challenge := func(name string, labels map[string]string) *unstructured.Unstructured {
		chal := validChallenge(name)
		chal.SetNamespace(ns)
		chal.SetLabels(labels)
		return chal
	}
	const owner = "team-1"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for resource, name := range map[string]string{
			"validatingadmissionpolicybindings": validatingBinding,
			"mutatingadmissionpolicybindings":   mutatingBinding,
		} {
			gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: resource}
			_ = c.dyn.Resource(gvr).Delete(ctx, name, metav1.DeleteOptions{})
		}
	})

	// The base's policy first, in force once the API server's admission has loaded its binding.
	applyAdmissionPolicy(ctx, t, c, ownerPolicyFile, scope("ValidatingAdmissionPolicyBinding", validatingBinding))
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the owner policy to refuse a dry-run create without the label", func() (bool, error) {
		_, err := challenges.Create(ctx, challenge("probe", nil), dryRun)
		return apierrors.IsInvalid(err), nil
	})
	// Then the component's. A MutatingAdmissionPolicy has no status to wait on: it is in force
	// once the same dry-run create is admitted with the label (the API server has loaded the
	// binding, and the Challenge's schema to apply the configuration with).
	var mutatingPolicies int
	for _, obj := range applyObjects(ctx, t, c, ownerLabelDefaultFile, scope("MutatingAdmissionPolicyBinding", mutatingBinding)) {
		if obj.GetKind() == "MutatingAdmissionPolicy" {
			mutatingPolicies++
		}
	}
	if mutatingPolicies != 1 {
		t.Fatalf("%s holds %d MutatingAdmissionPolicies, want 1", ownerLabelDefaultFile, mutatingPolicies)
	}
	e2eutil.WaitFor(ctx, t, 60*time.Second, "the owner-label policy to add the label on a dry-run create", func() (bool, error) {
		got, err := challenges.Create(ctx, challenge("probe", nil), dryRun)
		return err == nil && got.GetLabels()[ownerLabel] == owner, nil
	})

	// Created without the label: stored with it.
	for name, labels := range map[string]map[string]string{
		"unlabelled":  nil,
		"other-label": {"team": "blue"},
	} {
		if _, err := challenges.Create(ctx, challenge(name, labels), metav1.CreateOptions{}); err != nil {
			t.Errorf("create %s (labels %v) without the owner label: %v, want admitted with it", name, labels, err)
			continue
		}
		got := mustGetChallenge(ctx, t, c, ns, name)
		want := map[string]string{ownerLabel: owner}
		for k, v := range labels {
			want[k] = v
		}
		if !maps.Equal(got.GetLabels(), want) {
			t.Errorf("%s read back with labels %v, want %v (the owner label equal to spec.owner %q)", name, got.GetLabels(), want, owner)
		}
	}

	// Server-side apply, as a platform may create its Challenges: the label is added, and the same
	// manager's later apply without it keeps it.
	apply := func(stopped bool) *unstructured.Unstructured {
		t.Helper()
		chal := challenge("applied", nil)
		if err := unstructured.SetNestedField(chal.Object, stopped, "spec", "stopped"); err != nil {
			t.Fatal(err)
		}
		got, err := challenges.Apply(ctx, "applied", chal, metav1.ApplyOptions{FieldManager: "e2e-platform"})
		if err != nil {
			t.Fatalf("server-side apply (stopped %v) without the owner label: %v", stopped, err)
		}
		return got
	}
	if got := apply(false); got.GetLabels()[ownerLabel] != owner {
		t.Errorf("created by server-side apply: labels %v, want %s=%s", got.GetLabels(), ownerLabel, owner)
	}
	if got := apply(true); got.GetLabels()[ownerLabel] != owner {
		t.Errorf("applied again without the label: labels %v, want %s=%s kept", got.GetLabels(), ownerLabel, owner)
	}

	// Another owner's label, or an empty one: mutating admission runs first but adds only where
	// there is no label, so the validating policy sees the label as sent and refuses it.
	for name, value := range map[string]string{"others": "team-7", "empty": ""} {
		_, err := challenges.Create(ctx, challenge(name, map[string]string{ownerLabel: value}), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "equal to its spec.owner") {
			t.Errorf("create with the owner label %q: %v, want refused (Invalid) by the owner policy, not corrected", value, err)
		}
	}

	// A spec.owner that is no label value: the CRD's refusal alone.
	bad := challenge("bad-owner", nil)
	if err := unstructured.SetNestedField(bad.Object, "-team-", "spec", "owner"); err != nil {
		t.Fatal(err)
	}
	_, err := challenges.Create(ctx, bad, dryRun)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.owner") ||
		strings.Contains(err.Error(), "metadata.labels") || strings.Contains(err.Error(), "challenge-hook-owner-label-default") {
		t.Errorf("create with spec.owner %q: %v, want refused (Invalid) by the CRD on spec.owner alone", "-team-", err)
	}

	// CREATE only: the label, once there, is the validating policy's to keep.
	_, err = challenges.Patch(ctx, "unlabelled", types.MergePatchType, []byte(`{"metadata":{"labels":{"`+ownerLabel+`":null}}}`),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not be changed or removed") {
		t.Errorf("removing the owner label the policy added: %v, want refused by the owner policy", err)
	}
}
