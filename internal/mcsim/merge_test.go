package mcsim

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/wire"
)

func object(t *testing.T, s string) Object {
	t.Helper()
	var obj Object
	require.NoError(t, json.Unmarshal([]byte(s), &obj))
	return obj
}

// stored is a child as the API server keeps it: what the hook applied (the annotation) plus
// defaults and fields of other writers.
func stored(t *testing.T, applied, rest string) Object {
	t.Helper()
	obj := Merge(object(t, applied), object(t, rest))
	meta := mapAt(obj, "metadata")
	meta["annotations"] = Merge(mapAt(meta, "annotations"), Object{wire.LastAppliedAnnotation: applied})
	obj["metadata"] = meta
	return obj
}

// TestUpdatedUnchanged: the same desired object changes nothing, whatever the API server and
// other writers added.
func TestUpdatedUnchanged(t *testing.T) {
	applied := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"ports":[{"port":80,"protocol":"TCP"}]}}`
	live := stored(t, applied, `{"metadata":{"uid":"u","resourceVersion":"7"},"spec":{"clusterIP":"10.96.0.10","ports":[{"port":80,"protocol":"TCP","targetPort":80}]},"status":{"loadBalancer":{}}}`)
	updated, changed, err := Updated(live, object(t, applied))
	require.NoError(t, err)
	assert.False(t, changed)
	assert.Equal(t, live, updated)
}

// TestUpdatedMerges: the desired change lands; what the hook stopped setting goes; what others
// set stays; lists whose items share a merge key merge item by item, other lists are replaced.
func TestUpdatedMerges(t *testing.T) {
	applied := `{"metadata":{"name":"p","labels":{"a":"1","b":"1"}},"spec":{"containers":[{"name":"app","image":"x:1"}],"args":["-v"]}}`
	live := stored(t, applied, `{"metadata":{"uid":"u","labels":{"other":"x"}},"spec":{"containers":[{"name":"app","image":"x:1","imagePullPolicy":"IfNotPresent"}],"nodeName":"n"},"status":{"phase":"Running"}}`)
	desired := `{"metadata":{"name":"p","labels":{"a":"2"}},"spec":{"containers":[{"name":"app","image":"x:2"},{"name":"side","image":"y"}],"args":["-q"]}}`
	updated, changed, err := Updated(live, object(t, desired))
	require.NoError(t, err)
	assert.True(t, changed)
	want := object(t, `{"metadata":{"name":"p","uid":"u","labels":{"a":"2","other":"x"}},
		"spec":{"containers":[{"name":"app","image":"x:2","imagePullPolicy":"IfNotPresent"},{"name":"side","image":"y"}],"args":["-q"],"nodeName":"n"},
		"status":{"phase":"Running"}}`)
	mapAt(want, "metadata")["annotations"] = Object{wire.LastAppliedAnnotation: string(mustJSON(t, object(t, desired)))}
	assert.Equal(t, want, updated)
	assert.NotContains(t, mapAt(mapAt(live, "metadata"), "labels"), "a2", "stored is not modified")
}

// TestUpdatedKeepsSystemFields: the merge never writes the API server's metadata or the status,
// even when the desired object sets them.
func TestUpdatedKeepsSystemFields(t *testing.T) {
	applied := `{"metadata":{"name":"c"},"data":{"k":"v"}}`
	live := stored(t, applied, `{"metadata":{"uid":"u","generation":3,"resourceVersion":"9"},"status":{"s":1}}`)
	updated, changed, err := Updated(live, object(t, `{"metadata":{"name":"c","uid":"forged","generation":1},"data":{"k":"v"},"status":{"s":2}}`))
	require.NoError(t, err)
	assert.True(t, changed, "the annotation records the new desired object")
	meta := mapAt(updated, "metadata")
	assert.Equal(t, "u", meta["uid"])
	assert.Equal(t, float64(3), meta["generation"])
	assert.Equal(t, Object{"s": float64(1)}, updated["status"])
}

// TestUpdatedListWithoutMergeKey: a list of objects with no merge key in common is replaced whole:
// a default the API server added inside it is lost, so the child is rewritten on every sync
// (why the hook writes out every defaulted value in such lists).
func TestUpdatedListWithoutMergeKey(t *testing.T) {
	applied := `{"metadata":{"name":"np"},"spec":{"ingress":[{"ports":[{"port":8080}]}]}}`
	live := stored(t, applied, `{"spec":{"ingress":[{"ports":[{"port":8080,"protocol":"TCP"}]}]}}`)
	_, changed, err := Updated(live, object(t, applied))
	require.NoError(t, err)
	assert.True(t, changed)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
