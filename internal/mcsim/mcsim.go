// Package mcsim simulates Metacontroller v4.17.2 around a hook, on the wire: the requests a
// CompositeController sends (sync, finalize, customize) and what becomes of the observed state
// once an answer is applied (children created and deleted, Pods lingering Terminating, Services
// given ClusterIPs by the API server). It is the one place that knows how Metacontroller shapes a
// request (../shared/metacontroller.md, read from pkg/controller/composite and pkg/controller/common),
// for `challenge-hook render` and for the hook's golden and property tests. It knows nothing of the
// hook: objects are JSON objects, and the hook is a function from request to answer.
package mcsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/wire"
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

// Created is obj as the API server stores it when a client creates it: in defaultNamespace unless
// it names one, and created now unless it says when.
func Created(obj Object, defaultNamespace string, now time.Time) Object {
	obj = deepCopy(obj)
	meta := mapAt(obj, "metadata")
	if meta["namespace"] == nil || meta["namespace"] == "" {
		meta["namespace"] = defaultNamespace
	}
	if _, ok := meta["creationTimestamp"]; !ok {
		meta["creationTimestamp"] = now.UTC().Format(time.RFC3339)
	}
	obj["metadata"] = meta
	return obj
}

// Stored is obj as the API server stores it once creator created it and statusManager wrote its
// status: apiVersion and kind, generation 1 unless it says, and managedFields.
func Stored(obj Object, kind Kind, creator, statusManager string) Object {
	obj = deepCopy(obj)
	obj["apiVersion"], obj["kind"] = kind.APIVersion, kind.Kind
	meta := mapAt(obj, "metadata")
	obj["metadata"] = meta
	if _, ok := meta["generation"]; !ok {
		meta["generation"] = 1
	}
	meta["managedFields"] = managedFields(obj, creator, statusManager, meta["creationTimestamp"])
	return obj
}

// Parent is a parent as Metacontroller sends it, created by creator: as the API server stores it,
// its status written by Metacontroller, with Metacontroller's finalizer when the controller has a
// finalize hook.
func (c Controller) Parent(in Object, creator string) (Object, error) {
	resource := mapAt(c.spec(), "parentResource")
	kind, err := c.kindOf(resource["apiVersion"], resource["resource"])
	if err != nil {
		return nil, fmt.Errorf("parent: %w", err)
	}
	parent := deepCopy(in)
	if f := c.finalizer(); f != "" {
		mapAt(parent, "metadata")["finalizers"] = []any{f}
	}
	return Stored(parent, kind, creator, "metacontroller"), nil
}

// statusManager is who writes a kind's status, for its managedFields.
func statusManager(kind any) string {
	switch kind {
	case "Pod":
		return "kubelet"
	case "Service":
		return "service-controller"
	case "Ingress":
		return "ingress-nginx"
	case "HTTPRoute", "TLSRoute":
		return "gateway-controller"
	case "Deployment", "DaemonSet":
		return "kube-controller-manager"
	}
	return ""
}

// managedFields is what the API server records of who set an object's fields, as Metacontroller
// sends it (a hook reads none of it, but it is much of a request's size): the manager of
// everything but the status, and the status subresource's.
func managedFields(obj Object, manager, statusManager string, at any) []any {
	owned := Object{}
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "status":
		case "metadata":
			owned[k] = Object{}
			for _, field := range []string{"labels", "annotations", "ownerReferences"} {
				if v, ok := v.(Object)[field]; ok {
					owned[k].(Object)[field] = v
				}
			}
		default:
			owned[k] = v
		}
	}
	entry := func(manager string, fields any) Object {
		return Object{"manager": manager, "operation": "Update", "apiVersion": obj["apiVersion"], "time": at, "fieldsType": "FieldsV1", "fieldsV1": fields}
	}
	out := []any{entry(manager, fieldsV1(owned))}
	if status, ok := obj["status"]; ok {
		status := entry(statusManager, fieldsV1(Object{"status": status}))
		status["subresource"] = "status"
		out = append(out, status)
	}
	return out
}

// fieldsV1 is a value's fields in the API server's FieldsV1 form: "f:<key>" for each key, a list
// or a value as {}.
func fieldsV1(v any) Object {
	out := Object{}
	if m, ok := v.(Object); ok {
		for k, v := range m {
			out["f:"+k] = fieldsV1(v)
		}
	}
	return out
}

// Related is the related map of a request: objs grouped by type and keyed "<namespace>/<name>"
// (hook version v2), each in namespace unless it names one, its apiVersion the one its kind is
// served at; and each of groups present, empty when nothing matched: the types the customize
// answer asked for.
func (c Controller) Related(namespace any, objs []Object, groups ...string) (map[string]any, error) {
	out := map[string]any{}
	for _, g := range groups {
		out[g] = map[string]any{}
	}
	for _, in := range objs {
		obj := deepCopy(in)
		apiVersion, err := c.apiVersionOf(obj["kind"])
		if err != nil {
			return nil, fmt.Errorf("related: %w", err)
		}
		obj["apiVersion"] = apiVersion
		meta := mapAt(obj, "metadata")
		obj["metadata"] = meta
		if _, ok := meta["namespace"]; !ok {
			meta["namespace"] = namespace
		}
		key := GroupKey(fmt.Sprint(obj["kind"]), apiVersion)
		if out[key] == nil {
			out[key] = map[string]any{}
		}
		out[key].(map[string]any)[fmt.Sprint(meta["namespace"], "/", meta["name"])] = obj
	}
	return out, nil
}

// Children is the children map of a request for parent: every type the controller declares has
// a group ({} when empty); each of children is observed as Metacontroller created it: the object
// the hook declared for it (declared, by "<Kind>/<name>"; none for a child it never declared),
// with the given fields over it, in the parent's namespace, owned by the parent, labelled with its
// uid (generateSelector), its last-applied configuration what was declared, and managedFields.
func (c Controller) Children(parent Object, children []Object, declared map[string]Object) (map[string]any, error) {
	groups := map[string]any{}
	resources, _ := c.spec()["childResources"].([]any)
	for _, r := range resources {
		resource, _ := r.(Object)
		kind, err := c.kindOf(resource["apiVersion"], resource["resource"])
		if err != nil {
			return nil, fmt.Errorf("childResources: %w", err)
		}
		groups[GroupKey(kind.Kind, kind.APIVersion)] = map[string]any{}
	}
	parentMeta := mapAt(parent, "metadata")
	for _, in := range children {
		kind := in["kind"]
		name := mapAt(in, "metadata")["name"]
		obj := Object{}
		lastApplied, isDeclared := declared[fmt.Sprint(kind, "/", name)]
		if isDeclared {
			obj = deepCopy(lastApplied)
		}
		obj = Merge(obj, in)
		apiVersion, err := c.apiVersionOf(kind)
		if err != nil {
			return nil, fmt.Errorf("child %v/%v: %w", kind, name, err)
		}
		obj["apiVersion"] = apiVersion
		meta := mapAt(obj, "metadata")
		obj["metadata"] = meta
		meta["namespace"] = parentMeta["namespace"]
		meta["labels"] = Merge(mapAt(meta, "labels"), Object{"controller-uid": parentMeta["uid"]})
		meta["ownerReferences"] = []any{Object{
			"apiVersion": parent["apiVersion"], "kind": parent["kind"], "name": parentMeta["name"], "uid": parentMeta["uid"],
			"controller": true, "blockOwnerDeletion": true,
		}}
		if isDeclared {
			raw, err := json.Marshal(lastApplied)
			if err != nil {
				return nil, fmt.Errorf("child %v/%v: %w", kind, name, err)
			}
			meta["annotations"] = Merge(mapAt(meta, "annotations"), Object{wire.LastAppliedAnnotation: string(raw)})
		}
		meta["managedFields"] = managedFields(obj, "metacontroller", statusManager(kind), parentMeta["creationTimestamp"])
		key := GroupKey(fmt.Sprint(kind), apiVersion)
		group, ok := groups[key].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("child %v/%v: the CompositeController declares no %s", kind, name, key)
		}
		group[fmt.Sprint(meta["namespace"], "/", name)] = obj
	}
	return groups, nil
}

// SyncRequest is a sync request (a finalize request when finalizing), as a v2 hook receives it.
func (c Controller) SyncRequest(parent Object, children, related map[string]any, finalizing bool) ([]byte, error) {
	return json.Marshal(Object{"controller": c.Object, "parent": parent, "children": children, "related": related, "finalizing": finalizing})
}

// CustomizeRequest is a customize request for parent.
func (c Controller) CustomizeRequest(parent Object) ([]byte, error) {
	return json.Marshal(Object{"controller": c.Object, "parent": parent})
}

// Applied says how much of an answer Metacontroller has applied when it sends the next request.
type Applied struct {
	// Create: the children the answer adds are observed (else the next request observes what the
	// previous one did: the moment before the creates land).
	Create bool
	// Delete: the observed children the answer leaves out are gone (else the moment before).
	Delete bool
	// PodsLinger: a Pod being deleted stays observed for one more request, Terminating (with a
	// deletionTimestamp), as a Pod whose process ignores SIGTERM does for its grace period.
	PodsLinger bool
	// ClusterIPs: every observed Service has what the API server allocated at its creation: its
	// spec in Allocated (by name: a ClusterIP, node ports), else a ClusterIP of ServiceCIDR's.
	ClusterIPs bool
	Allocated  []Object
	// Now is when the creates and deletes land.
	Now time.Time
}

// Apply is the request Metacontroller sends after it applied answer to request: the answer's
// status becomes the parent's; each child the answer declares that is observed has the answer's
// object as its last-applied configuration; creates and deletes land as how says.
func Apply(request, answer []byte, how Applied) ([]byte, error) {
	var resp struct {
		Status   json.RawMessage   `json:"status"`
		Children []json.RawMessage `json:"children"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	var req Object
	if err := json.Unmarshal(request, &req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	parent, ok := req["parent"].(Object)
	if !ok {
		return nil, errors.New("request: no parent")
	}
	parent["status"] = resp.Status
	groups, _ := req["children"].(Object)
	if groups == nil {
		groups = Object{}
		req["children"] = groups
	}
	namespace, _ := mapAt(parent, "metadata")["namespace"].(string)
	declared, err := applyDeclared(groups, resp.Children, namespace, how)
	if err != nil {
		return nil, err
	}
	if how.Delete {
		deleteUndeclared(groups, declared, how)
	}
	if how.ClusterIPs {
		services, _ := groups[GroupKey("Service", "v1")].(Object)
		allocateClusterIPs(services, how.Allocated)
	}
	return json.Marshal(req)
}

// timestamp is how the API server writes a time.
func timestamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// applyDeclared records each declared child on the observed one as its last-applied
// configuration, creating it first (how.Create) when none is observed. It returns the declared
// children by "<group key> <namespace>/<name>".
func applyDeclared(groups Object, children []json.RawMessage, namespace string, how Applied) (map[string]bool, error) {
	declared := map[string]bool{}
	for _, raw := range children {
		var child Object
		if err := json.Unmarshal(raw, &child); err != nil {
			return nil, fmt.Errorf("answer's child: %w", err)
		}
		meta := mapAt(child, "metadata")
		child["metadata"] = meta
		if _, ok := meta["namespace"]; !ok {
			meta["namespace"] = namespace
		}
		groupKey := GroupKey(fmt.Sprint(child["kind"]), fmt.Sprint(child["apiVersion"]))
		key := fmt.Sprint(meta["namespace"], "/", meta["name"])
		declared[groupKey+" "+key] = true
		group, _ := groups[groupKey].(Object)
		observed, exists := group[key].(Object)
		if !exists && !how.Create {
			continue
		}
		if group == nil {
			group = Object{}
			groups[groupKey] = group
		}
		if !exists {
			observed = child
			meta["uid"] = "uid-" + key
			meta["creationTimestamp"] = timestamp(how.Now)
			group[key] = observed
		}
		observedMeta := mapAt(observed, "metadata")
		observed["metadata"] = observedMeta
		annotations := mapAt(observedMeta, "annotations")
		observedMeta["annotations"] = annotations
		annotations[wire.LastAppliedAnnotation] = string(raw)
	}
	return declared, nil
}

// deleteUndeclared deletes every observed child the answer left out; with how.PodsLinger a Pod
// is Terminating first, for one request.
func deleteUndeclared(groups Object, declared map[string]bool, how Applied) {
	for groupKey, group := range groups {
		group, _ := group.(Object)
		for key, obj := range group {
			if declared[groupKey+" "+key] {
				continue
			}
			obj, _ := obj.(Object)
			meta := mapAt(obj, "metadata")
			if _, terminating := meta["deletionTimestamp"]; how.PodsLinger && strings.HasPrefix(groupKey, "Pod.") && !terminating {
				meta["deletionTimestamp"] = timestamp(how.Now)
				continue
			}
			delete(group, key)
		}
	}
}

// ServiceCIDR is where the simulated API server allocates ClusterIPs: the first addresses of
// Kubernetes' default Service range, from .10.
const ServiceCIDR = "10.96.0.0/16"

// allocateClusterIPs gives each Service (by "<namespace>/<name>") what the API server allocated at
// its creation: the spec of allocated's Service of the same name, and a ClusterIP when it has
// none: the n-th address for the n-th Service in key order, or the next one no other Service holds.
func allocateClusterIPs(services Object, allocated []Object) {
	keys := slices.Sorted(maps.Keys(services))
	taken := map[any]bool{}
	for _, key := range keys {
		obj := services[key].(Object)
		spec := mapAt(obj, "spec")
		for _, a := range allocated {
			if a["kind"] == "Service" && mapAt(a, "metadata")["name"] == mapAt(obj, "metadata")["name"] {
				spec = Merge(spec, mapAt(a, "spec"))
			}
		}
		obj["spec"] = spec
		taken[spec["clusterIP"]] = true
	}
	for i, key := range keys {
		spec := mapAt(services[key].(Object), "spec")
		if spec["clusterIP"] != nil {
			continue
		}
		for n := i; ; n++ {
			ip := fmt.Sprintf("10.96.%d.%d", (10+n)/256, (10+n)%256)
			if !taken[ip] {
				spec["clusterIP"], taken[ip] = ip, true
				break
			}
		}
	}
}

// Run is the exchange of Metacontroller and hook from request on: the hook answers, Metacontroller
// applies the answer as how says and sends the next request, rounds times. visit, if not nil, sees
// each request and its answer, the first included. Run returns the last request and its answer.
func Run(request []byte, hook Hook, rounds int, how Applied, visit func(request, answer []byte) error) ([]byte, []byte, error) {
	answer, err := hook(request)
	for round := 0; ; round++ {
		if err != nil {
			return nil, nil, fmt.Errorf("round %d: %w", round, err)
		}
		if visit != nil {
			if err := visit(request, answer); err != nil {
				return nil, nil, fmt.Errorf("round %d: %w", round, err)
			}
		}
		if round == rounds {
			return request, answer, nil
		}
		if request, err = Apply(request, answer, how); err == nil {
			answer, err = hook(request)
		}
	}
}

// Declared is every child the hook declares for a new parent, by "<Kind>/<name>": what it
// answers once Metacontroller applied its answers to first rounds times (creates and deletes
// landed, Services given ClusterIPs with allocated), the latest answer's object for each. A
// hook holds children back until others are observed (a Pod until its NetworkPolicy), so one
// round does not declare them all.
func Declared(first []byte, hook Hook, rounds int, allocated []Object, now time.Time) (map[string]Object, error) {
	out := map[string]Object{}
	how := Applied{Create: true, Delete: true, ClusterIPs: true, Allocated: allocated, Now: now}
	answers := 0
	_, _, err := Run(first, hook, rounds, how, func(_, answer []byte) error {
		if answers++; answers == 1 {
			return nil // the first answer, before anything exists
		}
		var resp struct {
			Children []Object `json:"children"`
		}
		if err := json.Unmarshal(answer, &resp); err != nil {
			return fmt.Errorf("answer: %w", err)
		}
		for _, child := range resp.Children {
			out[fmt.Sprint(child["kind"], "/", mapAt(child, "metadata")["name"])] = child
		}
		return nil
	})
	return out, err
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
