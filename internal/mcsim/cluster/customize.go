package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// errRelatedNotSynced: a related resource's informer has not listed it yet; the parent is synced
// again later, with no SyncError event.
var errRelatedNotSynced = errors.New("related informer not synced yet")

// isRetryLater says whether err only delays a sync: no SyncError event is recorded for it.
func isRetryLater(err error) bool {
	var tooMany *tooManyRequests
	return errors.As(err, &tooMany) || errors.Is(err, errRelatedNotSynced)
}

func labelSet(obj *unstructured.Unstructured) labels.Set { return labels.Set(obj.GetLabels()) }

// relatedRule is one of a customize answer's relatedResources.
type relatedRule struct {
	APIVersion        string                `json:"apiVersion"`
	Resource          string                `json:"resource"`
	LabelSelector     *metav1.LabelSelector `json:"labelSelector,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	Namespace         string                `json:"namespace,omitempty"`
	Names             []string              `json:"names,omitempty"`
}

type customizeResponse struct {
	RelatedResources []relatedRule `json:"relatedResources"`
}

// answerKey: an answer may depend only on the parent's identity and spec.
type answerKey struct {
	uid        types.UID
	generation int64
}

// relatedInformer watches a related resource.
type relatedInformer struct {
	resource
	informer cache.SharedIndexInformer
}

// customizer asks the customize hook which objects relate to a parent and selects them.
type customizer struct {
	pc   *parentController
	hook *hook
	ctx  context.Context

	mu        sync.Mutex
	answers   map[answerKey][]relatedRule
	informers map[string]*relatedInformer // by "<apiVersion> <resource>"
}

func newCustomizer(pc *parentController, hook *hook) *customizer {
	return &customizer{pc: pc, hook: hook, answers: map[answerKey][]relatedRule{}, informers: map[string]*relatedInformer{}}
}

// start: related informers, started when a rule first names their resource, run until ctx ends.
func (cz *customizer) start(ctx context.Context) { cz.ctx = ctx }

// forget drops the answers of a deleted parent.
func (cz *customizer) forget(parent *unstructured.Unstructured) {
	cz.mu.Lock()
	defer cz.mu.Unlock()
	for key := range cz.answers {
		if key.uid == parent.GetUID() {
			delete(cz.answers, key)
		}
	}
}

// rules is the customize answer for parent, from the cache or the hook.
func (cz *customizer) rules(ctx context.Context, parent *unstructured.Unstructured) ([]relatedRule, error) {
	key := answerKey{parent.GetUID(), parent.GetGeneration()}
	cz.mu.Lock()
	rules, ok := cz.answers[key]
	cz.mu.Unlock()
	if ok {
		return rules, nil
	}
	var response customizeResponse
	if err := cz.hook.call(ctx, map[string]any{"controller": cz.pc.object, "parent": parent.Object}, &response); err != nil {
		return nil, err
	}
	cz.mu.Lock()
	cz.answers[key] = response.RelatedResources
	cz.mu.Unlock()
	return response.RelatedResources, nil
}

// cachedRules is the cached customize answer for parent, if any.
func (cz *customizer) cachedRules(parent *unstructured.Unstructured) []relatedRule {
	cz.mu.Lock()
	defer cz.mu.Unlock()
	return cz.answers[answerKey{parent.GetUID(), parent.GetGeneration()}]
}

// related is the request's related map for parent: a group for each rule's type, {} when nothing
// matched.
func (cz *customizer) related(ctx context.Context, parent *unstructured.Unstructured) (map[string]map[string]mcsim.Object, error) {
	out := map[string]map[string]mcsim.Object{}
	if cz.hook == nil {
		return out, nil
	}
	rules, err := cz.rules(ctx, parent)
	if err != nil {
		return nil, fmt.Errorf("customize hook failed for %s %s/%s: %w", parent.GetKind(), parent.GetNamespace(), parent.GetName(), err)
	}
	for _, rule := range rules {
		ri, err := cz.informer(rule)
		if err != nil {
			return nil, err
		}
		if !ri.informer.HasSynced() {
			return nil, errRelatedNotSynced
		}
		groupKey := mcsim.GroupKey(ri.gvk.Kind, ri.gvk.GroupVersion().String())
		group := out[groupKey]
		if group == nil {
			group = map[string]mcsim.Object{}
			out[groupKey] = group
		}
		var items []any
		if ri.namespaced && rule.Namespace != "" {
			items, err = ri.informer.GetIndexer().ByIndex(cache.NamespaceIndex, rule.Namespace)
		} else {
			items = ri.informer.GetIndexer().List()
		}
		if err != nil {
			return nil, err
		}
		for _, item := range items {
			obj, ok := item.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			match, err := cz.matches(rule, ri, parent, obj)
			if err != nil {
				return nil, err
			}
			if match {
				key := cacheKey(obj)
				if cz.pc.syncHook != nil && cz.pc.syncHook.version != "v2" {
					key = obj.GetName()
				}
				group[key] = obj.Object
			}
		}
	}
	return out, nil
}

// matches says whether rule selects obj for parent.
func (cz *customizer) matches(rule relatedRule, ri *relatedInformer, parent, obj *unstructured.Unstructured) (bool, error) {
	if obj.GetAPIVersion() != rule.APIVersion || obj.GetKind() != ri.gvk.Kind {
		return false, nil
	}
	switch {
	case len(rule.Names) > 0 && (rule.LabelSelector != nil || rule.NamespaceSelector != nil):
		return false, fmt.Errorf("related rule cannot have both names and labelSelector/namespaceSelector specified: %+v", rule)
	case rule.NamespaceSelector != nil:
		return false, fmt.Errorf("related rule %s %s: namespaceSelector is not simulated", rule.APIVersion, rule.Resource)
	}
	if ri.namespaced && rule.Namespace != "" && obj.GetNamespace() != rule.Namespace {
		return false, nil
	}
	// A v1 hook of a namespaced parent relates objects of its own namespace only.
	v1 := cz.hook.version != "v2"
	if v1 && cz.pc.parent.namespaced && ri.namespaced && obj.GetNamespace() != parent.GetNamespace() {
		return false, nil
	}
	if len(rule.Names) > 0 {
		return slices.Contains(rule.Names, obj.GetName()), nil
	}
	if rule.LabelSelector == nil {
		return true, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(rule.LabelSelector)
	if err != nil {
		return false, fmt.Errorf("related rule %s %s: %w", rule.APIVersion, rule.Resource, err)
	}
	return selector.Matches(labelSet(obj)), nil
}

// informer is the informer of rule's resource, started on first use.
func (cz *customizer) informer(rule relatedRule) (*relatedInformer, error) {
	key := rule.APIVersion + " " + rule.Resource
	cz.mu.Lock()
	defer cz.mu.Unlock()
	if ri := cz.informers[key]; ri != nil {
		return ri, nil
	}
	r, err := discover(cz.pc.c, mcsim.Object{"apiVersion": rule.APIVersion, "resource": rule.Resource})
	if err != nil {
		return nil, fmt.Errorf("related resource: %w", err)
	}
	ri := &relatedInformer{resource: r, informer: cz.pc.newInformer(r, 0)}
	if _, err := ri.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { cz.notify(ri, obj) },
		UpdateFunc: func(old, cur any) { cz.notifyUpdate(ri, old, cur) },
		DeleteFunc: func(obj any) { cz.notify(ri, obj) },
	}); err != nil {
		return nil, fmt.Errorf("related informer %s: %w", key, err)
	}
	cz.informers[key] = ri
	cz.pc.startInformer(cz.ctx, ri.informer)
	return ri, nil
}

func (cz *customizer) notifyUpdate(ri *relatedInformer, old, cur any) {
	o, _ := old.(*unstructured.Unstructured)
	c, _ := cur.(*unstructured.Unstructured)
	if o != nil && c != nil && o.GetResourceVersion() == c.GetResourceVersion() {
		return
	}
	cz.notify(ri, old)
	cz.notify(ri, cur)
}

// notify enqueues every parent whose cached customize answer selects obj.
func (cz *customizer) notify(ri *relatedInformer, item any) {
	obj, ok := unwrapTombstone(item)
	if !ok {
		return
	}
	for _, p := range cz.pc.parentInformer.GetIndexer().List() {
		parent, ok := p.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		for _, rule := range cz.cachedRules(parent) {
			if rule.APIVersion != ri.gvk.GroupVersion().String() || rule.Resource != ri.gvr.Resource {
				continue
			}
			if match, _ := cz.matches(rule, ri, parent, obj); match {
				cz.pc.enqueueParent(parent)
				break
			}
		}
	}
}
