// How Metacontroller updates a child it already created: a kubectl-apply style three-way merge of
// the hook's desired object onto the stored one, against what it applied last time (v4.17.2,
// pkg/dynamic/apply and pkg/controller/common.ApplyUpdate, the default "dynamic apply" strategy).

package mcsim

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// listMergeKeys are the item fields that make a list a map in the merge, in order of precedence:
// a list all of whose items are objects sharing one of these fields merges item by item, keyed
// by it; any other list is replaced whole by the desired one.
var listMergeKeys = []string{"containerPort", "port", "mountPath", "name", "uid", "ip", "path"}

// systemMetadata are the metadata fields the API server owns: an update keeps the stored values.
var systemMetadata = []string{"selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
	"deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"}

// Updated is the object Metacontroller writes to update stored for desired (an InPlace update,
// or, for Recreate, the sign that it deletes the child): desired's changes since the
// last-applied annotation merged onto stored, the system metadata and status kept as stored,
// and the annotation set to desired. changed is false when the result equals stored: then
// Metacontroller writes nothing. stored and desired are not modified.
func Updated(stored, desired Object) (updated Object, changed bool, err error) {
	var lastApplied Object
	if raw, _ := mapAt(mapAt(stored, "metadata"), "annotations")[wire.LastAppliedAnnotation].(string); raw != "" {
		if err := json.Unmarshal([]byte(raw), &lastApplied); err != nil {
			return nil, false, fmt.Errorf("annotation %s: %w", wire.LastAppliedAnnotation, err)
		}
	}
	desired = jsonCopy(desired).(Object)
	if annotations := mapAt(mapAt(desired, "metadata"), "annotations"); len(annotations) > 0 {
		delete(annotations, wire.LastAppliedAnnotation)
	}
	merged, err := merge("", jsonCopy(stored), lastApplied, desired)
	if err != nil {
		return nil, false, err
	}
	updated, ok := merged.(Object)
	if !ok {
		return nil, false, fmt.Errorf("merge: the object became a %T", merged)
	}
	meta := mapAt(updated, "metadata")
	storedMeta := mapAt(stored, "metadata")
	for _, field := range systemMetadata {
		keep(meta, storedMeta, field)
	}
	keep(updated, stored, "status")
	raw, err := json.Marshal(desired)
	if err != nil {
		return nil, false, fmt.Errorf("last-applied: %w", err)
	}
	annotations := mapAt(meta, "annotations")
	annotations[wire.LastAppliedAnnotation] = string(raw)
	meta["annotations"] = annotations
	updated["metadata"] = meta
	return updated, !reflect.DeepEqual(updated, stored), nil
}

// keep sets dst[key] to src's value, or removes it when src has none.
func keep(dst, src Object, key string) {
	if v, ok := src[key]; ok {
		dst[key] = jsonCopy(v)
	} else {
		delete(dst, key)
	}
}

// merge applies the change from lastApplied to desired onto stored and returns the result.
func merge(path string, stored, lastApplied, desired any) (any, error) {
	switch stored := stored.(type) {
	case Object:
		last, ok := lastApplied.(Object)
		if !ok && lastApplied != nil {
			return nil, fmt.Errorf("last applied%s: a %T where the object has an object", path, lastApplied)
		}
		want, ok := desired.(Object)
		if !ok && desired != nil {
			return nil, fmt.Errorf("desired%s: a %T where the object has an object", path, desired)
		}
		return mergeObject(path, stored, last, want)
	case []any:
		last, ok := lastApplied.([]any)
		if !ok && lastApplied != nil {
			return nil, fmt.Errorf("last applied%s: a %T where the object has a list", path, lastApplied)
		}
		want, ok := desired.([]any)
		if !ok && desired != nil {
			return nil, fmt.Errorf("desired%s: a %T where the object has a list", path, desired)
		}
		if key := listMapKey(stored, last, want); key != "" {
			return mergeListMap(path, key, stored, last, want)
		}
		return desired, nil
	default:
		return desired, nil
	}
}

// mergeObject removes from stored what was applied last and is no longer desired, and merges
// every desired field.
func mergeObject(path string, stored, lastApplied, desired Object) (Object, error) {
	for key := range lastApplied {
		if _, ok := desired[key]; !ok {
			delete(stored, key)
		}
	}
	for key, want := range desired {
		v, err := merge(path+"["+key+"]", stored[key], lastApplied[key], want)
		if err != nil {
			return nil, err
		}
		stored[key] = v
	}
	return stored, nil
}

// mergeListMap merges lists of objects item by item, keyed by key: the stored items first, in
// their order, then the desired ones the stored list did not have, in theirs.
func mergeListMap(path, key string, stored, lastApplied, desired []any) ([]any, error) {
	byKey := func(list []any) Object {
		out := Object{}
		for _, item := range list {
			out[mergeKeyOf(item, key)] = item
		}
		return out
	}
	merged, err := mergeObject(path, byKey(stored), byKey(lastApplied), byKey(desired))
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(merged))
	placed := map[string]bool{}
	for _, list := range [][]any{stored, desired} {
		for _, item := range list {
			k := mergeKeyOf(item, key)
			if v, ok := merged[k]; ok && !placed[k] {
				out = append(out, v)
				placed[k] = true
			}
		}
	}
	return out, nil
}

func mergeKeyOf(item any, key string) string {
	if s, ok := item.(Object)[key].(string); ok {
		return s
	}
	return fmt.Sprint(item.(Object)[key])
}

// listMapKey is the merge key every item of every list has, or "" when some item is no object
// or they share none of listMergeKeys.
func listMapKey(lists ...[]any) string {
	var common map[string]bool
	for _, list := range lists {
		for _, item := range list {
			obj, ok := item.(Object)
			if !ok {
				return ""
			}
			if common == nil {
				common = map[string]bool{}
				for k := range obj {
					common[k] = true
				}
				continue
			}
			for k := range common {
				if _, ok := obj[k]; !ok {
					delete(common, k)
				}
			}
		}
	}
	for _, key := range listMergeKeys {
		if common[key] {
			return key
		}
	}
	return ""
}

// jsonCopy is a deep copy of a JSON value (objects and lists included).
func jsonCopy(v any) any {
	switch v := v.(type) {
	case Object:
		out := make(Object, len(v))
		for k, e := range v {
			out[k] = jsonCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonCopy(e)
		}
		return out
	default:
		return v
	}
}
