package sync

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// benchCase is one realistic request, as Metacontroller sends it, for the benchmarks.
type benchCase struct {
	name string
	path string
	body []byte
}

// benchCaseSources says where each benchmarked request comes from: the richest golden case whose
// directory matches the pattern, or else the load run's own fixture.
func benchCaseSources() []struct{ name, goldenGlob, fixture string } {
	return []struct{ name, goldenGlob, fixture string }{
		{"new", "../testdata/new*/request.json", "../hack/loadrun/testdata/new-request.json"},
		{"running", "../testdata/running-*/request.json", "../hack/loadrun/testdata/running-request.json"},
		{"error", "../testdata/error-*/request.json", "../hack/loadrun/testdata/error-request.json"},
		{"finalize", "../testdata/finaliz*/request.json", "../hack/loadrun/testdata/finalize-request.json"},
	}
}

func loadBenchCases(tb testing.TB) []benchCase {
	tb.Helper()
	var cases []benchCase
	for _, src := range benchCaseSources() {
		path := src.fixture
		matches, err := filepath.Glob(src.goldenGlob)
		if err != nil {
			tb.Fatalf("glob %s: %v", src.goldenGlob, err)
		}
		if richest := largestFile(tb, matches); richest != "" {
			path = richest
		}
		body, err := os.ReadFile(path)
		if err != nil {
			tb.Fatalf("bench case %s: %v", src.name, err)
		}
		cases = append(cases, benchCase{name: src.name, path: path, body: body})
	}
	return cases
}

// largestFile returns the biggest of paths (the richest request), "" when there is none.
func largestFile(tb testing.TB, paths []string) string {
	tb.Helper()
	sort.Strings(paths)
	best, bestSize := "", int64(-1)
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			tb.Fatalf("stat %s: %v", p, err)
		}
		if info.Size() > bestSize {
			best, bestSize = p, info.Size()
		}
	}
	return best
}

// benchClockAndConfig returns the clock and configuration `make run` serves with (testdata/dev.flags),
// so that the benchmarks take the same paths as the golden cases.
func benchClockAndConfig(tb testing.TB) (time.Time, Config) {
	tb.Helper()
	flags, err := os.ReadFile("../testdata/dev.flags")
	if err != nil {
		tb.Fatalf("dev flags: %v", err)
	}
	cfg := DefaultConfig()
	now := time.Time{}
	for _, field := range strings.Fields(string(flags)) {
		name, value, _ := strings.Cut(strings.TrimLeft(field, "-"), "=")
		switch name {
		case "clock":
			if now, err = time.Parse(time.RFC3339, value); err != nil {
				tb.Fatalf("dev flags clock: %v", err)
			}
		case "flag-key-file":
			key, err := os.ReadFile(filepath.Join("..", value))
			if err != nil {
				tb.Fatalf("dev flags key: %v", err)
			}
			cfg.FlagKey = bytes.TrimSpace(key)
		}
	}
	if now.IsZero() {
		tb.Fatal("testdata/dev.flags sets no --clock")
	}
	return now, cfg
}

// BenchmarkPipeline is what the hook does per request besides HTTP: decode, sync, encode.
func BenchmarkPipeline(b *testing.B) {
	now, cfg := benchClockAndConfig(b)
	for _, bc := range loadBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				req, err := DecodeRequest(bc.body)
				if err != nil {
					b.Fatalf("%s: %v", bc.path, err)
				}
				if _, err := EncodeResponse(Sync(req, now, cfg)); err != nil {
					b.Fatalf("%s: %v", bc.path, err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range loadBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeRequest(bc.body); err != nil {
					b.Fatalf("%s: %v", bc.path, err)
				}
			}
		})
	}
}

func BenchmarkSync(b *testing.B) {
	now, cfg := benchClockAndConfig(b)
	for _, bc := range loadBenchCases(b) {
		req, err := DecodeRequest(bc.body)
		if err != nil {
			b.Fatalf("%s: %v", bc.path, err)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Sync(req, now, cfg)
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	now, cfg := benchClockAndConfig(b)
	for _, bc := range loadBenchCases(b) {
		req, err := DecodeRequest(bc.body)
		if err != nil {
			b.Fatalf("%s: %v", bc.path, err)
		}
		resp := Sync(req, now, cfg)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodeResponse(resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJSONValidBaseline is the scale the decoder is measured against: encoding/json only
// checking that the request is JSON, without building anything.
func BenchmarkJSONValidBaseline(b *testing.B) {
	for _, bc := range loadBenchCases(b) {
		if bc.name != "running" {
			continue
		}
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			for b.Loop() {
				if !json.Valid(bc.body) {
					b.Fatalf("%s is not valid JSON", bc.path)
				}
			}
		})
	}
}
