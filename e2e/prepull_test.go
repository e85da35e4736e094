//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var daemonSetGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}

const (
	prePullComponentDir = "manifests/components/prepull"
	// prePullHookImage is the hook image the test's hook names (--prepull-image); kwok runs no
	// container, so it is never pulled.
	prePullHookImage = "ghcr.io/challenge-hook/challenge-hook:v0.1.0"
)

// TestPrePull: the pre-pull component under the real Metacontroller. Its RBAC and its
// CompositeController (webhook pointed at a hook started with --prepull-image) are applied; a
// definition in a namespace enforcing Pod Security "restricted" gets its DaemonSet, whose Pod the
// DaemonSet controller creates on the kwok node (so Pod Security admitted it), and its deny-all
// NetworkPolicy; a changed image updates the DaemonSet; spec.prePull: false removes both, and
// removing it brings them back; deleting the definition removes them (garbage collection).
func TestPrePull(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t)
	hook := startHook(t, c.root, "--flag-key-file=testdata/flag.key", "--prepull-image="+prePullHookImage)
	applyPrePullComponent(ctx, t, c, hook.baseURL)

	ns := c.createNamespace(ctx, t, "prepull", "restricted")
	defs := c.dyn.Resource(defGVR).Namespace(ns)
	daemonSets := c.dyn.Resource(daemonSetGVR).Namespace(ns)
	policies := c.dyn.Resource(networkPolicyGVR).Namespace(ns)
	def := validDefinition("web")
	tpl := spec(def)
	bot := map[string]any{"name": "bot", "image": "registry.ctf.example/bot:1"}
	tpl["containers"] = append(tpl["containers"].([]any), bot)
	webImage := tpl["containers"].([]any)[0].(map[string]any)["image"].(string)
	if _, err := defs.Create(ctx, def, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create definition: %v", err)
	}
	const name = "web.prepull"

	start := time.Now()
	waitForPrePull(ctx, t, daemonSets, name, []string{webImage, "registry.ctf.example/bot:1"})
	t.Logf("DaemonSet %s declared %v after the definition's creation", name, time.Since(start).Round(time.Millisecond))
	waitFor(ctx, t, 30*time.Second, "NetworkPolicy "+name, func() (bool, error) {
		_, err := policies.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	waitFor(ctx, t, 60*time.Second, "a pre-pull Pod on the kwok node", func() (bool, error) {
		pods, err := c.dyn.Resource(podGVR).Namespace(ns).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=prepull,ctf.challenge-hook.dev/definition=web"})
		if err != nil {
			return false, err
		}
		for _, pod := range pods.Items {
			node, _, _ := unstructured.NestedString(pod.Object, "spec", "nodeName")
			if node == kwokNodeName && podImages(pod) == fmt.Sprint([]string{webImage, "registry.ctf.example/bot:1"}) {
				return true, nil
			}
		}
		return false, nil
	})
	waitForState(ctx, t, defs, "web", "PrePulling")
	waitFor(ctx, t, 60*time.Second, "DaemonSet "+name+" ready on the kwok node", func() (bool, error) {
		ds, err := daemonSets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedInt64(ds.Object, "status", "numberReady")
		observed, _, _ := unstructured.NestedInt64(ds.Object, "status", "observedGeneration")
		return ready == 1 && observed == ds.GetGeneration(), nil
	})
	requireSettled(ctx, t, map[string]dynamic.ResourceInterface{"DaemonSet": daemonSets, "NetworkPolicy": policies, "ChallengeDefinition": defs},
		map[string]string{"DaemonSet": name, "NetworkPolicy": name, "ChallengeDefinition": "web"})

	updateDefinition(ctx, t, defs, "web", func(spec map[string]any) {
		spec["containers"].([]any)[1].(map[string]any)["image"] = "registry.ctf.example/bot:2"
	})
	waitForPrePull(ctx, t, daemonSets, name, []string{webImage, "registry.ctf.example/bot:2"})

	updateDefinition(ctx, t, defs, "web", func(spec map[string]any) { spec["prePull"] = false })
	waitForGone(ctx, t, daemonSets, name)
	waitForGone(ctx, t, policies, name)
	waitForState(ctx, t, defs, "web", "Disabled")

	updateDefinition(ctx, t, defs, "web", func(spec map[string]any) { delete(spec, "prePull") })
	waitForPrePull(ctx, t, daemonSets, name, []string{webImage, "registry.ctf.example/bot:2"})

	if err := defs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete definition: %v", err)
	}
	waitForGone(ctx, t, daemonSets, name)
	waitForGone(ctx, t, policies, name)
	t.Logf("whole life %v", time.Since(start).Round(time.Millisecond))
}

// applyPrePullComponent applies the component's RBAC and its CompositeController, whose webhook
// is hookBase (the hook runs outside the cluster) with a short resync, and removes them when the
// test ends.
func applyPrePullComponent(ctx context.Context, t *testing.T, c *cluster, hookBase string) {
	t.Helper()
	rbac, err := readYAMLObjects(filepath.Join(c.root, prePullComponentDir, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := testCompositeControllerFrom(filepath.Join(c.root, prePullComponentDir, "compositecontroller.yaml"), hookBase, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range append(rbac, cc) {
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.createOrUpdate(ctx, client, obj); err != nil {
			t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = client.Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		})
	}
}

// waitForPrePull waits until the DaemonSet runs the pause program in one container per image,
// installed by an init container from the hook image.
func waitForPrePull(ctx context.Context, t *testing.T, daemonSets dynamic.ResourceInterface, name string, images []string) {
	t.Helper()
	waitFor(ctx, t, 60*time.Second, fmt.Sprintf("DaemonSet %s pulling %v", name, images), func() (bool, error) {
		ds, err := daemonSets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		template, _, _ := unstructured.NestedMap(ds.Object, "spec", "template")
		pod := unstructured.Unstructured{Object: template}
		if podImages(pod) != fmt.Sprint(images) {
			return false, nil
		}
		inits, _, _ := unstructured.NestedSlice(template, "spec", "initContainers")
		if len(inits) != 1 || inits[0].(map[string]any)["image"] != prePullHookImage {
			return false, fmt.Errorf("init containers %v: want one, of image %s", inits, prePullHookImage)
		}
		containers, _, _ := unstructured.NestedSlice(template, "spec", "containers")
		for _, ctr := range containers {
			if command, _ := ctr.(map[string]any)["command"].([]any); !slices.Equal(command, []any{"/challenge-hook-prepull/pause"}) {
				return false, fmt.Errorf("container %v runs %v, not the pause program", ctr.(map[string]any)["name"], command)
			}
		}
		return true, nil
	})
}

// requireSettled: over two resync periods of the pre-pull controller (5 s), nothing is written:
// the DaemonSet, the NetworkPolicy and the definition's status are what the hook's answer already
// says, so Metacontroller's three-way merge is empty. (The DaemonSet's Pod is ready first, so that
// the DaemonSet controller has no status left to write.)
func requireSettled(ctx context.Context, t *testing.T, clients map[string]dynamic.ResourceInterface, names map[string]string) {
	t.Helper()
	read := func() map[string]string {
		out := map[string]string{}
		for kind, client := range clients {
			obj, err := client.Get(ctx, names[kind], metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s %s: %v", kind, names[kind], err)
			}
			out[kind] = obj.GetResourceVersion()
		}
		return out
	}
	before := read()
	time.Sleep(11 * time.Second)
	if after := read(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("written again on a resync with nothing changed: before %v, after %v", before, after)
	}
}

// podImages are the images of a Pod's (or Pod template's) containers, printed.
func podImages(pod unstructured.Unstructured) string {
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	var images []string
	for _, ctr := range containers {
		image, _ := ctr.(map[string]any)["image"].(string)
		images = append(images, image)
	}
	return fmt.Sprint(images)
}

func waitForGone(ctx context.Context, t *testing.T, client dynamic.ResourceInterface, name string) {
	t.Helper()
	waitFor(ctx, t, 60*time.Second, name+" deleted", func() (bool, error) {
		_, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

func waitForState(ctx context.Context, t *testing.T, defs dynamic.ResourceInterface, name, state string) {
	t.Helper()
	waitFor(ctx, t, 30*time.Second, fmt.Sprintf("definition %s pre-pull state %s", name, state), func() (bool, error) {
		def, err := defs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got, _, _ := unstructured.NestedString(def.Object, "status", "prePull", "state")
		return got == state, nil
	})
}

// updateDefinition changes a definition's spec, retrying on conflicts (Metacontroller writes its
// status).
func updateDefinition(ctx context.Context, t *testing.T, defs dynamic.ResourceInterface, name string, change func(spec map[string]any)) {
	t.Helper()
	waitFor(ctx, t, 10*time.Second, "update definition "+name, func() (bool, error) {
		def, err := defs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		change(spec(def))
		_, err = defs.Update(ctx, def, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}
