//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// TestKustomizeInstall: what `kubectl apply -k manifests/` installs is accepted by the API server,
// and the hook's own Pods are admitted in its namespace, which enforces Pod Security "restricted".
// It installs manifests/ through an overlay that names the e2e Metacontroller in the deletion
// policy's ConfigMap, as an organizer whose Metacontroller has another identity does: every other
// test then runs under both deletion policies.
// The CRDs are installed from the same files by every test (newCluster). The CompositeController
// is created as a server-side dry run under another name (the suite's own, with webhook urls, has
// its name): Metacontroller's CRD schema accepts the shipped object as it is.
func TestKustomizeInstall(t *testing.T) {
	kubectl := os.Getenv("E2E_KUBECTL")
	if kubectl == "" {
		t.Fatal("E2E_KUBECTL is not set: run the e2e tests with `make e2e`")
	}
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	// An organizer's overlay: manifests/, with the ConfigMap of the deletion policy naming the
	// Metacontroller that runs here (docs/operations.md shows the same patch).
	username := metacontrollerUsername(ctx, t)
	overlay := t.TempDir()
	// kustomize takes a base by a relative path only.
	base, err := filepath.Rel(overlay, filepath.Join(c.root, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	kustomization := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
patches:
  - patch: |-
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: %s
        namespace: challenge-hook
      data:
        %s: |
          %s
`, base, metacontrollersConfigMap, usernamesKey, username)
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	rendered, err := exec.CommandContext(ctx, kubectl, "kustomize", overlay).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize of an overlay of manifests/: %v", err)
	}
	objs, err := decodeYAMLObjects(rendered, "kubectl kustomize manifests/")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		if obj.GetKind() == "ConfigMap" && obj.GetName() == metacontrollersConfigMap {
			if got, _, _ := unstructured.NestedString(obj.Object, "data", usernamesKey); strings.TrimSpace(got) != username {
				t.Fatalf("the overlay's ConfigMap %s lists %q, want %q", metacontrollersConfigMap, got, username)
			}
		}
	}
	seen := map[string]int{}
	for _, obj := range objs {
		seen[obj.GetKind()]++
		options := metav1.CreateOptions{}
		switch obj.GetKind() {
		case "CustomResourceDefinition":
			continue
		case "CompositeController":
			obj.SetName(obj.GetName() + "-kustomize-dry-run")
			options.DryRun = []string{metav1.DryRunAll}
		}
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetKind() == "Namespace" {
			// The suite created it for the Secret of Metacontroller's token, as the README's install
			// creates that Secret in it: apply the shipped one over it.
			if err := e2eutil.CreateOrUpdate(ctx, client, obj); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := client.Create(ctx, obj, options); err != nil {
			t.Fatalf("create %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
	for _, kind := range []string{"CustomResourceDefinition", "CompositeController", "Namespace", "ServiceAccount",
		"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy", "ConfigMap", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if seen[kind] == 0 {
			t.Errorf("kubectl kustomize manifests/ renders no %s", kind)
		}
	}
	// The controller-manager creates the hook's Pods only if Pod Security admits them.
	e2eutil.WaitFor(ctx, t, 60*time.Second, "the hook's two Pods to be admitted", func() (bool, error) {
		pods, err := c.dyn.Resource(podGVR).Namespace("challenge-hook").List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=challenge-hook",
		})
		if err != nil {
			return false, err
		}
		return len(pods.Items) == 2, nil
	})
}

// TestOnlyMetacontrollersTokenIsAnswered: the suite's hook serves with a token of its own; the
// shipped CompositeController's authorization has Metacontroller send it from the Secret the
// suite created (the README's install step), so Metacontroller's syncs are answered (the suite's
// probe Challenge was synced before any test), and a caller without it gets 401.
func TestOnlyMetacontrollersTokenIsAnswered(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	for _, authorization := range []string{"", "Bearer not-the-token"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+shared.hook.addr+"/sync", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if authorization != "" {
			req.Header.Set("Authorization", authorization)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST /sync with Authorization %q: HTTP %d, want 401", authorization, resp.StatusCode)
		}
	}
	if !strings.Contains(shared.hook.logs.String(), `"path":"/sync","status":200`) {
		t.Errorf("the hook answered no sync of Metacontroller's with 200; its log:\n%s", tail(shared.hook.logs.String(), 4096))
	}
}
