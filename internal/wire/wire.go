// Package wire decodes the requests of Metacontroller's hooks, for both controllers the hook serves
// (the Challenge hook of package sync and the pre-pull controller of package prepull): one pass over
// the body, each key of the request and each group of its children and related maps dispatched to
// a typed decoder, any key a later Metacontroller adds read past, and every error a bad request
// that names the part of the request that is wrong.
package wire

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// LastAppliedAnnotation is where Metacontroller keeps each child exactly as a hook last returned it.
const LastAppliedAnnotation = "metacontroller.k8s.io/last-applied-configuration"

// ErrBadRequest marks a request the hook cannot understand: the server answers 400 and
// Metacontroller changes nothing.
var ErrBadRequest = errors.New("bad request")

// BadRequest is an error wrapping ErrBadRequest.
func BadRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// ErrNoName marks an observed object without metadata.name.
var ErrNoName = errors.New("has no metadata.name")

// ObjectMeta is the metadata the hooks read of every object.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	DeletionTimestamp string            `json:"deletionTimestamp,omitempty"`
}

// CompareMeta orders objects by namespace, then name: the order of every observed list, whatever
// order the request's maps came in.
func CompareMeta(a, b ObjectMeta) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// GroupDecoder decodes the next object of one children or related group and appends it.
type GroupDecoder func(dec *json.Decoder) error

// DecodeInto decodes one object straight into its typed list; encoding/json skips every field the
// type does not declare. An object without a name is ErrNoName.
func DecodeInto[T any](list *[]T, name func(*T) string) GroupDecoder {
	return func(dec *json.Decoder) error {
		var obj T
		if err := dec.Decode(&obj); err != nil {
			return err
		}
		if name(&obj) == "" {
			return ErrNoName
		}
		*list = append(*list, obj)
		return nil
	}
}

// DecodeRequestKeys reads a hook request's top-level object in one pass, each key by its decoder
// in fields; any other key (whatever a later Metacontroller adds) is read past, never stored.
// Nothing may follow the object.
func DecodeRequestKeys(body []byte, fields map[string]func(dec *json.Decoder) error) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("request: %v", io.EOF)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	err := forEachKey(dec, "request", func(key string) error {
		if decode, ok := fields[key]; ok {
			return decode(dec)
		}
		if err := dec.Decode(&struct{}{}); err != nil {
			return BadRequest("%s: %v", key, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return ExpectEnd(dec)
}

// DecodeParent decodes the request's parent; a later "parent" key replaces an earlier one.
func DecodeParent[T any](dec *json.Decoder, parent **T) error {
	*parent = nil
	if err := dec.Decode(parent); err != nil {
		return BadRequest("parent: %v", err)
	}
	return nil
}

// forEachKey reads a JSON object (or null, as an empty one) key by key; visit must consume the
// value. Errors not already a bad request are wrapped as one, prefixed with what.
func forEachKey(dec *json.Decoder, what string, visit func(key string) error) error {
	tok, err := nextToken(dec)
	if err != nil {
		return BadRequest("%s: %v", what, err)
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('{') {
		return BadRequest("%s: cannot unmarshal %s into an object", what, tokenKind(tok))
	}
	for dec.More() {
		tok, err := nextToken(dec)
		if err != nil {
			return BadRequest("%s: %v", what, err)
		}
		if err := visit(tok.(string)); err != nil {
			return err
		}
	}
	if _, err := nextToken(dec); err != nil {
		return BadRequest("%s: %v", what, err)
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

// DecodeGroups reads a children or related map: {"<type key>": {"<name>": object}}. A type the
// hook does not know is refused: the hook answers with every child that should exist, so an
// unknown type's children would be deleted.
func DecodeGroups(dec *json.Decoder, field, noun string, groups map[string]GroupDecoder) error {
	return forEachKey(dec, field, func(key string) error {
		decodeObject, known := groups[key]
		if !known {
			return BadRequest("%s: unknown %s type %q: the CompositeController lists a type this hook does not manage", field, noun, key)
		}
		return forEachKey(dec, fmt.Sprintf("%s[%q]", field, key), func(name string) error {
			err := decodeObject(dec)
			if errors.Is(err, ErrNoName) {
				return BadRequest("%s[%q][%q] %v", field, key, name, err)
			}
			if err != nil {
				return BadRequest("%s[%q][%q]: %v", field, key, name, err)
			}
			return nil
		})
	})
}

// ExpectEnd refuses anything after the request's object.
func ExpectEnd(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("unexpected data after the JSON object")
	}
	return nil
}
