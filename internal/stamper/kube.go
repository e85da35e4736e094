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
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// LabelChallenge is the label the hook puts on every child of a Challenge, its name (the hook's
// sync.LabelChallenge).
const LabelChallenge = "ctf.challenge-hook.dev/challenge"

var (
	challengesGVR = schema.GroupVersionResource{Group: "ctf.challenge-hook.dev", Version: "v1alpha1", Resource: "challenges"}
	servicesGVR   = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

// byAddress is the Services' index by ClusterIP:port.
const byAddress = "address"

// Kube is the Cluster of a real API server: watches (list and watch) of the Services labelled
// with a Challenge and of the Challenges, in every namespace, and a merge patch of the one
// annotation. It needs challenges get, list, watch and patch, and services list and watch.
type Kube struct {
	client     dynamic.Interface
	factory    dynamicinformer.DynamicSharedInformerFactory
	services   cache.SharedIndexInformer
	challenges cache.SharedIndexInformer
}

// NewKube prepares the watches; Start starts them.
func NewKube(client dynamic.Interface) (*Kube, error) {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, metav1.NamespaceAll, nil)
	services := dynamicinformer.NewFilteredDynamicInformer(client, servicesGVR, metav1.NamespaceAll, 0,
		cache.Indexers{byAddress: serviceAddresses}, func(o *metav1.ListOptions) { o.LabelSelector = LabelChallenge }).Informer()
	if err := services.SetTransform(trimService); err != nil {
		return nil, fmt.Errorf("the Services' watch: %w", err)
	}
	challenges := factory.ForResource(challengesGVR).Informer()
	if err := challenges.SetTransform(trimChallenge); err != nil {
		return nil, fmt.Errorf("the Challenges' watch: %w", err)
	}
	return &Kube{client: client, factory: factory, services: services, challenges: challenges}, nil
}

// Start runs the watches until ctx ends, and waits until both have listed once; false when ctx
// ended first.
func (k *Kube) Start(ctx context.Context) bool {
	go k.services.RunWithContext(ctx)
	k.factory.Start(ctx.Done())
	return cache.WaitForCacheSync(ctx.Done(), k.services.HasSynced, k.challenges.HasSynced)
}

// trimService keeps what the index reads of a Service: its name, namespace, Challenge label and
// addresses (a Service of an instance is small, but an event has thousands).
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
	spec := map[string]any{}
	for _, field := range []string{"clusterIP", "clusterIPs", "ports"} {
		if v, ok := u.Object["spec"].(map[string]any)[field]; ok {
			spec[field] = v
		}
	}
	trimmed.Object["spec"] = spec
	return trimmed, nil
}

// trimChallenge keeps what the stamper reads of a Challenge: its name, namespace, version, the
// stamp, and the two status times.
func trimChallenge(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	trimmed := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	trimmed.SetName(u.GetName())
	trimmed.SetNamespace(u.GetNamespace())
	trimmed.SetUID(u.GetUID())
	trimmed.SetResourceVersion(u.GetResourceVersion())
	if stamp, ok := u.GetAnnotations()[AnnotationLastActivity]; ok {
		trimmed.SetAnnotations(map[string]string{AnnotationLastActivity: stamp})
	}
	status := map[string]any{}
	for _, field := range []string{"lastActivityAt", "idleAt"} {
		if v, ok, _ := unstructured.NestedString(u.Object, "status", field); ok {
			status[field] = v
		}
	}
	trimmed.Object["status"] = status
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

// ChallengeAt is the Challenge of the Service at address: the Service's label names it, in the
// Service's namespace.
func (k *Kube) ChallengeAt(address netip.AddrPort) (types.NamespacedName, bool) {
	objs, err := k.services.GetIndexer().ByIndex(byAddress, address.String())
	if err != nil || len(objs) != 1 {
		return types.NamespacedName{}, false // none, or two Services claiming one address for a moment
	}
	u := objs[0].(*unstructured.Unstructured)
	name := u.GetLabels()[LabelChallenge]
	if name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: u.GetNamespace(), Name: name}, true
}

// Challenge is the Challenge as the watch last saw it.
func (k *Kube) Challenge(key types.NamespacedName) (Challenge, bool) {
	obj, ok, err := k.challenges.GetIndexer().GetByKey(key.String())
	if err != nil || !ok {
		return Challenge{}, false
	}
	return challengeOf(obj.(*unstructured.Unstructured)), true
}

// Get reads the Challenge from the API server.
func (k *Kube) Get(ctx context.Context, key types.NamespacedName) (Challenge, error) {
	u, err := k.client.Resource(challengesGVR).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return Challenge{}, fmt.Errorf("get Challenge %s: %w", key, err)
	}
	return challengeOf(u), nil
}

// Stamp is a JSON merge patch of the annotation alone, with the resourceVersion as its
// precondition: a Challenge written meanwhile answers Conflict.
func (k *Kube) Stamp(ctx context.Context, key types.NamespacedName, resourceVersion, value string) (Challenge, error) {
	metadata := map[string]any{"annotations": map[string]string{AnnotationLastActivity: value}}
	if resourceVersion != "" {
		metadata["resourceVersion"] = resourceVersion
	}
	patch, err := json.Marshal(map[string]any{"metadata": metadata})
	if err != nil {
		return Challenge{}, err
	}
	u, err := k.client.Resource(challengesGVR).Namespace(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "challenge-hook-activity-stamper"})
	if err != nil {
		return Challenge{}, fmt.Errorf("stamp Challenge %s: %w", key, err)
	}
	return challengeOf(u), nil
}

// challengeOf reads a Challenge.
func challengeOf(u *unstructured.Unstructured) Challenge {
	at := func(field string) time.Time {
		s, _, _ := unstructured.NestedString(u.Object, "status", field)
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}
		}
		return t
	}
	return Challenge{
		Key:             types.NamespacedName{Namespace: u.GetNamespace(), Name: u.GetName()},
		UID:             u.GetUID(),
		ResourceVersion: u.GetResourceVersion(),
		Stamp:           u.GetAnnotations()[AnnotationLastActivity],
		LastActivityAt:  at("lastActivityAt"),
		IdleAt:          at("idleAt"),
	}
}
