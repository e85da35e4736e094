package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// attributionBudget is what flag attribution (a verification with candidates) may spend, apart
// from every other request of the hook, so that the platform's verifications, however many it
// sends at once, leave Metacontroller's syncs their cores: at most --max-concurrent-attributions
// decoded and checked at once, and at most --attribution-candidates-per-second candidates a
// second. Each candidate costs about a microsecond of one core (decoding its name, two thirds, and
// its HMAC), so the rate is the core time attribution may take. A verification without candidates
// (microseconds) is held by neither.
//
// An attribution takes a slot, then its candidates from a bucket; when the bucket is short, it
// waits for them in its slot, so that attributions are paced one after another. Past the wait
// (concurrencyWait, as for a slot) it gets 429 with Retry-After: a flood, even one that retries at
// once, makes a few refusals a second, each after a wait, not a loop of them.
type attributionBudget struct {
	slots     *concurrencyLimit
	perSecond int
	// bucket holds one second's worth of candidates, and at least one request's worth
	// (MaxFlagCandidates), so that the largest verification always fits once it refills.
	bucket *rate.Limiter
	now    clock
	// sleep waits d, or less when ctx ends first (the caller went away), which it returns.
	sleep func(ctx context.Context, d time.Duration) error
	m     *metrics
}

// Up to waiters wait for a slot: the verifications answered at once (--max-concurrent-verifications)
// bound them already, each holding its body. Refused at once instead, a flood that retries at
// once would make a loop of refusals.
func newAttributionBudget(slots, waiters, perSecond int, wait time.Duration, now clock, m *metrics) *attributionBudget {
	b := &attributionBudget{
		slots:     newConcurrencyLimit(slots, wait, "flag attributions (verifications with candidates)", "--max-concurrent-attributions"),
		perSecond: perSecond,
		bucket:    rate.NewLimiter(rate.Limit(perSecond), attributionBurst(perSecond)),
		now:       now,
		sleep:     sleepContext,
		m:         m,
	}
	b.slots.advice = fmt.Sprintf("; attributions are paced to %d candidates a second (--attribution-candidates-per-second), "+
		"verifications without candidates are held by neither limit: ask with candidates only when a submission is wrong for its owner", perSecond)
	b.slots.maxWaiting = int64(waiters)
	b.slots.refused = func() { m.attributionsRefused.WithLabelValues("concurrency").Inc() }
	return b
}

// attributionBurst is the bucket's size: one second of perSecond, at least MaxFlagCandidates.
func attributionBurst(perSecond int) int {
	return max(perSecond, hooksync.MaxFlagCandidates)
}

// candidatesAtMost bounds, before decoding (most of an attribution's cost), the candidates a
// verification body names: every JSON string is written between two quotes that are not escaped,
// and a body with candidates holds seven strings besides them (the keys definition, owner, flag
// and candidates, and the first three's values). A body as the platform writes it gives exactly
// its number of candidates, one without candidates 0; one whose strings hold escaped quotes gives
// more. Clamped to the bucket's size, so that any body fits once it refills; a body over
// MaxFlagCandidates is refused when decoded.
func candidatesAtMost(body []byte, burst int) int {
	return min(max(bytes.Count(body, []byte{'"'})/2-7, 0), burst)
}

// admit takes a slot and candidates from the bucket for one attribution, waiting for them up to
// the slots' wait, or answers 429 with Retry-After itself and returns false. A true must be
// followed by release.
func (b *attributionBudget) admit(w http.ResponseWriter, r *http.Request, candidates int) bool {
	if !b.slots.enter(w, r) {
		return false
	}
	now := b.now()
	reservation := b.bucket.ReserveN(now, candidates)
	delay := reservation.DelayFrom(now)
	if !reservation.OK() || delay > b.slots.wait {
		// What it would wait for is given back: the refused take nothing from the bucket.
		reservation.CancelAt(now)
		b.slots.leave()
		b.m.attributionsRefused.WithLabelValues("rate").Inc()
		retryAfter := max(1, int(math.Ceil(float64(candidates)/float64(b.perSecond))))
		if reservation.OK() {
			retryAfter = max(1, int(math.Ceil(delay.Seconds())))
		}
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
		respondError(w, r, http.StatusTooManyRequests, "overloaded", fmt.Sprintf(
			"flag attribution is over its budget of %d candidates a second (--attribution-candidates-per-second) and this verification names %d: "+
				"retry after %ds (Retry-After); to spend less, ask with candidates only when a submission is wrong for its owner, "+
				"or raise --attribution-candidates-per-second (each candidate costs the hook about a microsecond of CPU)",
			b.perSecond, candidates, retryAfter))
		return false
	}
	if err := b.sleep(r.Context(), delay); err != nil {
		reservation.CancelAt(b.now())
		b.slots.leave()
		return false // the caller is gone: nobody reads an answer
	}
	b.m.attributionCandidates.Add(float64(candidates))
	return true
}

// release gives back the slot admit took.
func (b *attributionBudget) release() { b.slots.leave() }
