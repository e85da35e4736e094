package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// calibrationBench is encoding/json's json.Valid on the benchmarked Running request: the issue
// measured about 3.6 ns per byte on this kind of machine, so a much slower figure says the machine
// was busy with other work during the run.
const calibrationBench = "BenchmarkJSONValidBaseline/running"

// issueValidNsPerByte is the issue's figure: json.Valid needed about 34 µs for a 9.4 KB request.
const issueValidNsPerByte = 34_000.0 / 9_400

// benchResult is one line of `go test -bench -benchmem` output.
type benchResult struct {
	NsPerOp     float64
	BytesPerOp  int64
	AllocsPerOp int64
	// BytesPerSecond is the input rate of a benchmark that calls b.SetBytes (its MB/s), else 0.
	BytesPerSecond float64
}

// parseGoBench reads benchmark lines by name, without the -GOMAXPROCS suffix. A benchmark that
// appears more than once (-count) keeps its fastest line.
func parseGoBench(out []byte) map[string]benchResult {
	results := map[string]benchResult{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		name := fields[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		var r benchResult
		var haveNs bool
		for i := 2; i+1 < len(fields); i += 2 {
			value, unit := fields[i], fields[i+1]
			switch unit {
			case "ns/op":
				v, err := strconv.ParseFloat(value, 64)
				haveNs = err == nil
				r.NsPerOp = v
			case "B/op":
				r.BytesPerOp, _ = strconv.ParseInt(value, 10, 64)
			case "allocs/op":
				r.AllocsPerOp, _ = strconv.ParseInt(value, 10, 64)
			case "MB/s":
				mbps, _ := strconv.ParseFloat(value, 64)
				r.BytesPerSecond = mbps * 1e6
			}
		}
		if !haveNs {
			continue
		}
		if prev, ok := results[name]; ok && prev.NsPerOp <= r.NsPerOp {
			continue
		}
		results[name] = r
	}
	return results
}

type report struct {
	wrkVersion   string
	cfg          runConfig
	requestSize  int
	responseSize int
	floorRuns    []serverRun
	hookRuns     []serverRun
	paced        *pacedRuns
	pipeline     *benchResult
	calibration  *benchResult
}

// pacedRuns are the floor and the hook loaded at the same moderate rate.
type pacedRuns struct {
	rate        float64
	floor, hook wrkResult
}

// best is the run with the highest throughput, with the peak RSS of the whole load run (VmHWM only
// grows, so the last run holds it).
func best(runs []serverRun) serverRun {
	var b serverRun
	for i, r := range runs {
		if i == 0 || r.wrk.RequestsPerSecond() > b.wrk.RequestsPerSecond() {
			b = r
		}
	}
	if len(runs) > 0 {
		b.peakRSSKiB = runs[len(runs)-1].peakRSSKiB
	}
	return b
}

func (r report) floor() serverRun { return best(r.floorRuns) }
func (r report) hook() serverRun  { return best(r.hookRuns) }

// totalErrors counts failed requests over every run, not only the reported best one.
func totalErrors(runs []serverRun) int64 {
	var n int64
	for _, r := range runs {
		n += r.wrk.Errors()
	}
	return n
}

// requestErrors fails the load run when any request of any run failed, paced runs included: a
// server that answers errors is not doing the work the figures claim to measure.
func (r report) requestErrors() error {
	hookErrors, floorErrors := totalErrors(r.hookRuns), totalErrors(r.floorRuns)
	if r.paced != nil {
		hookErrors += r.paced.hook.Errors()
		floorErrors += r.paced.floor.Errors()
	}
	if hookErrors == 0 && floorErrors == 0 {
		return nil
	}
	return fmt.Errorf("%d hook and %d floor requests failed over all runs (server logs: %s/hook.log, %s/floor.log)",
		hookErrors, floorErrors, r.cfg.workDir, r.cfg.workDir)
}

func ratio(num, den float64) float64 {
	if den == 0 {
		return 0
	}
	return num / den
}

func formatMicros(us int64) string {
	return formatDuration(time.Duration(us) * time.Microsecond)
}

func formatDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	}
}

// print writes the report: each server's figures, the hook's as ratios of the floor's, and the Go
// benchmark of decode+sync+encode.
func (r report) print(out io.Writer) {
	fmt.Fprintf(out, "\nload run: %s, %d connections, %d threads, keep-alive, 127.0.0.1; per server %s warm-up, then %d x %s measured, alternating floor and hook\n",
		r.wrkVersion, r.cfg.connections, r.cfg.threads, r.cfg.warmup, r.cfg.rounds, r.cfg.duration)
	fmt.Fprintf(out, "request: POST %s, %d bytes (%s, compacted); response: %d bytes (the floor answers the hook's own response)\n",
		r.cfg.path, r.requestSize, r.cfg.bodyPath, r.responseSize)
	fmt.Fprintln(out, "latency: closed loop (each connection sends its next request when the last is answered)")
	fmt.Fprintln(out)
	floor, hook := r.floor(), r.hook()

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "server\trequests/s\tp50\tp90\tp99\tp99.9\tmax\terrors\tCPU/request\tpeak RSS\tmachine busy\t")
	row := func(name string, s serverRun) {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%.1f MiB\t%.0f%%\t\n", name,
			s.wrk.RequestsPerSecond(), formatMicros(s.wrk.P50US), formatMicros(s.wrk.P90US),
			formatMicros(s.wrk.P99US), formatMicros(s.wrk.P999US), formatMicros(s.wrk.MaxUS),
			s.wrk.Errors(), formatDuration(s.CPUPerRequest()), float64(s.peakRSSKiB)/1024, s.machineBusy*100)
	}
	for i := range r.floorRuns {
		row(fmt.Sprintf("floor run %d", i+1), r.floorRuns[i])
		row(fmt.Sprintf("hook run %d", i+1), r.hookRuns[i])
	}
	row("floor (best)", floor)
	row("hook (best)", hook)
	x := func(hook, floor float64) string { return fmt.Sprintf("%.2fx", ratio(hook, floor)) }
	fmt.Fprintf(tw, "hook/floor\t%s\t%s\t%s\t%s\t%s\t%s\t\t%s\t%s\t\t\n",
		x(hook.wrk.RequestsPerSecond(), floor.wrk.RequestsPerSecond()),
		x(float64(hook.wrk.P50US), float64(floor.wrk.P50US)),
		x(float64(hook.wrk.P90US), float64(floor.wrk.P90US)),
		x(float64(hook.wrk.P99US), float64(floor.wrk.P99US)),
		x(float64(hook.wrk.P999US), float64(floor.wrk.P999US)),
		x(float64(hook.wrk.MaxUS), float64(floor.wrk.MaxUS)),
		x(float64(hook.CPUPerRequest()), float64(floor.CPUPerRequest())),
		x(float64(hook.peakRSSKiB), float64(floor.peakRSSKiB)))
	tw.Flush()

	if p := r.paced; p != nil {
		fmt.Fprintf(out, "\npaced: each connection pauses between requests, aiming at %.0f requests/s (%.0f%% of the hook's best) for both\n",
			p.rate, r.cfg.pacedShare*100)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "server\trequests/s\tp50\tp90\tp99\tp99.9\tmax\terrors\t")
		for _, run := range []struct {
			name string
			w    wrkResult
		}{{"floor", p.floor}, {"hook", p.hook}} {
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t\n", run.name, run.w.RequestsPerSecond(),
				formatMicros(run.w.P50US), formatMicros(run.w.P90US), formatMicros(run.w.P99US),
				formatMicros(run.w.P999US), formatMicros(run.w.MaxUS), run.w.Errors())
		}
		fmt.Fprintf(tw, "hook/floor\t\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\t\n",
			ratio(float64(p.hook.P50US), float64(p.floor.P50US)), ratio(float64(p.hook.P90US), float64(p.floor.P90US)),
			ratio(float64(p.hook.P99US), float64(p.floor.P99US)), ratio(float64(p.hook.P999US), float64(p.floor.P999US)),
			ratio(float64(p.hook.MaxUS), float64(p.floor.MaxUS)))
		tw.Flush()
	}

	if r.pipeline != nil {
		fmt.Fprintf(out, "\n%s (no HTTP): %.1f µs/op, %d B/op, %d allocs/op\n",
			r.cfg.pipelineBench, r.pipeline.NsPerOp/1000, r.pipeline.BytesPerOp, r.pipeline.AllocsPerOp)
	}
	if r.calibration != nil && r.calibration.BytesPerSecond > 0 {
		nsPerByte := 1e9 / r.calibration.BytesPerSecond
		fmt.Fprintf(out, "calibration: json.Valid on the same request %.1f µs/op, %.1f ns/byte (the issue measured %.1f ns/byte on this kind of machine: %.1fx)\n",
			r.calibration.NsPerOp/1000, nsPerByte, issueValidNsPerByte, nsPerByte/issueValidNsPerByte)
	}
}
