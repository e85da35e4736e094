package sync

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	apimetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// All of the hook's JSON is here: requests are decoded into the typed values of types.go, answers
// are encoded from them and from the children's apply configurations. The sync logic sees Go
// values only.

// ErrBadRequest marks a request the hook cannot understand: the server answers 400 and
// Metacontroller changes nothing.
var ErrBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// errNoName marks an observed object without metadata.name.
var errNoName = errors.New("has no metadata.name")

// groupDecoder decodes the next object of one children or related group and appends it.
type groupDecoder func(dec *json.Decoder) error

// childGroups dispatches each child type of the table (childKinds) by the key Metacontroller
// gives it to its typed list.
func childGroups(c *ObservedChildren) map[string]groupDecoder {
	groups := map[string]groupDecoder{}
	for _, k := range childKinds {
		groups[k.Key()] = k.observed(c).decode
	}
	return groups
}

// relatedGroups are the types the customize hook asks for. Pods were related before they were
// children: Metacontroller may still send them from a customize answer it cached before the
// upgrade, and they are read past.
func relatedGroups(r *Related) map[string]groupDecoder {
	return map[string]groupDecoder{
		"ChallengeDefinition." + v1alpha1.APIVersion: decodeInto(&r.Definitions, func(d *ChallengeDefinition) string { return d.Metadata.Name }),
		"Challenge." + v1alpha1.APIVersion:           decodeInto(&r.Challenges, func(c *Challenge) string { return c.Metadata.Name }),
		"Pod.v1":                                     func(dec *json.Decoder) error { return dec.Decode(&struct{}{}) },
	}
}

// decodeInto decodes one object straight into its typed list; encoding/json skips every field the
// type does not declare.
func decodeInto[T any](list *[]T, name func(*T) string) groupDecoder {
	return func(dec *json.Decoder) error {
		var obj T
		if err := dec.Decode(&obj); err != nil {
			return err
		}
		if name(&obj) == "" {
			return errNoName
		}
		*list = append(*list, obj)
		return nil
	}
}

// DecodeRequest decodes a sync or finalize request in one pass: the groups of the children and
// related maps are dispatched by key to their typed lists as they are read. Every error wraps
// ErrBadRequest and names the part of the request that is wrong.
func DecodeRequest(body []byte) (Request, error) {
	var req Request
	var parent *Challenge
	err := decodeRequestKeys(body, map[string]func(dec *json.Decoder) error{
		"parent": func(dec *json.Decoder) error { return decodeParent(dec, &parent) },
		"children": func(dec *json.Decoder) error {
			return decodeGroups(dec, "children", "child", childGroups(&req.Children))
		},
		"related": func(dec *json.Decoder) error {
			return decodeGroups(dec, "related", "related", relatedGroups(&req.Related))
		},
		"controller": func(dec *json.Decoder) error {
			// Only spec.childResources is read: which child types the hook may return.
			var controller CompositeController
			if err := dec.Decode(&controller); err != nil {
				return badRequest("controller: %v", err)
			}
			req.DeclaredChildTypes = controller.Spec.ChildResources
			return nil
		},
		"finalizing": func(dec *json.Decoder) error {
			if err := dec.Decode(&req.Finalizing); err != nil {
				return badRequest("finalizing: %v", err)
			}
			return nil
		},
	})
	if err != nil {
		return Request{}, err
	}
	if parent == nil {
		return Request{}, badRequest("request has no parent")
	}
	if parent.Metadata.Name == "" {
		return Request{}, badRequest("parent has no metadata.name")
	}
	req.Parent = *parent
	sortObserved(&req)
	return req, nil
}

// decodeRequestKeys reads a hook request's top-level object in one pass, each key by its decoder
// in fields; any other key (whatever a later Metacontroller adds) is read past, never stored.
// Nothing may follow the object.
func decodeRequestKeys(body []byte, fields map[string]func(dec *json.Decoder) error) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("request: %v", io.EOF)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	err := forEachKey(dec, "request", func(key string) error {
		if decode, ok := fields[key]; ok {
			return decode(dec)
		}
		if err := dec.Decode(&struct{}{}); err != nil {
			return badRequest("%s: %v", key, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return expectEnd(dec)
}

// decodeParent decodes the request's parent; a later "parent" key replaces an earlier one.
func decodeParent[T any](dec *json.Decoder, parent **T) error {
	*parent = nil
	if err := dec.Decode(parent); err != nil {
		return badRequest("parent: %v", err)
	}
	return nil
}

// forEachKey reads a JSON object (or null, as an empty one) key by key; visit must consume the
// value. Errors not already a bad request are wrapped as one, prefixed with what.
func forEachKey(dec *json.Decoder, what string, visit func(key string) error) error {
	tok, err := nextToken(dec)
	if err != nil {
		return badRequest("%s: %v", what, err)
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('{') {
		return badRequest("%s: cannot unmarshal %s into an object", what, tokenKind(tok))
	}
	for dec.More() {
		tok, err := nextToken(dec)
		if err != nil {
			return badRequest("%s: %v", what, err)
		}
		if err := visit(tok.(string)); err != nil {
			return err
		}
	}
	if _, err := nextToken(dec); err != nil {
		return badRequest("%s: %v", what, err)
	}
	return nil
}

// nextToken is dec.Token, where the input ending inside the request is an unexpected EOF.
func nextToken(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return tok, err
}

func tokenKind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "array"
	case string:
		return "string"
	case float64, json.Number:
		return "number"
	case bool:
		return "bool"
	}
	return fmt.Sprintf("%T", tok)
}

// decodeGroups reads a children or related map: {"<type key>": {"<name>": object}}. A type the
// hook does not know is refused: the hook answers with every child that should exist, so an
// unknown type's children would be deleted.
func decodeGroups(dec *json.Decoder, field, noun string, groups map[string]groupDecoder) error {
	return forEachKey(dec, field, func(key string) error {
		decodeObject, known := groups[key]
		if !known {
			return badRequest("%s: unknown %s type %q: the CompositeController lists a type this hook does not manage", field, noun, key)
		}
		return forEachKey(dec, fmt.Sprintf("%s[%q]", field, key), func(name string) error {
			err := decodeObject(dec)
			if errors.Is(err, errNoName) {
				return badRequest("%s[%q][%q] %v", field, key, name, err)
			}
			if err != nil {
				return badRequest("%s[%q][%q]: %v", field, key, name, err)
			}
			return nil
		})
	})
}

// expectEnd refuses anything after the request's object.
func expectEnd(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("unexpected data after the JSON object")
	}
	return nil
}

// DecodeCustomizeRequest decodes a customize request.
func DecodeCustomizeRequest(body []byte) (CustomizeRequest, error) {
	var wire struct {
		Parent *Challenge `json:"parent"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&wire); err != nil {
		return CustomizeRequest{}, badRequest("request: %v", err)
	}
	if err := expectEnd(dec); err != nil {
		return CustomizeRequest{}, err
	}
	if wire.Parent == nil {
		return CustomizeRequest{}, badRequest("request has no parent")
	}
	if wire.Parent.Metadata.Name == "" {
		return CustomizeRequest{}, badRequest("parent has no metadata.name")
	}
	return CustomizeRequest{Parent: *wire.Parent}, nil
}

// DecodeFlagVerification decodes a flag verification request strictly: a key the hook does not know
// is a mistake the platform should hear of. Errors wrap ErrBadRequest and never quote the flag.
func DecodeFlagVerification(body []byte) (FlagVerification, error) {
	var v FlagVerification
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return FlagVerification{}, badRequest("request: %v", err)
	}
	if err := expectEnd(dec); err != nil {
		return FlagVerification{}, err
	}
	if v.Flag == "" {
		return FlagVerification{}, badRequest(`flag is required: {"definition": "<namespace>/<name>", "owner": "...", "flag": "..."}`)
	}
	if err := CheckFlagSubject(v.Definition, v.Owner); err != nil {
		return FlagVerification{}, badRequest("%v", err)
	}
	return v, nil
}

func compareMeta(a, b ObjectMeta) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// sortObserved puts every list in namespace and name order (stable: identical requests give
// identical lists), whatever order the maps came in.
func sortObserved(req *Request) {
	for _, k := range childKinds {
		k.observed(&req.Children).sort()
	}
	slices.SortStableFunc(req.Related.Definitions, func(a, b ChallengeDefinition) int { return compareMeta(a.Metadata, b.Metadata) })
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
