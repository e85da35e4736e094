//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sjson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// The driver below performs, step by step, what Metacontroller v4 does in one sync of a
// CompositeController parent (pkg/controller/composite/controller.go syncParentObject and
// pkg/controller/common/manage_children.go): add the finalizer; claim the children (generated
// selector controller-uid=<parent uid> plus a controller ownerReference); ask the customize hook
// for related objects and fetch them; POST the sync (or finalize) hook; create, update (InPlace,
// via the ported three-way merge) or delete children; remove the finalizer when finalized; write
// the status through the status subresource when it changed. Metacontroller itself cannot run
// here (no network to fetch it); this is the part of it the hook's contract depends on.

// controllerUIDLabel is the label Metacontroller puts on children with generateSelector: true.
const controllerUIDLabel = "controller-uid"

// childResource is one entry of the CompositeController's childResources.
type childResource struct {
	gvr    schema.GroupVersionResource
	kind   string
	method string // updateStrategy.method: OnDelete (default), Recreate, InPlace, ...
}

// compositeController is the part of compositecontroller.yaml the driver follows.
type compositeController struct {
	object           map[string]any // sent to the hooks as "controller"
	name             string
	children         []childResource
	generateSelector bool
	resyncPeriod     time.Duration
	// hookPaths maps sync, finalize and customize to the webhook path; absent hooks are absent.
	hookPaths map[string]string
	// keyByNamespace: hook version v2 keys children and related objects "<namespace>/<name>".
	keyByNamespace bool
}

// finalizerName is the finalizer Metacontroller adds to parents when a finalize hook is set.
func (cc compositeController) finalizerName() string {
	return "metacontroller.io/compositecontroller-" + cc.name
}

// loadCompositeController reads the project's compositecontroller.yaml.
func loadCompositeController(t *testing.T, c *cluster) compositeController {
	t.Helper()
	path := filepath.Join(c.root, "compositecontroller.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read CompositeController: %v", err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	var spec struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			ChildResources []struct {
				APIVersion     string `json:"apiVersion"`
				Resource       string `json:"resource"`
				UpdateStrategy struct {
					Method string `json:"method"`
				} `json:"updateStrategy"`
			} `json:"childResources"`
			GenerateSelector    bool    `json:"generateSelector"`
			ResyncPeriodSeconds float64 `json:"resyncPeriodSeconds"`
			Hooks               map[string]struct {
				Version string `json:"version"`
				Webhook struct {
					Path string `json:"path"`
					URL  string `json:"url"`
				} `json:"webhook"`
			} `json:"hooks"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &spec); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	cc := compositeController{
		object:           obj,
		name:             spec.Metadata.Name,
		generateSelector: spec.Spec.GenerateSelector,
		resyncPeriod:     time.Duration(spec.Spec.ResyncPeriodSeconds * float64(time.Second)),
		hookPaths:        map[string]string{},
	}
	if !cc.generateSelector {
		t.Fatalf("%s: the driver supports generateSelector: true only (Challenges have no spec.selector)", path)
	}
	for _, child := range spec.Spec.ChildResources {
		gv, err := schema.ParseGroupVersion(child.APIVersion)
		if err != nil {
			t.Fatalf("%s: child apiVersion %q: %v", path, child.APIVersion, err)
		}
		gvr := gv.WithResource(child.Resource)
		gvk, err := c.mapper.KindFor(gvr)
		if err != nil {
			t.Fatalf("%s: child resource %s: %v", path, gvr, err)
		}
		cc.children = append(cc.children, childResource{gvr: gvr, kind: gvk.Kind, method: child.UpdateStrategy.Method})
	}
	for name, hook := range spec.Spec.Hooks {
		hookPath := hook.Webhook.Path
		if hookPath == "" && hook.Webhook.URL != "" {
			hookPath = "/" + strings.SplitN(strings.SplitN(hook.Webhook.URL, "://", 2)[1], "/", 2)[1]
		}
		cc.hookPaths[name] = hookPath
		if name == "sync" {
			cc.keyByNamespace = hook.Version == "v2"
		}
	}
	if cc.hookPaths["sync"] == "" {
		t.Fatalf("%s: no sync hook", path)
	}
	return cc
}

// typeKey is Metacontroller's key of a child or related type: "Service.v1", "Deployment.apps/v1".
func typeKey(gvk schema.GroupVersionKind) string {
	return gvk.Kind + "." + gvk.GroupVersion().String()
}

// objectKey is the inner key of an object in a children or related map.
func (cc compositeController) objectKey(obj *unstructured.Unstructured) string {
	if cc.keyByNamespace && obj.GetNamespace() != "" {
		return obj.GetNamespace() + "/" + obj.GetName()
	}
	return obj.GetName()
}

// childID identifies a child across observed and desired sets.
func childID(obj *unstructured.Unstructured) string {
	return typeKey(obj.GroupVersionKind()) + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// driver plays Metacontroller for one CompositeController and one hook server.
type driver struct {
	c    *cluster
	hook *hookServer
	cc   compositeController
	// customizeCache holds the customize answer per parent uid and generation, as Metacontroller does.
	customizeCache map[string][]relatedRule
}

func newDriver(t *testing.T, c *cluster, hook *hookServer) *driver {
	t.Helper()
	return &driver{c: c, hook: hook, cc: loadCompositeController(t, c), customizeCache: map[string][]relatedRule{}}
}

// relatedRule is one entry of the customize hook's relatedResources.
type relatedRule struct {
	APIVersion    string                `json:"apiVersion"`
	Resource      string                `json:"resource"`
	Namespace     string                `json:"namespace"`
	Names         []string              `json:"names"`
	LabelSelector *metav1.LabelSelector `json:"labelSelector"`
}

// hookResponse is a decoded sync or finalize answer.
type hookResponse struct {
	Status             map[string]any
	Children           []*unstructured.Unstructured
	ResyncAfterSeconds float64
	Finalized          bool
}

// decodeHookResponse decodes strictly (hook version v2 refuses unknown keys) and keeps integers as
// int64, as Metacontroller's decoding does, so that reflect.DeepEqual against live objects works.
func decodeHookResponse(body []byte) (hookResponse, error) {
	var raw map[string]any
	if err := k8sjson.Unmarshal(body, &raw); err != nil {
		return hookResponse{}, fmt.Errorf("decode hook response: %w", err)
	}
	var resp hookResponse
	for key, value := range raw {
		switch key {
		case "status":
			if value != nil {
				status, ok := value.(map[string]any)
				if !ok {
					return hookResponse{}, fmt.Errorf("hook response status is %T, not an object", value)
				}
				resp.Status = status
			}
		case "children":
			if value == nil {
				continue
			}
			list, ok := value.([]any)
			if !ok {
				return hookResponse{}, fmt.Errorf("hook response children is %T, not a list", value)
			}
			for i, item := range list {
				obj, ok := item.(map[string]any)
				if !ok {
					return hookResponse{}, fmt.Errorf("hook response children[%d] is %T, not an object", i, item)
				}
				child := &unstructured.Unstructured{Object: obj}
				if child.GetAPIVersion() == "" || child.GetKind() == "" || child.GetName() == "" {
					return hookResponse{}, fmt.Errorf("hook response children[%d] lacks apiVersion, kind or metadata.name", i)
				}
				resp.Children = append(resp.Children, child)
			}
		case "resyncAfterSeconds":
			switch n := value.(type) {
			case int64:
				resp.ResyncAfterSeconds = float64(n)
			case float64:
				resp.ResyncAfterSeconds = n
			default:
				return hookResponse{}, fmt.Errorf("hook response resyncAfterSeconds is %T", value)
			}
		case "finalized":
			b, ok := value.(bool)
			if !ok {
				return hookResponse{}, fmt.Errorf("hook response finalized is %T", value)
			}
			resp.Finalized = b
		default:
			return hookResponse{}, fmt.Errorf("hook response has unknown key %q (v2 hooks decode strictly)", key)
		}
	}
	return resp, nil
}

// observation is everything one sync sends to the hook, as live objects.
type observation struct {
	parent   *unstructured.Unstructured
	children map[string]*unstructured.Unstructured // by childID
	related  []*unstructured.Unstructured
}

// fingerprint changes whenever an object the parent's sync depends on changes: what would wake
// Metacontroller through its watches.
func (o observation) fingerprint() string {
	parts := []string{"parent " + o.parent.GetResourceVersion()}
	for id, child := range o.children {
		parts = append(parts, id+" "+child.GetResourceVersion())
	}
	for _, obj := range o.related {
		parts = append(parts, childID(obj)+" "+obj.GetResourceVersion())
	}
	sort.Strings(parts)
	return strings.Join(parts, "\n")
}

// observe gathers the parent, its children and its related objects.
func (d *driver) observe(ctx context.Context, parent *unstructured.Unstructured) (observation, error) {
	children, err := d.observeChildren(ctx, parent)
	if err != nil {
		return observation{}, err
	}
	obs := observation{parent: parent, children: children}
	rules, err := d.customize(ctx, parent)
	if err != nil {
		return observation{}, err
	}
	for _, rule := range rules {
		objs, err := d.fetchRelated(ctx, parent, rule)
		if err != nil {
			return observation{}, err
		}
		obs.related = append(obs.related, objs...)
	}
	return obs, nil
}

// observeChildren claims the parent's children: every object of a child type in the parent's
// namespace with the generated selector's label and a controller reference to the parent.
func (d *driver) observeChildren(ctx context.Context, parent *unstructured.Unstructured) (map[string]*unstructured.Unstructured, error) {
	children := map[string]*unstructured.Unstructured{}
	for _, child := range d.cc.children {
		list, err := d.c.dyn.Resource(child.gvr).Namespace(parent.GetNamespace()).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{controllerUIDLabel: string(parent.GetUID())}.String(),
		})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", child.gvr.Resource, err)
		}
		for i := range list.Items {
			obj := &list.Items[i]
			if ref := metav1.GetControllerOf(obj); ref == nil || ref.UID != parent.GetUID() {
				continue // not ours (Metacontroller would adopt orphans; the driver never makes any)
			}
			obj.SetGroupVersionKind(child.gvr.GroupVersion().WithKind(child.kind))
			children[childID(obj)] = obj
		}
	}
	return children, nil
}

// customize asks the customize hook which related objects the sync needs (cached per generation).
func (d *driver) customize(ctx context.Context, parent *unstructured.Unstructured) ([]relatedRule, error) {
	path := d.cc.hookPaths["customize"]
	if path == "" {
		return nil, nil
	}
	cacheKey := fmt.Sprintf("%s/%d", parent.GetUID(), parent.GetGeneration())
	if rules, ok := d.customizeCache[cacheKey]; ok {
		return rules, nil
	}
	body, err := json.Marshal(map[string]any{"controller": d.cc.object, "parent": parent.Object})
	if err != nil {
		return nil, fmt.Errorf("encode customize request: %w", err)
	}
	answer, err := d.hook.post(ctx, path, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		RelatedResources []relatedRule `json:"relatedResources"`
	}
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("decode customize response %s: %w", answer, err)
	}
	for _, rule := range resp.RelatedResources {
		if len(rule.Names) > 0 && rule.LabelSelector != nil {
			return nil, fmt.Errorf("customize rule for %s sets both names and labelSelector", rule.Resource)
		}
	}
	d.customizeCache[cacheKey] = resp.RelatedResources
	return resp.RelatedResources, nil
}

func (d *driver) fetchRelated(ctx context.Context, parent *unstructured.Unstructured, rule relatedRule) ([]*unstructured.Unstructured, error) {
	gv, err := schema.ParseGroupVersion(rule.APIVersion)
	if err != nil {
		return nil, fmt.Errorf("related apiVersion %q: %w", rule.APIVersion, err)
	}
	gvr := gv.WithResource(rule.Resource)
	gvk, err := d.c.mapper.KindFor(gvr)
	if err != nil {
		return nil, fmt.Errorf("related resource %s: %w", gvr, err)
	}
	ns := rule.Namespace
	if ns == "" || !d.cc.keyByNamespace {
		ns = parent.GetNamespace() // v1 hooks may relate objects in the parent's namespace only
	}
	client := d.c.dyn.Resource(gvr).Namespace(ns)
	var out []*unstructured.Unstructured
	if len(rule.Names) > 0 {
		for _, name := range rule.Names {
			obj, err := client.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("get related %s %s/%s: %w", gvr.Resource, ns, name, err)
			}
			out = append(out, obj)
		}
		return out, nil
	}
	selector := labels.Everything()
	if rule.LabelSelector != nil {
		if selector, err = metav1.LabelSelectorAsSelector(rule.LabelSelector); err != nil {
			return nil, fmt.Errorf("related label selector: %w", err)
		}
	}
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list related %s: %w", gvr.Resource, err)
	}
	for i := range list.Items {
		obj := &list.Items[i]
		obj.SetGroupVersionKind(gvk)
		out = append(out, obj)
	}
	return out, nil
}

// syncRequest builds the sync or finalize request body Metacontroller would send.
func (d *driver) syncRequest(obs observation) map[string]any {
	children := d.childrenMap(obs.children)
	related := map[string]any{}
	for _, obj := range obs.related {
		group, ok := related[typeKey(obj.GroupVersionKind())].(map[string]any)
		if !ok {
			group = map[string]any{}
			related[typeKey(obj.GroupVersionKind())] = group
		}
		group[d.cc.objectKey(obj)] = obj.Object
	}
	return map[string]any{
		"controller": d.cc.object,
		"parent":     obs.parent.Object,
		"children":   children,
		"related":    related,
		"finalizing": d.finalizing(obs.parent),
	}
}

// childrenMap is the request's "children": every child type present, each object by its key.
func (d *driver) childrenMap(observed map[string]*unstructured.Unstructured) map[string]any {
	children := map[string]any{}
	for _, child := range d.cc.children {
		children[typeKey(child.gvr.GroupVersion().WithKind(child.kind))] = map[string]any{}
	}
	for _, obj := range observed {
		children[typeKey(obj.GroupVersionKind())].(map[string]any)[d.cc.objectKey(obj)] = obj.Object
	}
	return children
}

func (d *driver) finalizing(parent *unstructured.Unstructured) bool {
	return parent.GetDeletionTimestamp() != nil && d.cc.hookPaths["finalize"] != ""
}

// callHook POSTs a sync request to the sync or finalize hook and decodes the answer.
func (d *driver) callHook(ctx context.Context, request map[string]any) (hookResponse, error) {
	body, err := json.Marshal(request)
	if err != nil {
		return hookResponse{}, fmt.Errorf("encode sync request: %w", err)
	}
	path := d.cc.hookPaths["sync"]
	if request["finalizing"] == true {
		path = d.cc.hookPaths["finalize"]
	}
	answer, err := d.hook.post(ctx, path, body)
	if err != nil {
		return hookResponse{}, err
	}
	return decodeHookResponse(answer)
}

// desiredChildren applies Metacontroller's invariants to the hook's children: the parent's
// namespace when none is set, and the generated-selector label.
func (d *driver) desiredChildren(parent *unstructured.Unstructured, children []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	desired := make(map[string]*unstructured.Unstructured, len(children))
	for _, child := range children {
		child = child.DeepCopy()
		if child.GetNamespace() == "" {
			child.SetNamespace(parent.GetNamespace())
		}
		childLabels := child.GetLabels()
		if childLabels == nil {
			childLabels = map[string]string{}
		}
		if _, ok := childLabels[controllerUIDLabel]; !ok {
			childLabels[controllerUIDLabel] = string(parent.GetUID())
			child.SetLabels(childLabels)
		}
		desired[childID(child)] = child
	}
	return desired
}

// syncResult records what one sync did.
type syncResult struct {
	observed observation
	request  map[string]any
	response hookResponse
	// created, updated and deleted name the children written, "Kind.group/version ns/name";
	// updates carry the fields the three-way merge changed.
	created, deleted []string
	updated          map[string][]string
	statusWritten    bool
	// answeredAt is when the hook's answer arrived (after the hook read its clock).
	answeredAt time.Time
	// parentGone: the parent no longer exists (finalized and deleted, or never existed).
	parentGone bool
}

// wrote reports whether the sync changed anything in the cluster (which a watch would report).
func (r syncResult) wrote() bool {
	return len(r.created)+len(r.deleted)+len(r.updated) > 0 || r.statusWritten
}

func (r syncResult) phase() string {
	phase, _ := r.response.Status["phase"].(string)
	return phase
}

func (r syncResult) String() string {
	updated := make([]string, 0, len(r.updated))
	for id, diff := range r.updated {
		updated = append(updated, id+" {"+strings.Join(diff, "; ")+"}")
	}
	sort.Strings(updated)
	return fmt.Sprintf("phase=%s reason=%v message=%q resyncAfter=%gs finalized=%v created=%v updated=%v deleted=%v statusWritten=%v",
		r.phase(), r.response.Status["reason"], r.response.Status["message"], r.response.ResyncAfterSeconds,
		r.response.Finalized, r.created, updated, r.deleted, r.statusWritten)
}

// syncOnce performs one Metacontroller sync of the Challenge ns/name.
func (d *driver) syncOnce(ctx context.Context, ns, name string) (syncResult, error) {
	res := syncResult{updated: map[string][]string{}}
	parents := d.c.dyn.Resource(chalGVR).Namespace(ns)
	parent, err := parents.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		res.parentGone = true
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("get parent: %w", err)
	}
	// Before anything else, make sure the finalizer is there (only while not being deleted).
	if d.cc.hookPaths["finalize"] != "" && parent.GetDeletionTimestamp() == nil && !slices.Contains(parent.GetFinalizers(), d.cc.finalizerName()) {
		parent.SetFinalizers(append(parent.GetFinalizers(), d.cc.finalizerName()))
		if parent, err = parents.Update(ctx, parent, metav1.UpdateOptions{}); err != nil {
			return res, fmt.Errorf("add finalizer: %w", err)
		}
	}
	if parent.GetDeletionTimestamp() != nil && !slices.Contains(parent.GetFinalizers(), d.cc.finalizerName()) {
		return res, nil // being deleted and already finalized: nothing left to do
	}
	if res.observed, err = d.observe(ctx, parent); err != nil {
		return res, err
	}
	res.request = d.syncRequest(res.observed)
	if res.response, err = d.callHook(ctx, res.request); err != nil {
		// Metacontroller skips the whole sync: nothing created, updated or deleted, status untouched.
		return res, fmt.Errorf("sync hook: %w", err)
	}
	res.answeredAt = time.Now()
	desired := d.desiredChildren(parent, res.response.Children)
	for _, child := range desired {
		if child.GetLabels()[controllerUIDLabel] != string(parent.GetUID()) {
			return res, fmt.Errorf("desired child %s has a controller-uid label that does not match the parent", childID(child))
		}
	}
	if res.response.Finalized {
		fresh, err := parents.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return res, fmt.Errorf("get parent to remove finalizer: %w", err)
		}
		fresh.SetFinalizers(slices.DeleteFunc(fresh.GetFinalizers(), func(f string) bool { return f == d.cc.finalizerName() }))
		if parent, err = parents.Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
			return res, fmt.Errorf("remove finalizer: %w", err)
		}
	}
	if err := d.manageChildren(ctx, parent, res.observed.children, desired, &res); err != nil {
		return res, err
	}
	written, err := d.updateStatus(ctx, parent, res.response.Status)
	if apierrors.IsNotFound(err) {
		res.parentGone = true
		return res, nil
	}
	res.statusWritten = written
	return res, err
}

// manageChildren deletes observed children that are not desired, creates missing ones and updates
// existing ones in place when the three-way merge changes them.
func (d *driver) manageChildren(ctx context.Context, parent *unstructured.Unstructured, observed, desired map[string]*unstructured.Unstructured, res *syncResult) error {
	var errs []string
	for id, obj := range observed {
		if _, ok := desired[id]; ok || obj.GetDeletionTimestamp() != nil {
			continue
		}
		client, err := d.c.resourceFor(obj)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		uid := obj.GetUID()
		background := metav1.DeletePropagationBackground
		err = client.Delete(ctx, obj.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: &background})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Sprintf("delete %s: %v", id, err))
			continue
		}
		res.deleted = append(res.deleted, id)
	}
	for id, obj := range desired {
		client, err := d.c.resourceFor(obj)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if live, ok := observed[id]; ok {
			merged, err := applyUpdate(live, obj)
			if err != nil {
				errs = append(errs, fmt.Sprintf("merge %s: %v", id, err))
				continue
			}
			if reflect.DeepEqual(merged.Object, live.Object) || live.GetDeletionTimestamp() != nil {
				continue
			}
			switch method := d.methodFor(obj); method {
			case "", "OnDelete":
				continue
			case "InPlace", "RollingInPlace":
				if _, err := client.Update(ctx, merged, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
					errs = append(errs, fmt.Sprintf("update %s: %v", id, err))
					continue
				}
				res.updated[id] = jsonDiff(live.Object, merged.Object)
			default:
				errs = append(errs, fmt.Sprintf("update strategy %q of %s is not supported by the e2e driver", method, id))
			}
			continue
		}
		obj = obj.DeepCopy()
		// The last-applied configuration is the child exactly as desired, before owner references.
		if err := setLastApplied(obj, obj.DeepCopy().Object); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		yes := true
		obj.SetOwnerReferences(append(obj.GetOwnerReferences(), metav1.OwnerReference{
			APIVersion: parent.GetAPIVersion(), Kind: parent.GetKind(), Name: parent.GetName(), UID: parent.GetUID(),
			Controller: &yes, BlockOwnerDeletion: &yes,
		}))
		if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Sprintf("create %s: %v", id, err))
			continue
		}
		res.created = append(res.created, id)
	}
	sort.Strings(res.created)
	sort.Strings(res.deleted)
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("reconcile children: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (d *driver) methodFor(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	for _, child := range d.cc.children {
		if child.gvr.Group == gvk.Group && child.kind == gvk.Kind {
			return child.method
		}
	}
	return ""
}

// updateStatus writes status (plus observedGeneration) through the status subresource when it
// differs from the live status, and reports whether it wrote.
func (d *driver) updateStatus(ctx context.Context, parent *unstructured.Unstructured, status map[string]any) (bool, error) {
	if status == nil {
		status = map[string]any{}
	}
	status = copyMap(status)
	status["observedGeneration"] = parent.GetGeneration()
	client := d.c.dyn.Resource(chalGVR).Namespace(parent.GetNamespace())
	for attempt := 0; ; attempt++ {
		fresh, err := client.Get(ctx, parent.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if fresh.GetUID() != parent.GetUID() {
			return false, fmt.Errorf("parent %s was replaced", parent.GetName())
		}
		if reflect.DeepEqual(fresh.Object["status"], status) {
			return false, nil
		}
		fresh.Object["status"] = status
		_, err = client.UpdateStatus(ctx, fresh, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("update status: %w", err)
		}
		return true, nil
	}
}

// runUntil syncs the Challenge repeatedly, as Metacontroller would be woken up: at once after a
// sync that wrote something, when an object it watches changes (polled), when resyncAfterSeconds
// passes, or after the CompositeController's resync period. It returns the first result for which
// done holds, and fails the test after timeout.
func (d *driver) runUntil(ctx context.Context, t *testing.T, ns, name string, timeout time.Duration, done func(syncResult) bool) syncResult {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last syncResult
	for {
		res, err := d.syncOnce(ctx, ns, name)
		if err != nil {
			t.Logf("sync %s/%s: %v (retrying)", ns, name, err)
		} else {
			t.Logf("sync %s/%s: %s", ns, name, res)
			last = res
			if done(res) {
				return res
			}
		}
		time.Sleep(50 * time.Millisecond) // let the controller-manager and kwok react
		wake := time.Now().Add(d.cc.resyncPeriod)
		if err != nil {
			wake = time.Now().Add(500 * time.Millisecond) // Metacontroller backs off and retries
		} else if res.response.ResyncAfterSeconds > 0 {
			if at := time.Now().Add(time.Duration(res.response.ResyncAfterSeconds * float64(time.Second))); at.Before(wake) {
				wake = at
			}
		}
		if err == nil && !res.wrote() && !res.parentGone {
			d.waitForChange(ctx, res.observed, wake, deadline)
		} else if err != nil {
			time.Sleep(time.Until(wake))
		}
		if time.Now().After(deadline) {
			t.Fatalf("Challenge %s/%s: condition not reached after %s; last sync: %s", ns, name, timeout, last)
		}
	}
}

// waitForChange returns when an object the last sync observed changes (what Metacontroller's
// watches would report), or at wake, or at deadline.
func (d *driver) waitForChange(ctx context.Context, last observation, wake, deadline time.Time) {
	before := last.fingerprint()
	for time.Now().Before(wake) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		parent, err := d.c.dyn.Resource(chalGVR).Namespace(last.parent.GetNamespace()).Get(ctx, last.parent.GetName(), metav1.GetOptions{})
		if err != nil {
			return // gone or unreachable: let the next sync find out
		}
		now, err := d.observe(ctx, parent)
		if err != nil || now.fingerprint() != before {
			return
		}
	}
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
