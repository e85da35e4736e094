package stamper

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/kubewatch"
)

// LabelChallenge is the label the hook puts on every child of a Challenge, its name.
const LabelChallenge = v1alpha1.LabelChallenge

var servicesGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// byAddress is the Services' index by ClusterIP:port.
const byAddress = "address"

// Kube is the Cluster of a real API server: a watch (list and watch) of the Services labelled
// with a Challenge in each namespace of instances (or in every namespace), and a merge patch of
// the one annotation. It needs services get, list, watch and patch there, and nothing else.
type Kube struct {
	client dynamic.Interface
	// informers holds one watch per namespace (metav1.NamespaceAll: one of every namespace).
	informers map[string]cache.SharedIndexInformer
}

// NewKube prepares the watches of the Services of namespaces (none: of every namespace); Start
// starts them.
func NewKube(client dynamic.Interface, namespaces []string) (*Kube, error) {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	k := &Kube{client: client, informers: map[string]cache.SharedIndexInformer{}}
	for _, ns := range namespaces {
		informer := kubewatch.NewInformer(client, servicesGVR, ns, LabelChallenge, 0, cache.Indexers{byAddress: serviceAddresses})
		if err := informer.SetTransform(trimService); err != nil {
			return nil, fmt.Errorf("the Services' watch of namespace %q: %w", ns, err)
		}
		k.informers[ns] = informer
	}
	return k, nil
}

// Start runs the watches until ctx ends, and waits until each has listed once; false when ctx
// ended first.
func (k *Kube) Start(ctx context.Context) bool {
	synced := make([]cache.InformerSynced, 0, len(k.informers))
	for _, informer := range k.informers {
		go informer.RunWithContext(ctx)
		synced = append(synced, informer.HasSynced)
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// trimService keeps what the stamper reads of a Service: its name, namespace, identity, Challenge
// label, the two annotations and its addresses (a Service of an instance is small, but an event
// has thousands).
func trimService(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	trimmed := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Service"}}
	trimmed.SetName(u.GetName())
	trimmed.SetNamespace(u.GetNamespace())
	trimmed.SetUID(u.GetUID())
	trimmed.SetResourceVersion(u.GetResourceVersion())
	trimmed.SetLabels(map[string]string{LabelChallenge: u.GetLabels()[LabelChallenge]})
	annotations := map[string]string{}
	for _, key := range []string{AnnotationLastActivity, AnnotationIdleTimeout} {
		if v, ok := u.GetAnnotations()[key]; ok {
			annotations[key] = v
		}
	}
	trimmed.SetAnnotations(annotations)
	spec := map[string]any{}
	for _, field := range []string{"clusterIP", "clusterIPs", "ports"} {
		if v, ok := u.Object["spec"].(map[string]any)[field]; ok {
			spec[field] = v
		}
	}
	trimmed.Object["spec"] = spec
	return trimmed, nil
}

// serviceAddresses are a Service's ClusterIP:port addresses, each ClusterIP with each port.
func serviceAddresses(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	ips, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "clusterIPs")
	if ip, _, _ := unstructured.NestedString(u.Object, "spec", "clusterIP"); len(ips) == 0 && ip != "" {
		ips = []string{ip}
	}
	ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
	var addresses []string
	for _, ip := range ips {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue // None (headless), or empty
		}
		for _, p := range ports {
			port, ok, _ := unstructured.NestedInt64(p.(map[string]any), "port")
			if ok && port > 0 && port < 1<<16 {
				addresses = append(addresses, netip.AddrPortFrom(addr.Unmap(), uint16(port)).String())
			}
		}
	}
	return addresses, nil
}

// ServiceAt is the Service at address, of whichever namespace watched.
func (k *Kube) ServiceAt(address netip.AddrPort) (types.NamespacedName, bool) {
	var found []any
	for _, informer := range k.informers {
		objs, err := informer.GetIndexer().ByIndex(byAddress, address.String())
		if err == nil {
			found = append(found, objs...)
		}
	}
	if len(found) != 1 {
		return types.NamespacedName{}, false // none, or two Services claiming one address for a moment
	}
	u := found[0].(*unstructured.Unstructured)
	return types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()}, true
}

// Service is the Service as the watch last saw it.
func (k *Kube) Service(key types.NamespacedName) (Service, bool) {
	informer, ok := k.informers[key.Namespace]
	if !ok {
		informer, ok = k.informers[metav1.NamespaceAll]
	}
	if !ok {
		return Service{}, false
	}
	obj, ok, err := informer.GetIndexer().GetByKey(cache.ObjectName{Namespace: key.Namespace, Name: key.Name}.String())
	if err != nil || !ok {
		return Service{}, false
	}
	return serviceOf(obj.(*unstructured.Unstructured)), true
}

// Get reads the Service from the API server.
func (k *Kube) Get(ctx context.Context, key types.NamespacedName) (Service, error) {
	u, err := k.client.Resource(servicesGVR).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return Service{}, fmt.Errorf("get Service %s: %w", key, err)
	}
	return serviceOf(u), nil
}

// Stamp is a JSON merge patch of the annotation alone, with the resourceVersion as its
// precondition: a Service written meanwhile answers Conflict.
func (k *Kube) Stamp(ctx context.Context, key types.NamespacedName, resourceVersion, value string) (Service, error) {
	metadata := map[string]any{"annotations": map[string]string{AnnotationLastActivity: value}}
	if resourceVersion != "" {
		metadata["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return Service{}, err
	}
	u, err := k.client.Resource(servicesGVR).Namespace(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "challenge-hook-activity-stamper"})
	if err != nil {
		return Service{}, fmt.Errorf("stamp Service %s: %w", key, err)
	}
	return serviceOf(u), nil
}

// serviceOf reads a Service.
func serviceOf(u *unstructured.Unstructured) Service {
	idleTimeout, err := time.ParseDuration(u.GetAnnotations()[AnnotationIdleTimeout])
	if err != nil || idleTimeout < 0 {
		idleTimeout = 0
	}
	return Service{
		Key:             types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()},
		UID:             u.GetUID(),
		ResourceVersion: u.GetResourceVersion(),
		Stamp:           u.GetAnnotations()[AnnotationLastActivity],
		IdleTimeout:     idleTimeout,
	}
}
