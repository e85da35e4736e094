package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkScript makes wrk POST the request body on every keep-alive connection and print its figures
// as one JSON line, so that nothing depends on wrk's human-readable layout. wrk measures latency in
// microseconds; percentile() reads its full-resolution histogram, p99.9 included.
const wrkScript = `-- Written by hack/loadrun; see wrk.go.
local f = assert(io.open(os.getenv("LOADRUN_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

-- A paced run: each connection waits LOADRUN_DELAY_MS between an answer and its next request.
local pause = tonumber(os.getenv("LOADRUN_DELAY_MS") or "")
if pause then
  function delay()
    return pause
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'LOADRUN {"requests":%.0f,"duration_us":%.0f,"bytes":%.0f,"connect_errors":%.0f,"read_errors":%.0f,' ..
    '"write_errors":%.0f,"status_errors":%.0f,"timeouts":%.0f,"p50_us":%.0f,"p90_us":%.0f,"p99_us":%.0f,' ..
    '"p999_us":%.0f,"max_us":%.0f,"mean_us":%.1f}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean))
end
`

const wrkResultPrefix = "LOADRUN "

// wrkResult is what one wrk run measured.
type wrkResult struct {
	Requests      int64   `json:"requests"`
	DurationUS    int64   `json:"duration_us"`
	Bytes         int64   `json:"bytes"`
	ConnectErrors int64   `json:"connect_errors"`
	ReadErrors    int64   `json:"read_errors"`
	WriteErrors   int64   `json:"write_errors"`
	StatusErrors  int64   `json:"status_errors"`
	Timeouts      int64   `json:"timeouts"`
	P50US         int64   `json:"p50_us"`
	P90US         int64   `json:"p90_us"`
	P99US         int64   `json:"p99_us"`
	P999US        int64   `json:"p999_us"`
	MaxUS         int64   `json:"max_us"`
	MeanUS        float64 `json:"mean_us"`
}

// Errors counts every failed request: connection, read and write errors, timeouts, and responses
// with a status of 400 or more.
func (r wrkResult) Errors() int64 {
	return r.ConnectErrors + r.ReadErrors + r.WriteErrors + r.StatusErrors + r.Timeouts
}

// RequestsPerSecond is the completed request rate over the run.
func (r wrkResult) RequestsPerSecond() float64 {
	if r.DurationUS <= 0 {
		return 0
	}
	return float64(r.Requests) / (float64(r.DurationUS) / 1e6)
}

// parseWrkOutput finds the line the script's done() printed.
func parseWrkOutput(out []byte) (wrkResult, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, wrkResultPrefix); ok {
			var r wrkResult
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return wrkResult{}, fmt.Errorf("parse wrk result %q: %w", rest, err)
			}
			return r, nil
		}
	}
	return wrkResult{}, fmt.Errorf("wrk printed no %q line; its output was:\n%s", strings.TrimSpace(wrkResultPrefix), out)
}

// wrkRunner runs wrk with fixed settings against any URL.
type wrkRunner struct {
	binary      string
	scriptPath  string
	bodyPath    string
	connections int
	threads     int
}

func newWrkRunner(binary, workDir, bodyPath string, connections, threads int) (*wrkRunner, error) {
	scriptPath := filepath.Join(workDir, "post.lua")
	if err := os.WriteFile(scriptPath, []byte(wrkScript), 0o644); err != nil {
		return nil, fmt.Errorf("write wrk script: %w", err)
	}
	absBody, err := filepath.Abs(bodyPath)
	if err != nil {
		return nil, fmt.Errorf("body path: %w", err)
	}
	return &wrkRunner{binary: binary, scriptPath: scriptPath, bodyPath: absBody, connections: connections, threads: threads}, nil
}

// Version reports wrk's version line, for the record.
func (w *wrkRunner) Version() string {
	out, _ := exec.Command(w.binary, "--version").CombinedOutput()
	first, _, _ := strings.Cut(string(out), "\n")
	fields := strings.Fields(first)
	if len(fields) >= 2 {
		return fields[0] + " " + fields[1]
	}
	return strings.TrimSpace(first)
}

// Run loads url for duration, as fast as the server answers, and returns what wrk measured.
func (w *wrkRunner) Run(ctx context.Context, url string, duration time.Duration) (wrkResult, error) {
	return w.run(ctx, url, duration, 0)
}

// RunPaced loads url with every connection pausing between an answer and its next request, so that
// the rate stays near rate requests/s while the server keeps up: the latency of a server that is
// not saturated.
func (w *wrkRunner) RunPaced(ctx context.Context, url string, duration time.Duration, rate float64) (wrkResult, error) {
	pause := time.Duration(float64(w.connections) / rate * float64(time.Second))
	return w.run(ctx, url, duration, max(pause, time.Millisecond))
}

func (w *wrkRunner) run(ctx context.Context, url string, duration, pause time.Duration) (wrkResult, error) {
	seconds := int((duration + time.Second - 1) / time.Second)
	cmd := exec.CommandContext(ctx, w.binary,
		"-t", strconv.Itoa(w.threads),
		"-c", strconv.Itoa(w.connections),
		"-d", strconv.Itoa(seconds)+"s",
		"--timeout", "5s",
		"-s", w.scriptPath,
		url)
	cmd.Env = append(os.Environ(), "LOADRUN_BODY="+w.bodyPath)
	if pause > 0 {
		cmd.Env = append(cmd.Env, "LOADRUN_DELAY_MS="+strconv.FormatInt(pause.Milliseconds(), 10))
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %w\n%s", url, err, out)
	}
	return parseWrkOutput(out)
}
