package platform

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/kubewatch"
)

var (
	challengesGVR  = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "challenges"}
	definitionsGVR = schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: "challengedefinitions"}
)

// The caches' indexes: definitions by the rCTF challenge id they are marked with, Challenges by
// the definition and owner they run.
const (
	byRCTFChallenge = "rctf-challenge"
	byInstance      = "instance"
)

// Kube is the Store of a real API server: a watch of the Challenges and one of the
// ChallengeDefinitions in each namespace of the event, decoded once as they arrive, so that
// rCTF's polls cost the API server nothing; writes go to the API server. It needs what
// manifests/platform-rbac.yaml grants in those namespaces, and nothing else.
type Kube struct {
	client      dynamic.Interface
	challenges  map[string]cache.SharedIndexInformer
	definitions map[string]cache.SharedIndexInformer

	// changed is closed (and replaced) at every change of a cached Challenge: a write waits on
	// it for the watch to bring the write back (awaitCache).
	changedMu sync.Mutex
	changed   chan struct{}
}

// NewKube prepares the watches of namespaces (at least one); Start starts them.
func NewKube(client dynamic.Interface, namespaces []string) (*Kube, error) {
	if len(namespaces) == 0 {
		return nil, fmt.Errorf("no namespace: the component acts only in the namespaces it is given")
	}
	k := &Kube{client: client, challenges: map[string]cache.SharedIndexInformer{}, definitions: map[string]cache.SharedIndexInformer{},
		changed: make(chan struct{})}
	notify := func(any) { k.notifyChange() }
	onChange := cache.ResourceEventHandlerFuncs{AddFunc: notify, UpdateFunc: func(_, obj any) { notify(obj) }, DeleteFunc: notify}
	for _, ns := range namespaces {
		challenges := kubewatch.NewInformer(client, challengesGVR, ns, "", 0, cache.Indexers{byInstance: instanceKeys})
		if err := challenges.SetTransform(decodeInto[v1alpha1.Challenge]); err != nil {
			return nil, fmt.Errorf("the Challenges' watch of namespace %q: %w", ns, err)
		}
		if _, err := challenges.AddEventHandler(onChange); err != nil {
			return nil, fmt.Errorf("the Challenges' watch of namespace %q: %w", ns, err)
		}
		definitions := kubewatch.NewInformer(client, definitionsGVR, ns, "", 0, cache.Indexers{byRCTFChallenge: rctfChallengeKeys})
		if err := definitions.SetTransform(decodeInto[v1alpha1.ChallengeDefinition]); err != nil {
			return nil, fmt.Errorf("the ChallengeDefinitions' watch of namespace %q: %w", ns, err)
		}
		k.challenges[ns], k.definitions[ns] = challenges, definitions
	}
	return k, nil
}

// Start runs the watches until ctx ends, and waits until each has listed once; false when ctx
// ended first.
func (k *Kube) Start(ctx context.Context) bool {
	var synced []cache.InformerSynced
	for _, informers := range []map[string]cache.SharedIndexInformer{k.challenges, k.definitions} {
		for _, informer := range informers {
			go informer.RunWithContext(ctx)
			synced = append(synced, informer.HasSynced)
		}
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// decodeInto decodes a watched object into T once, as it enters the cache; anything else (a
// deletion's last known state) passes as it is.
func decodeInto[T any](obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf("decode %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

func instanceKey(namespace, definition, owner string) string {
	return namespace + "/" + definition + "/" + owner
}

// instanceKeys indexes a Challenge by the definition of its own namespace it runs, and its owner.
func instanceKeys(obj any) ([]string, error) {
	c, ok := obj.(*v1alpha1.Challenge)
	if !ok || c.Spec.DefinitionRef == nil || c.Spec.DefinitionRef.Namespace != "" && c.Spec.DefinitionRef.Namespace != c.Namespace {
		return nil, nil
	}
	return []string{instanceKey(c.Namespace, c.Spec.DefinitionRef.Name, c.Spec.Owner)}, nil
}

func rctfChallengeKeys(obj any) ([]string, error) {
	d, ok := obj.(*v1alpha1.ChallengeDefinition)
	if !ok {
		return nil, nil
	}
	if id, marked := d.Annotations[v1alpha1.AnnotationRCTFChallenge]; marked {
		return []string{id}, nil
	}
	return nil, nil
}

// Definitions implements Store.
func (k *Kube) Definitions(id string) []*v1alpha1.ChallengeDefinition {
	var out []*v1alpha1.ChallengeDefinition
	for _, informer := range k.definitions {
		objs, _ := informer.GetIndexer().ByIndex(byRCTFChallenge, id)
		for _, obj := range objs {
			out = append(out, obj.(*v1alpha1.ChallengeDefinition))
		}
	}
	return out
}

// Instances implements Store.
func (k *Kube) Instances(namespace, definition, owner string) []*v1alpha1.Challenge {
	informer, ok := k.challenges[namespace]
	if !ok {
		return nil
	}
	objs, _ := informer.GetIndexer().ByIndex(byInstance, instanceKey(namespace, definition, owner))
	out := make([]*v1alpha1.Challenge, 0, len(objs))
	for _, obj := range objs {
		out = append(out, obj.(*v1alpha1.Challenge))
	}
	return out
}

// Get implements Store.
func (k *Kube) Get(ctx context.Context, namespace, name string) (*v1alpha1.Challenge, error) {
	u, err := k.client.Resource(challengesGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get Challenge %s/%s: %w", namespace, name, err)
	}
	return decodeChallenge(u)
}

// Create implements Store.
func (k *Kube) Create(ctx context.Context, challenge *v1alpha1.Challenge) (*v1alpha1.Challenge, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(challenge)
	if err != nil {
		return nil, fmt.Errorf("encode Challenge %s/%s: %w", challenge.Namespace, challenge.Name, err)
	}
	delete(obj, "status")
	u, err := k.client.Resource(challengesGVR).Namespace(challenge.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj},
		metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, fmt.Errorf("create Challenge %s/%s: %w", challenge.Namespace, challenge.Name, err)
	}
	k.awaitCache(ctx, challenge.Namespace, challenge.Name, func(c *v1alpha1.Challenge) bool { return c != nil && c.UID == u.GetUID() })
	return decodeChallenge(u)
}

// Patch implements Store.
func (k *Kube) Patch(ctx context.Context, namespace, name string, mergePatch []byte) (*v1alpha1.Challenge, error) {
	u, err := k.client.Resource(challengesGVR).Namespace(namespace).Patch(ctx, name, types.MergePatchType, mergePatch,
		metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, fmt.Errorf("patch Challenge %s/%s: %w", namespace, name, err)
	}
	k.awaitCache(ctx, namespace, name, func(c *v1alpha1.Challenge) bool {
		return c == nil || c.UID != u.GetUID() || !olderThan(c.ResourceVersion, u.GetResourceVersion())
	})
	return decodeChallenge(u)
}

// Delete implements Store.
func (k *Kube) Delete(ctx context.Context, namespace, name string) error {
	background := metav1.DeletePropagationBackground
	if err := k.client.Resource(challengesGVR).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
		return fmt.Errorf("delete Challenge %s/%s: %w", namespace, name, err)
	}
	k.awaitCache(ctx, namespace, name, func(c *v1alpha1.Challenge) bool { return c == nil || c.DeletionTimestamp != nil })
	return nil
}

// cacheWait bounds how long a write waits for the watch to bring it back.
const cacheWait = time.Second

// notifyChange wakes every awaitCache.
func (k *Kube) notifyChange() {
	k.changedMu.Lock()
	defer k.changedMu.Unlock()
	close(k.changed)
	k.changed = make(chan struct{})
}

func (k *Kube) changes() <-chan struct{} {
	k.changedMu.Lock()
	defer k.changedMu.Unlock()
	return k.changed
}

// awaitCache waits, at most cacheWait, until the cached Challenge namespace/name (nil: none)
// shows a write the component just made: rCTF polls right after a start, an extension or a
// deletion, and the answer must not be the state before it. It looks again at each change the
// watch brings (a fraction of a millisecond after the write, on a near API server).
func (k *Kube) awaitCache(ctx context.Context, namespace, name string, written func(*v1alpha1.Challenge) bool) {
	informer, ok := k.challenges[namespace]
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cacheWait)
	defer cancel()
	key := cache.ObjectName{Namespace: namespace, Name: name}.String()
	for {
		changed := k.changes()
		obj, found, _ := informer.GetIndexer().GetByKey(key)
		var c *v1alpha1.Challenge
		if found {
			c, _ = obj.(*v1alpha1.Challenge)
		}
		if written(c) {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// olderThan says whether resource version a is older than b: they are etcd revisions, decimal
// integers; anything else compares only for equality.
func olderThan(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x < y
}

func decodeChallenge(u *unstructured.Unstructured) (*v1alpha1.Challenge, error) {
	c, err := decodeInto[v1alpha1.Challenge](u)
	if err != nil {
		return nil, err
	}
	return c.(*v1alpha1.Challenge), nil
}
