package sync

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	apimetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// All of the hook's JSON is here: requests are decoded into the typed values of wire.go, answers
// are encoded from them and from the children's apply configurations. The sync logic sees Go
// values only.

// ErrBadRequest marks a request the hook cannot understand: the server answers 400 and
// Metacontroller changes nothing.
var ErrBadRequest = wire.ErrBadRequest

// childGroups dispatches each child type of the table (childKinds) by the key Metacontroller
// gives it to its typed list.
func childGroups(c *ObservedChildren) map[string]wire.GroupDecoder {
	groups := map[string]wire.GroupDecoder{}
	for _, k := range childKinds {
		groups[k.Key()] = k.observed(c).decode
	}
	return groups
}

// relatedGroups are the types the customize hook asks for. Pods were related before they were
// children: Metacontroller may still send them from a customize answer it cached before the
// upgrade, and they are read past.
func relatedGroups(r *Related) map[string]wire.GroupDecoder {
	return map[string]wire.GroupDecoder{
		"ChallengeDefinition." + v1alpha1.APIVersion: wire.DecodeInto(&r.Definitions, func(d *ChallengeDefinition) string { return d.Metadata.Name }),
		"Challenge." + v1alpha1.APIVersion:           wire.DecodeInto(&r.Challenges, func(c *Challenge) string { return c.Metadata.Name }),
		"Pod.v1":                                     func(dec *json.Decoder) error { return dec.Decode(&struct{}{}) },
	}
}

// DecodeRequest decodes a sync or finalize request in one pass: the groups of the children and
// related maps are dispatched by key to their typed lists as they are read. Every error wraps
// ErrBadRequest and names the part of the request that is wrong.
func DecodeRequest(body []byte) (Request, error) {
	var req Request
	var parent *Challenge
	err := wire.DecodeRequestKeys(body, map[string]func(dec *json.Decoder) error{
		"parent": func(dec *json.Decoder) error { return wire.DecodeParent(dec, &parent) },
		"children": func(dec *json.Decoder) error {
			return wire.DecodeGroups(dec, "children", "child", childGroups(&req.Children))
		},
		"related": func(dec *json.Decoder) error {
			return wire.DecodeGroups(dec, "related", "related", relatedGroups(&req.Related))
		},
		"controller": func(dec *json.Decoder) error {
			// Only spec.childResources is read: which child types the hook may return.
			var controller CompositeController
			if err := dec.Decode(&controller); err != nil {
				return wire.BadRequest("controller: %v", err)
			}
			req.DeclaredChildTypes = controller.Spec.ChildResources
			return nil
		},
		"finalizing": func(dec *json.Decoder) error {
			if err := dec.Decode(&req.Finalizing); err != nil {
				return wire.BadRequest("finalizing: %v", err)
			}
			return nil
		},
	})
	if err != nil {
		return Request{}, err
	}
	if parent == nil {
		return Request{}, wire.BadRequest("request has no parent")
	}
	if parent.Metadata.Name == "" {
		return Request{}, wire.BadRequest("parent has no metadata.name")
	}
	req.Parent = *parent
	sortObserved(&req)
	return req, nil
}

// DecodeCustomizeRequest decodes a customize request.
func DecodeCustomizeRequest(body []byte) (CustomizeRequest, error) {
	var req struct {
		Parent *Challenge `json:"parent"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&req); err != nil {
		return CustomizeRequest{}, wire.BadRequest("request: %v", err)
	}
	if err := wire.ExpectEnd(dec); err != nil {
		return CustomizeRequest{}, err
	}
	if req.Parent == nil {
		return CustomizeRequest{}, wire.BadRequest("request has no parent")
	}
	if req.Parent.Metadata.Name == "" {
		return CustomizeRequest{}, wire.BadRequest("parent has no metadata.name")
	}
	return CustomizeRequest{Parent: *req.Parent}, nil
}

// DecodeFlagVerification decodes a flag verification request strictly: a key the hook does not know
// is a mistake the platform should hear of. Errors wrap ErrBadRequest and never quote the flag.
func DecodeFlagVerification(body []byte) (FlagVerification, error) {
	var v FlagVerification
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return FlagVerification{}, wire.BadRequest("request: %v", err)
	}
	if err := wire.ExpectEnd(dec); err != nil {
		return FlagVerification{}, err
	}
	if v.Flag == "" {
		return FlagVerification{}, wire.BadRequest(`flag is required: {"definition": "<namespace>/<name>", "owner": "...", "flag": "..."}`)
	}
	if err := CheckFlagSubject(v.Definition, v.Owner); err != nil {
		return FlagVerification{}, wire.BadRequest("%v", err)
	}
	if len(v.Candidates) > MaxFlagCandidates {
		return FlagVerification{}, wire.BadRequest("candidates: %d owners, at most %d in one verification: split them over several requests",
			len(v.Candidates), MaxFlagCandidates)
	}
	for i, candidate := range v.Candidates {
		if err := checkOwner(candidate); err != nil {
			return FlagVerification{}, wire.BadRequest("candidates[%d]: %v", i, err)
		}
	}
	return v, nil
}

// sortObserved puts every list in namespace and name order (stable: identical requests give
// identical lists), whatever order the maps came in.
func sortObserved(req *Request) {
	for _, k := range childKinds {
		k.observed(&req.Children).sort()
	}
	slices.SortStableFunc(req.Related.Definitions, func(a, b ChallengeDefinition) int { return wire.CompareMeta(a.Metadata, b.Metadata) })
}

// keptChild is an observed child the hook must not change, returned exactly as Metacontroller last
// applied it. Without a (valid) last-applied configuration it is returned by identity alone: with
// nothing desired and nothing last applied, Metacontroller's merge changes nothing, and the child
// is not deleted because it is listed.
type keptChild struct {
	obj ObservedObject
}

func (k keptChild) MarshalJSON() ([]byte, error) {
	if last := k.obj.Metadata.Annotations.LastApplied; last != "" && json.Valid([]byte(last)) {
		return []byte(last), nil
	}
	type identityMeta struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
	}
	return json.Marshal(struct {
		APIVersion string       `json:"apiVersion"`
		Kind       string       `json:"kind"`
		Metadata   identityMeta `json:"metadata"`
	}{k.obj.APIVersion, k.obj.Kind, identityMeta{k.obj.Metadata.Name, k.obj.Metadata.Namespace}})
}

// narrowedPolicy is the observed NetworkPolicy of an instance's single Pod, kept while that Pod
// lingers after its template became one of pods: as last applied, but selecting no Pod that
// carries a component label. A policy applied before its selector excluded them (by an older
// hook) selects the new pods' Pods too, and would give them its rules (its internet egress, say)
// on top of their own. The single Pod carries no component label: it stays selected. Without a
// readable selector in its last-applied configuration it is kept as it is (keptChild).
type narrowedPolicy struct {
	obj ObservedObject
}

func (n narrowedPolicy) MarshalJSON() ([]byte, error) {
	var policy map[string]any
	if json.Unmarshal([]byte(n.obj.Metadata.Annotations.LastApplied), &policy) != nil {
		return keptChild(n).MarshalJSON()
	}
	spec, _ := policy["spec"].(map[string]any)
	selector, ok := spec["podSelector"].(map[string]any)
	if !ok {
		return keptChild(n).MarshalJSON()
	}
	expressions, _ := selector["matchExpressions"].([]any)
	for _, e := range expressions {
		if e, _ := e.(map[string]any); e["key"] == LabelComponent && e["operator"] == string(apimetav1.LabelSelectorOpDoesNotExist) {
			return keptChild(n).MarshalJSON()
		}
	}
	selector["matchExpressions"] = append(expressions, map[string]any{"key": LabelComponent, "operator": string(apimetav1.LabelSelectorOpDoesNotExist)})
	return json.Marshal(policy)
}

// EncodeResponse encodes a hook answer (or any value the server writes as JSON). encoding/json
// writes struct fields in declaration order and map keys sorted, so identical responses encode to
// identical bytes.
func EncodeResponse(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return buf.Bytes(), nil
}
