//go:build e2e

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// deletionPolicyFile is the ValidatingAdmissionPolicy (and its binding) that refuses the deletions
// of a Challenge that would orphan its children or let the garbage collector delete them itself.
const deletionPolicyFile = "manifests/challenge-deletion-policy.yaml"

// namespaceFile is the hook's namespace, where the deletion policy's parameter lives.
const namespaceFile = "manifests/namespace.yaml"

// TestOrphanDeletionRefused: with manifests/challenge-deletion-policy.yaml applied (as `kubectl
// apply -k manifests/` does), the API server refuses every deletion of a Challenge that would not
// go through its children: `--cascade=orphan`, the legacy orphanDependents, `--cascade=foreground`,
// and the "orphan" finalizer (added, or on a new Challenge); each refusal leaves the instance
// untouched. A plain `kubectl delete` is admitted and finalizes as ever, and Metacontroller's own
// updates of the Challenge (its finalizer) pass the policy.
func TestOrphanDeletionRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	applyDeletionPolicy(ctx, t, c)
	ns := c.createNamespace(ctx, t, "orphan", podSecurityRestricted)
	w, chal := startChallenge(ctx, t, c, ns, lifecycleChallenge("orphan", "ghcr.io/example/pwn:1.0", ""))
	w.phase(t, 60*time.Second, "Running")
	challenges := c.dyn.Resource(chalGVR).Namespace(ns)

	// The policy is in force once the API server's admission has loaded it: a dry-run orphan
	// delete is refused.
	orphan := metav1.DeletePropagationOrphan
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the deletion policy to refuse a dry-run orphan delete", func() (bool, error) {
		err := challenges.Delete(ctx, chal.GetName(), metav1.DeleteOptions{PropagationPolicy: &orphan, DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(err), nil
	})
	before := versions(childrenOf(ctx, t, c, ns, chal.GetUID()))
	if len(ofResource(childrenOf(ctx, t, c, ns, chal.GetUID()), "networkpolicies.networking.k8s.io")) == 0 {
		t.Fatalf("the Running instance has no NetworkPolicy: children %v", keys(childrenOf(ctx, t, c, ns, chal.GetUID())))
	}
	untouched := func(what string) {
		t.Helper()
		got := mustGetChallenge(ctx, t, c, ns, chal.GetName())
		if got.GetDeletionTimestamp() != nil {
			t.Errorf("%s: the Challenge is being deleted", what)
		}
		if problems := sameChildren(before, versions(childrenOf(ctx, t, c, ns, chal.GetUID())), false); len(problems) > 0 {
			t.Errorf("%s: the children changed:\n  %s", what, strings.Join(problems, "\n  "))
		}
	}
	refusedByKubectl := func(what, want string, args ...string) {
		t.Helper()
		out, err := kubectlResult(ctx, t, args...)
		if err == nil || !strings.Contains(out, "denied request") || !strings.Contains(out, want) {
			t.Errorf("%s: kubectl %s: err %v, output %q; want refused by the policy, naming %q", what, strings.Join(args, " "), err, out, want)
		} else {
			t.Logf("%s: refused: %s", what, strings.TrimSpace(out))
		}
		untouched(what)
	}
	name := "challenges." + ctfGroup + "/" + chal.GetName()
	refusedByKubectl("--cascade=orphan", "--cascade=orphan", "delete", "--wait=false", "--cascade=orphan", "-n", ns, name)
	refusedByKubectl("--cascade=foreground", "--cascade=foreground", "delete", "--wait=false", "--cascade=foreground", "-n", ns, name)
	refusedByKubectl("the orphan finalizer added", `"orphan" or "foregroundDeletion" finalizer`,
		"patch", "-n", ns, name, "--type=json", `-p=[{"op":"add","path":"/metadata/finalizers/-","value":"orphan"}]`)

	// The legacy option, which kubectl no longer sends; the API server still honours it.
	orphanDependents := true
	//lint:ignore SA1019 the deprecated field is what the policy must refuse
	err := challenges.Delete(ctx, chal.GetName(), metav1.DeleteOptions{OrphanDependents: &orphanDependents})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "orphanDependents") {
		t.Errorf("delete with orphanDependents: true: %v, want refused (Invalid) naming orphanDependents", err)
	}
	untouched("orphanDependents: true")

	// A new Challenge that carries the orphan finalizer from the start.
	withFinalizer := lifecycleChallenge("orphan-finalizer", "ghcr.io/example/pwn:1.0", "")
	withFinalizer.SetNamespace(ns)
	withFinalizer.SetFinalizers([]string{"orphan"})
	if _, err := challenges.Create(ctx, withFinalizer, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("create a Challenge with the orphan finalizer: %v, want refused (Invalid)", err)
	}

	// Background, the default, is admitted: Terminating, then gone with every child.
	kubectl(ctx, t, "delete", "--wait=false", "-n", ns, name)
	w.phase(t, 30*time.Second, "Terminating")
	w.gone(t, 60*time.Second)
	e2eutil.WaitFor(ctx, t, 30*time.Second, "every child of the deleted instance to be gone", func() (bool, error) {
		return len(childrenOf(ctx, t, c, ns, chal.GetUID())) == 0, nil
	})
}

// applyDeletionPolicy creates (or updates) the objects of deletionPolicyFile the way an organizer
// installs them: the ConfigMap that names Metacontroller lists the e2e Metacontroller's username
// (withMetacontrollerUsername), in the hook's namespace (created from namespaceFile when no test
// installed it yet). It waits until the API server has type-checked each policy, failing on any
// expression warning.
func applyDeletionPolicy(ctx context.Context, t *testing.T, c *cluster) {
	t.Helper()
	applyObjects(ctx, t, c, namespaceFile, nil)
	applyAdmissionPolicy(ctx, t, c, deletionPolicyFile, withMetacontrollerUsername(metacontrollerUsername(ctx, t)))
}

// applyAdmissionPolicy creates or updates the objects of a file holding ValidatingAdmissionPolicies
// and their bindings, each changed by edit first when edit is not nil, and waits until the API
// server has type-checked every policy, failing on any warning.
func applyAdmissionPolicy(ctx context.Context, t *testing.T, c *cluster, file string, edit func(*unstructured.Unstructured)) {
	t.Helper()
	var policies []*unstructured.Unstructured
	for _, obj := range applyObjects(ctx, t, c, file, edit) {
		if obj.GetKind() == "ValidatingAdmissionPolicy" {
			policies = append(policies, obj)
		}
	}
	if len(policies) == 0 {
		t.Fatalf("%s has no ValidatingAdmissionPolicy", file)
	}
	for _, policy := range policies {
		waitTypeChecked(ctx, t, c, file, policy)
	}
}

// waitTypeChecked waits until the API server has type-checked a ValidatingAdmissionPolicy (of
// file), failing on any warning.
func waitTypeChecked(ctx context.Context, t *testing.T, c *cluster, file string, policy *unstructured.Unstructured) {
	t.Helper()
	client, err := c.resourceFor(policy)
	if err != nil {
		t.Fatal(err)
	}
	var checked *unstructured.Unstructured
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the API server to type-check "+policy.GetName(), func() (bool, error) {
		got, err := client.Get(ctx, policy.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		observed, _, _ := unstructured.NestedInt64(got.Object, "status", "observedGeneration")
		checked = got
		return observed == got.GetGeneration(), nil
	})
	if warnings, _, _ := unstructured.NestedSlice(checked.Object, "status", "typeChecking", "expressionWarnings"); len(warnings) > 0 {
		t.Errorf("%s: %s: type-checking warnings: %v", file, policy.GetName(), warnings)
	}
	if conditions, _, _ := unstructured.NestedSlice(checked.Object, "status", "conditions"); len(conditions) > 0 {
		t.Logf("%s conditions: %v", policy.GetName(), conditions)
	}
}

// applyObjects creates or updates every object of a YAML file (relative to the repository root),
// each changed by edit first when edit is not nil, and returns them as applied.
func applyObjects(ctx context.Context, t *testing.T, c *cluster, file string, edit func(*unstructured.Unstructured)) []*unstructured.Unstructured {
	t.Helper()
	objs, err := readYAMLObjects(filepath.Join(c.root, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if edit != nil {
			edit(obj)
		}
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Fatal(err)
		}
		// Another test may apply the same file meanwhile.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return e2eutil.CreateOrUpdate(ctx, client, obj) }); err != nil {
			t.Fatal(err)
		}
	}
	return objs
}
