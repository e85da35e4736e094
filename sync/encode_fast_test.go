package sync

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The fast encode path is checked against encodeResponseStd (encoding/json): on every golden answer,
// and on every child type with every field set, so that a field added to a child type and not to
// encode_fast.go fails here.

func TestFastEncodeMatchesEncodingJSONOnGoldenCases(t *testing.T) {
	cfg := goldenConfig(t)
	for path, body := range differentialBodies(t) {
		req, err := DecodeRequest(body)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, now := range []time.Time{goldenNow, goldenNow.Add(48 * time.Hour)} {
			checkFastEncode(t, Sync(req, now, cfg))
		}
	}
}

func checkFastEncode(t *testing.T, resp Response) {
	t.Helper()
	want, wantErr := encodeResponseStd(resp)
	got, ok := encodeResponseFast(&resp)
	if !ok {
		if wantErr == nil {
			t.Fatalf("the fast path gave up on a response encoding/json encodes: %s", want)
		}
		return
	}
	if wantErr != nil {
		t.Fatalf("the fast path encoded a response encoding/json refuses (%v): %s", wantErr, got)
	}
	if string(got) != string(want) {
		t.Fatalf("the fast path encodes differently:\n got: %s\nwant: %s", got, want)
	}
}

// trickyStrings exercise every escape encoding/json writes with HTML escaping off.
func trickyStrings() []string {
	short := []string{"plain", "q\"b\\s/<&>", "\b\f\n\r\t\x00\x1f\x7f", "é\u2028\u2029😀", "bad\xffutf8\xc3", ""}
	// The same past the first eight-byte words, where the encoder checks a word at a time.
	var long []string
	for _, s := range short {
		long = append(long, "0123456789abcdefg"+s+"hijklmnopqrstuvwxyz")
	}
	return append(short, long...)
}

// fill sets every field reachable from v to a non-zero value: strings from trickyStrings, two
// elements in every slice, three keys in every map, every pointer allocated.
func fill(v reflect.Value, seed int) {
	strs := trickyStrings()
	switch v.Kind() {
	case reflect.String:
		v.SetString(strs[seed%len(strs)])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed*37 - 5))
	case reflect.Float64:
		v.SetFloat(float64(seed) + 0.25)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed+1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			fill(v.Field(i), seed+i)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0), seed+1)
		fill(v.Index(1), seed+2)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := 0; i < 3; i++ {
			key := reflect.New(v.Type().Key()).Elem()
			fill(key, seed+i*5)
			value := reflect.New(v.Type().Elem()).Elem()
			fill(value, seed+i)
			m.SetMapIndex(key, value)
		}
		v.Set(m)
	case reflect.Interface:
		// Response.Children: filled by the test with every child type.
	default:
		panic("fill: unhandled kind " + v.Kind().String())
	}
}

func filled[T any](seed int) T {
	var v T
	fill(reflect.ValueOf(&v).Elem(), seed)
	return v
}

// emptied allocates every pointer but leaves every collection empty (not nil), to check omitempty.
func emptied[T any]() T {
	var v T
	var walk func(reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			v.Set(reflect.New(v.Type().Elem()))
			walk(v.Elem())
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				walk(v.Field(i))
			}
		case reflect.Slice:
			if v.Type().Elem().Kind() != reflect.Interface {
				v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			}
		case reflect.Map:
			v.Set(reflect.MakeMap(v.Type()))
		}
	}
	walk(reflect.ValueOf(&v).Elem())
	return v
}

func TestFastEncodeMatchesEncodingJSONOnEveryField(t *testing.T) {
	for seed := 0; seed < 12; seed++ {
		children := []any{
			filled[deployment](seed), filled[*deployment](seed + 1),
			filled[service](seed), filled[*service](seed + 2),
			filled[networkPolicy](seed), filled[*networkPolicy](seed + 3),
			filled[ingress](seed), filled[*ingress](seed + 4),
			filled[secret](seed), filled[*secret](seed + 5),
			filled[childIdentity](seed),
			json.RawMessage(` {"kept" : [1, 2.5e3, "x\u003c"], "n": null} `), json.RawMessage(nil),
			deployment{}, service{}, networkPolicy{}, ingress{}, secret{}, childIdentity{},
			emptied[deployment](), emptied[service](), emptied[networkPolicy](), emptied[ingress](), emptied[secret](),
			(*deployment)(nil), (*service)(nil), (*secret)(nil), nil,
		}
		for _, child := range children {
			checkFastEncode(t, Response{Status: filled[ChallengeStatus](seed), Children: []any{child}, ResyncAfterSeconds: float64(seed) * 1.5})
		}
		checkFastEncode(t, Response{Status: filled[ChallengeStatus](seed), Children: children, Finalized: seed%2 == 0})
	}
	for _, resync := range []float64{0, 1e-7, 1e21, 123456789.125, -3, 1e-6} {
		checkFastEncode(t, Response{Children: []any{}, ResyncAfterSeconds: resync})
	}
	checkFastEncode(t, Response{Status: emptied[ChallengeStatus]()})
}

func TestFastEncodeGivesUpOnWhatEncodingJSONRefuses(t *testing.T) {
	for _, resp := range []Response{
		{Children: []any{json.RawMessage(`{"a":`)}},
		{Children: []any{json.RawMessage(``)}},
		{Children: []any{struct{ X int }{1}}},
		{Children: []any{}, ResyncAfterSeconds: nanOf()},
	} {
		if out, ok := encodeResponseFast(&resp); ok {
			t.Errorf("the fast path encoded %#v as %s; encoding/json must decide", resp.Children, out)
		}
		want, wantErr := encodeResponseStd(resp)
		got, gotErr := EncodeResponse(resp)
		if string(got) != string(want) || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("EncodeResponse = %s, %v; encoding/json gives %s, %v", got, gotErr, want, wantErr)
		}
	}
}

func nanOf() float64 {
	zero := 0.0
	return zero / zero
}

// FuzzFastEncode: whatever request decodes, the answer encodes to encoding/json's bytes.
func FuzzFastEncode(f *testing.F) {
	for _, body := range differentialBodies(f) {
		f.Add(body)
	}
	cfg := goldenConfig(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body)
		if err != nil {
			return
		}
		checkFastEncode(t, Sync(req, goldenNow, cfg))
	})
}
