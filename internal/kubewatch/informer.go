// Package kubewatch informs on one resource through the dynamic client, as client-go's
// dynamicinformer.NewFilteredDynamicInformer does, without importing that package: it returns
// k8s.io/client-go/informers' GenericInformer, and so compiles every API group's informers,
// listers, typed clients and apply configurations (about 230 packages: 108 s of a cold build on 2
// cores) into each binary and test that watches anything.
package kubewatch

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// NewInformer is an informer of the objects of gvr in namespace (every namespace when empty) that
// labelSelector selects (every one when empty), with indexers, resynced every resync (never when 0).
func NewInformer(client dynamic.Interface, gvr schema.GroupVersionResource, namespace, labelSelector string, resync time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	resource := client.Resource(gvr).Namespace(namespace)
	selected := func(options metav1.ListOptions) metav1.ListOptions {
		if labelSelector != "" {
			options.LabelSelector = labelSelector
		}
		return options
	}
	return cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
				return resource.List(ctx, selected(options))
			},
			WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
				return resource.Watch(ctx, selected(options))
			},
		}, client),
		&unstructured.Unstructured{},
		cache.SharedIndexInformerOptions{ResyncPeriod: resync, Indexers: indexers, ObjectDescription: gvr.String()},
	)
}
