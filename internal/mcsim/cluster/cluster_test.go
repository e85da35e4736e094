package cluster

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// touch changes a label of the parent: an update that enqueues it.
func (h *harness) touch(name, value string) {
	h.t.Helper()
	patch := `{"metadata":{"labels":{"touched":"` + value + `"}}}`
	_, err := h.dyn.Resource(widgets).Namespace(testNamespace).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(h.t, err)
}

// TestChildrenCreated: each new child is created in the parent's namespace with a controller
// ownerReference, the controller-uid label and its last-applied annotation, every request
// carries the Secret's token, and the status is written with observedGeneration.
func TestChildrenCreated(t *testing.T) {
	h := newHarness(t, childrenAnswer(configMap("c", mcsim.Object{"k": "v"}), service("s", 80), pod("p", "app:1")))
	h.start(h.controller(false, false, nil), 2)
	w := h.mustCreate(widgets, widget("w", mcsim.Object{"size": "1"}))
	h.eventually("three children", func() bool { return len(h.list(pods))+len(h.list(services))+len(h.list(configMaps)) == 3 })
	cm, err := h.get(configMaps, "c")
	require.NoError(t, err)
	assert.Equal(t, []metav1.OwnerReference{controllerRef(w)}, cm.GetOwnerReferences())
	assert.Equal(t, string(w.GetUID()), cm.GetLabels()["controller-uid"])
	assert.JSONEq(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns","labels":{"controller-uid":"`+string(w.GetUID())+`"}},"data":{"k":"v"}}`,
		cm.GetAnnotations()[wire.LastAppliedAnnotation])
	h.eventually("the status", func() bool {
		got, _ := h.get(widgets, "w")
		return assert.ObjectsAreEqual(map[string]any{"phase": "Ready", "observedGeneration": int64(1)}, got.Object["status"])
	})
	for _, r := range h.received("") {
		assert.Equal(t, "Bearer s3cret", r.authorization, "the token of the Secret the webhook names")
	}
}

// TestChildrenByControllerRef: the request's children are the objects whose controller
// ownerReference is the parent (not those that only carry its label), keyed by type and
// "<namespace>/<name>", every declared type present.
func TestChildrenByControllerRef(t *testing.T) {
	h := newHarness(t, childrenAnswer())
	h.start(h.controller(false, false, nil), 1)
	w := h.mustCreate(widgets, widget("w", nil))
	labelled := &unstructured.Unstructured{Object: configMap("labelled", nil)}
	labelled.SetNamespace(testNamespace)
	labelled.SetLabels(map[string]string{"controller-uid": string(w.GetUID())})
	h.mustCreate(configMaps, labelled)
	owned := &unstructured.Unstructured{Object: configMap("owned", nil)}
	owned.SetNamespace(testNamespace)
	owned.SetOwnerReferences([]metav1.OwnerReference{controllerRef(w)})
	// The answer declares it, so that it is not deleted.
	h.setAnswer(childrenAnswer(configMap("owned", nil)))
	h.mustCreate(configMaps, owned)
	h.eventually("a sync that observes the owned child", func() bool {
		for _, r := range h.received("/sync") {
			if _, ok := r.body["children"].(map[string]any)["ConfigMap.v1"].(map[string]any)["ns/owned"]; ok {
				return true
			}
		}
		return false
	})
	last := h.received("/sync")
	children := last[len(last)-1].body["children"].(map[string]any)
	assert.Equal(t, []string{"ns/owned"}, keys(children["ConfigMap.v1"]))
	assert.Equal(t, map[string]any{}, children["Service.v1"])
	assert.Equal(t, map[string]any{}, children["Pod.v1"])
	_, err := h.get(configMaps, "labelled")
	assert.NoError(t, err, "a child the parent does not control is never deleted")
}

func keys(m any) []string {
	var out []string
	for k := range m.(map[string]any) {
		out = append(out, k)
	}
	return out
}

// TestUndeclaredChildDeleted: an observed child the answer leaves out is deleted.
func TestUndeclaredChildDeleted(t *testing.T) {
	h := newHarness(t, childrenAnswer(configMap("a", nil), configMap("b", nil)))
	h.start(h.controller(false, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("both children", func() bool { return len(h.list(configMaps)) == 2 })
	h.setAnswer(childrenAnswer(configMap("a", nil)))
	h.touch("w", "1")
	h.eventually("b deleted", func() bool {
		_, err := h.get(configMaps, "b")
		return apierrors.IsNotFound(err)
	})
	_, err := h.get(configMaps, "a")
	assert.NoError(t, err)
}

// TestUpdateStrategies: when the three-way merge changes a child, OnDelete leaves it, InPlace
// updates it and Recreate deletes it (a later sync creates it again); an unchanged answer writes
// nothing.
func TestUpdateStrategies(t *testing.T) {
	h := newHarness(t, childrenAnswer(configMap("c", mcsim.Object{"k": "1"}), service("s", 80), pod("p", "app:1")))
	h.start(h.controller(false, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("three children", func() bool { return len(h.list(pods))+len(h.list(services))+len(h.list(configMaps)) == 3 })
	oldPod, err := h.get(pods, "p")
	require.NoError(t, err)
	// The same answer again: nothing is written.
	syncs := len(h.received("/sync"))
	h.touch("w", "1")
	h.eventually("a sync", func() bool { return len(h.received("/sync")) > syncs })
	time.Sleep(200 * time.Millisecond)
	assert.Zero(t, h.actions("update", services, ""), "an unchanged answer updates nothing")
	assert.Zero(t, h.actions("delete", pods, ""), "an unchanged answer recreates nothing")

	h.setAnswer(childrenAnswer(configMap("c", mcsim.Object{"k": "2"}), service("s", 81), pod("p", "app:2")))
	h.touch("w", "2")
	h.eventually("the Service updated in place", func() bool {
		s, err := h.get(services, "s")
		return err == nil && s.Object["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)["port"] == int64(81)
	})
	h.eventually("the Pod recreated", func() bool {
		p, err := h.get(pods, "p")
		return err == nil && p.GetUID() != oldPod.GetUID()
	})
	p, _ := h.get(pods, "p")
	assert.Equal(t, "app:2", p.Object["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"])
	cm, err := h.get(configMaps, "c")
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"k": "1"}, cm.Object["data"], "OnDelete never updates")
}

// TestStatusWrittenWhenItDiffers: the status is read from the API server and written to /status
// only when the answer's differs from the stored one.
func TestStatusWrittenWhenItDiffers(t *testing.T) {
	h := newHarness(t, childrenAnswer())
	h.start(h.controller(false, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("the status written", func() bool { return h.actions("update", widgets, "status") == 1 })
	for i := range 3 {
		syncs := len(h.received("/sync"))
		h.touch("w", string(rune('a'+i)))
		h.eventually("a sync", func() bool { return len(h.received("/sync")) > syncs })
	}
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, 1, h.actions("update", widgets, "status"), "the same status is not written again")
	assert.GreaterOrEqual(t, h.actions("get", widgets, ""), 4, "each status write reads the parent first")
	h.setAnswer(func(string, map[string]any) (int, map[string]any) {
		return http.StatusOK, map[string]any{"status": map[string]any{"phase": "Other"}, "children": []any{}}
	})
	h.touch("w", "z")
	h.eventually("the new status written", func() bool { return h.actions("update", widgets, "status") == 2 })
}

// TestResyncPeriod: resyncPeriodSeconds syncs every parent again, with nothing changed.
func TestResyncPeriod(t *testing.T) {
	h := newHarness(t, childrenAnswer())
	h.start(h.controller(false, false, func(spec mcsim.Object) { spec["resyncPeriodSeconds"] = int64(1) }), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("three syncs", func() bool { return len(h.received("/sync")) >= 3 })
}

// TestResyncAfterSeconds: an answer's resyncAfterSeconds syncs the parent again then; without
// it, nothing does.
func TestResyncAfterSeconds(t *testing.T) {
	after := 0.2
	h := newHarness(t, func(string, map[string]any) (int, map[string]any) {
		return http.StatusOK, map[string]any{"status": map[string]any{}, "children": []any{}, "resyncAfterSeconds": after}
	})
	h.start(h.controller(false, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("four syncs", func() bool { return len(h.received("/sync")) >= 4 })
	h.setAnswer(childrenAnswer())
	time.Sleep(500 * time.Millisecond)
	n := len(h.received("/sync"))
	time.Sleep(time.Second)
	assert.Equal(t, n, len(h.received("/sync")), "no resyncAfterSeconds, no sync")
}

// TestIgnoreStatusChanges: with parentResource.ignoreStatusChanges a write of the status alone
// syncs nothing, while a label change does; without it, the status write syncs.
func TestIgnoreStatusChanges(t *testing.T) {
	for _, ignore := range []bool{true, false} {
		t.Run(map[bool]string{true: "ignored", false: "synced"}[ignore], func(t *testing.T) {
			h := newHarness(t, childrenAnswer())
			h.start(h.controller(false, false, func(spec mcsim.Object) {
				spec["parentResource"].(mcsim.Object)["ignoreStatusChanges"] = ignore
			}), 1)
			h.mustCreate(widgets, widget("w", nil))
			h.eventually("the status written", func() bool { return h.actions("update", widgets, "status") == 1 })
			time.Sleep(300 * time.Millisecond)
			n := len(h.received("/sync"))
			w, err := h.get(widgets, "w")
			require.NoError(t, err)
			w.Object["status"] = map[string]any{"phase": "Written by someone else"}
			_, err = h.dyn.Resource(widgets).Namespace(testNamespace).UpdateStatus(context.Background(), w, metav1.UpdateOptions{})
			require.NoError(t, err)
			if ignore {
				time.Sleep(500 * time.Millisecond)
				assert.Equal(t, n, len(h.received("/sync")), "a status change alone syncs nothing")
				h.touch("w", "1")
			}
			h.eventually("a sync", func() bool { return len(h.received("/sync")) > n })
		})
	}
}

// TestCustomizeRelated: the customize hook is called once per parent generation; the objects its
// rules select are the request's related map, and a change of one syncs the parent again with it.
func TestCustomizeRelated(t *testing.T) {
	h := newHarness(t, func(path string, request map[string]any) (int, map[string]any) {
		if path == "/customize" {
			return http.StatusOK, map[string]any{"relatedResources": []any{
				map[string]any{"apiVersion": "example.dev/v1", "resource": "gadgets", "namespace": testNamespace, "names": []any{"g1"}},
				map[string]any{"apiVersion": "example.dev/v1", "resource": "gadgets", "labelSelector": map[string]any{"matchLabels": map[string]any{"team": "blue"}}},
			}}
		}
		return http.StatusOK, map[string]any{"status": map[string]any{}, "children": []any{}}
	})
	gadget := func(name, ns, color string, labels map[string]string) *unstructured.Unstructured {
		g := &unstructured.Unstructured{Object: mcsim.Object{"apiVersion": "example.dev/v1", "kind": "Gadget",
			"metadata": mcsim.Object{"name": name, "namespace": ns}, "spec": mcsim.Object{"color": color}}}
		g.SetLabels(labels)
		return g
	}
	h.mustCreate(gadgets, gadget("g1", testNamespace, "red", nil))
	h.mustCreate(gadgets, gadget("g2", testNamespace, "red", nil))
	h.mustCreate(gadgets, gadget("g3", "other", "red", map[string]string{"team": "blue"}))
	h.start(h.controller(false, true, func(spec mcsim.Object) {
		spec["parentResource"].(mcsim.Object)["ignoreStatusChanges"] = true
	}), 1)
	h.mustCreate(widgets, widget("w", nil))
	related := func() map[string]any {
		syncs := h.received("/sync")
		if len(syncs) == 0 {
			return nil
		}
		r, _ := syncs[len(syncs)-1].body["related"].(map[string]any)["Gadget.example.dev/v1"].(map[string]any)
		return r
	}
	h.eventually("a sync with g1 and g3 related", func() bool {
		r := related()
		_, g1 := r["ns/g1"]
		_, g3 := r["other/g3"]
		return len(r) == 2 && g1 && g3
	})
	h.eventually("the status written", func() bool { return h.actions("update", widgets, "status") == 1 })
	time.Sleep(300 * time.Millisecond) // nothing else syncs the parent now
	g1, err := h.get(gadgets, "g1")
	require.NoError(t, err)
	g1.Object["spec"] = mcsim.Object{"color": "green"}
	_, err = h.dyn.Resource(gadgets).Namespace(testNamespace).Update(context.Background(), g1, metav1.UpdateOptions{})
	require.NoError(t, err)
	h.eventually("a sync with g1 changed", func() bool {
		g, _ := related()["ns/g1"].(map[string]any)
		return g != nil && g["spec"].(map[string]any)["color"] == "green"
	})
	assert.Len(t, h.received("/customize"), 1, "one customize call for one generation")
	w, err := h.get(widgets, "w")
	require.NoError(t, err)
	w.Object["spec"] = mcsim.Object{"size": "2"}
	_, err = h.dyn.Resource(widgets).Namespace(testNamespace).Update(context.Background(), w, metav1.UpdateOptions{})
	require.NoError(t, err)
	h.eventually("customize called for the new generation", func() bool { return len(h.received("/customize")) == 2 })
}

// TestFinalizer: with a finalize hook, the parent holds Metacontroller's finalizer before its
// first sync; once deleted, the finalize hook is called (finalizing: true), its children are
// still managed, and finalized: true removes the finalizer, which lets the parent go.
func TestFinalizer(t *testing.T) {
	finalized := false
	h := newHarness(t, func(path string, request map[string]any) (int, map[string]any) {
		if path == "/finalize" {
			return http.StatusOK, map[string]any{"status": map[string]any{"phase": "Terminating"}, "children": []any{}, "finalized": finalized}
		}
		return http.StatusOK, map[string]any{"status": map[string]any{"phase": "Ready"}, "children": []any{configMap("c", nil)}}
	})
	h.start(h.controller(true, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("the child", func() bool { return len(h.list(configMaps)) == 1 })
	first := h.received("/sync")[0].body["parent"].(map[string]any)["metadata"].(map[string]any)
	assert.Equal(t, []any{"metacontroller.io/compositecontroller-web"}, first["finalizers"], "the finalizer is on before the first sync")

	require.NoError(t, h.dyn.Resource(widgets).Namespace(testNamespace).Delete(context.Background(), "w", metav1.DeleteOptions{}))
	h.eventually("a finalize request", func() bool { return len(h.received("/finalize")) > 0 })
	assert.Equal(t, true, h.received("/finalize")[0].body["finalizing"])
	h.eventually("the child deleted while finalizing", func() bool { return len(h.list(configMaps)) == 0 })
	_, err := h.get(widgets, "w")
	require.NoError(t, err, "finalized: false keeps the parent")
	h.mu.Lock()
	finalized = true
	h.mu.Unlock()
	h.touch("w", "1")
	h.eventually("the parent gone", func() bool {
		_, err := h.get(widgets, "w")
		return apierrors.IsNotFound(err)
	})
}

// TestNoFinalizeHookNoFinalizer: without a finalize hook no finalizer is added, and one left by
// an earlier spec is removed.
func TestNoFinalizeHookNoFinalizer(t *testing.T) {
	h := newHarness(t, childrenAnswer())
	h.start(h.controller(false, false, nil), 1)
	w := widget("w", nil)
	w.SetFinalizers([]string{"metacontroller.io/compositecontroller-web", "keep"})
	h.mustCreate(widgets, w)
	h.eventually("Metacontroller's finalizer removed", func() bool {
		got, err := h.get(widgets, "w")
		return err == nil && len(got.GetFinalizers()) == 1 && got.GetFinalizers()[0] == "keep"
	})
}

// TestHookErrorChangesNothing: an answer other than 200 skips the sync entirely (no child, no
// status), records a SyncError event and is retried.
func TestHookErrorChangesNothing(t *testing.T) {
	h := newHarness(t, func(string, map[string]any) (int, map[string]any) {
		return http.StatusInternalServerError, map[string]any{"status": map[string]any{"phase": "Broken"}, "children": []any{configMap("c", nil)}}
	})
	h.start(h.controller(false, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("retries", func() bool { return len(h.received("/sync")) >= 3 })
	assert.Empty(t, h.list(configMaps))
	assert.Zero(t, h.actions("update", widgets, "status"))
	select {
	case e := <-h.events.Events:
		assert.True(t, strings.HasPrefix(e, "Warning SyncError Sync error: "), e)
	case <-time.After(5 * time.Second):
		t.Fatal("no SyncError event")
	}
}

// TestTooManyRequests: a 429 answer delays the next sync by its Retry-After (1 s here) instead
// of the queue's backoff (5 ms, doubling), and records no event.
func TestTooManyRequests(t *testing.T) {
	h := newHarness(t, func(string, map[string]any) (int, map[string]any) {
		return http.StatusTooManyRequests, map[string]any{}
	})
	h.start(h.controller(false, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("a sync", func() bool { return len(h.received("/sync")) == 1 })
	time.Sleep(700 * time.Millisecond)
	assert.Len(t, h.received("/sync"), 1, "no retry before Retry-After")
	h.eventually("the retry after 1 s", func() bool { return len(h.received("/sync")) == 2 })
	assert.Empty(t, h.events.Events, "a 429 records no event")
}

// TestWorkers: at most --workers syncs run at once, each parent on one worker at a time.
func TestWorkers(t *testing.T) {
	for _, workers := range []int{1, 3} {
		h := newHarness(t, childrenAnswer())
		h.start(h.controller(false, false, nil), workers)
		for i := range 8 {
			h.mustCreate(widgets, widget("w"+string(rune('0'+i)), nil))
		}
		h.eventually("every parent synced", func() bool { return h.actions("update", widgets, "status") == 8 })
		assert.Equal(t, int32(workers), h.maxInFlight.Load(), "hook requests in flight with %d workers", workers)
	}
}

// TestStrictV2Answer: a v2 hook's answer with an unknown key is an error: nothing is applied.
func TestStrictV2Answer(t *testing.T) {
	h := newHarness(t, func(string, map[string]any) (int, map[string]any) {
		return http.StatusOK, map[string]any{"status": map[string]any{}, "children": []any{configMap("c", nil)}, "resyncAfter": 1}
	})
	h.start(h.controller(false, false, nil), 1)
	h.mustCreate(widgets, widget("w", nil))
	h.eventually("retries", func() bool { return len(h.received("/sync")) >= 2 })
	assert.Empty(t, h.list(configMaps))
	raw, _ := json.Marshal(h.received("/sync")[0].body["controller"])
	assert.Contains(t, string(raw), `"name":"web"`, "every request carries the CompositeController")
}
