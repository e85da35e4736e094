//go:build e2e

// This file ports the part of Metacontroller that decides whether a child is rewritten, so that
// "no churn" below means exactly what Metacontroller would do. Ported from
// github.com/metacontroller/metacontroller (v4.x): pkg/dynamic/apply/apply.go (Merge and its
// helpers) and pkg/controller/common/manage_children.go (ApplyUpdate, revertField and the
// ObjectMeta system fields).
//
// Copyright 2018 Google Inc.; Copyright 2022 Metacontroller authors.
// Licensed under the Apache License, Version 2.0 (https://www.apache.org/licenses/LICENSE-2.0).
// Changes: renamed to unexported functions, typed `any`, errors wrapped with %w, logging removed.

package e2e

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// lastAppliedAnnotation is where Metacontroller keeps a child exactly as the hook last returned it.
const lastAppliedAnnotation = "metacontroller.k8s.io/last-applied-configuration"

// setLastApplied stores lastApplied as JSON (encoding/json sorts map keys) in the annotation.
func setLastApplied(obj *unstructured.Unstructured, lastApplied map[string]any) error {
	lastAppliedJSON, err := json.Marshal(lastApplied)
	if err != nil {
		return fmt.Errorf("marshal last-applied configuration: %w", err)
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = make(map[string]string, 1)
	}
	annotations[lastAppliedAnnotation] = string(lastAppliedJSON)
	obj.SetAnnotations(annotations)
	return nil
}

// getLastApplied reads the annotation; nil when there is none.
func getLastApplied(obj *unstructured.Unstructured) (map[string]any, error) {
	lastAppliedJSON := obj.GetAnnotations()[lastAppliedAnnotation]
	if lastAppliedJSON == "" {
		return nil, nil
	}
	lastApplied := make(map[string]any)
	if err := json.Unmarshal([]byte(lastAppliedJSON), &lastApplied); err != nil {
		return nil, fmt.Errorf("unmarshal %q annotation: %w", lastAppliedAnnotation, err)
	}
	return lastApplied, nil
}

// applyMerge updates a copy of observed with the changes from lastApplied to desired, in the style
// of `kubectl apply`, without any type-specific knowledge.
func applyMerge(observed, lastApplied, desired map[string]any) (map[string]any, error) {
	destination := runtime.DeepCopyJSON(observed)
	if _, err := mergeValue("", destination, lastApplied, desired); err != nil {
		return nil, fmt.Errorf("merge desired changes: %w", err)
	}
	return destination, nil
}

// mergeValue applies the diff from lastApplied to desired onto destination and returns the
// replacement destination value.
func mergeValue(fieldPath string, destination, lastApplied, desired any) (any, error) {
	switch destVal := destination.(type) {
	case map[string]any:
		lastVal, ok := lastApplied.(map[string]any)
		if !ok && lastVal != nil {
			return nil, fmt.Errorf("lastApplied%s: expecting map[string]any, got %T", fieldPath, lastApplied)
		}
		desVal, ok := desired.(map[string]any)
		if !ok && desVal != nil {
			return nil, fmt.Errorf("desired%s: expecting map[string]any, got %T", fieldPath, desired)
		}
		return mergeObject(fieldPath, destVal, lastVal, desVal)
	case []any:
		lastVal, ok := lastApplied.([]any)
		if !ok && lastVal != nil {
			return nil, fmt.Errorf("lastApplied%s: expecting []any, got %T", fieldPath, lastApplied)
		}
		desVal, ok := desired.([]any)
		if !ok && desVal != nil {
			return nil, fmt.Errorf("desired%s: expecting []any, got %T", fieldPath, desired)
		}
		return mergeArray(fieldPath, destVal, lastVal, desVal)
	default:
		// A scalar or null: the desired value wins (we are only called when there is one).
		return desired, nil
	}
}

func mergeObject(fieldPath string, destination, lastApplied, desired map[string]any) (any, error) {
	// Remove fields that were in lastApplied but are no longer desired.
	for key := range lastApplied {
		if _, present := desired[key]; !present {
			delete(destination, key)
		}
	}
	var err error
	for key, desVal := range desired {
		destination[key], err = mergeValue(fmt.Sprintf("%s[%s]", fieldPath, key), destination[key], lastApplied[key], desVal)
		if err != nil {
			return nil, err
		}
	}
	return destination, nil
}

func mergeArray(fieldPath string, destination, lastApplied, desired []any) (any, error) {
	if mergeKey := detectListMapKey(destination, lastApplied, desired); mergeKey != "" {
		return mergeListMap(fieldPath, mergeKey, destination, lastApplied, desired)
	}
	// Any other list is replaced whole.
	return desired, nil
}

func mergeListMap(fieldPath, mergeKey string, destination, lastApplied, desired []any) (any, error) {
	destMap := makeListMap(mergeKey, destination)
	lastMap := makeListMap(mergeKey, lastApplied)
	desMap := makeListMap(mergeKey, desired)
	if _, err := mergeObject(fieldPath, destMap, lastMap, desMap); err != nil {
		return nil, err
	}
	// Back to a list, keeping the destination's order, then desired's new items.
	destList := make([]any, 0, len(destMap))
	added := make(map[string]bool, len(destMap))
	for _, item := range destination {
		key := stringMergeKey(item.(map[string]any)[mergeKey])
		if newItem, ok := destMap[key]; ok {
			destList = append(destList, newItem)
			added[key] = true
		}
	}
	for _, item := range desired {
		key := stringMergeKey(item.(map[string]any)[mergeKey])
		if !added[key] {
			destList = append(destList, destMap[key])
			added[key] = true
		}
	}
	return destList, nil
}

func makeListMap(mergeKey string, list []any) map[string]any {
	res := make(map[string]any, len(list))
	for _, item := range list {
		// detectListMapKey has checked that every item is an object.
		res[stringMergeKey(item.(map[string]any)[mergeKey])] = item
	}
	return res
}

func stringMergeKey(val any) string {
	if s, ok := val.(string); ok {
		return s
	}
	return fmt.Sprintf("%v", val)
}

// knownMergeKeys are the keys guessed as list-map keys, highest precedence first.
var knownMergeKeys = [...]string{"containerPort", "port", "mountPath", "name", "uid", "ip", "path"}

// detectListMapKey returns the first known merge key that every item of every list carries, or ""
// when the lists are not lists of objects sharing one.
func detectListMapKey(lists ...[]any) string {
	var commonKeys map[string]bool
	for _, list := range lists {
		for _, item := range list {
			obj, ok := item.(map[string]any)
			if !ok {
				return ""
			}
			if commonKeys == nil {
				commonKeys = make(map[string]bool, len(obj))
				for key := range obj {
					commonKeys[key] = true
				}
				continue
			}
			for key := range commonKeys {
				if _, ok := obj[key]; !ok {
					delete(commonKeys, key)
				}
			}
		}
	}
	for _, key := range knownMergeKeys {
		if commonKeys[key] {
			return key
		}
	}
	return ""
}

// objectMetaSystemFields are read-only, system-populated ObjectMeta fields: a desired child that
// sets them never causes an update.
var objectMetaSystemFields = [...]string{
	"selfLink", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
	"deletionGracePeriodSeconds",
}

// applyUpdate is Metacontroller's ApplyUpdate: the object it would PUT for a child that exists.
// The child is rewritten exactly when the result is not reflect.DeepEqual to live.
func applyUpdate(live, desired *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	lastApplied, err := getLastApplied(live)
	if err != nil {
		return nil, err
	}
	update := desired.DeepCopy()
	// Metacontroller blanks (not removes) a last-applied annotation the hook itself returned.
	if annotations := update.GetAnnotations(); annotations != nil {
		if _, ok := annotations[lastAppliedAnnotation]; ok {
			annotations[lastAppliedAnnotation] = ""
			update.SetAnnotations(annotations)
		}
	}
	merged, err := applyMerge(live.UnstructuredContent(), lastApplied, update.UnstructuredContent())
	if err != nil {
		return nil, err
	}
	newObj := &unstructured.Unstructured{Object: merged}
	for _, field := range objectMetaSystemFields {
		if err := revertField(newObj, live, "metadata", field); err != nil {
			return nil, err
		}
	}
	if err := revertField(newObj, live, "status"); err != nil {
		return nil, err
	}
	if err := setLastApplied(newObj, update.UnstructuredContent()); err != nil {
		return nil, err
	}
	return newObj, nil
}

// revertField makes fieldPath of newObj what it is in orig (present with the same value, or absent).
func revertField(newObj, orig *unstructured.Unstructured, fieldPath ...string) error {
	field, found, err := unstructured.NestedFieldNoCopy(orig.Object, fieldPath...)
	if err != nil {
		return fmt.Errorf("look up %v: %w", fieldPath, err)
	}
	if !found {
		unstructured.RemoveNestedField(newObj.Object, fieldPath...)
		return nil
	}
	if err := unstructured.SetNestedField(newObj.Object, runtime.DeepCopyJSONValue(field), fieldPath...); err != nil {
		return fmt.Errorf("revert %v: %w", fieldPath, err)
	}
	return nil
}
