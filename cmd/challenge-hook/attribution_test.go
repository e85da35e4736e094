package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// teams are n candidate owners, team-0000 on.
func teams(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("team-%04d", i)
	}
	return out
}

// candidatesAtMost counts a body as the platform writes it exactly, and never fewer candidates
// than a body that decodes holds, however it is written.
func TestCandidatesAtMost(t *testing.T) {
	const burst = 50000
	marshal := func(v any) []byte {
		body, err := json.Marshal(v)
		require.NoError(t, err)
		return body
	}
	flag := "CTF{" + strings.Repeat("0", 32) + "}"
	for _, n := range []int{0, 1, 2, 1000, hooksync.MaxFlagCandidates} {
		body := marshal(hooksync.FlagVerification{Definition: "ctf/web", Owner: "team-1", Flag: flag, Candidates: teams(n)})
		assert.Equal(t, n, candidatesAtMost(body, burst), "%d candidates, as json.Marshal writes them", n)
	}
	for _, tt := range []struct {
		name string
		body string
		want int
	}{
		{"no candidates key", `{"definition":"ctf/web","owner":"team-1","flag":"` + flag + `"}`, 0},
		{"candidates null", `{"definition":"ctf/web","owner":"team-1","flag":"` + flag + `","candidates":null}`, 0},
		{"indented, keys reordered", "{\n  \"candidates\": [\n    \"team-7\",\n    \"team-8\"\n  ],\n  \"flag\": \"" + flag + "\",\n  \"owner\": \"team-1\",\n  \"definition\": \"ctf/web\"\n}", 2},
		{"escaped quotes in the flag count as more", `{"definition":"ctf/web","owner":"team-1","flag":"a\"b\"c","candidates":["team-7"]}`, 2},
		{"a key written twice counts as more", `{"definition":"ctf/web","owner":"team-1","owner":"team-2","flag":"x","candidates":["team-7"]}`, 3},
		{"an escaped key counts the same", `{"defin\u0069tion":"ctf/web","owner":"team-1","flag":"x","candidates":["team-7"]}`, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, candidatesAtMost([]byte(tt.body), burst))
			if v, err := hooksync.DecodeFlagVerification([]byte(tt.body)); err == nil {
				assert.GreaterOrEqual(t, candidatesAtMost([]byte(tt.body), burst), len(v.Candidates))
			}
		})
	}
	many := marshal(hooksync.FlagVerification{Definition: "ctf/web", Owner: "team-1", Flag: flag, Candidates: teams(9000)})
	assert.Equal(t, 6000, candidatesAtMost(many, 6000), "clamped to the bucket, so that it fits once it refills")
}

// Whatever the body, candidatesAtMost never counts fewer candidates than it decodes to: no body
// checks more candidates than it paid for.
func FuzzCandidatesAtMost(f *testing.F) {
	flag := "CTF{" + strings.Repeat("0", 32) + "}"
	for _, body := range []string{
		`{"definition":"ctf/web","owner":"team-1","flag":"` + flag + `","candidates":["team-7","team-8"]}`,
		`{"definition":"ctf/web","owner":"team-1","flag":"` + flag + `"}`,
		`{"candidates":["a"],"definition":"ctf/web","owner":"team-1","flag":"x\"y"}`,
		`{"defin\u0069tion":"ctf/web","owner":"team-1","flag":"x","candidates":["team-7", "t\u0065am-8"]}`,
	} {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := hooksync.DecodeFlagVerification(body)
		if err != nil {
			return
		}
		if got := candidatesAtMost(body, hooksync.MaxFlagCandidates); got < len(v.Candidates) {
			t.Fatalf("candidatesAtMost says %d, the body decodes to %d candidates: %q", got, len(v.Candidates), body)
		}
	})
}

// testBudget is an attribution budget on a clock the test moves, and its metrics. Its waits for
// the bucket move the clock, and add up in slept.
type testBudget struct {
	*attributionBudget
	m     *metrics
	mu    sync.Mutex
	now   time.Time
	slept time.Duration
}

func newTestBudget(slots, waiters, perSecond int, wait time.Duration) *testBudget {
	b := &testBudget{m: newMetrics(), now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	b.attributionBudget = newAttributionBudget(slots, waiters, perSecond, wait, func() time.Time {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.now
	}, b.m)
	b.sleep = func(_ context.Context, d time.Duration) error {
		b.advance(d)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.slept += d
		return nil
	}
	return b
}

func (b *testBudget) advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now = b.now.Add(d)
}

// metric is the value of series as b's metrics serve it, 0 when they do not.
func (b *testBudget) metric(t *testing.T, series string) float64 {
	t.Helper()
	w := httptest.NewRecorder()
	b.m.handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, metricsPath, nil))
	for line := range strings.Lines(w.Body.String()) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			v, err := strconv.ParseFloat(value, 64)
			require.NoError(t, err, line)
			return v
		}
	}
	return 0
}

// admitted asks b for an attribution of n candidates; a refusal's answer is returned.
func (b *testBudget) admitted(n int) (bool, *httptest.ResponseRecorder) {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, flagVerifyPath, nil)
	return b.admit(w, r, n), w
}

// The bucket: one second's worth, at least one largest verification's. An attribution it is
// short for waits in its slot for what refills within the wait; past that, 429 with the seconds
// until the bucket holds the request's candidates in Retry-After, and a body that says what to do
// besides waiting. The refused take nothing from it.
func TestAttributionBudgetRate(t *testing.T) {
	b := newTestBudget(1, 4, 1000, time.Second)
	assert.Equal(t, hooksync.MaxFlagCandidates, b.bucket.Burst(), "a rate below the largest verification still lets it through")
	ok, _ := b.admitted(hooksync.MaxFlagCandidates)
	require.True(t, ok, "a full bucket holds the largest verification")
	b.release()
	assert.Zero(t, b.slept, "without waiting")

	ok, w := b.admitted(2500)
	require.False(t, ok, "2,500 candidates at 1,000 a second: 2.5 s, over the 1 s wait")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "3", w.Header().Get("Retry-After"), "2.5 s, rounded up")
	var e errorBody
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), "body: %s", w.Body)
	for _, want := range []string{"1000 candidates a second (--attribution-candidates-per-second)", "names 2500", "retry after 3s",
		"ask with candidates only when a submission is wrong", "raise --attribution-candidates-per-second"} {
		assert.Contains(t, e.Error, want)
	}
	assert.Zero(t, b.slept, "refused at once")

	ok, _ = b.admitted(800)
	require.True(t, ok, "800 refill within the wait; the refusal took nothing")
	assert.Equal(t, 800*time.Millisecond, b.slept, "it waited for them")
	b.release()

	b.advance(1500 * time.Millisecond)
	ok, w = b.admitted(2600)
	require.False(t, ok, "the bucket holds 1,500: 1.1 s short")
	assert.Equal(t, "2", w.Header().Get("Retry-After"))
	ok, _ = b.admitted(2500)
	require.True(t, ok, "1 s short: within the wait")
	assert.Equal(t, 1800*time.Millisecond, b.slept)
	b.release()

	assert.Equal(t, 2.0, b.metric(t, `challenge_hook_flag_attributions_refused_total{limit="rate"}`))
	assert.Equal(t, 0.0, b.metric(t, `challenge_hook_flag_attributions_refused_total{limit="concurrency"}`))
	assert.Equal(t, float64(hooksync.MaxFlagCandidates+800+2500), b.metric(t, "challenge_hook_flag_attribution_candidates_total"), "candidates admitted")
}

// The concurrency bound: never more than its slots at once; the next wait for a slot, as many as
// it is told (more than the 4 × slots of limitConcurrency), up to the wait, then get 429 with
// Retry-After naming the flag, and take nothing from the bucket.
func TestAttributionBudgetConcurrency(t *testing.T) {
	const slots, waiters = 2, 16
	b := newTestBudget(slots, waiters, 1000000, 5*time.Second)
	var inFlight, most atomic.Int64
	var wg sync.WaitGroup
	for range slots + waiters {
		wg.Go(func() {
			ok, w := b.admitted(10)
			if !ok {
				t.Errorf("a waiter within the wait was refused: %d %s", w.Code, w.Body)
				return
			}
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(20 * time.Millisecond)
			inFlight.Add(-1)
			b.release()
		})
	}
	wg.Wait()
	assert.Equal(t, int64(slots), most.Load(), "as many at once as there are slots, and no more")
	assert.Equal(t, float64(10*(slots+waiters)), b.metric(t, "challenge_hook_flag_attribution_candidates_total"), "every waiter was admitted")

	b = newTestBudget(slots, waiters, 1000000, 200*time.Millisecond)
	for range slots {
		ok, _ := b.admitted(10)
		require.True(t, ok)
	}
	start := time.Now()
	ok, w := b.admitted(10)
	require.False(t, ok)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "it waited for a slot first")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Contains(t, w.Body.String(), "2 flag attributions (verifications with candidates) already (--max-concurrent-attributions): retry in 1s")
	assert.Contains(t, w.Body.String(), "paced to 1000000 candidates a second (--attribution-candidates-per-second), verifications without candidates are held by neither limit")
	assert.Equal(t, 1.0, b.metric(t, `challenge_hook_flag_attributions_refused_total{limit="concurrency"}`))
	assert.Equal(t, float64(10*slots), b.metric(t, "challenge_hook_flag_attribution_candidates_total"), "the refused took nothing")
}

// The served verification takes the budget for attributions alone: while every attribution slot
// is taken, one with candidates gets 429 and one without is answered; within the budget the
// verdicts are right.
func TestFlagVerifyHonoursTheAttributionBudget(t *testing.T) {
	key := []byte("budget-test-key-of-at-least-32-bytes")
	b := newTestBudget(1, 4, 1000000, 100*time.Millisecond)
	handler := handleFlagVerify(key, b.attributionBudget)
	const definition = "ctf/web"
	post := func(v hooksync.FlagVerification) *httptest.ResponseRecorder {
		body, err := json.Marshal(v)
		require.NoError(t, err)
		w := httptest.NewRecorder()
		handler(w, httptest.NewRequest(http.MethodPost, flagVerifyPath, bytes.NewReader(body)))
		return w
	}
	shared := hooksync.FlagVerification{Definition: definition, Owner: "team-0001", Flag: hooksync.DynamicFlag(key, definition, "team-0007", "CTF"), Candidates: teams(100)}
	plain := hooksync.FlagVerification{Definition: definition, Owner: "team-0007", Flag: shared.Flag}

	ok, _ := b.admitted(1) // the one slot, held
	require.True(t, ok)
	w := post(shared)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "body: %s", w.Body)
	assert.Contains(t, w.Body.String(), "--max-concurrent-attributions")
	w = post(plain)
	assert.Equal(t, http.StatusOK, w.Code, "a verification without candidates is not held")
	assert.Equal(t, string(verdictCorrect), w.Body.String())
	b.release()

	w = post(shared)
	require.Equal(t, http.StatusOK, w.Code, "body: %s", w.Body)
	assert.Equal(t, string(attributedVerdict(hooksync.FlagVerdict{OwnedBy: "team-0007"})), w.Body.String())
	assert.Equal(t, float64(1+100), b.metric(t, "challenge_hook_flag_attribution_candidates_total"))
}

// Over the served listener, with a budget of 2,000 candidates a second: a largest verification is
// verified, the next at once (2.5 s short) gets 429 with Retry-After and its JSON error, and a
// verification without candidates is answered all along. A refusal is never a verdict: the owner's valid flag
// is answered correct or 429, never wrong, and a shared flag is attributed to its owner alone.
func TestAttributionBudgetServed(t *testing.T) {
	ts := newTokenServer(t, "--attribution-candidates-per-second=2000", "--max-concurrent-attributions=1")
	auth := []string{"Authorization", "Bearer " + testVerifyToken}
	const definition = "inline/ctf/pwn-team7"
	candidates := slices.Concat(teams(4998), []string{"team-7", "team-8"})
	verify := func(owner string) (*http.Response, []byte) {
		return post(t, ts.verifyURL+"/flags/verify", "application/json", attribution(t, definition, owner, ts.flag, candidates...), auth...)
	}

	resp, body := verify("team-8")
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.JSONEq(t, `{"correct":false,"ownedBy":"team-7"}`, string(body), "the shared flag is team-7's")

	resp, body = verify("team-8")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the budget is spent; body: %s", body)
	assert.Equal(t, "3", resp.Header.Get("Retry-After"), "5,000 candidates at 2,000 a second")
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e errorBody
	require.NoError(t, json.Unmarshal(body, &e), "body: %s", body)
	assert.Contains(t, e.Error, "--attribution-candidates-per-second")
	assert.NotContains(t, string(body), flagHexPart(ts.flag), "an answer echoes the flag")

	resp, body = post(t, ts.verifyURL+"/flags/verify", "application/json", verification(t, definition, "team-7", ts.flag), auth...)
	require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
	assert.JSONEq(t, `{"correct":true}`, string(body), "a verification without candidates is not held by the budget")

	// The owner's own flag, while the budget refills: right, or refused; never wrong, never
	// another's.
	var right, refused int
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline) || right == 0; {
		resp, body := verify("team-7")
		switch resp.StatusCode {
		case http.StatusOK:
			assert.JSONEq(t, `{"correct":true}`, string(body))
			right++
		case http.StatusTooManyRequests:
			assert.NotContains(t, string(body), "correct")
			refused++
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	assert.Positive(t, refused)
	assert.LessOrEqual(t, right, 2, "at most what 2,000 a second refill")

	resp, scraped := get(t, ts.metrics+"/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(scraped), `challenge_hook_flag_attributions_refused_total{limit="rate"} `)
	assert.Contains(t, string(scraped), `challenge_hook_http_requests_total{code="429",route="/flags/verify"} `)
}

// The budget's flags fall back to the environment like the others.
func TestAttributionBudgetFlags(t *testing.T) {
	cfg, _, err := parseServerConfig(nil, noEnv)
	require.NoError(t, err)
	assert.Equal(t, 1, cfg.maxAttributions)
	assert.Equal(t, 50000, cfg.attributionRate)
	cfg, _, err = parseServerConfig([]string{"--max-concurrent-attributions=2"}, envMap(map[string]string{
		"CHALLENGE_HOOK_MAX_CONCURRENT_ATTRIBUTIONS":       "3",
		"CHALLENGE_HOOK_ATTRIBUTION_CANDIDATES_PER_SECOND": "20000",
	}))
	require.NoError(t, err)
	assert.Equal(t, 2, cfg.maxAttributions, "flag over env")
	assert.Equal(t, 20000, cfg.attributionRate, "env over default")
	for _, arg := range []string{"--max-concurrent-attributions=0", "--attribution-candidates-per-second=0"} {
		_, _, err := parseServerConfig([]string{arg}, noEnv)
		if assert.Error(t, err, arg) {
			assert.Contains(t, err.Error(), "positive whole number")
		}
	}
}
