package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestParseWrkOutput(t *testing.T) {
	out := "Running 5s test @ http://127.0.0.1:1/sync\n  2 threads and 64 connections\n" +
		`LOADRUN {"requests":1000,"duration_us":2000000,"bytes":5,"connect_errors":1,"read_errors":2,"write_errors":3,"status_errors":4,"timeouts":5,"p50_us":10,"p90_us":20,"p99_us":30,"p999_us":40,"max_us":50,"mean_us":12.5}` + "\n"
	r, err := parseWrkOutput([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.RequestsPerSecond(); got != 500 {
		t.Errorf("requests/s = %v, want 500", got)
	}
	if got := r.Errors(); got != 15 {
		t.Errorf("errors = %d, want 15", got)
	}
	if r.P999US != 40 || r.P99US != 30 || r.MaxUS != 50 {
		t.Errorf("latencies = %+v", r)
	}
	if _, err := parseWrkOutput([]byte("wrk: connection refused\n")); err == nil {
		t.Error("output without the result line was accepted")
	}
}

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
BenchmarkPipeline/running-2   	   50000	     23456 ns/op	  25.03 MB/s	   12345 B/op	     123 allocs/op
BenchmarkPipeline/running-2   	   50000	     21000 ns/op	  25.03 MB/s	   12345 B/op	     120 allocs/op
BenchmarkSync/new              	   68974	     18976 ns/op	    6904 B/op	      82 allocs/op
PASS
`
	got := parseGoBench([]byte(out))
	running, ok := got["BenchmarkPipeline/running"]
	if !ok {
		t.Fatalf("no BenchmarkPipeline/running in %v", got)
	}
	if running.NsPerOp != 21000 || running.AllocsPerOp != 120 || running.BytesPerOp != 12345 || running.BytesPerSecond != 25.03e6 {
		t.Errorf("running = %+v, want the fastest line", running)
	}
	if got["BenchmarkSync/new"].AllocsPerOp != 82 {
		t.Errorf("BenchmarkSync/new = %+v", got["BenchmarkSync/new"])
	}
}

func TestParseVmHWM(t *testing.T) {
	kib, err := parseVmHWM([]byte("Name:\tchallenge-hook\nVmPeak:\t 1263228 kB\nVmHWM:\t   23240 kB\nVmRSS:\t   20000 kB\n"))
	if err != nil || kib != 23240 {
		t.Errorf("parseVmHWM = %d, %v; want 23240", kib, err)
	}
	if _, err := parseVmHWM([]byte("Name:\tx\n")); err == nil {
		t.Error("status without VmHWM was accepted")
	}
}

func TestMachineBusy(t *testing.T) {
	before, err := parseMachineCPU([]byte("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseMachineCPU([]byte("cpu  250 0 150 750 100 0 0 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	// 200 busy ticks out of 250.
	if got := after.busyFractionSince(before); got != 0.8 {
		t.Errorf("busy = %v, want 0.8", got)
	}
}

func TestFloorAnswersTheCannedResponse(t *testing.T) {
	canned := []byte(`{"status":{"phase":"Running"},"children":[]}`)
	srv := httptest.NewServer(floorHandler(canned))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/sync", "application/json", strings.NewReader(strings.Repeat("x", 20000)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != string(canned) {
		t.Errorf("floor answered %d %q, want 200 %q", resp.StatusCode, body, canned)
	}
	if resp.ContentLength != int64(len(canned)) {
		t.Errorf("Content-Length = %d, want %d", resp.ContentLength, len(canned))
	}
}

func TestReportFailsWhenATargetFails(t *testing.T) {
	run := func(rps, p99 int64, rssKiB int64) serverRun {
		return serverRun{wrk: wrkResult{Requests: rps, DurationUS: 1e6, P99US: p99}, peakRSSKiB: rssKiB}
	}
	cfg := runConfig{connections: 64, rounds: 1, pipelineBench: "BenchmarkPipeline/running"}
	fast := &benchResult{NsPerOp: 15000, AllocsPerOp: 40}
	good := report{cfg: cfg, floorRuns: []serverRun{run(1000, 100, 10000)}, hookRuns: []serverRun{run(700, 150, 30000)}, pipeline: fast}
	if !good.print(io.Discard) {
		t.Error("a run meeting every target did not pass")
	}
	for name, bad := range map[string]report{
		"throughput": {cfg: cfg, floorRuns: []serverRun{run(1000, 100, 10000)}, hookRuns: []serverRun{run(500, 150, 30000)}, pipeline: fast},
		"p99":        {cfg: cfg, floorRuns: []serverRun{run(1000, 100, 10000)}, hookRuns: []serverRun{run(700, 201, 30000)}, pipeline: fast},
		"rss":        {cfg: cfg, floorRuns: []serverRun{run(1000, 100, 10000)}, hookRuns: []serverRun{run(700, 150, 51200)}, pipeline: fast},
		"ns/op":      {cfg: cfg, floorRuns: []serverRun{run(1000, 100, 10000)}, hookRuns: []serverRun{run(700, 150, 30000)}, pipeline: &benchResult{NsPerOp: 20001, AllocsPerOp: 40}},
		"allocs":     {cfg: cfg, floorRuns: []serverRun{run(1000, 100, 10000)}, hookRuns: []serverRun{run(700, 150, 30000)}, pipeline: &benchResult{NsPerOp: 15000, AllocsPerOp: 50}},
		"no bench":   {cfg: cfg, floorRuns: []serverRun{run(1000, 100, 10000)}, hookRuns: []serverRun{run(700, 150, 30000)}},
	} {
		if bad.print(io.Discard) {
			t.Errorf("%s: a run missing the target passed", name)
		}
	}
	errored := good
	errored.hookRuns = []serverRun{run(700, 150, 30000), run(600, 150, 30000)}
	errored.hookRuns[1].wrk.StatusErrors = 1
	if errored.print(io.Discard) {
		t.Error("an error in a run that was not the best one went unnoticed")
	}
}
