//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
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

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

var daemonSetGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}

const (
	prePullComponentDir = "manifests/components/prepull"
	// prePullHookImage is the hook image the test's hook names (--prepull-image); kwok runs no
	// container, so it is never pulled.
	prePullHookImage = "ghcr.io/challenge-hook/challenge-hook:v0.1.0"
)

// TestPrePull: the pre-pull component under the real Metacontroller. Its RBAC and its
// CompositeController (webhooks pointed at a hook started with --prepull-image and the test's
// namespace in --definition-namespaces) are applied; a
// definition in a namespace enforcing Pod Security "restricted" gets its DaemonSet, whose Pod the
// DaemonSet controller creates on the kwok node (so Pod Security admitted it), and its deny-all
// NetworkPolicy; a changed image updates the DaemonSet; spec.prePull: false removes both, and
// removing it brings them back; deleting the definition removes them (garbage collection).
func TestPrePull(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	c := newCluster(t)
	ns := c.createNamespace(ctx, t, "prepull", "restricted")
	hook := startHook(t, c.root, "--flag-key-file=testdata/flag.key", "--prepull-image="+prePullHookImage, "--definition-namespaces="+ns)
	applyPrePullComponent(ctx, t, c, hook.baseURL)

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
	e2eutil.WaitFor(ctx, t, 30*time.Second, "NetworkPolicy "+name, func() (bool, error) {
		_, err := policies.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	e2eutil.WaitFor(ctx, t, 60*time.Second, "a pre-pull Pod on the kwok node", func() (bool, error) {
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
	e2eutil.WaitFor(ctx, t, 60*time.Second, "DaemonSet "+name+" ready on the kwok node", func() (bool, error) {
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
		if err := e2eutil.CreateOrUpdate(ctx, client, obj); err != nil {
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
	e2eutil.WaitFor(ctx, t, 60*time.Second, fmt.Sprintf("DaemonSet %s pulling %v", name, images), func() (bool, error) {
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
	e2eutil.WaitFor(ctx, t, 60*time.Second, name+" deleted", func() (bool, error) {
		_, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

func waitForState(ctx context.Context, t *testing.T, defs dynamic.ResourceInterface, name, state string) {
	t.Helper()
	e2eutil.WaitFor(ctx, t, 30*time.Second, fmt.Sprintf("definition %s pre-pull state %s", name, state), func() (bool, error) {
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
	e2eutil.WaitFor(ctx, t, 10*time.Second, "update definition "+name, func() (bool, error) {
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

// TestPrePullTrust: the pre-pull component under the real Metacontroller honours the namespaces
// the organizer names and the caps. With the shipped trust flags (no --definition-namespaces)
// nothing is pre-pulled: a co-tenant's definition of 8 pods of 8 images and the event's own
// definition both get NamespaceNotAllowed and no DaemonSet. With --definition-namespaces=<event>
// and --prepull-max-images=4: the co-tenant's still gets nothing; in the event, definitions take
// the 4 images in creation order (web: 2, joined: 2, late: 1 does not fit), one of 9 images gets
// nothing, and joined's pods a-b/c and a/b-c make a valid DaemonSet whose Pod runs on the node;
// deleting web frees its share and late gets its DaemonSet.
func TestPrePullTrust(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	c := newCluster(t)
	event := c.createNamespace(ctx, t, "prepull-event", "restricted")
	tenant := c.createNamespace(ctx, t, "prepull-tenant", "restricted")
	trust, err := shippedTrustFlags(c.root)
	if err != nil {
		t.Fatal(err)
	}
	shipped := startHook(t, c.root, append([]string{"--flag-key-file=testdata/flag.key", "--prepull-image=" + prePullHookImage}, trust...)...)
	applyPrePullComponent(ctx, t, c, shipped.baseURL)

	tenantDefs := c.dyn.Resource(defGVR).Namespace(tenant)
	eventDefs := c.dyn.Resource(defGVR).Namespace(event)
	create := func(defs dynamic.ResourceInterface, def *unstructured.Unstructured) {
		t.Helper()
		if _, err := defs.Create(ctx, def, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create definition %s: %v", def.GetName(), err)
		}
		time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of a second
	}
	create(tenantDefs, imagesDefinition("farm", 8, 8))
	create(eventDefs, imagesDefinition("web", 1, 2))
	waitForState(ctx, t, tenantDefs, "farm", "NamespaceNotAllowed")
	waitForState(ctx, t, eventDefs, "web", "NamespaceNotAllowed")
	requireNoDaemonSets(ctx, t, c, tenant, event)

	// The organizer names the event's namespace, and caps the total at 4 images.
	named := startHook(t, c.root, append(append([]string{"--flag-key-file=testdata/flag.key", "--prepull-image=" + prePullHookImage}, trust...),
		"--definition-namespaces="+event, "--prepull-max-images=4")...)
	applyPrePullComponent(ctx, t, c, named.baseURL)
	waitForState(ctx, t, eventDefs, "web", "PrePulling")
	joined := imagesDefinition("joined", 2, 1)
	pods := spec(joined)["pods"].([]any)
	pods[0].(map[string]any)["name"], pods[0].(map[string]any)["containers"].([]any)[0].(map[string]any)["name"] = "a-b", "c"
	pods[1].(map[string]any)["name"], pods[1].(map[string]any)["containers"].([]any)[0].(map[string]any)["name"] = "a", "b-c"
	create(eventDefs, joined)
	create(eventDefs, imagesDefinition("big", 3, 3))
	create(eventDefs, imagesDefinition("late", 1, 1))
	waitForState(ctx, t, eventDefs, "joined", "PrePulling")
	waitForState(ctx, t, eventDefs, "big", "TooManyImages")
	waitForState(ctx, t, eventDefs, "late", "TooManyImages")
	waitForState(ctx, t, tenantDefs, "farm", "NamespaceNotAllowed")
	// What each definition of the named namespaces adds to every pre-pull sync request.
	if stored, err := eventDefs.Get(ctx, "big", metav1.GetOptions{}); err == nil {
		data, _ := json.Marshal(stored.Object)
		t.Logf("definition big (3 pods of 3 containers) as stored, managedFields and status included: %d bytes", len(data))
	}

	daemonSets := c.dyn.Resource(daemonSetGVR).Namespace(event)
	e2eutil.WaitFor(ctx, t, 60*time.Second, "a pre-pull Pod of joined on the kwok node", func() (bool, error) {
		pods, err := c.dyn.Resource(podGVR).Namespace(event).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=prepull,ctf.challenge-hook.dev/definition=joined"})
		if err != nil {
			return false, err
		}
		for _, pod := range pods.Items {
			if node, _, _ := unstructured.NestedString(pod.Object, "spec", "nodeName"); node == kwokNodeName {
				containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
				var names []string
				for _, ctr := range containers {
					names = append(names, fmt.Sprint(ctr.(map[string]any)["name"]))
				}
				if fmt.Sprint(names) != "[a-b--c a--b-c]" {
					return false, fmt.Errorf("joined's pre-pull containers %v, want [a-b--c a--b-c]", names)
				}
				return true, nil
			}
		}
		return false, nil
	})
	time.Sleep(6 * time.Second) // a resync of the pre-pull controller (5 s)
	if names := sortedNames(ctx, t, daemonSets); fmt.Sprint(names) != "[joined.prepull web.prepull]" {
		t.Errorf("DaemonSets in the event's namespace %v, want joined's and web's only", names)
	}
	requireNoDaemonSets(ctx, t, c, tenant)

	// Deleting web frees its two images: late (one) fits beside joined's two.
	if err := eventDefs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitForState(ctx, t, eventDefs, "late", "PrePulling")
	waitForPrePull(ctx, t, daemonSets, "late.prepull", []string{"registry.ctf.example/late-0-0:1"})
	t.Logf("late pre-pulled %v after web's deletion", time.Since(start).Round(time.Millisecond))
	waitForState(ctx, t, eventDefs, "big", "TooManyImages")
}

// imagesDefinition is a definition of pods pods of containers containers each, every container of
// an image of its own.
func imagesDefinition(name string, pods, containers int) *unstructured.Unstructured {
	var podList []any
	for i := range pods {
		var ctrs []any
		for j := range containers {
			ctrs = append(ctrs, map[string]any{"name": fmt.Sprintf("c%d", j), "image": fmt.Sprintf("registry.ctf.example/%s-%d-%d:1", name, i, j)})
		}
		pod := map[string]any{"name": fmt.Sprintf("p%d", i), "containers": ctrs}
		if i == 0 {
			ctrs[0].(map[string]any)["ports"] = []any{map[string]any{"containerPort": int64(8080)}}
			pod["expose"] = []any{map[string]any{"port": int64(8080), "type": "NodePort"}}
		}
		podList = append(podList, pod)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ctfGroup + "/v1alpha1",
		"kind":       "ChallengeDefinition",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"pods": podList, "timeout": "30m"},
	}}
}

// requireNoDaemonSets fails if any of the namespaces holds a DaemonSet.
func requireNoDaemonSets(ctx context.Context, t *testing.T, c *cluster, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		list, err := c.dyn.Resource(daemonSetGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ds := range list.Items {
			t.Errorf("DaemonSet %s/%s", ns, ds.GetName())
		}
	}
}
