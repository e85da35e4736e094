// The requests Metacontroller sends: the parent, related and children maps, sync and customize.

package mcsim

import (
	"encoding/json"
	"fmt"

	"github.com/challenge-hook/challenge-hook/internal/wire"
)

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
