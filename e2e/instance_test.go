//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// controllerUIDLabel is the label Metacontroller puts on children with generateSelector: true.
const controllerUIDLabel = "controller-uid"

// statusEvent is one state of a Challenge as a watch delivered it.
type statusEvent struct {
	at      time.Time
	obj     *unstructured.Unstructured // nil once deleted
	phase   string
	reason  string
	message string
}

func (e statusEvent) String() string {
	if e.obj == nil {
		return e.at.Format("15:04:05.000") + " deleted"
	}
	return fmt.Sprintf("%s rv=%s phase=%s reason=%s message=%q", e.at.Format("15:04:05.000"), e.obj.GetResourceVersion(), e.phase, e.reason, e.message)
}

// challengeWatch records every state of one Challenge from before its creation on, so that short
// phases (None lasts one sync) are seen too.
type challengeWatch struct {
	ns, name string
	mu       sync.Mutex
	events   []statusEvent
	changed  chan struct{} // closed and replaced on every event
	// cursor is the index of the next event next() looks at.
	cursor int
}

// watchChallenge starts watching the Challenge ns/name (which may not exist yet) until the test ends.
func watchChallenge(t *testing.T, c *cluster, ns, name string) *challengeWatch {
	t.Helper()
	ctx := e2eutil.TestContext(t)
	client := c.dyn.Resource(chalGVR).Namespace(ns)
	selector := "metadata.name=" + name
	list, err := client.List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		t.Fatalf("list Challenge %s/%s: %v", ns, name, err)
	}
	w := &challengeWatch{ns: ns, name: name, changed: make(chan struct{})}
	for i := range list.Items {
		w.record(&list.Items[i])
	}
	lw := &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return client.Watch(ctx, opts)
		},
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), lw)
	if err != nil {
		t.Fatalf("watch Challenge %s/%s: %v", ns, name, err)
	}
	go func() {
		for {
			for ev := range rw.ResultChan() {
				obj, ok := ev.Object.(*unstructured.Unstructured)
				if !ok {
					continue
				}
				if ev.Type == watch.Deleted {
					obj = nil
				}
				w.record(obj)
			}
			rw.Stop()
			// A retry watcher ends for good when the API server no longer has the events since its
			// resource version (410 Gone: on a busy plane a reconnection can fall behind the watch
			// cache). List again, record what is there now, and watch on from there, so that a
			// later change is still seen.
			for ctx.Err() == nil {
				list, err := client.List(ctx, metav1.ListOptions{FieldSelector: selector})
				if err == nil {
					if len(list.Items) == 0 && w.exists() {
						w.record(nil) // deleted meanwhile
					}
					for i := range list.Items {
						w.record(&list.Items[i])
					}
					if rw, err = watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), lw); err == nil {
						break
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Challenge %s/%s as watched:\n%s", ns, name, w.history())
		}
	})
	return w
}

// exists: the last state recorded is an object, not "deleted" or nothing yet.
func (w *challengeWatch) exists() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events) > 0 && w.events[len(w.events)-1].obj != nil
}

func (w *challengeWatch) record(obj *unstructured.Unstructured) {
	e := statusEvent{at: time.Now(), obj: obj}
	if obj != nil {
		e.phase, _, _ = unstructured.NestedString(obj.Object, "status", "phase")
		e.reason, _, _ = unstructured.NestedString(obj.Object, "status", "reason")
		e.message, _, _ = unstructured.NestedString(obj.Object, "status", "message")
	}
	w.mu.Lock()
	w.events = append(w.events, e)
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// next waits for the first event, from the cursor on, that satisfies cond, moves the cursor past
// it and returns it; it fails the test after timeout.
func (w *challengeWatch) next(t *testing.T, timeout time.Duration, what string, cond func(statusEvent) bool) statusEvent {
	t.Helper()
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		for ; w.cursor < len(w.events); w.cursor++ {
			if e := w.events[w.cursor]; cond(e) {
				w.cursor++
				w.mu.Unlock()
				return e
			}
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("Challenge %s/%s: no %s within %s; as watched:\n%s", w.ns, w.name, what, timeout, w.history())
		}
	}
}

// phase waits for the Challenge to show phase.
func (w *challengeWatch) phase(t *testing.T, timeout time.Duration, phase string) statusEvent {
	t.Helper()
	return w.next(t, timeout, "phase "+phase, func(e statusEvent) bool { return e.phase == phase })
}

// gone waits for the Challenge to be deleted.
func (w *challengeWatch) gone(t *testing.T, timeout time.Duration) statusEvent {
	t.Helper()
	return w.next(t, timeout, "deletion", func(e statusEvent) bool { return e.obj == nil })
}

// phases lists the phases seen so far, consecutive repeats and the empty phase (before the first
// status write) left out.
func (w *challengeWatch) phases() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, e := range w.events {
		if e.phase != "" && (len(out) == 0 || out[len(out)-1] != e.phase) {
			out = append(out, e.phase)
		}
	}
	return out
}

func (w *challengeWatch) history() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := make([]string, len(w.events))
	for i, e := range w.events {
		lines[i] = "  " + e.String()
	}
	return strings.Join(lines, "\n")
}

// createObject creates obj in ns (its namespace field is overwritten) and returns it as stored.
func createObject(ctx context.Context, t *testing.T, c *cluster, ns string, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	obj = obj.DeepCopy()
	obj.SetNamespace(ns)
	client, err := c.resourceFor(obj)
	if err != nil {
		t.Fatal(err)
	}
	created, err := client.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", obj.GetKind(), ns, obj.GetName(), err)
	}
	return created
}

// startChallenge watches, then creates, a Challenge in ns.
func startChallenge(ctx context.Context, t *testing.T, c *cluster, ns string, obj *unstructured.Unstructured) (*challengeWatch, *unstructured.Unstructured) {
	t.Helper()
	w := watchChallenge(t, c, ns, obj.GetName())
	return w, createObject(ctx, t, c, ns, obj)
}

// childID names a child across snapshots: "<resource> <namespace>/<name>".
func childID(gvr schema.GroupVersionResource, obj *unstructured.Unstructured) string {
	return gvr.GroupResource().String() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// childrenOf lists every object of the CompositeController's child types in ns that carries the
// parent's controller-uid label, by childID.
func childrenOf(ctx context.Context, t *testing.T, c *cluster, ns string, parentUID types.UID) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, gvr := range shared.children {
		list, err := c.dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{controllerUIDLabel: string(parentUID)}.String(),
		})
		if err != nil {
			t.Fatalf("list %s in %s: %v", gvr.Resource, ns, err)
		}
		for i := range list.Items {
			out[childID(gvr, &list.Items[i])] = &list.Items[i]
		}
	}
	return out
}

// ofResource picks the children of one resource ("services", "ingresses.networking.k8s.io"), in
// name order.
func ofResource(children map[string]*unstructured.Unstructured, groupResource string) []*unstructured.Unstructured {
	var ids []string
	for id := range children {
		if strings.HasPrefix(id, groupResource+" ") {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	out := make([]*unstructured.Unstructured, len(ids))
	for i, id := range ids {
		out[i] = children[id]
	}
	return out
}

// workloadsOf picks the instance's workload children (see workloadResource).
func workloadsOf(children map[string]*unstructured.Unstructured) []*unstructured.Unstructured {
	return ofResource(children, workloadResource.GroupResource().String())
}

// childVersion is what changes when a child is rewritten or replaced.
type childVersion struct {
	uid             types.UID
	generation      int64
	resourceVersion string
}

func versions(children map[string]*unstructured.Unstructured) map[string]childVersion {
	out := make(map[string]childVersion, len(children))
	for id, obj := range children {
		out[id] = childVersion{uid: obj.GetUID(), generation: obj.GetGeneration(), resourceVersion: obj.GetResourceVersion()}
	}
	return out
}

// sameChildren reports how after differs from before: a child missing, added, replaced (new uid)
// or rewritten (new generation; with compareRV, any new resourceVersion).
func sameChildren(before, after map[string]childVersion, compareRV bool) []string {
	var problems []string
	for id, b := range before {
		a, ok := after[id]
		switch {
		case !ok:
			problems = append(problems, id+" was deleted")
		case a.uid != b.uid:
			problems = append(problems, fmt.Sprintf("%s was replaced (uid %s -> %s)", id, b.uid, a.uid))
		case a.generation != b.generation:
			problems = append(problems, fmt.Sprintf("%s was rewritten (generation %d -> %d)", id, b.generation, a.generation))
		case compareRV && a.resourceVersion != b.resourceVersion:
			problems = append(problems, fmt.Sprintf("%s was written (resourceVersion %s -> %s)", id, b.resourceVersion, a.resourceVersion))
		}
	}
	for id := range after {
		if _, ok := before[id]; !ok {
			problems = append(problems, id+" appeared")
		}
	}
	sort.Strings(problems)
	return problems
}

// checkControllerOwner: every child names the Challenge as its controller.
func checkControllerOwner(t *testing.T, parent *unstructured.Unstructured, children map[string]*unstructured.Unstructured) {
	t.Helper()
	if len(children) == 0 {
		t.Errorf("Challenge %s has no children", parent.GetName())
	}
	for id, child := range children {
		ref := metav1.GetControllerOf(child)
		if ref == nil || ref.UID != parent.GetUID() || ref.Kind != "Challenge" || ref.Name != parent.GetName() {
			t.Errorf("%s: controller owner %+v, want the Challenge %s (uid %s)", id, ref, parent.GetName(), parent.GetUID())
		}
	}
}

// metacontrollerLog reads the lines Metacontroller writes about child objects (--zap-log-level=4:
// one "Creating", "Updating" or "Deleting child" line per write, and "Deleting for update" when an
// updateStrategy Recreate child is deleted to be created again).
type metacontrollerLog struct{ path string }

// offset is where the log ends now; lines written later are read from there.
func (l metacontrollerLog) offset(t *testing.T) int64 {
	t.Helper()
	info, err := os.Stat(l.path)
	if err != nil {
		t.Fatalf("Metacontroller log: %v", err)
	}
	return info.Size()
}

// childWrites counts, by message, the child writes logged since offset for parents in namespace ns.
func (l metacontrollerLog) childWrites(t *testing.T, offset int64, ns string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	l.scan(t, offset, func(line []byte) {
		var entry struct {
			Msg    string `json:"msg"`
			Parent struct {
				Namespace string `json:"namespace"`
			} `json:"parent"`
		}
		if json.Unmarshal(line, &entry) != nil {
			return
		}
		switch entry.Msg {
		case "Creating", "Updating", "Deleting child", "Deleting for update":
			if entry.Parent.Namespace == ns {
				counts[entry.Msg]++
			}
		}
	})
	return counts
}

// scan calls each with every line of the log from offset on.
func (l metacontrollerLog) scan(t *testing.T, offset int64, each func(line []byte)) {
	t.Helper()
	f, err := os.Open(l.path)
	if err != nil {
		t.Fatalf("Metacontroller log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		t.Fatalf("Metacontroller log: %v", err)
	}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		each(scanner.Bytes())
	}
	if err := scanner.Err(); err != nil {
		t.Fatalf("Metacontroller log: %v", err)
	}
}
