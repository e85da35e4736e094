package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// serveBenchCase is one recorded Metacontroller request and the answer the golden files expect.
type serveBenchCase struct {
	name     string
	request  []byte // compact, as Metacontroller sends it
	response []byte // the golden response.json, indented for review
}

// loadServeBenchCases reads, from the repository root, a new instance's first sync and the richest
// Running resync (every child, the Pod with its status, managedFields included): the two requests
// an event's opening minute and its steady state are made of. Where the glob matches several
// cases, the largest request is taken.
func loadServeBenchCases(b *testing.B) []serveBenchCase {
	b.Helper()
	var cases []serveBenchCase
	for _, src := range []struct{ name, glob string }{
		{"new", "testdata/life-1-none-first-sync/request.json"},
		{"running", "testdata/running-*-fixed-point/request.json"},
	} {
		matches, err := filepath.Glob(src.glob)
		if err != nil || len(matches) == 0 {
			b.Fatalf("bench case %s: no golden case matches %s (err %v)", src.name, src.glob, err)
		}
		path, size := "", int64(-1)
		for _, match := range matches {
			info, err := os.Stat(match)
			if err != nil {
				b.Fatal(err)
			}
			if info.Size() > size {
				path, size = match, info.Size()
			}
		}
		indented, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		var request bytes.Buffer
		if err := json.Compact(&request, indented); err != nil {
			b.Fatalf("%s: %v", path, err)
		}
		response, err := os.ReadFile(filepath.Join(filepath.Dir(path), "response.json"))
		if err != nil {
			b.Fatal(err)
		}
		cases = append(cases, serveBenchCase{name: src.name, request: request.Bytes(), response: response})
	}
	return cases
}

// newBenchApp builds the server as run does with `make run`'s flags (testdata/dev.flags: the
// golden files' clock, flag key and token) and args, from the repository root. Its request log
// goes to io.Discard: the lines are still formatted, as in production, only not written.
func newBenchApp(b *testing.B, args ...string) *app {
	b.Helper()
	b.Chdir("../..")
	devFlags, err := os.ReadFile("testdata/dev.flags")
	if err != nil {
		b.Fatal(err)
	}
	return newTestApp(b, io.Discard, append(strings.Fields(string(devFlags)), args...)...)
}

// benchVerifyToken is the platform's token of the benchmarks, sent as "Bearer bench-verify-token".
const benchVerifyToken = "bench-verify-token"

// benchVerifyTokenFlag writes benchVerifyToken to a file and returns the flag that serves flag
// verification with it.
func benchVerifyTokenFlag(b *testing.B) string {
	b.Helper()
	tokenFile := filepath.Join(b.TempDir(), "verify-token")
	if err := os.WriteFile(tokenFile, []byte(benchVerifyToken+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return "--verify-token-file=" + tokenFile
}

// checkGolden fails the benchmark unless the handler answers bc's golden response byte for byte:
// what is measured is the real answer, not an error path.
func checkGolden(b *testing.B, status int, body []byte, bc serveBenchCase) {
	b.Helper()
	if status != http.StatusOK {
		b.Fatalf("%s: status %d: %s", bc.name, status, body)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, body, "", "  "); err != nil {
		b.Fatalf("%s: %v", bc.name, err)
	}
	if !bytes.Equal(indented.Bytes(), bc.response) {
		b.Fatalf("%s: the answer differs from its golden response.json", bc.name)
	}
}

// poster sends one recorded sync request and returns the answer's status and body.
type poster func(request []byte) (status int, body []byte, err error)

// inProcess posts to handler's POST /sync in-process (httptest.NewRecorder), as the HTTP server
// would call it, with no connection; authorization is Metacontroller's header.
func inProcess(handler http.Handler, authorization string) func() (poster, func()) {
	return func() (poster, func()) {
		return func(request []byte) (int, []byte, error) {
			r := httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(request))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", authorization)
			w := httptest.NewRecorder()
			handler.ServeHTTP(w, r)
			return w.Code, w.Body.Bytes(), nil
		}, func() {}
	}
}

// overLoopback posts to url's /sync through a keep-alive client of its own per poster, as
// Metacontroller holds connections to the hook; authorization is Metacontroller's header.
func overLoopback(url, authorization string) func() (poster, func()) {
	return func() (poster, func()) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		return func(request []byte) (int, []byte, error) {
			r, err := http.NewRequest(http.MethodPost, url+"/sync", bytes.NewReader(request))
			if err != nil {
				return 0, nil, err
			}
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", authorization)
			resp, err := client.Do(r)
			if err != nil {
				return 0, nil, err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return resp.StatusCode, body, err
		}, client.CloseIdleConnections
	}
}

// benchServed runs every case through posters from newPoster: first one request whose answer
// must be the golden one, then the measured loop, from one goroutine or, parallel, from
// GOMAXPROCS goroutines with a poster each.
func benchServed(b *testing.B, parallel bool, newPoster func() (poster, func())) {
	for _, bc := range loadServeBenchCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			post, done := newPoster()
			defer done()
			status, body, err := post(bc.request)
			if err != nil {
				b.Fatal(err)
			}
			checkGolden(b, status, body, bc)
			b.SetBytes(int64(len(bc.request)))
			b.ReportAllocs()
			if !parallel {
				for b.Loop() {
					if err := postOK(post, bc.request); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				post, done := newPoster()
				defer done()
				for pb.Next() {
					if err := postOK(post, bc.request); err != nil {
						b.Error(err) // not Fatal: this is not the benchmark's goroutine
						return
					}
				}
			})
		})
	}
}

// postOK posts request and wants a 200.
func postOK(post poster, request []byte) error {
	status, body, err := post(request)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("status %d: %s", status, body)
	}
	return err
}

// BenchmarkServedHandler is what one sync request costs the hook: the handler run serves (request
// log, metrics, panic recovery, routing, authentication, concurrency and body limits, then decode,
// sync and encode) on a recorded request, in-process, one at a time. Per op: one request, its
// httptest request and recorder included (a few hundred bytes); no network.
func BenchmarkServedHandler(b *testing.B) {
	benchServed(b, false, inProcess(newBenchApp(b).handler, devAuthorization(b)[1]))
}

// BenchmarkServedHandlerParallel is BenchmarkServedHandler with GOMAXPROCS requests at once (run
// with -cpu 1,2): how the hook's throughput grows with cores. ns/op is wall time per request over
// all goroutines.
func BenchmarkServedHandlerParallel(b *testing.B) {
	benchServed(b, true, inProcess(newBenchApp(b).handler, devAuthorization(b)[1]))
}

// BenchmarkServedOverLoopback is the parallel benchmark over a real connection: the handler behind
// net/http's server (httptest, 127.0.0.1), a keep-alive client per goroutine. The client's work is
// in the same process, so ns/op and allocs/op count both ends: an upper bound of the server's own
// cost.
func BenchmarkServedOverLoopback(b *testing.B) {
	srv := httptest.NewServer(newBenchApp(b).handler)
	b.Cleanup(srv.Close)
	benchServed(b, true, overLoopback(srv.URL, devAuthorization(b)[1]))
}

// BenchmarkFlagVerify is what one POST /flags/verify costs the hook, through the verification
// listener's handler run builds (request log, token, concurrency and body limits, decode, HMACs,
// answer), in-process, with attribution's rate out of reach: "owner" is one owner's flag checked
// (a request without candidates); "candidates-2000" is a shared flag attributed among 2,000
// candidate owners (the last one's), "candidates-5000" the same at MaxFlagCandidates. Each checks
// its answer first.
func BenchmarkFlagVerify(b *testing.B) {
	// Without attribution's budget: one verification's cost is measured, not the rate allowed.
	handler := newBenchApp(b, benchVerifyTokenFlag(b), "--attribution-candidates-per-second=1000000000").verifyHandler
	key, err := readFlagKey("testdata/flag.key")
	if err != nil {
		b.Fatal(err)
	}
	const definition = "ctf/web-sqli"
	request := func(owner string, candidates []string) []byte {
		shared := "team-0000"
		if len(candidates) > 0 {
			shared = candidates[len(candidates)-1]
		}
		body, err := json.Marshal(hooksync.FlagVerification{Definition: definition, Owner: owner,
			Flag: hooksync.DynamicFlag(key, definition, shared, "CTF"), Candidates: candidates})
		if err != nil {
			b.Fatal(err)
		}
		return body
	}
	for _, bc := range []struct {
		name    string
		request []byte
		want    string
	}{
		{"owner", request("team-0000", nil), `{"correct":true}`},
		{"candidates-2000", request("someone-else", teams(2000)), `{"correct":false,"ownedBy":"team-1999"}`},
		{"candidates-5000", request("someone-else", teams(hooksync.MaxFlagCandidates)), `{"correct":false,"ownedBy":"team-4999"}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			post := func() (int, []byte) {
				r := httptest.NewRequest(http.MethodPost, flagVerifyPath, bytes.NewReader(bc.request))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Authorization", "Bearer "+benchVerifyToken)
				w := httptest.NewRecorder()
				handler.ServeHTTP(w, r)
				return w.Code, w.Body.Bytes()
			}
			status, body := post()
			var compact bytes.Buffer
			if status != http.StatusOK || json.Compact(&compact, body) != nil || compact.String() != bc.want {
				b.Fatalf("status %d, answer %q, want %s", status, body, bc.want)
			}
			b.SetBytes(int64(len(bc.request)))
			b.ReportAllocs()
			for b.Loop() {
				if status, body := post(); status != http.StatusOK {
					b.Fatalf("status %d: %s", status, body)
				}
			}
		})
	}
}

// BenchmarkSyncUnderVerifyFlood is /sync's latency while the platform floods POST /flags/verify:
// the app run builds (testdata/dev.flags and a verification token), its main and verification
// listeners each behind net/http's server on 127.0.0.1, in this process. One client posts the
// `running` sync, one at a time, through phases of floodPhase that alternate between idle and
// under flood, so that both see the machine's same load. The flood is floodClients
// clients, each posting a verification among MaxFlagCandidates candidates as soon as the last one
// is answered. Sub-benchmarks:
//   - unbudgeted: attribution without its budget (--max-concurrent-attributions=16, a rate no
//     flood reaches), as the hook was before it had one;
//   - budget: the shipped budget; the clients wait Retry-After after a 429, as the platform should;
//   - budget-retry-at-once: the same clients retry at once after a 429.
//
// Per op: one sync; ns/op mixes both phases. Reported: each phase's sync latency (p50 and p99, in
// µs), the flood phases' length (flood-s, their drain included), the verifications answered 200
// and 429 in them, in all and a second, and the candidates checked a second. Run with
// -benchtime=60s (10 phases of each); a -benchtime shorter than two phases is skipped.
func BenchmarkSyncUnderVerifyFlood(b *testing.B) {
	for _, mode := range []struct {
		name            string
		args            []string
		honorRetryAfter bool
	}{
		{"unbudgeted", []string{"--max-concurrent-attributions=16", "--attribution-candidates-per-second=1000000000"}, false},
		{"budget", nil, true},
		{"budget-retry-at-once", nil, false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			benchSyncUnderFlood(b, mode.args, mode.honorRetryAfter)
		})
	}
}

const (
	floodPhase   = 3 * time.Second // each phase's length
	floodClients = 16              // verifications in flight at once, from the platform
)

func benchSyncUnderFlood(b *testing.B, args []string, honorRetryAfter bool) {
	a := newBenchApp(b, append([]string{benchVerifyTokenFlag(b)}, args...)...)
	hook := httptest.NewServer(a.handler)
	b.Cleanup(hook.Close)
	verify := httptest.NewServer(a.verifyHandler)
	b.Cleanup(verify.Close)

	var running serveBenchCase
	for _, bc := range loadServeBenchCases(b) {
		if bc.name == "running" {
			running = bc
		}
	}
	post, done := overLoopback(hook.URL, devAuthorization(b)[1])()
	defer done()
	status, body, err := post(running.request)
	if err != nil {
		b.Fatal(err)
	}
	checkGolden(b, status, body, running)

	flood := newVerifyFlood(b, verify.URL, honorRetryAfter)
	var idle, flooded []time.Duration
	var floodTime time.Duration
	flooding, phaseStart := false, time.Now()
	for b.Loop() {
		if time.Since(phaseStart) >= floodPhase {
			if flooding {
				flood.stop() // what was in flight is counted: so is the time it took
				floodTime += time.Since(phaseStart)
			} else {
				flood.start()
			}
			flooding, phaseStart = !flooding, time.Now()
		}
		start := time.Now()
		if err := postOK(post, running.request); err != nil {
			b.Fatal(err)
		}
		if took := time.Since(start); flooding {
			flooded = append(flooded, took)
		} else {
			idle = append(idle, took)
		}
	}
	if flooding {
		flood.stop()
		floodTime += time.Since(phaseStart)
	}
	if len(flooded) == 0 {
		// make bench's default -benchtime (1s) is one idle phase.
		b.Skipf("no flood phase within -benchtime: run with -benchtime=%s or more (60s is 10 phases of each)", 2*floodPhase)
	}
	for _, phase := range []struct {
		name  string
		syncs []time.Duration
	}{{"idle", idle}, {"flood", flooded}} {
		slices.Sort(phase.syncs)
		b.ReportMetric(float64(phase.syncs[len(phase.syncs)/2].Microseconds()), phase.name+"-p50-µs")
		b.ReportMetric(float64(phase.syncs[len(phase.syncs)*99/100].Microseconds()), phase.name+"-p99-µs")
	}
	seconds := floodTime.Seconds()
	b.ReportMetric(seconds, "flood-s")
	b.ReportMetric(float64(flood.ok.Load()), "verify-200")
	b.ReportMetric(float64(flood.refused.Load()), "verify-429")
	b.ReportMetric(float64(flood.ok.Load())/seconds, "verify-200/s")
	b.ReportMetric(float64(flood.refused.Load())/seconds, "verify-429/s")
	b.ReportMetric(float64(flood.ok.Load()*hooksync.MaxFlagCandidates)/seconds, "candidates/s")
	if n := flood.failed.Load(); n > 0 {
		b.Errorf("%d verifications answered neither the attribution nor 429: %s", n, flood.lastFailure.Load())
	}
}

// verifyFlood is the platform flooding POST /flags/verify: floodClients clients, each posting a
// verification among MaxFlagCandidates candidates (a shared flag, the last candidate's) as soon
// as its last one is answered, between start and stop.
type verifyFlood struct {
	url             string
	request         []byte
	want            string // the compact answer of request
	honorRetryAfter bool
	client          *http.Client
	ok, refused     atomic.Int64
	failed          atomic.Int64
	lastFailure     atomic.Value // string
	halt            chan struct{}
	wg              sync.WaitGroup
}

func newVerifyFlood(b *testing.B, url string, honorRetryAfter bool) *verifyFlood {
	b.Helper()
	key, err := readFlagKey("testdata/flag.key")
	if err != nil {
		b.Fatal(err)
	}
	const definition = "ctf/web-sqli"
	candidates := teams(hooksync.MaxFlagCandidates)
	owner := candidates[len(candidates)-1]
	request, err := json.Marshal(hooksync.FlagVerification{Definition: definition, Owner: "someone-else",
		Flag: hooksync.DynamicFlag(key, definition, owner, "CTF"), Candidates: candidates})
	if err != nil {
		b.Fatal(err)
	}
	f := &verifyFlood{url: url + flagVerifyPath, request: request, want: `{"correct":false,"ownedBy":"` + owner + `"}`, honorRetryAfter: honorRetryAfter,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: floodClients}}}
	b.Cleanup(f.client.CloseIdleConnections)
	return f
}

func (f *verifyFlood) start() {
	f.halt = make(chan struct{})
	for range floodClients {
		f.wg.Go(func() {
			for {
				select {
				case <-f.halt:
					return
				default:
				}
				if wait := f.verify(); wait > 0 && f.honorRetryAfter {
					select {
					case <-f.halt:
						return
					case <-time.After(wait):
					}
				}
			}
		})
	}
}

// stop ends the flood once every client's verification in flight is answered.
func (f *verifyFlood) stop() {
	close(f.halt)
	f.wg.Wait()
}

// verify posts one verification and counts its answer; after a 429 it returns the Retry-After.
func (f *verifyFlood) verify() (retryAfter time.Duration) {
	fail := func(format string, args ...any) time.Duration {
		f.failed.Add(1)
		f.lastFailure.Store(fmt.Sprintf(format, args...))
		return 0
	}
	r, err := http.NewRequest(http.MethodPost, f.url, bytes.NewReader(f.request))
	if err != nil {
		return fail("%v", err)
	}
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+benchVerifyToken)
	resp, err := f.client.Do(r)
	if err != nil {
		return fail("%v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fail("%v", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		var compact bytes.Buffer
		if json.Compact(&compact, body) != nil || compact.String() != f.want {
			return fail("answer %q, want %s", body, f.want)
		}
		f.ok.Add(1)
		return 0
	case http.StatusTooManyRequests:
		f.refused.Add(1)
		seconds, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || seconds < 1 {
			return fail("429 with Retry-After %q", resp.Header.Get("Retry-After"))
		}
		return time.Duration(seconds) * time.Second
	default:
		return fail("status %d: %s", resp.StatusCode, body)
	}
}
