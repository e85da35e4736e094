package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runConfig is everything one load run depends on.
type runConfig struct {
	hookBinary    string
	hookArgs      string
	listenFlag    string
	bodyPath      string
	path          string
	duration      time.Duration
	warmup        time.Duration
	rounds        int
	pacedShare    float64
	connections   int
	threads       int
	wrkBinary     string
	goBenchPath   string
	pipelineBench string
	workDir       string
}

func parseRunFlags(args []string) (runConfig, error) {
	var cfg runConfig
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&cfg.hookBinary, "hook", "bin/challenge-hook", "hook binary to load")
	fs.StringVar(&cfg.hookArgs, "hook-args", "", "arguments the hook is started with (split on white space), e.g. the contents of testdata/dev.flags")
	fs.StringVar(&cfg.listenFlag, "listen-flag", "--listen", "the hook's flag for its listen address")
	fs.StringVar(&cfg.bodyPath, "body", "", "request body to POST (a sync request as Metacontroller sends it)")
	fs.StringVar(&cfg.path, "path", "/sync", "URL path to POST to")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "measured load per server (whole seconds)")
	fs.DurationVar(&cfg.warmup, "warmup", 2*time.Second, "unmeasured load per server before its first measured run")
	fs.IntVar(&cfg.rounds, "rounds", 2, "measured runs per server, alternating floor and hook; each server's best run is reported")
	fs.Float64Var(&cfg.pacedShare, "paced-share", 0.5, "after the saturated runs, one paced run per server at this share of the hook's best throughput (0: none)")
	fs.IntVar(&cfg.connections, "connections", 64, "keep-alive connections")
	fs.IntVar(&cfg.threads, "threads", 2, "wrk threads")
	fs.StringVar(&cfg.wrkBinary, "wrk", "wrk", "wrk binary")
	fs.StringVar(&cfg.goBenchPath, "gobench", "", "output of `go test -bench -benchmem` holding the pipeline benchmark")
	fs.StringVar(&cfg.pipelineBench, "pipeline-bench", "BenchmarkPipeline/running", "benchmark of decode+sync+encode of the Running request")
	fs.StringVar(&cfg.workDir, "workdir", ".cache/bench", "directory for the script, logs and the canned response")
	if err := fs.Parse(args); err != nil {
		return runConfig{}, err
	}
	if cfg.bodyPath == "" {
		return runConfig{}, errors.New("run: -body is required")
	}
	if cfg.duration < time.Second {
		return runConfig{}, errors.New("run: -duration must be at least 1s")
	}
	if cfg.rounds < 1 {
		return runConfig{}, errors.New("run: -rounds must be at least 1")
	}
	return cfg, nil
}

// runMain performs the load run and prints the report. It fails when a server does not start or
// answer, wrk fails, or any request of any run failed (after printing the report).
func runMain(ctx context.Context, args []string, out io.Writer) error {
	cfg, err := parseRunFlags(args)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.workDir, 0o755); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	indented, err := os.ReadFile(cfg.bodyPath)
	if err != nil {
		return fmt.Errorf("read request body: %w", err)
	}
	// Metacontroller sends compact JSON (encoding/json's Marshal); golden files are indented.
	var compact bytes.Buffer
	if err := json.Compact(&compact, indented); err != nil {
		return fmt.Errorf("request body %s: %w", cfg.bodyPath, err)
	}
	body := compact.Bytes()
	bodyPath := filepath.Join(cfg.workDir, "request.json")
	if err := os.WriteFile(bodyPath, body, 0o644); err != nil {
		return fmt.Errorf("write request body: %w", err)
	}
	var pipeline, calibration *benchResult
	if cfg.goBenchPath != "" {
		benchOut, err := os.ReadFile(cfg.goBenchPath)
		if err != nil {
			return fmt.Errorf("read go bench output: %w", err)
		}
		results := parseGoBench(benchOut)
		found, ok := results[cfg.pipelineBench]
		if !ok {
			return fmt.Errorf("%s has no %s line", cfg.goBenchPath, cfg.pipelineBench)
		}
		pipeline = &found
		if valid, ok := results[calibrationBench]; ok {
			calibration = &valid
		}
	}
	wrk, err := newWrkRunner(cfg.wrkBinary, cfg.workDir, bodyPath, cfg.connections, cfg.threads)
	if err != nil {
		return err
	}

	hook, err := startHook(ctx, cfg)
	if err != nil {
		return err
	}
	defer hook.stop()
	hookURL := "http://" + hook.addr + cfg.path
	response, err := awaitFirstResponse(ctx, hook, hookURL, body)
	if err != nil {
		return err
	}
	responsePath := filepath.Join(cfg.workDir, "response.json")
	if err := os.WriteFile(responsePath, response, 0o644); err != nil {
		return fmt.Errorf("write canned response: %w", err)
	}

	floor, err := startFloor(ctx, cfg.workDir, responsePath)
	if err != nil {
		return err
	}
	floorURL := "http://" + floor.addr + cfg.path
	floorResponse, err := post(ctx, floorURL, body)
	if err != nil {
		floor.stop()
		return fmt.Errorf("floor: %w", err)
	}
	if len(floorResponse) != len(response) {
		floor.stop()
		return fmt.Errorf("floor answered %d bytes, the hook %d", len(floorResponse), len(response))
	}
	defer floor.stop()
	// Alternate the servers so that a burst of other work on the shared machine hits both alike.
	var floorRuns, hookRuns []serverRun
	for round := range cfg.rounds {
		floorRun, err := measure(ctx, wrk, floor, floorURL, cfg, round == 0)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		floorRuns = append(floorRuns, floorRun)
		hookRun, err := measure(ctx, wrk, hook, hookURL, cfg, round == 0)
		if err != nil {
			return fmt.Errorf("hook: %w", err)
		}
		hookRuns = append(hookRuns, hookRun)
	}
	// The same moderate rate for both: latency when the hook is not the bottleneck.
	var paced *pacedRuns
	if rate := best(hookRuns).wrk.RequestsPerSecond() * cfg.pacedShare; rate > 0 {
		floorPaced, err := wrk.RunPaced(ctx, floorURL, cfg.duration, rate)
		if err != nil {
			return fmt.Errorf("floor, paced: %w", err)
		}
		hookPaced, err := wrk.RunPaced(ctx, hookURL, cfg.duration, rate)
		if err != nil {
			return fmt.Errorf("hook, paced: %w", err)
		}
		paced = &pacedRuns{rate: rate, floor: floorPaced, hook: hookPaced}
	}

	rep := report{
		wrkVersion:   wrk.Version(),
		cfg:          cfg,
		requestSize:  len(body),
		responseSize: len(response),
		floorRuns:    floorRuns,
		hookRuns:     hookRuns,
		paced:        paced,
		pipeline:     pipeline,
		calibration:  calibration,
	}
	rep.print(out)
	return rep.requestErrors()
}

// server is a process under load: the hook or the floor.
type server struct {
	name    string
	addr    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
}

// stop asks the server to shut down gracefully and kills it if it does not within 10 s.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *server) logTail() string {
	data, _ := os.ReadFile(s.logPath)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

func startProcess(name, logPath string, cmd *exec.Cmd) (*server, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = logFile
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	return s, nil
}

func startHook(ctx context.Context, cfg runConfig) (*server, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	args := append(strings.Fields(cfg.hookArgs), cfg.listenFlag+"="+addr)
	s, err := startProcess("hook", filepath.Join(cfg.workDir, "hook.log"), exec.CommandContext(ctx, cfg.hookBinary, args...))
	if err != nil {
		return nil, err
	}
	s.addr = addr
	return s, nil
}

// startFloor runs this same program as the floor, in its own process like the hook, and reads the
// address it printed.
func startFloor(ctx context.Context, workDir, responsePath string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, "floor", "-listen", "127.0.0.1:0", "-response", responsePath)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	s, err := startProcess("floor", filepath.Join(workDir, "floor.log"), cmd)
	if err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("floor did not print its address: %w\n%s", err, s.logTail())
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		s.stop()
		return nil, fmt.Errorf("floor printed %q, want \"listening on <addr>\"", line)
	}
	s.addr = addr
	return s, nil
}

func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	return addr, nil
}

// awaitFirstResponse posts the body until the hook answers, so that the run starts only once the
// hook serves, and returns the hook's real response: the floor answers the same bytes.
func awaitFirstResponse(ctx context.Context, hook *server, url string, body []byte) ([]byte, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		response, err := post(ctx, url, body)
		if err == nil {
			return response, nil
		}
		var status *statusError
		if errors.As(err, &status) {
			return nil, fmt.Errorf("hook answered the load run's request with %w\n%s", err, hook.logTail())
		}
		select {
		case <-hook.exited:
			return nil, fmt.Errorf("hook exited before serving: %v\n%s", hook.cmd.ProcessState, hook.logTail())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("hook did not answer within 20s: %w\n%s", err, hook.logTail())
		}
	}
}

type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

func post(ctx context.Context, url string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{code: resp.StatusCode, body: string(data)}
	}
	return data, nil
}

// serverRun is what one server did under the measured load.
type serverRun struct {
	wrk wrkResult
	// cpuSeconds is the server's user+system CPU time during the measured run.
	cpuSeconds float64
	// machineBusy is the fraction of all CPUs busy during the measured run (server, wrk and anything
	// else on the machine): a run on a machine busy with other work is not comparable.
	machineBusy float64
	// peakRSSKiB is the server's VmHWM after the run, warm-up included.
	peakRSSKiB int64
}

// CPUPerRequest is the server's CPU time per completed request.
func (r serverRun) CPUPerRequest() time.Duration {
	if r.wrk.Requests == 0 {
		return 0
	}
	return time.Duration(r.cpuSeconds / float64(r.wrk.Requests) * 1e9)
}

func measure(ctx context.Context, wrk *wrkRunner, s *server, url string, cfg runConfig, warmUp bool) (serverRun, error) {
	if warmUp && cfg.warmup > 0 {
		if _, err := wrk.Run(ctx, url, cfg.warmup); err != nil {
			return serverRun{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	pid := s.cmd.Process.Pid
	cpuBefore, err := processCPUTicks(pid)
	if err != nil {
		return serverRun{}, err
	}
	machineBefore, err := readMachineCPU()
	if err != nil {
		return serverRun{}, err
	}
	result, err := wrk.Run(ctx, url, cfg.duration)
	if err != nil {
		return serverRun{}, err
	}
	cpuAfter, err := processCPUTicks(pid)
	if err != nil {
		return serverRun{}, err
	}
	machineAfter, err := readMachineCPU()
	if err != nil {
		return serverRun{}, err
	}
	peak, err := peakRSSKiB(pid)
	if err != nil {
		return serverRun{}, err
	}
	return serverRun{
		wrk:         result,
		cpuSeconds:  float64(cpuAfter-cpuBefore) / userHZ,
		machineBusy: machineAfter.busyFractionSince(machineBefore),
		peakRSSKiB:  peak,
	}, nil
}

// userHZ is the unit of the CPU times in /proc (USER_HZ), 100 on every Linux this runs on.
const userHZ = 100

// processCPUTicks reads utime+stime of all the process's threads from /proc/<pid>/stat.
func processCPUTicks(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("process CPU time: %w", err)
	}
	// The command name (field 2) may hold spaces; the fields after it are space-separated.
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, fmt.Errorf("process CPU time: malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[end+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("process CPU time: short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("process CPU time: %w", err)
	}
	return utime + stime, nil
}

// peakRSSKiB reads VmHWM, the process's peak resident set size, from /proc/<pid>/status.
func peakRSSKiB(pid int) (int64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	return parseVmHWM(data)
}

func parseVmHWM(status []byte) (int64, error) {
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fields := strings.Fields(rest)
			if len(fields) != 2 || fields[1] != "kB" {
				return 0, fmt.Errorf("peak RSS: unexpected VmHWM line %q", line)
			}
			return strconv.ParseInt(fields[0], 10, 64)
		}
	}
	return 0, errors.New("peak RSS: no VmHWM line")
}

// machineCPU is the first line of /proc/stat: ticks spent by all CPUs.
type machineCPU struct {
	total, idle int64
}

func readMachineCPU() (machineCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, fmt.Errorf("machine CPU: %w", err)
	}
	return parseMachineCPU(data)
}

func parseMachineCPU(stat []byte) (machineCPU, error) {
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("machine CPU: unexpected /proc/stat line %q", line)
	}
	var m machineCPU
	for i, f := range fields[1:] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("machine CPU: %w", err)
		}
		// Fields: user nice system idle iowait irq softirq steal guest guest_nice; guest time is
		// already counted in user, so it is left out of the total.
		if i >= 8 {
			break
		}
		m.total += v
		if i == 3 || i == 4 {
			m.idle += v
		}
	}
	return m, nil
}

func (m machineCPU) busyFractionSince(before machineCPU) float64 {
	total := m.total - before.total
	if total <= 0 {
		return 0
	}
	return 1 - float64(m.idle-before.idle)/float64(total)
}
