package sync

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"
)

// benchCase is one realistic request, as Metacontroller sends it, for the benchmarks.
type benchCase struct {
	name string
	path string
	body []byte
}

// benchCaseSources names the golden cases the benchmarks run: a first sync, the richest Running
// case (the steady stream of resyncs: every child, the Pod with its status, managedFields included), an
// Error case, and a finalize with children still present.
func benchCaseSources() []struct{ name, glob string } {
	return []struct{ name, glob string }{
		{"new", "../testdata/life-1-none-first-sync/request.json"},
		{"running", "../testdata/running-*-fixed-point/request.json"},
		{"error", "../testdata/error-image-pull-backoff-fixed-point/request.json"},
		{"finalize", "../testdata/finalize-running-instance-terminating/request.json"},
	}
}

// loadBenchCases reads the benchmarked requests, compacted as Metacontroller sends them (the golden
// files are indented for review). Where the glob matches several cases, the largest is taken.
func loadBenchCases(tb testing.TB) []benchCase {
	tb.Helper()
	var cases []benchCase
	for _, src := range benchCaseSources() {
		matches, err := filepath.Glob(src.glob)
		if err != nil {
			tb.Fatalf("glob %s: %v", src.glob, err)
		}
		path := largestFile(tb, matches)
		if path == "" {
			tb.Fatalf("bench case %s: no golden case matches %s", src.name, src.glob)
		}
		indented, err := os.ReadFile(path)
		if err != nil {
			tb.Fatalf("bench case %s: %v", src.name, err)
		}
		var body bytes.Buffer
		if err := json.Compact(&body, indented); err != nil {
			tb.Fatalf("bench case %s: %v", path, err)
		}
		cases = append(cases, benchCase{name: src.name, path: path, body: body.Bytes()})
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

// benchClockAndConfig returns the golden cases' clock and configuration, so that the benchmarks
// take the same paths as the golden cases.
func benchClockAndConfig(tb testing.TB) (time.Time, Config) {
	return goldenNow, goldenConfig(tb)
}

// processCPUTime is the user and system CPU time of this process, all threads (GC included).
func processCPUTime(tb testing.TB) time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		tb.Fatalf("getrusage: %v", err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// reportCPUPerOp adds cpu-ns/op: the CPU time the benchmark's process spent per iteration. On the
// shared 2-core machine ns/op (wall time) grows when other work runs; CPU time much less.
func reportCPUPerOp(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPUTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// BenchmarkPipeline is what the hook does per request besides HTTP: decode, sync, encode.
func BenchmarkPipeline(b *testing.B) {
	now, cfg := benchClockAndConfig(b)
	for _, bc := range loadBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			start := processCPUTime(b)
			for b.Loop() {
				req, err := DecodeRequest(bc.body)
				if err != nil {
					b.Fatalf("%s: %v", bc.path, err)
				}
				if _, err := EncodeResponse(Sync(req, now, cfg)); err != nil {
					b.Fatalf("%s: %v", bc.path, err)
				}
			}
			reportCPUPerOp(b, start)
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range loadBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			start := processCPUTime(b)
			for b.Loop() {
				if _, err := DecodeRequest(bc.body); err != nil {
					b.Fatalf("%s: %v", bc.path, err)
				}
			}
			reportCPUPerOp(b, start)
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
