// Package mcsim simulates Metacontroller v4.17.2 around a hook, on the wire: the requests a
// CompositeController sends (sync, finalize, customize) and what becomes of the observed state
// once an answer is applied (children created and deleted, Pods lingering Terminating, Services
// given ClusterIPs by the API server). It is the one place that knows how Metacontroller shapes a
// request and updates a child (../shared/metacontroller.md, read from pkg/controller/composite,
// pkg/controller/common and pkg/dynamic/apply), for `challenge-hook render` and for the hook's
// golden and property tests; its package cluster plays the same part against a real API server
// for the end-to-end tests. It knows nothing of the hook: objects are JSON objects, and the hook
// is a function from request to answer.
package mcsim

import (
	"fmt"
	"maps"
)

// Object is a Kubernetes object (or any JSON object) as encoding/json decodes it.
type Object = map[string]any

// Kind is what API discovery tells Metacontroller of a resource.
type Kind struct {
	APIVersion string
	Kind       string
	// Resource is the plural a CompositeController names the type by.
	Resource string
}

// GroupKey is how Metacontroller keys a type in a request's children and related maps:
// "<Kind>.<version>" for the core group, "<Kind>.<group>/<version>" otherwise.
func GroupKey(kind, apiVersion string) string { return kind + "." + apiVersion }

// Controller is a CompositeController as Metacontroller runs it.
type Controller struct {
	// Object is the CompositeController, as every request carries it ("controller").
	Object Object
	// Discovery are the kinds of the resources the controller names (parent, children) and of
	// the objects its customize hook relates.
	Discovery []Kind
}

// Hook is the hook under test: an answer to a request, both as the wire carries them.
type Hook func(request []byte) ([]byte, error)

func (c Controller) spec() Object { return mapAt(c.Object, "spec") }

// kindOf is the kind of a resource, as discovery names it.
func (c Controller) kindOf(apiVersion, resource any) (Kind, error) {
	for _, k := range c.Discovery {
		if k.APIVersion == apiVersion && k.Resource == resource {
			return k, nil
		}
	}
	return Kind{}, fmt.Errorf("discovery: no resource %v %v", apiVersion, resource)
}

// apiVersionOf is the API version a kind is served at.
func (c Controller) apiVersionOf(kind any) (string, error) {
	for _, k := range c.Discovery {
		if k.Kind == kind {
			return k.APIVersion, nil
		}
	}
	return "", fmt.Errorf("discovery: no kind %v", kind)
}

// finalizer is the finalizer Metacontroller puts on every parent of a controller with a finalize
// hook (composite.NewParentController), "" without one.
func (c Controller) finalizer() string {
	if _, ok := mapAt(c.spec(), "hooks")["finalize"]; !ok {
		return ""
	}
	return "metacontroller.io/compositecontroller-" + fmt.Sprint(mapAt(c.Object, "metadata")["name"])
}

// Merge is over merged into base as a JSON merge patch (RFC 7386): objects merge key by key, null
// deletes, anything else replaces. base is not changed.
func Merge(base, over Object) Object {
	out := deepCopy(base)
	for k, v := range over {
		switch v := v.(type) {
		case nil:
			delete(out, k)
		case Object:
			out[k] = Merge(mapAt(out, k), v)
		default:
			out[k] = v
		}
	}
	return out
}

// mapAt is obj's object at key; a new empty one when there is none (not added to obj).
func mapAt(obj Object, key string) Object {
	m, _ := obj[key].(Object)
	if m == nil {
		return Object{}
	}
	return m
}

// Copy is obj with its nested objects copied (lists are shared).
func Copy(obj Object) Object { return deepCopy(obj) }

func deepCopy(obj Object) Object {
	out := maps.Clone(obj)
	if out == nil {
		out = Object{}
	}
	for k, v := range out {
		if m, ok := v.(Object); ok {
			out[k] = deepCopy(m)
		}
	}
	return out
}
