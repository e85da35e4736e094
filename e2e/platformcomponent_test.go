//go:build e2e

package e2e

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// TestPlatformComponentInstall: an organizer's overlay of manifests/ with the component
// manifests/components/platform renders with kubectl kustomize, and the API server accepts every
// object the component adds (its RoleBinding in a namespace of the test's, as an organizer copies
// it into each namespace of the event); the component's two Pods are admitted in the hook's
// namespace, which enforces Pod Security "restricted", under the component's ServiceAccount with
// its token (the component's credential), and the base install is left as it was. TestRCTF and
// TestMonitoring run the component's process with this RBAC (startPlatformComponent, under a
// ClusterRole name of their own); TestCredentialsAsDocumented reads back what it grants. Parallel:
// no other test creates the shipped names this one does, and the tests that apply the shipped
// namespace too are not.
func TestPlatformComponentInstall(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "platform-component", podSecurityRestricted)
	const component = "challenge-hook-platform"
	added := map[string]bool{}
	for _, obj := range renderOverlay(ctx, t, c, "manifests/components/platform") {
		if obj.GetKind() == "Namespace" && obj.GetName() == "challenge-hook" {
			// The shipped namespace, Pod Security "restricted", over the one the suite made.
			client, err := c.resourceFor(obj)
			if err != nil {
				t.Fatal(err)
			}
			if err := e2eutil.CreateOrUpdate(ctx, client, obj); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !strings.HasPrefix(obj.GetName(), component) {
			continue // the base install's
		}
		if obj.GetKind() == "RoleBinding" {
			obj.SetNamespace(ns) // deleted with ns
		}
		createUntilCleanup(ctx, t, c, obj)
		added[obj.GetKind()+" "+obj.GetName()] = true
	}
	want := []string{"ServiceAccount " + component, "ClusterRole " + component + "-component", "RoleBinding " + component + "-component",
		"Deployment " + component, "PodDisruptionBudget " + component, "Service " + component, "Service " + component + "-metrics",
		"Service " + component + "-page", "NetworkPolicy " + component}
	if got := slices.Sorted(maps.Keys(added)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("the component adds %v, want %v", got, want)
	}
	e2eutil.WaitFor(ctx, t, 60*time.Second, "the component's two Pods to be admitted", func() (bool, error) {
		pods, err := c.dyn.Resource(podGVR).Namespace("challenge-hook").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + component})
		if err != nil || len(pods.Items) != 2 {
			return false, err
		}
		for _, pod := range pods.Items {
			if sa, _, _ := unstructured.NestedString(pod.Object, "spec", "serviceAccountName"); sa != component {
				t.Errorf("Pod %s runs as ServiceAccount %q, want %s", pod.GetName(), sa, component)
			}
			if mount, _, _ := unstructured.NestedBool(pod.Object, "spec", "automountServiceAccountToken"); !mount {
				t.Errorf("Pod %s mounts no ServiceAccount token: the component could not call the API server", pod.GetName())
			}
		}
		return true, nil
	})
}

// createUntilCleanup creates obj, deleted when the test ends when it is not namespaced or is in the
// hook's namespace (a test namespace takes its objects with it).
func createUntilCleanup(ctx context.Context, t *testing.T, c *cluster, obj *unstructured.Unstructured) {
	t.Helper()
	client, err := c.resourceFor(obj)
	if err != nil {
		t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	if obj.GetNamespace() == "" || obj.GetNamespace() == "challenge-hook" {
		t.Cleanup(func() { _ = client.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
	}
}
