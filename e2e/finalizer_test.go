//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// metacontrollersConfigMap is the parameter of the deletion policy's finalizer rule: the usernames
// that may remove Metacontroller's finalizer from a Challenge, one per line under usernamesKey.
const (
	metacontrollersConfigMap = "challenge-hook-metacontrollers"
	usernamesKey             = "usernames"
)

// metacontrollerUsername is the username the API server knows the e2e Metacontroller by: hack/cluster.sh
// runs it out of cluster with the kubeconfig $E2E_METACONTROLLER_KUBECONFIG, and `kubectl auth
// whoami` with that kubeconfig prints it, as it does for an organizer with Metacontroller's
// credentials.
func metacontrollerUsername(ctx context.Context, t *testing.T) string {
	t.Helper()
	kubeconfig := os.Getenv("E2E_METACONTROLLER_KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal("E2E_METACONTROLLER_KUBECONFIG is not set: run the e2e tests with `make e2e`")
	}
	out, err := kubectlResult(ctx, t, "--kubeconfig="+kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil || strings.TrimSpace(out) == "" {
		t.Fatalf("kubectl auth whoami with Metacontroller's kubeconfig %s: %v: %s", kubeconfig, err, out)
	}
	return strings.TrimSpace(out)
}

// withMetacontrollerUsername edits the deletion policy's ConfigMap, as an organizer whose
// Metacontroller runs under another identity than the shipped one does: it lists username alone.
func withMetacontrollerUsername(username string) func(*unstructured.Unstructured) {
	return func(obj *unstructured.Unstructured) {
		if obj.GetKind() == "ConfigMap" && obj.GetName() == metacontrollersConfigMap {
			obj.Object["data"] = map[string]any{usernamesKey: username + "\n"}
		}
	}
}

// TestFinalizerRemovalRefused: with manifests/challenge-deletion-policy.yaml applied (its ConfigMap
// naming the e2e Metacontroller), the platform's ServiceAccount (manifests/platform-rbac.yaml,
// impersonated) cannot remove Metacontroller's finalizer from a Challenge, neither from a running
// one nor from one it deleted whose Pod is still Terminating, by kubectl patch (merge or JSON) or
// its client's JSON patch of that finalizer alone, and each refusal says what to do instead; the instance's NetworkPolicy stays with
// its Pod. Metacontroller, the identity the ConfigMap names, still removes it: the deletion
// completes once the Pod is gone. The finalizer of another CompositeController (the sharding
// component's shard 1) is protected the same way, and the identity the ConfigMap names may remove it.
func TestFinalizerRemovalRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	applyDeletionPolicy(ctx, t, c)
	in := startIsolated(ctx, t, c, "finalizer")
	platform := platformCluster(ctx, t, c, in.ns)
	platformUser := "system:serviceaccount:" + in.ns + ":" + platformServiceAccount
	finalizer := shared.finalizer()
	if got := mustGetChallenge(ctx, t, c, in.ns, in.chal.GetName()).GetFinalizers(); !slices.Contains(got, finalizer) {
		t.Fatalf("the Running Challenge has finalizers %v, want Metacontroller's %s", got, finalizer)
	}
	challenges := platform.dyn.Resource(chalGVR).Namespace(in.ns)
	dryRun := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	removeAll := []byte(`{"metadata":{"finalizers":null}}`)

	// In force once the API server's admission has loaded the policy and its parameter.
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the finalizer policy to refuse the platform's dry-run removal", func() (bool, error) {
		_, err := challenges.Patch(ctx, in.chal.GetName(), types.MergePatchType, removeAll, dryRun)
		return apierrors.IsInvalid(err), nil
	})
	// The refusal names the finalizer and the user, and says where to look instead.
	wantInMessage := []string{"denied request", platformUser + " may not remove " + finalizer,
		"status.message", "Metacontroller's log", "docs/operations.md"}
	name := "challenges." + ctfGroup + "/" + in.chal.GetName()
	refusedByKubectl := func(what string, args ...string) {
		t.Helper()
		args = append([]string{"--as=" + platformUser, "-n", in.ns}, args...)
		out, err := kubectlResult(ctx, t, args...)
		var missing []string
		for _, want := range wantInMessage {
			if !strings.Contains(out, want) {
				missing = append(missing, want)
			}
		}
		if err == nil || len(missing) > 0 {
			t.Errorf("%s: kubectl %s: err %v, output %q; want refused by the policy, the message missing %q",
				what, strings.Join(args, " "), err, out, missing)
		} else {
			t.Logf("%s: refused: %s", what, strings.TrimSpace(out))
		}
	}
	// The platform may patch, not update: its client removes exactly Metacontroller's finalizer.
	refusedClientPatch := func(what string) {
		t.Helper()
		chal, err := challenges.Get(ctx, in.chal.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.Index(chal.GetFinalizers(), finalizer)
		if i < 0 {
			t.Fatalf("%s: the Challenge has finalizers %v, not Metacontroller's %s", what, chal.GetFinalizers(), finalizer)
		}
		patch := fmt.Appendf(nil, `[{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`, i, finalizer, i)
		_, err = challenges.Patch(ctx, in.chal.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not remove "+finalizer) {
			t.Errorf("%s: the platform's patch removing %s alone: %v, want refused (Invalid) naming it", what, finalizer, err)
		}
	}
	stillHeld := func(what string) {
		t.Helper()
		if got := mustGetChallenge(ctx, t, c, in.ns, in.chal.GetName()).GetFinalizers(); !slices.Contains(got, finalizer) {
			t.Errorf("%s: the Challenge lost Metacontroller's finalizer: finalizers %v", what, got)
		}
	}

	// A running instance: the platform's other writes pass, its removal of the finalizer does not.
	if _, err := challenges.Patch(ctx, in.chal.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"blue"}}}`), dryRun); err != nil {
		t.Errorf("the platform's label patch refused: %v", err)
	}
	refusedByKubectl("running, merge patch", "patch", name, "--type=merge", `-p={"metadata":{"finalizers":null}}`)
	refusedByKubectl("running, JSON patch", "patch", name, "--type=json", `-p=[{"op":"remove","path":"/metadata/finalizers"}]`)
	refusedClientPatch("running")
	stillHeld("running")

	// A deletion that does not finish (the Pod held Terminating by the test's finalizer), and the
	// habit of removing the finalizer to unstick it.
	in.holdPod(ctx, t)
	if err := challenges.Delete(ctx, in.chal.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the platform's delete: %v", err)
	}
	in.w.phase(t, 30*time.Second, "Terminating")
	refusedByKubectl("Terminating, merge patch", "patch", name, "--type=merge", `-p={"metadata":{"finalizers":null}}`)
	refusedByKubectl("Terminating, JSON patch", "patch", name, "--type=json", `-p=[{"op":"remove","path":"/metadata/finalizers"}]`)
	refusedClientPatch("Terminating")
	stillHeld("Terminating")
	policy, err := c.dyn.Resource(networkPolicyGVR).Namespace(in.ns).Get(ctx, in.policy.GetName(), metav1.GetOptions{})
	if err != nil || policy.GetUID() != in.policy.GetUID() || policy.GetDeletionTimestamp() != nil {
		t.Errorf("the Terminating Pod's NetworkPolicy %s is gone or going (err %v)", in.policy.GetName(), err)
	}

	// Metacontroller finalizes as ever once the Pod is gone: its removal of the finalizer passes,
	// the Pod goes first, its NetworkPolicy next, the Challenge last.
	in.releasePod(ctx, t)
	in.w.gone(t, 60*time.Second)
	in.checkDeletedInOrder(ctx, t, "pods", "networkpolicies.networking.k8s.io", "challenges."+ctfGroup)

	// Another CompositeController's finalizer (the sharding component's shard 1) is Metacontroller's
	// too: the platform may not remove it; the identity the ConfigMap names may.
	shardFinalizer := "metacontroller.io/compositecontroller-" + shared.controller.GetName() + "-shard-1"
	sharded := validChallenge("sharded")
	sharded.SetFinalizers([]string{shardFinalizer})
	createObject(ctx, t, c, in.ns, sharded)
	removeShard := fmt.Appendf(nil, `[{"op":"test","path":"/metadata/finalizers/0","value":%q},{"op":"remove","path":"/metadata/finalizers/0"}]`, shardFinalizer)
	_, err = challenges.Patch(ctx, sharded.GetName(), types.JSONPatchType, removeShard, metav1.PatchOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "may not remove "+shardFinalizer) {
		t.Errorf("the platform's removal of %s: %v, want refused (Invalid) naming it", shardFinalizer, err)
	}
	if _, err := c.dyn.Resource(chalGVR).Namespace(in.ns).Patch(ctx, sharded.GetName(), types.JSONPatchType, removeShard, metav1.PatchOptions{}); err != nil {
		t.Errorf("the removal of %s by %s, whom the ConfigMap names: %v", shardFinalizer, metacontrollerUsername(ctx, t), err)
	}
}
