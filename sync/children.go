package sync

import (
	"encoding/json"
	"slices"

	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// ChildKind is one type of child the hook manages. childKinds is the one table of them: decoding a
// request, sorting and counting what it observed, keeping children as they are, render's requests
// and the route checks all read it, and manifests' tests hold both CompositeControllers to it.
type ChildKind struct {
	APIVersion string
	Kind       string
	// Resource is the type's plural, as a CompositeController's childResources names it.
	Resource string
	// Component is the kustomize component that declares the type ("" for the base install); a
	// component's types are declared only where it is applied.
	Component string
	// Legacy types are declared by no CompositeController of this version; the hook decodes their
	// objects, where an older CompositeController still declares the type, and never returns one,
	// so that Metacontroller deletes them.
	Legacy bool
	// observed is where the request's objects of this type go.
	observed func(*ObservedChildren) observedList
}

// Key is how Metacontroller keys the type in a request's children map: "<Kind>.<version>" for the
// core group, "<Kind>.<group>/<version>" otherwise.
func (k ChildKind) Key() string { return k.Kind + "." + k.APIVersion }

// childKinds in the order the hook returns children it keeps as they are.
var childKinds = []ChildKind{
	{APIVersion: "v1", Kind: "Pod", Resource: "pods", observed: func(c *ObservedChildren) observedList { return listOf(&c.Pods) }},
	{APIVersion: "v1", Kind: "Service", Resource: "services", observed: func(c *ObservedChildren) observedList { return listOf(&c.Services) }},
	{APIVersion: "networking.k8s.io/v1", Kind: "Ingress", Resource: "ingresses", observed: func(c *ObservedChildren) observedList { return listOf(&c.Ingresses) }},
	{APIVersion: gatewayAPIVersion, Kind: kindHTTPRoute, Resource: "httproutes", Component: GatewayAPIComponent,
		observed: func(c *ObservedChildren) observedList { return listOf(&c.HTTPRoutes) }},
	{APIVersion: gatewayAPIVersion, Kind: kindTLSRoute, Resource: "tlsroutes", Component: GatewayAPIComponent,
		observed: func(c *ObservedChildren) observedList { return listOf(&c.TLSRoutes) }},
	{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Resource: "networkpolicies", observed: func(c *ObservedChildren) observedList { return listOf(&c.NetworkPolicies) }},
	{APIVersion: "v1", Kind: "Secret", Resource: "secrets", observed: func(c *ObservedChildren) observedList { return listOf(&c.Secrets) }},
	{APIVersion: "apps/v1", Kind: "Deployment", Resource: "deployments", Legacy: true, observed: func(c *ObservedChildren) observedList { return listOf(&c.Deployments) }},
}

// ChildKinds are the child types a CompositeController of this version declares: the base
// install's (component "") or a kustomize component's.
func ChildKinds(component string) []ChildKind {
	var out []ChildKind
	for _, k := range childKinds {
		if k.Component == component && !k.Legacy {
			out = append(out, k)
		}
	}
	return out
}

// ChildResource is the type's entry in a CompositeController's spec.childResources.
func (k ChildKind) ChildResource() ChildResource {
	return ChildResource{APIVersion: k.APIVersion, Resource: k.Resource}
}

// observedList is one type's list of observed objects in ObservedChildren.
type observedList interface {
	decode(dec *json.Decoder) error
	sort()
	len() int
	appendTo(out []ObservedObject) []ObservedObject
}

// observed is every observed child type: each embeds ObservedObject.
type observed interface{ observedObject() ObservedObject }

func (o ObservedObject) observedObject() ObservedObject { return o }

type typedList[T observed] struct{ items *[]T }

func listOf[T observed](items *[]T) observedList { return typedList[T]{items} }

// decode decodes one object straight into the list (wire.DecodeInto).
func (l typedList[T]) decode(dec *json.Decoder) error {
	return wire.DecodeInto(l.items, func(o *T) string { return (*o).observedObject().Metadata.Name })(dec)
}

// sort puts the list in namespace and name order (stable: identical requests give identical
// lists), whatever order the request's map came in.
func (l typedList[T]) sort() {
	slices.SortStableFunc(*l.items, func(a, b T) int {
		return wire.CompareMeta(a.observedObject().Metadata.ObjectMeta, b.observedObject().Metadata.ObjectMeta)
	})
}

func (l typedList[T]) len() int { return len(*l.items) }

func (l typedList[T]) appendTo(out []ObservedObject) []ObservedObject {
	for _, o := range *l.items {
		out = append(out, o.observedObject())
	}
	return out
}

// Count is the number of observed children of every type.
func (c ObservedChildren) Count() int {
	n := 0
	for _, k := range childKinds {
		n += k.observed(&c).len()
	}
	return n
}

// Objects lists every observed child in the order of childKinds.
func (c ObservedChildren) Objects() []ObservedObject {
	out := make([]ObservedObject, 0, c.Count())
	for _, k := range childKinds {
		out = k.observed(&c).appendTo(out)
	}
	return out
}

// findByName finds the observed child with the given name (the instance's children are named
// after it, one per type).
func findByName[T observed](objs []T, name string) (T, bool) {
	for _, o := range objs {
		if o.observedObject().Metadata.Name == name {
			return o, true
		}
	}
	var zero T
	return zero, false
}
