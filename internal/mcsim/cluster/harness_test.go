package cluster

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// The harness's API: a namespaced parent (Widget, status subresource), three child types, one
// per update strategy, and a related type (Gadget).
var (
	widgets    = schema.GroupVersionResource{Group: "example.dev", Version: "v1", Resource: "widgets"}
	gadgets    = schema.GroupVersionResource{Group: "example.dev", Version: "v1", Resource: "gadgets"}
	pods       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	services   = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

const testNamespace = "ns"

// harness is the simulator against a fake API server that behaves as the real one where the
// simulator's behaviours depend on it: uids, resourceVersions and generations are set, an update
// of the main resource keeps the status and one of /status keeps the rest, and a delete of an
// object holding finalizers only sets its deletionTimestamp.
type harness struct {
	t   *testing.T
	dyn *dynamicfake.FakeDynamicClient
	// answer is the hook: it answers each request (sync, finalize or customize, by path).
	mu                    sync.Mutex
	answer                func(path string, request map[string]any) (int, map[string]any)
	requests              []hookRequest
	inFlight, maxInFlight atomic.Int32
	rv                    atomic.Int64
	hook                  *httptest.Server
	events                *record.FakeRecorder
}

type hookRequest struct {
	path          string
	authorization string
	body          map[string]any
}

// newHarness serves the hook on 127.0.0.1 and creates the CompositeController cc (its spec; the
// hooks' urls are set to the hook's).
func newHarness(t *testing.T, answer func(path string, request map[string]any) (int, map[string]any)) *harness {
	h := &harness{t: t, answer: answer}
	h.hook = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.hook.Close)
	listKinds := map[schema.GroupVersionResource]string{
		widgets: "WidgetList", gadgets: "GadgetList", pods: "PodList", services: "ServiceList", configMaps: "ConfigMapList",
		compositeControllers: "CompositeControllerList",
	}
	h.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds)
	h.dyn.PrependReactor("create", "*", h.create)
	h.dyn.PrependReactor("update", "*", h.update)
	h.dyn.PrependReactor("delete", "*", h.delete)
	return h
}

func (h *harness) serve(w http.ResponseWriter, r *http.Request) {
	n := h.inFlight.Add(1)
	defer h.inFlight.Add(-1)
	for {
		m := h.maxInFlight.Load()
		if n <= m || h.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	var request map[string]any
	if err := json.Unmarshal(body, &request); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.requests = append(h.requests, hookRequest{path: r.URL.Path, authorization: r.Header.Get("Authorization"), body: request})
	answer := h.answer
	h.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // long enough for concurrent syncs to overlap
	code, response := answer(r.URL.Path, request)
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(response)
}

// setAnswer replaces the hook's answers.
func (h *harness) setAnswer(answer func(path string, request map[string]any) (int, map[string]any)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answer = answer
}

// received is what the hook received so far, at path ("" for every path).
func (h *harness) received(path string) []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookRequest
	for _, r := range h.requests {
		if path == "" || r.path == path {
			out = append(out, r)
		}
	}
	return out
}

// controller is a CompositeController of the harness's types whose hooks call the harness.
func (h *harness) controller(finalize, customize bool, edit func(spec mcsim.Object)) *unstructured.Unstructured {
	webhook := func(path string) mcsim.Object {
		return mcsim.Object{"version": "v2", "webhook": mcsim.Object{"url": h.hook.URL + path, "timeout": "2s",
			"authorization": mcsim.Object{"secretRef": mcsim.Object{"name": "token", "namespace": "hook", "key": "token"}}}}
	}
	hooks := mcsim.Object{"sync": webhook("/sync")}
	if finalize {
		hooks["finalize"] = webhook("/finalize")
	}
	if customize {
		hooks["customize"] = webhook("/customize")
	}
	spec := mcsim.Object{
		"parentResource": mcsim.Object{"apiVersion": "example.dev/v1", "resource": "widgets"},
		"childResources": []any{
			mcsim.Object{"apiVersion": "v1", "resource": "pods", "updateStrategy": mcsim.Object{"method": "Recreate"}},
			mcsim.Object{"apiVersion": "v1", "resource": "services", "updateStrategy": mcsim.Object{"method": "InPlace"}},
			mcsim.Object{"apiVersion": "v1", "resource": "configmaps"},
		},
		"generateSelector": true,
		"hooks":            hooks,
	}
	if edit != nil {
		edit(spec)
	}
	return &unstructured.Unstructured{Object: mcsim.Object{"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
		"metadata": mcsim.Object{"name": "web"}, "spec": spec}}
}

// start creates cc and runs the simulator with workers until the test ends.
func (h *harness) start(cc *unstructured.Unstructured, workers int) {
	h.t.Helper()
	h.mustCreate(compositeControllers, cc)
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "token", Namespace: "hook"}, Data: map[string][]byte{"token": []byte("s3cret\n")}}
	secret := func(_ context.Context, namespace, name string) (*corev1.Secret, error) {
		if namespace != token.Namespace || name != token.Name {
			return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
		}
		return token, nil
	}
	disco := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{}}
	disco.Resources = []*metav1.APIResourceList{
		{GroupVersion: "example.dev/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true}, {Name: "widgets/status", Kind: "Widget", Namespaced: true},
			{Name: "gadgets", Kind: "Gadget", Namespaced: true}}},
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "pods", Kind: "Pod", Namespaced: true}, {Name: "services", Kind: "Service", Namespaced: true},
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}},
	}
	h.events = record.NewFakeRecorder(100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	opts := Options{Workers: workers, DiscoveryInterval: time.Hour, Controllers: labels.Everything(),
		Log: NewLogger(testLog(), 4), Metrics: NewMetrics()}
	go func() {
		defer close(done)
		_ = run(ctx, clients{dynamic: h.dyn, secret: secret, discovery: memory.NewMemCacheClient(disco), events: h.events}, opts)
	}()
	h.t.Cleanup(func() { cancel(); <-done })
}

// Objects as the fake API server stores them.

func (h *harness) stamp(obj *unstructured.Unstructured) {
	obj.SetResourceVersion(strconv.FormatInt(h.rv.Add(1), 10))
}

func (h *harness) create(action clienttesting.Action) (bool, runtime.Object, error) {
	obj := action.(clienttesting.CreateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
	if obj.GetUID() == "" {
		obj.SetUID(types.UID("uid-" + obj.GetName() + "-" + strconv.FormatInt(h.rv.Load(), 10)))
	}
	obj.SetGeneration(1)
	obj.SetCreationTimestamp(metav1.Now())
	h.stamp(obj)
	err := h.dyn.Tracker().Create(action.GetResource(), obj, action.GetNamespace())
	return true, obj, err
}

func (h *harness) update(action clienttesting.Action) (bool, runtime.Object, error) {
	obj := action.(clienttesting.UpdateAction).GetObject().(*unstructured.Unstructured).DeepCopy()
	gvr, ns := action.GetResource(), action.GetNamespace()
	stored, err := h.dyn.Tracker().Get(gvr, ns, obj.GetName())
	if err != nil {
		return true, nil, err
	}
	old := stored.(*unstructured.Unstructured)
	if obj.GetResourceVersion() != "" && obj.GetResourceVersion() != old.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(gvr.GroupResource(), obj.GetName(), nil)
	}
	var next *unstructured.Unstructured
	if action.GetSubresource() == "status" {
		next = old.DeepCopy()
		next.Object["status"] = obj.Object["status"]
	} else {
		next = obj
		next.SetGeneration(old.GetGeneration())
		next.SetDeletionTimestamp(old.GetDeletionTimestamp())
		if status, ok := old.Object["status"]; ok {
			next.Object["status"] = status
		}
		if !reflect.DeepEqual(old.Object["spec"], obj.Object["spec"]) {
			next.SetGeneration(old.GetGeneration() + 1)
		}
	}
	if reflect.DeepEqual(next.Object, old.Object) {
		return true, old, nil // a no-op update writes nothing
	}
	h.stamp(next)
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		return true, next, h.dyn.Tracker().Delete(gvr, ns, next.GetName())
	}
	return true, next, h.dyn.Tracker().Update(gvr, next, ns)
}

func (h *harness) delete(action clienttesting.Action) (bool, runtime.Object, error) {
	gvr, ns, name := action.GetResource(), action.GetNamespace(), action.(clienttesting.DeleteAction).GetName()
	stored, err := h.dyn.Tracker().Get(gvr, ns, name)
	if err != nil {
		return true, nil, err
	}
	obj := stored.(*unstructured.Unstructured).DeepCopy()
	if len(obj.GetFinalizers()) == 0 {
		return true, nil, h.dyn.Tracker().Delete(gvr, ns, name)
	}
	if obj.GetDeletionTimestamp() == nil {
		now := metav1.Now()
		obj.SetDeletionTimestamp(&now)
		h.stamp(obj)
		return true, nil, h.dyn.Tracker().Update(gvr, obj, ns)
	}
	return true, nil, nil
}

func (h *harness) mustCreate(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	h.t.Helper()
	created, err := h.dyn.Resource(gvr).Namespace(obj.GetNamespace()).Create(context.Background(), obj, metav1.CreateOptions{})
	require.NoError(h.t, err)
	return created
}

func (h *harness) get(gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	return h.dyn.Resource(gvr).Namespace(testNamespace).Get(context.Background(), name, metav1.GetOptions{})
}

func (h *harness) list(gvr schema.GroupVersionResource) []unstructured.Unstructured {
	h.t.Helper()
	list, err := h.dyn.Resource(gvr).Namespace(testNamespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(h.t, err)
	return list.Items
}

// actions counts the API calls of verb (and subresource) on gvr so far.
func (h *harness) actions(verb string, gvr schema.GroupVersionResource, subresource string) int {
	n := 0
	for _, a := range h.dyn.Actions() {
		if a.GetVerb() == verb && a.GetResource() == gvr && a.GetSubresource() == subresource {
			n++
		}
	}
	return n
}

// eventually waits up to 10 s for cond.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	require.Eventually(h.t, cond, 10*time.Second, 20*time.Millisecond, what)
}

func widget(name string, spec mcsim.Object) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: mcsim.Object{"apiVersion": "example.dev/v1", "kind": "Widget",
		"metadata": mcsim.Object{"name": name, "namespace": testNamespace}, "spec": spec}}
}

// syncAnswer answers every sync with children and a status naming how many children it saw.
func childrenAnswer(children ...mcsim.Object) func(string, map[string]any) (int, map[string]any) {
	return func(path string, request map[string]any) (int, map[string]any) {
		if path == "/customize" {
			return http.StatusOK, map[string]any{"relatedResources": []any{}}
		}
		list := make([]any, len(children))
		for i, c := range children {
			list[i] = c
		}
		return http.StatusOK, map[string]any{"status": map[string]any{"phase": "Ready"}, "children": list}
	}
}

func configMap(name string, data mcsim.Object) mcsim.Object {
	return mcsim.Object{"apiVersion": "v1", "kind": "ConfigMap", "metadata": mcsim.Object{"name": name}, "data": data}
}

func service(name string, port int64) mcsim.Object {
	return mcsim.Object{"apiVersion": "v1", "kind": "Service", "metadata": mcsim.Object{"name": name},
		"spec": mcsim.Object{"ports": []any{mcsim.Object{"port": port, "protocol": "TCP"}}}}
}

func pod(name, image string) mcsim.Object {
	return mcsim.Object{"apiVersion": "v1", "kind": "Pod", "metadata": mcsim.Object{"name": name},
		"spec": mcsim.Object{"containers": []any{mcsim.Object{"name": "app", "image": image}}}}
}

// testLog is where the simulator logs in tests: nowhere, unless MCSIM_TEST_LOG is set.
func testLog() io.Writer {
	if os.Getenv("MCSIM_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}
