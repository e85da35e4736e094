package cluster

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// syncResponse is a sync or finalize hook's answer.
type syncResponse struct {
	Status             mcsim.Object   `json:"status"`
	Children           []mcsim.Object `json:"children"`
	ResyncAfterSeconds float64        `json:"resyncAfterSeconds"`
	Finalized          bool           `json:"finalized"`
}

// sync syncs the parent key names: its finalizer, the hook's answer for it and its children and
// related objects, the children that answer declares, and its status.
func (pc *parentController) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	pc.log.V(4, "Sync", "object", objectRef{Namespace: namespace, Name: name})
	item, exists, err := pc.parentInformer.GetIndexer().GetByKey(key)
	if err != nil {
		return err
	}
	if !exists {
		pc.log.V(4, "Parent object has been deleted", "object", objectRef{Namespace: namespace, Name: name})
		return nil
	}
	parent := item.(*unstructured.Unstructured).DeepCopy()
	err = pc.syncParent(ctx, parent)
	if err != nil && !isRetryLater(err) {
		pc.c.events.Eventf(parent, corev1.EventTypeWarning, "SyncError", "Sync error: %s", err)
	}
	return err
}

func (pc *parentController) syncParent(ctx context.Context, parent *unstructured.Unstructured) error {
	if !pc.matches(parent) {
		return nil
	}
	updated, err := pc.syncFinalizer(ctx, parent)
	if err != nil {
		return fmt.Errorf("can't sync finalizer for %s %s/%s: %w", parent.GetKind(), parent.GetNamespace(), parent.GetName(), err)
	}
	parent = updated
	if !pc.matches(parent) {
		return nil
	}
	observed := pc.observedChildren(parent)
	related, err := pc.customize.related(ctx, parent)
	if err != nil {
		return err
	}
	response, err := pc.callHook(ctx, parent, observed, related)
	if err != nil {
		return fmt.Errorf("sync hook failed for %s %s/%s: %w", parent.GetKind(), parent.GetNamespace(), parent.GetName(), err)
	}
	if response.ResyncAfterSeconds > 0 {
		pc.queue.AddAfter(cacheKey(parent), time.Duration(response.ResyncAfterSeconds*float64(time.Second)))
	}
	if response.Finalized {
		updated, err := pc.updateParent(ctx, parent, func(p *unstructured.Unstructured) bool { return removeFinalizer(p, pc.finalizer) })
		if err != nil {
			return fmt.Errorf("can't remove finalizer for %s %s/%s: %w", parent.GetKind(), parent.GetNamespace(), parent.GetName(), err)
		}
		parent = updated
	}
	desired, err := pc.desiredChildren(parent, response.Children)
	if err != nil {
		return err
	}
	var manageErr error
	if parent.GetDeletionTimestamp() == nil || pc.shouldFinalize(parent) {
		if err := pc.manageChildren(ctx, parent, observed, desired); err != nil {
			manageErr = fmt.Errorf("can't reconcile children for %s %s/%s: %w", parent.GetKind(), parent.GetNamespace(), parent.GetName(), err)
		}
	}
	if err := pc.updateStatus(ctx, parent, response.Status); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			pc.log.V(4, "Parent object has been deleted", "object", refOf(parent))
		case apierrors.IsConflict(err):
			pc.log.V(4, "Parent ignoring update due to outdated resourceVersion", "object", refOf(parent))
		default:
			return fmt.Errorf("can't update status for %s %s/%s: %w", parent.GetKind(), parent.GetNamespace(), parent.GetName(), err)
		}
	}
	return manageErr
}

// callHook calls the finalize hook for a parent being deleted (or no longer selected), else
// the sync hook.
func (pc *parentController) callHook(ctx context.Context, parent *unstructured.Unstructured, observed children, related map[string]map[string]mcsim.Object) (syncResponse, error) {
	hook, finalizing := pc.syncHook, false
	if pc.finalizeHook != nil && (parent.GetDeletionTimestamp() != nil || !pc.parentSelector.Matches(labelSet(parent))) {
		hook, finalizing = pc.finalizeHook, true
	}
	if hook == nil {
		return syncResponse{}, fmt.Errorf("the controller has no sync hook")
	}
	request := map[string]any{"controller": pc.object, "parent": parent.Object, "children": pc.requestMap(observed, hook.version),
		"related": related, "finalizing": finalizing}
	var response syncResponse
	err := hook.call(ctx, request, &response)
	return response, err
}

// syncFinalizer adds the finalizer to a parent that is not being deleted when the controller has
// a finalize hook, and removes it when the controller has none.
func (pc *parentController) syncFinalizer(ctx context.Context, parent *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	name := "metacontroller.io/compositecontroller-" + pc.name
	has := slices.Contains(parent.GetFinalizers(), name)
	switch {
	case pc.finalizer != "" && !has && parent.GetDeletionTimestamp() == nil:
		return pc.updateParent(ctx, parent, func(p *unstructured.Unstructured) bool {
			if slices.Contains(p.GetFinalizers(), name) {
				return false
			}
			p.SetFinalizers(append(p.GetFinalizers(), name))
			return true
		})
	case pc.finalizer == "" && has:
		return pc.updateParent(ctx, parent, func(p *unstructured.Unstructured) bool { return removeFinalizer(p, name) })
	}
	return parent, nil
}

func removeFinalizer(p *unstructured.Unstructured, name string) bool {
	finalizers := p.GetFinalizers()
	kept := slices.DeleteFunc(slices.Clone(finalizers), func(f string) bool { return f == name })
	if len(kept) == len(finalizers) {
		return false
	}
	p.SetFinalizers(kept)
	return true
}

// shouldFinalize says whether the children of a parent being deleted are still managed: while the
// finalizer is on, unless the garbage collector deletes or orphans them.
func (pc *parentController) shouldFinalize(parent *unstructured.Unstructured) bool {
	finalizers := parent.GetFinalizers()
	if slices.Contains(finalizers, metav1.FinalizerDeleteDependents) || slices.Contains(finalizers, metav1.FinalizerOrphanDependents) {
		return false
	}
	return pc.finalizer != "" && slices.Contains(finalizers, pc.finalizer)
}

// parentClient is the client of the parent's namespace.
func (pc *parentController) parentClient(parent *unstructured.Unstructured) dynamic.ResourceInterface {
	return pc.c.dynamic.Resource(pc.parent.gvr).Namespace(parent.GetNamespace())
}

// updateParent reads the parent, changes it with change and writes it when change says it did,
// again on a conflict. A parent of another uid under the same name is not found.
func (pc *parentController) updateParent(ctx context.Context, parent *unstructured.Unstructured, change func(*unstructured.Unstructured) bool) (*unstructured.Unstructured, error) {
	return pc.atomicUpdate(ctx, parent, change, func(current *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return pc.parentClient(parent).Update(ctx, current, metav1.UpdateOptions{})
	})
}

// updateStatus writes the answer's status, with observedGeneration, to /status when it differs
// from the stored one.
func (pc *parentController) updateStatus(ctx context.Context, parent *unstructured.Unstructured, status mcsim.Object) error {
	if status == nil {
		status = mcsim.Object{}
	}
	status["observedGeneration"] = parent.GetGeneration()
	_, err := pc.atomicUpdate(ctx, parent, func(current *unstructured.Unstructured) bool {
		if reflect.DeepEqual(current.Object["status"], status) {
			return false
		}
		current.Object["status"] = status
		return true
	}, func(current *unstructured.Unstructured) (*unstructured.Unstructured, error) {
		return pc.parentClient(parent).UpdateStatus(ctx, current, metav1.UpdateOptions{})
	})
	return err
}

func (pc *parentController) atomicUpdate(ctx context.Context, parent *unstructured.Unstructured, change func(*unstructured.Unstructured) bool,
	write func(*unstructured.Unstructured) (*unstructured.Unstructured, error)) (*unstructured.Unstructured, error) {
	var result *unstructured.Unstructured
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		current, err := pc.parentClient(parent).Get(ctx, parent.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if current.GetUID() != parent.GetUID() {
			return apierrors.NewNotFound(pc.parent.gvr.GroupResource(), parent.GetName())
		}
		if !change(current) {
			result = current
			return nil
		}
		result, err = write(current)
		return err
	})
	return result, err
}

// cacheKey is obj's key in an informer's cache and in the queue: "<namespace>/<name>".
func cacheKey(obj *unstructured.Unstructured) string {
	return cache.NewObjectName(obj.GetNamespace(), obj.GetName()).String()
}
