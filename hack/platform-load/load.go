package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"
)

// rCTF's polling: every 2 s while an instance starts, every 10 s while it runs.
const (
	startingEvery = 2 * time.Second
	runningEvery  = 10 * time.Second
)

// The two servers the load alternates between.
const (
	component = iota
	floor
)

var targetNames = [2]string{"component", "floor"}

// poster sends rCTF's POST of a get to a server and checks its answer.
type poster struct {
	client *http.Client
	urls   [2]string
}

// post sends body to target's /v1/instances/ and returns the answer, or an error for anything
// but a 200 with an instancerInstanceDetails.
func (p *poster) post(target int, body []byte) ([]byte, error) {
	return p.send(http.MethodPost, target, body)
}

func (p *poster) send(method string, target int, body []byte) ([]byte, error) {
	req, err := http.NewRequest(method, p.urls[target], bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	answer, err := readAll(resp)
	if err != nil {
		return nil, err
	}
	var a struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return nil, fmt.Errorf("status %d, no JSON answer: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK || a.Kind != "instancerInstanceDetails" {
		return nil, fmt.Errorf("status %d, %s: %s", resp.StatusCode, a.Kind, a.Message)
	}
	return answer, nil
}

// floorHandler is the floor: it reads the body and answers body, with the component's headers.
func floorHandler(body []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(body)
	})
}

// schedule is the load's clock: from start, phases of phase each, alternating between the
// component (even phases) and the floor (odd ones), until end; the first warm phases (one or more
// of each) are a warm-up, not measured: the connection pool filling, the goroutines' stacks
// growing.
type schedule struct {
	start, end time.Time
	phase      time.Duration
	warm       int
}

func (s schedule) phaseAt(t time.Time) int { return int(t.Sub(s.start) / s.phase) }

// record is what one target saw.
type record struct {
	latencies []time.Duration         // from the send to the answer read
	byPhase   map[int][]time.Duration // the same, by the target's phase (0, 1, ...)
	late      []time.Duration         // from the poll's scheduled time to its send: the client's own delay
	errors    int
	firstErrs []string
	cpu       time.Duration // this process's CPU time during the target's phases
}

func newRecord() *record { return &record{byPhase: map[int][]time.Duration{}} }

func (r *record) add(o *record) {
	r.latencies = append(r.latencies, o.latencies...)
	for phase, d := range o.byPhase {
		r.byPhase[phase] = append(r.byPhase[phase], d...)
	}
	r.late = append(r.late, o.late...)
	r.errors += o.errors
	for _, e := range o.firstErrs {
		if len(r.firstErrs) < 3 && !slices.Contains(r.firstErrs, e) {
			r.firstErrs = append(r.firstErrs, e)
		}
	}
}

// runLoad polls as rCTF does for every team, each team's polls spread uniformly over its period
// (so the load is steady), the period divided by multiplier, until s.end; every poll goes to the
// target of its scheduled time, and is measured past the warm-up (its errors count throughout).
func runLoad(p *poster, teams []*team, s schedule, multiplier float64) [2]*record {
	var mu sync.Mutex
	total := [2]*record{newRecord(), newRecord()}
	var wg sync.WaitGroup
	counts := map[string]int{}
	for _, t := range teams {
		counts[t.state]++
	}
	seen := map[string]int{}
	for _, t := range teams {
		every := runningEvery
		if t.state == stateStarting {
			every = startingEvery
		}
		every = time.Duration(float64(every) / multiplier)
		offset := every * time.Duration(seen[t.state]) / time.Duration(counts[t.state])
		seen[t.state]++
		wg.Go(func() {
			mine := [2]*record{newRecord(), newRecord()}
			for next := s.start.Add(offset); next.Before(s.end); next = next.Add(every) {
				time.Sleep(time.Until(next))
				phase := s.phaseAt(next)
				target := phase % 2
				sent := time.Now()
				_, err := p.post(target, t.get)
				took := time.Since(sent)
				r := mine[target]
				if phase >= s.warm {
					r.latencies = append(r.latencies, took)
					r.byPhase[(phase-s.warm)/2] = append(r.byPhase[(phase-s.warm)/2], took)
					r.late = append(r.late, sent.Sub(next))
				}
				if err != nil {
					r.errors++
					if len(r.firstErrs) < 3 {
						r.firstErrs = append(r.firstErrs, err.Error())
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range total {
				total[i].add(mine[i])
			}
		})
	}
	cpu := phaseCPU(s)
	wg.Wait()
	total[component].cpu, total[floor].cpu = cpu[component], cpu[floor]
	return total
}

// phaseCPU adds up this process's CPU time (user and system) over each target's measured phases,
// read at every phase's end, until s.end.
func phaseCPU(s schedule) [2]time.Duration {
	var out [2]time.Duration
	last := processCPU()
	for end := s.start.Add(s.phase); !end.After(s.end); end = end.Add(s.phase) {
		time.Sleep(time.Until(end))
		now := processCPU()
		if phase := s.phaseAt(end.Add(-s.phase)); phase >= s.warm {
			out[phase%2] += now - last
		}
		last = now
	}
	return out
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stats are a sample's count and nearest-rank percentiles.
type stats struct {
	n             int
	p50, p99, max time.Duration
}

func statsOf(d []time.Duration) stats {
	if len(d) == 0 {
		return stats{}
	}
	s := slices.Sorted(slices.Values(d))
	rank := func(q float64) time.Duration { return s[max(0, int(math.Ceil(q*float64(len(s))))-1)] }
	return stats{n: len(s), p50: rank(0.50), p99: rank(0.99), max: s[len(s)-1]}
}

// ms formats a duration in milliseconds, to the microsecond.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }
