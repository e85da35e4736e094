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

func TestReportShowsTheBestRunsAndTheirRatios(t *testing.T) {
	run := func(rps, p99 int64, rssKiB int64) serverRun {
		return serverRun{wrk: wrkResult{Requests: rps, DurationUS: 1e6, P99US: p99}, peakRSSKiB: rssKiB}
	}
	rep := report{
		cfg:       runConfig{connections: 64, rounds: 2, pipelineBench: "BenchmarkPipeline/running"},
		floorRuns: []serverRun{run(1000, 100, 10000), run(900, 120, 10240)},
		hookRuns:  []serverRun{run(600, 300, 20000), run(700, 150, 30720)},
		pipeline:  &benchResult{NsPerOp: 450000, BytesPerOp: 65800, AllocsPerOp: 833},
	}
	var out strings.Builder
	rep.print(&out)
	rows := map[string][]string{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		// Right-aligned columns: the server's name ends at the first gap of two spaces.
		if name, rest, ok := strings.Cut(strings.TrimSpace(line), "  "); ok {
			rows[name] = strings.Fields(rest)
		}
	}
	// Columns: requests/s p50 p90 p99 p99.9 max errors CPU/request peak RSS (value and unit) ...
	if got := rows["hook (best)"]; len(got) < 10 || got[0] != "700" || got[3] != "150.0µs" || got[8] != "30.0" {
		t.Errorf("hook (best) row = %q, want the 700 requests/s run with the last run's peak RSS, 30.0 MiB", got)
	}
	if got := rows["floor (best)"]; len(got) < 4 || got[0] != "1000" || got[3] != "100.0µs" {
		t.Errorf("floor (best) row = %q, want the 1000 requests/s run", got)
	}
	if got := rows["hook/floor"]; len(got) < 4 || got[0] != "0.70x" || got[3] != "1.50x" {
		t.Errorf("hook/floor row = %q, want requests/s 0.70x and p99 1.50x", got)
	}
	if want := "BenchmarkPipeline/running (no HTTP): 450.0 µs/op, 65800 B/op, 833 allocs/op"; !strings.Contains(out.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, out.String())
	}
}

func TestAFailedRequestInAnyRunFailsTheLoadRun(t *testing.T) {
	run := func(rps int64) serverRun {
		return serverRun{wrk: wrkResult{Requests: rps, DurationUS: 1e6}}
	}
	clean := report{
		floorRuns: []serverRun{run(1000), run(900)},
		hookRuns:  []serverRun{run(700), run(600)},
		paced:     &pacedRuns{rate: 350, floor: run(350).wrk, hook: run(350).wrk},
	}
	if err := clean.requestErrors(); err != nil {
		t.Errorf("a run without failed requests failed: %v", err)
	}
	failedHookRun := clean
	failedHookRun.hookRuns = []serverRun{run(700), run(600)}
	failedHookRun.hookRuns[1].wrk.StatusErrors = 1 // not the best run, so not in the table's best row
	failedFloorRun := clean
	failedFloorRun.floorRuns = []serverRun{run(1000), run(900)}
	failedFloorRun.floorRuns[0].wrk.Timeouts = 2
	failedPacedRun := clean
	failedPacedRun.paced = &pacedRuns{rate: 350, floor: run(350).wrk, hook: run(350).wrk}
	failedPacedRun.paced.hook.ReadErrors = 3
	for name, rep := range map[string]report{"hook run 2": failedHookRun, "floor run 1": failedFloorRun, "paced hook run": failedPacedRun} {
		if err := rep.requestErrors(); err == nil {
			t.Errorf("%s: a failed request went unnoticed", name)
		}
	}
}
