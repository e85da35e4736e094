package sync

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A child without a last-applied annotation (created by hand, or by an older tool) is kept by
// identity alone, which Metacontroller's merge leaves untouched.
func TestKeepChildWithoutLastApplied(t *testing.T) {
	obj := ObservedObject{APIVersion: "v1", Kind: "Service", Metadata: ObservedMeta{ObjectMeta: ObjectMeta{Name: "svc", Namespace: "ctf"}}}
	identity := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc","namespace":"ctf"}}`
	out, err := EncodeResponse(keptChild{obj})
	require.NoError(t, err)
	require.JSONEq(t, identity, string(out))
	obj.Metadata.Annotations.LastApplied = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc","namespace":"ctf"},"spec":{"type":"NodePort"}}`
	out, err = EncodeResponse(keptChild{obj})
	require.NoError(t, err)
	require.JSONEq(t, obj.Metadata.Annotations.LastApplied, string(out))
	obj.Metadata.Annotations.LastApplied = `{"apiVersion":"v1",`
	out, err = EncodeResponse(keptChild{obj})
	require.NoError(t, err)
	require.JSONEq(t, identity, string(out), "a last-applied configuration that is not JSON is not returned")
}

func TestDecodeRequestErrors(t *testing.T) {
	cases := map[string]string{
		`{`:                                     "request: unexpected EOF",
		`{"parent": null}`:                      "request has no parent",
		`{"parent": {"metadata": {}}}`:          "parent has no metadata.name",
		`{"parent": {"metadata": {"name": 7}}}`: "parent: json: cannot unmarshal number",
		`{"parent": {"metadata": {"name": "a"}}, "children": {"Job.batch/v1": {"x": {"metadata": {"name": "x"}}}}}`: `unknown child type "Job.batch/v1"`,
		`{"parent": {"metadata": {"name": "a"}}, "children": {"Service.v1": {"x": {"kind": "Service"}}}}`:           `children["Service.v1"]["x"] has no metadata.name`,
		`{"parent": {"metadata": {"name": "a"}}} {}`:                                                                "unexpected data after the JSON object",
	}
	for body, want := range cases {
		_, err := DecodeRequest([]byte(body))
		require.ErrorIs(t, err, ErrBadRequest, body)
		require.Contains(t, err.Error(), want, body)
	}
}
