package sync

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The fast decode path is checked against decodeRequestStd, the encoding/json decoder: on every
// request it accepts, it must build the very same Request; it may give up (and leave the request to
// decodeRequestStd), but never on a well-formed request as Metacontroller sends it.

// differentialBodies are the golden sync requests, as indented in testdata and compacted as
// Metacontroller sends them.
func differentialBodies(tb testing.TB) map[string][]byte {
	tb.Helper()
	paths, err := filepath.Glob("../testdata/*/request.json")
	if err != nil {
		tb.Fatal(err)
	}
	bodies := map[string][]byte{}
	for _, path := range paths {
		if strings.HasPrefix(filepath.Base(filepath.Dir(path)), "customize-") {
			continue
		}
		body, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		bodies[path] = body
		bodies[path+" (compact)"] = compact.Bytes()
	}
	if len(bodies) == 0 {
		tb.Fatal("no golden sync requests found")
	}
	return bodies
}

// checkFastDecode fails when the fast path accepts body and builds anything else than the oracle,
// or accepts what the oracle refuses.
func checkFastDecode(t *testing.T, body []byte) (fastAccepted bool) {
	t.Helper()
	fast, ok := decodeRequestFast(body)
	want, err := decodeRequestStd(body)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("the fast path accepts a request encoding/json refuses (%v):\n%s", err, body)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("the fast path decodes differently:\n fast: %#v\n want: %#v\nbody: %s", fast, want, body)
	}
	return true
}

func TestFastDecodeMatchesEncodingJSON(t *testing.T) {
	for path, body := range differentialBodies(t) {
		t.Run(path, func(t *testing.T) {
			if _, err := decodeRequestStd(body); err != nil {
				t.Fatalf("golden request refused: %v", err)
			}
			if !checkFastDecode(t, body) {
				t.Fatal("the fast path gave up on a well-formed request, which would then cost encoding/json's time")
			}
		})
	}
}

// FuzzFastDecode: on any body, the fast path either gives up or agrees with encoding/json, and
// DecodeRequest (fast path, then encoding/json) never panics.
func FuzzFastDecode(f *testing.F) {
	for _, body := range differentialBodies(f) {
		f.Add(body)
	}
	for _, seed := range []string{
		`{"parent":{"metadata":{"name":"a"}},"children":null,"related":null}`,
		`{"parent":{"metadata":{"name":"a","labels":{}}, "status":{"endpoints":[],"conditions":null}},"children":{"Service.v1":{}},"related":{},"finalizing":true}`,
		`{"parent":{"metadata":{"name":"a"}},"children":{"Deployment.apps/v1":{"x":{"metadata":{"name":"x","annotations":{"metacontroller.k8s.io/last-applied-configuration":"{\"a\":\"\\u00e9\\ud83d\\ude00\"}"}},"status":{"readyReplicas":1,"conditions":[{"type":"Available","status":"True"}]}}}}}`,
		`{"parent":{"metadata":{"name":"a","Name":"b"}}}`,
		`{"parent":{"metadata":{"name":"a"}}} ]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkFastDecode(t, body)
		_, _ = DecodeRequest(body)
	})
}

// TestFastDecodeEdgeCases checks the fast path against encoding/json on small requests built to
// hit every way a scanner can go wrong: malformed strings, numbers and literals (including inside
// parts the fast path skips), duplicate and case-folded names, nulls, and escapes.
func TestFastDecodeEdgeCases(t *testing.T) {
	const base = `{"controller":{"x":[1,2.5e-3,true,null,{"k":"v"}]},"parent":{"metadata":{"name":"a","namespace":"ns",` +
		`"managedFields":[{"f:x":{"f:y":{}}}],"labels":{"l":"v"}},"spec":{"owner":"o"}},` +
		`"children":{"Deployment.apps/v1":{"a":{"metadata":{"name":"a","annotations":{"x":"y"}},"spec":{"z":[]},` +
		`"status":{"readyReplicas":1}}}},"related":{},"finalizing":false}`
	variants := map[string]string{
		"base":                       base,
		"control char in skipped":    strings.Replace(base, `"k":"v"`, "\"k\":\"v\x01\"", 1),
		"tab in kept string":         strings.Replace(base, `"name":"a","namespace"`, "\"name\":\"a\tb\",\"namespace\"", 1),
		"newline in key":             strings.Replace(base, `"f:y"`, "\"f:\ny\"", 1),
		"bad escape":                 strings.Replace(base, `"k":"v"`, `"k":"\q"`, 1),
		"short unicode escape":       strings.Replace(base, `"k":"v"`, `"k":"\u12"`, 1),
		"bad escape kept":            strings.Replace(base, `"owner":"o"`, `"owner":"é\q"`, 1),
		"short unicode kept":         strings.Replace(base, `"owner":"o"`, `"owner":"é\u12x"`, 1),
		"surrogate then bad escape":  strings.Replace(base, `"owner":"o"`, `"owner":"\ud83d\uzzzz"`, 1),
		"control char after escape":  strings.Replace(base, `"owner":"o"`, "\"owner\":\"\\n\x02\"", 1),
		"escapes kept":               strings.Replace(base, `"owner":"o"`, `"owner":"\u00e9\ud83d\ude00\ud800x\"\\\/\b\f\n\r\t"`, 1),
		"invalid utf8 kept":          strings.Replace(base, `"owner":"o"`, "\"owner\":\"\xff\xc3\"", 1),
		"leading zero":               strings.Replace(base, `2.5e-3`, `02`, 1),
		"bare minus":                 strings.Replace(base, `2.5e-3`, `-`, 1),
		"fraction for int":           strings.Replace(base, `"readyReplicas":1`, `"readyReplicas":1.0`, 1),
		"int32 overflow":             strings.Replace(base, `"readyReplicas":1`, `"readyReplicas":2147483648`, 1),
		"negative zero":              strings.Replace(base, `"readyReplicas":1`, `"readyReplicas":-0`, 1),
		"string for int":             strings.Replace(base, `"readyReplicas":1`, `"readyReplicas":"1"`, 1),
		"truncated literal":          strings.Replace(base, `true`, `tru`, 1),
		"trailing comma":             strings.Replace(base, `"l":"v"}`, `"l":"v",}`, 1),
		"duplicate field":            strings.Replace(base, `"owner":"o"`, `"owner":"o","owner":"p"`, 1),
		"case-folded field":          strings.Replace(base, `"owner":"o"`, `"OWNER":"o"`, 1),
		"escaped key":                strings.Replace(base, `"owner":"o"`, `"own\u0065r":"o"`, 1),
		"duplicate label":            strings.Replace(base, `"l":"v"`, `"l":"v","l":"w"`, 1),
		"null label value":           strings.Replace(base, `"l":"v"`, `"l":null`, 1),
		"null labels":                strings.Replace(base, `"labels":{"l":"v"}`, `"labels":null`, 1),
		"empty labels":               strings.Replace(base, `"labels":{"l":"v"}`, `"labels":{}`, 1),
		"null child":                 strings.Replace(base, `"a":{"metadata":{"name":"a","annotations"`, `"b":null,"a":{"metadata":{"name":"a","annotations"`, 1),
		"null metadata":              strings.Replace(base, `"metadata":{"name":"a","annotations":{"x":"y"}}`, `"metadata":null`, 1),
		"number annotation":          strings.Replace(base, `"x":"y"`, `"x":1`, 1),
		"unknown child kind":         strings.Replace(base, `Deployment.apps/v1`, `Job.batch/v1`, 1),
		"duplicate group":            strings.Replace(base, `"related":{}`, `"related":{},"children":{}`, 1),
		"trailing data":              base + ` x`,
		"trailing bracket":           base + `]`,
		"two values":                 base + base,
		"whitespace everywhere":      strings.NewReplacer(`,"`, " ,\n\t\"", `":`, "\" \r: ").Replace(base),
		"null parent":                strings.Replace(base, `"parent":{"metadata"`, `"parent":null,"x":{"metadata"`, 1),
		"deep nesting in skipped":    strings.Replace(base, `"k":"v"`, `"k":`+strings.Repeat("[", 200)+strings.Repeat("]", 200), 1),
		"unterminated":               base[:len(base)-3],
		"status null":                strings.Replace(base, `"status":{"readyReplicas":1}`, `"status":null`, 1),
		"finalizing string":          strings.Replace(base, `"finalizing":false`, `"finalizing":"true"`, 1),
		"conditions with null entry": strings.Replace(base, `"readyReplicas":1`, `"readyReplicas":1,"conditions":[null,{"type":"A"}]`, 1),
	}
	for name, body := range variants {
		t.Run(name, func(t *testing.T) { checkFastDecode(t, []byte(body)) })
	}
	if !checkFastDecode(t, []byte(base)) {
		t.Fatal("the fast path gave up on the well-formed base request")
	}
}
