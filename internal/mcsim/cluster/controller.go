package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/challenge-hook/challenge-hook/internal/kubewatch"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// controllerUIDIndex indexes children by the uid of their controller ownerReference.
const controllerUIDIndex = "controller-uid"

// resource is what discovery says of a resource a CompositeController names.
type resource struct {
	gvr        schema.GroupVersionResource
	gvk        schema.GroupVersionKind
	namespaced bool
}

// childType is a child resource and its update strategy.
type childType struct {
	resource
	// method is updateStrategy.method: OnDelete (""), Recreate, InPlace, RollingRecreate, RollingInPlace.
	method   string
	informer cache.SharedIndexInformer
}

// parentController runs one CompositeController.
type parentController struct {
	name string
	// object is the CompositeController, as every request carries it.
	object              mcsim.Object
	c                   clients
	log                 *Logger
	parent              resource
	parentInformer      cache.SharedIndexInformer
	parentSelector      labels.Selector
	ignoreStatusChanges bool
	generateSelector    bool
	resync              time.Duration
	children            []*childType
	// finalizer is Metacontroller's finalizer on parents, "" when the controller has no finalize hook.
	finalizer              string
	syncHook, finalizeHook *hook
	customize              *customizer
	queue                  workqueue.TypedRateLimitingInterface[string]
	workers                int
	informerStops          sync.WaitGroup
}

// newParentController reads cc: its resources from discovery, its hooks' tokens from their Secrets.
func newParentController(ctx context.Context, c clients, opts Options, cc *unstructured.Unstructured) (*parentController, error) {
	spec, _ := cc.Object["spec"].(mcsim.Object)
	parentSpec, _ := spec["parentResource"].(mcsim.Object)
	pc := &parentController{name: cc.GetName(), object: cc.Object, c: c, log: opts.Log, workers: opts.Workers}
	var err error
	if pc.parent, err = discover(c, parentSpec); err != nil {
		return nil, fmt.Errorf("parentResource: %w", err)
	}
	pc.parentSelector = labels.Everything()
	if sel, ok := parentSpec["labelSelector"].(mcsim.Object); ok {
		var ls metav1.LabelSelector
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(sel, &ls); err != nil {
			return nil, fmt.Errorf("parentResource.labelSelector: %w", err)
		}
		if pc.parentSelector, err = metav1.LabelSelectorAsSelector(&ls); err != nil {
			return nil, fmt.Errorf("parentResource.labelSelector: %w", err)
		}
	}
	pc.ignoreStatusChanges, _ = parentSpec["ignoreStatusChanges"].(bool)
	pc.generateSelector, _ = spec["generateSelector"].(bool)
	if seconds, ok := spec["resyncPeriodSeconds"].(int64); ok {
		pc.resync = max(time.Duration(seconds)*time.Second, time.Second)
	}
	childSpecs, _ := spec["childResources"].([]any)
	for _, raw := range childSpecs {
		child, _ := raw.(mcsim.Object)
		r, err := discover(c, child)
		if err != nil {
			return nil, fmt.Errorf("childResources: %w", err)
		}
		strategy, _ := child["updateStrategy"].(mcsim.Object)
		method, _ := strategy["method"].(string)
		pc.children = append(pc.children, &childType{resource: r, method: method})
	}
	hooks, _ := spec["hooks"].(mcsim.Object)
	hookSpec := func(kind string) mcsim.Object { h, _ := hooks[kind].(mcsim.Object); return h }
	if pc.syncHook, err = newHook(ctx, c.secret, opts.Metrics, pc.name, "sync", hookSpec("sync")); err != nil {
		return nil, err
	}
	if pc.finalizeHook, err = newHook(ctx, c.secret, opts.Metrics, pc.name, "finalize", hookSpec("finalize")); err != nil {
		return nil, err
	}
	if pc.finalizeHook != nil {
		pc.finalizer = "metacontroller.io/compositecontroller-" + pc.name
	}
	customizeHook, err := newHook(ctx, c.secret, opts.Metrics, pc.name, "customize", hookSpec("customize"))
	if err != nil {
		return nil, err
	}
	pc.customize = newCustomizer(pc, customizeHook)
	pc.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "CompositeController-" + pc.name, MetricsProvider: queueProvider{opts.Metrics}})
	return pc, nil
}

// discover is what discovery says of the resource spec names ({apiVersion, resource}).
func discover(c clients, spec mcsim.Object) (resource, error) {
	apiVersion, _ := spec["apiVersion"].(string)
	name, _ := spec["resource"].(string)
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return resource{}, err
	}
	list, err := c.discovery.ServerResourcesForGroupVersion(apiVersion)
	if err != nil {
		return resource{}, fmt.Errorf("discovery of %s: %w", apiVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == name {
			return resource{gvr: gv.WithResource(name), gvk: gv.WithKind(r.Kind), namespaced: r.Namespaced}, nil
		}
	}
	return resource{}, fmt.Errorf("discovery: %s serves no resource %q", apiVersion, name)
}

// newInformer is an informer of every object of r, indexed by controller uid.
func (pc *parentController) newInformer(r resource, resync time.Duration) cache.SharedIndexInformer {
	return kubewatch.NewInformer(pc.c.dynamic, r.gvr, metav1.NamespaceAll, "", resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, controllerUIDIndex: indexByControllerUID})
}

func indexByControllerUID(obj any) ([]string, error) {
	o, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	if ref := metav1.GetControllerOfNoCopy(o); ref != nil {
		return []string{string(ref.UID)}, nil
	}
	return nil, nil
}

// startInformer runs informer until ctx ends.
func (pc *parentController) startInformer(ctx context.Context, informer cache.SharedIndexInformer) {
	pc.informerStops.Add(1)
	go func() {
		defer pc.informerStops.Done()
		informer.Run(ctx.Done())
	}()
}

// run watches the parents and children and syncs parents on the workers until ctx ends.
func (pc *parentController) run(ctx context.Context) {
	defer pc.informerStops.Wait()
	defer pc.queue.ShutDown()
	pc.parentInformer = pc.newInformer(pc.parent, pc.resync)
	if _, err := pc.parentInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: pc.enqueueParent, UpdateFunc: pc.onParentUpdate, DeleteFunc: pc.onParentDelete,
	}); err != nil {
		pc.log.Error(err, "Parent informer")
		return
	}
	synced := []cache.InformerSynced{pc.parentInformer.HasSynced}
	for _, child := range pc.children {
		child.informer = pc.newInformer(child.resource, 0)
		if _, err := child.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: pc.onChild, UpdateFunc: pc.onChildUpdate, DeleteFunc: pc.onChild,
		}); err != nil {
			pc.log.Error(err, "Child informer", "resource", child.gvr.String())
			return
		}
		synced = append(synced, child.informer.HasSynced)
	}
	pc.customize.start(ctx)
	pc.startInformer(ctx, pc.parentInformer)
	for _, child := range pc.children {
		pc.startInformer(ctx, child.informer)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	var workers sync.WaitGroup
	for range pc.workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			wait.UntilWithContext(ctx, pc.work, time.Second)
		}()
	}
	<-ctx.Done()
	pc.queue.ShutDown()
	workers.Wait()
}

// work syncs parents from the queue until it shuts down.
func (pc *parentController) work(ctx context.Context) {
	for {
		key, quit := pc.queue.Get()
		if quit {
			return
		}
		pc.process(ctx, key)
		pc.queue.Done(key)
	}
}

func (pc *parentController) process(ctx context.Context, key string) {
	err := pc.sync(ctx, key)
	var tooMany *tooManyRequests
	switch {
	case err == nil:
		pc.queue.Forget(key)
	case errors.As(err, &tooMany):
		pc.queue.AddAfter(key, tooMany.after)
	case errors.Is(err, errRelatedNotSynced):
		pc.queue.AddRateLimited(key)
	default:
		pc.log.Error(err, "Failed to sync", "key", key)
		pc.queue.AddRateLimited(key)
	}
}

// matches says whether a parent is this controller's: it holds the finalizer, or its labels
// match parentResource.labelSelector.
func (pc *parentController) matches(parent *unstructured.Unstructured) bool {
	return (pc.finalizer != "" && slices.Contains(parent.GetFinalizers(), pc.finalizer)) || pc.parentSelector.Matches(labels.Set(parent.GetLabels()))
}

func (pc *parentController) enqueueParent(obj any) {
	if parent, ok := obj.(*unstructured.Unstructured); ok && !pc.matches(parent) {
		return
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		pc.log.Error(err, "Parent key")
		return
	}
	pc.queue.Add(key)
}

// onParentUpdate enqueues an updated parent; with ignoreStatusChanges not when only its status
// (or nothing but its resourceVersion) changed. A resync's update, the very same object, is
// always enqueued.
func (pc *parentController) onParentUpdate(oldObj, newObj any) {
	old, okOld := oldObj.(*unstructured.Unstructured)
	cur, okCur := newObj.(*unstructured.Unstructured)
	if pc.ignoreStatusChanges && okOld && okCur && old != cur &&
		old.GetGeneration() == cur.GetGeneration() &&
		reflect.DeepEqual(old.GetLabels(), cur.GetLabels()) &&
		reflect.DeepEqual(old.GetAnnotations(), cur.GetAnnotations()) &&
		cur.GetDeletionTimestamp() == nil {
		return
	}
	pc.enqueueParent(newObj)
}

func (pc *parentController) onParentDelete(obj any) {
	if parent, ok := unwrapTombstone(obj); ok {
		pc.customize.forget(parent)
	}
	pc.enqueueParent(obj)
}

func unwrapTombstone(obj any) (*unstructured.Unstructured, bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	return u, ok
}

func (pc *parentController) onChildUpdate(oldObj, newObj any) {
	old, _ := oldObj.(*unstructured.Unstructured)
	cur, _ := newObj.(*unstructured.Unstructured)
	if old != nil && cur != nil && old.GetResourceVersion() == cur.GetResourceVersion() {
		return
	}
	pc.onChild(newObj)
}

// onChild enqueues the parent that controls a child that was added, changed or deleted.
func (pc *parentController) onChild(obj any) {
	child, ok := unwrapTombstone(obj)
	if !ok {
		return
	}
	ref := metav1.GetControllerOfNoCopy(child)
	if ref == nil {
		return
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != pc.parent.gvk.Group || ref.Kind != pc.parent.gvk.Kind {
		return
	}
	namespace := ""
	if pc.parent.namespaced {
		namespace = child.GetNamespace()
	}
	key := cache.NewObjectName(namespace, ref.Name).String()
	item, exists, err := pc.parentInformer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return
	}
	parent, ok := item.(*unstructured.Unstructured)
	if !ok || parent.GetUID() != ref.UID || !pc.matches(parent) {
		return
	}
	pc.queue.Add(key)
}
