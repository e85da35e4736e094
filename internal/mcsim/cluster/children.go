package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// children are objects of each child type, keyed "<namespace>/<name>".
type children map[*childType]map[string]*unstructured.Unstructured

// observedChildren are the children the parent controls, by their controller ownerReference, in
// its namespace.
func (pc *parentController) observedChildren(parent *unstructured.Unstructured) children {
	out := children{}
	for _, child := range pc.children {
		out[child] = map[string]*unstructured.Unstructured{}
		items, err := child.informer.GetIndexer().ByIndex(controllerUIDIndex, string(parent.GetUID()))
		if err != nil {
			continue
		}
		for _, item := range items {
			obj, ok := item.(*unstructured.Unstructured)
			if !ok || (pc.parent.namespaced && obj.GetNamespace() != parent.GetNamespace()) {
				continue
			}
			out[child][cacheKey(obj)] = obj
		}
	}
	return out
}

// requestMap is children as a request carries them: every type, {} when empty, keyed
// "<Kind>.<apiVersion>"; objects keyed "<namespace>/<name>" for a v2 hook, "<name>" for v1.
func (pc *parentController) requestMap(set children, version string) map[string]map[string]mcsim.Object {
	out := map[string]map[string]mcsim.Object{}
	for child, objs := range set {
		group := map[string]mcsim.Object{}
		for key, obj := range objs {
			if version != "v2" {
				key = obj.GetName()
			}
			group[key] = obj.Object
		}
		out[mcsim.GroupKey(child.gvk.Kind, child.gvk.GroupVersion().String())] = group
	}
	return out
}

// desiredChildren are the answer's children, each in the parent's namespace unless it names one,
// labelled with the parent's uid (generateSelector), of the types the controller declares.
func (pc *parentController) desiredChildren(parent *unstructured.Unstructured, answer []mcsim.Object) (children, error) {
	selector, err := pc.childSelector(parent)
	if err != nil {
		return nil, err
	}
	out := children{}
	for _, obj := range answer {
		child := &unstructured.Unstructured{Object: obj}
		if child.GetNamespace() == "" {
			child.SetNamespace(parent.GetNamespace())
		}
		if pc.generateSelector {
			l := child.GetLabels()
			if l == nil {
				l = map[string]string{}
			}
			if _, ok := l["controller-uid"]; !ok {
				l["controller-uid"] = string(parent.GetUID())
				child.SetLabels(l)
			}
		}
		if !selector.Matches(labels.Set(child.GetLabels())) {
			return nil, fmt.Errorf("labels on desired child %s %s/%s don't match parent selector", child.GetKind(), child.GetNamespace(), child.GetName())
		}
		t := pc.childTypeOf(child)
		if t == nil {
			return nil, fmt.Errorf("desired child %s %s/%s: the CompositeController declares no child resource of apiVersion %s kind %s",
				child.GetKind(), child.GetNamespace(), child.GetName(), child.GetAPIVersion(), child.GetKind())
		}
		if out[t] == nil {
			out[t] = map[string]*unstructured.Unstructured{}
		}
		out[t][cacheKey(child)] = child
	}
	return out, nil
}

// childSelector selects the parent's children: controller-uid=<uid> with generateSelector, else
// the parent's spec.selector.
func (pc *parentController) childSelector(parent *unstructured.Unstructured) (labels.Selector, error) {
	if pc.generateSelector {
		return labels.SelectorFromSet(labels.Set{"controller-uid": string(parent.GetUID())}), nil
	}
	raw, _, _ := unstructured.NestedMap(parent.Object, "spec", "selector")
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
		return nil, fmt.Errorf("spec.selector of %s %s/%s: %w", parent.GetKind(), parent.GetNamespace(), parent.GetName(), err)
	}
	if len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0 {
		return nil, errors.New(".spec.selector must have either matchLabels, matchExpressions, or both")
	}
	return metav1.LabelSelectorAsSelector(&ls)
}

func (pc *parentController) childTypeOf(obj *unstructured.Unstructured) *childType {
	for _, t := range pc.children {
		if t.gvk == obj.GroupVersionKind() {
			return t
		}
	}
	return nil
}

// manageChildren deletes the observed children the answer leaves out, creates the ones it adds
// and updates the others as their type's update strategy says.
func (pc *parentController) manageChildren(ctx context.Context, parent *unstructured.Unstructured, observed, desired children) error {
	var errs []error
	for t, objs := range observed {
		for key, obj := range objs {
			if obj.GetDeletionTimestamp() != nil || desired[t][key] != nil {
				continue
			}
			pc.log.Info("Deleting child", "parent", refOf(parent), "child", refOf(obj))
			if err := pc.deleteChild(ctx, t, obj); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for t, objs := range desired {
		for key, obj := range objs {
			if err := pc.applyChild(ctx, t, parent, observed[t][key], obj); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// deleteChild deletes obj, only the object observed (its uid), its dependents in the background.
func (pc *parentController) deleteChild(ctx context.Context, t *childType, obj *unstructured.Unstructured) error {
	uid := obj.GetUID()
	background := metav1.DeletePropagationBackground
	err := pc.c.dynamic.Resource(t.gvr).Namespace(obj.GetNamespace()).Delete(ctx, obj.GetName(),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &background})
	if apierrors.IsNotFound(err) {
		pc.log.Info("Failed to delete child, child object has been deleted", "child", refOf(obj))
		return nil
	}
	if err != nil {
		return fmt.Errorf("can't delete %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// applyChild creates desired when nothing is observed, else updates the observed child as the
// type's update strategy says when the three-way merge changes it.
func (pc *parentController) applyChild(ctx context.Context, t *childType, parent, observed, desired *unstructured.Unstructured) error {
	client := pc.c.dynamic.Resource(t.gvr).Namespace(desired.GetNamespace())
	if observed == nil {
		pc.log.Info("Creating", "parent", refOf(parent), "child", refOf(desired))
		lastApplied, err := json.Marshal(desired.Object)
		if err != nil {
			return fmt.Errorf("last-applied of %s %s: %w", desired.GetKind(), desired.GetName(), err)
		}
		annotations := desired.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[wire.LastAppliedAnnotation] = string(lastApplied)
		desired.SetAnnotations(annotations)
		desired.SetOwnerReferences(append(desired.GetOwnerReferences(), controllerRef(parent)))
		if _, err := client.Create(ctx, desired, metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				pc.log.Info("Failed to create child, child object already exists", "parent", refOf(parent), "child", refOf(desired))
				return nil
			}
			return fmt.Errorf("can't create %s %s/%s: %w", desired.GetKind(), desired.GetNamespace(), desired.GetName(), err)
		}
		return nil
	}
	updated, changed, err := mcsim.Updated(observed.Object, desired.Object)
	if err != nil {
		return fmt.Errorf("merge %s %s/%s: %w", desired.GetKind(), desired.GetNamespace(), desired.GetName(), err)
	}
	if !changed {
		return nil
	}
	if observed.GetDeletionTimestamp() != nil {
		pc.log.Info("Not updating", "parent", refOf(parent), "child", refOf(desired), "reason", "Pending deletion of child object")
		return nil
	}
	switch t.method {
	case "", "OnDelete":
		pc.log.V(5, "Not updating", "parent", refOf(parent), "child", refOf(desired), "reason", "OnDelete update strategy selected")
		return nil
	case "Recreate", "RollingRecreate":
		pc.log.Info("Deleting for update", "parent", refOf(parent), "child", refOf(desired), "reason", "Recreate update strategy selected")
		return pc.deleteChild(ctx, t, observed)
	case "InPlace", "RollingInPlace":
		pc.log.Info("Updating", "parent", refOf(parent), "child", refOf(desired), "reason", "InPlace update strategy selected")
		_, err := client.Update(ctx, &unstructured.Unstructured{Object: updated}, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err):
			pc.log.Info("Failed to update child, child object has been deleted", "parent", refOf(parent), "child", refOf(desired))
		case apierrors.IsConflict(err):
			pc.log.Info("Failed to update child due to outdated resourceVersion", "parent", refOf(parent), "child", refOf(desired))
		case err != nil:
			return fmt.Errorf("can't update %s %s/%s: %w", desired.GetKind(), desired.GetNamespace(), desired.GetName(), err)
		}
		return nil
	default:
		return fmt.Errorf("invalid update strategy for %s: unknown method %q", t.gvk.Kind, t.method)
	}
}

// controllerRef is the ownerReference that makes parent a child's controller.
func controllerRef(parent *unstructured.Unstructured) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: parent.GetAPIVersion(), Kind: parent.GetKind(), Name: parent.GetName(),
		UID: types.UID(parent.GetUID()), Controller: &yes, BlockOwnerDeletion: &yes}
}
