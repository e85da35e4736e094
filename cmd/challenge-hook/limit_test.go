package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limitConcurrency lets slots requests in at once; the next ones wait for a slot, up to the wait,
// and at most 4 × slots of them; past either bound they get 429 with Retry-After.
func TestLimitConcurrency(t *testing.T) {
	const slots = 2
	release := make(chan struct{})
	var inHandler, maxInHandler atomic.Int64
	handler := limitConcurrency(slots, 300*time.Millisecond, "requests", "--max-concurrent-requests")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inHandler.Add(1)
		defer inHandler.Add(-1)
		for {
			m := maxInHandler.Load()
			if n <= m || maxInHandler.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		respondJSON(w, http.StatusOK, statusBody{Status: "ok"})
	}))
	srv := httptest.NewServer(handler)
	defer srv.Close()

	type result struct {
		code       int
		retryAfter string
		err        string
		took       time.Duration
	}
	send := func(results chan<- result) {
		start := time.Now()
		resp, body := post(t, srv.URL, "application/json", []byte(`{}`))
		var e errorBody
		_ = json.Unmarshal(body, &e)
		results <- result{resp.StatusCode, resp.Header.Get("Retry-After"), e.Error, time.Since(start)}
	}

	// Two in flight, held; a third waits its 300ms and is refused.
	held := make(chan result, slots)
	for range slots {
		go send(held)
	}
	require.Eventually(t, func() bool { return inHandler.Load() == slots }, 5*time.Second, time.Millisecond)
	refused := make(chan result, 1)
	send(refused)
	r := <-refused
	assert.Equal(t, http.StatusTooManyRequests, r.code)
	assert.Equal(t, "1", r.retryAfter, "Metacontroller resyncs after Retry-After seconds")
	assert.Contains(t, r.err, "--max-concurrent-requests")
	assert.GreaterOrEqual(t, r.took, 300*time.Millisecond, "it waited for a slot first")

	// More than 4 × slots waiting: the surplus is refused at once.
	waiters := make(chan result, 4*slots+3)
	var wg sync.WaitGroup
	for range 4*slots + 3 {
		wg.Go(func() { send(waiters) })
	}
	wg.Wait()
	close(waiters)
	var immediate, late int
	for r := range waiters {
		require.Equal(t, http.StatusTooManyRequests, r.code)
		if r.took < 200*time.Millisecond {
			immediate++
		} else {
			late++
		}
	}
	assert.GreaterOrEqual(t, immediate, 3, "the waiters past 4 × slots are refused without waiting")
	assert.LessOrEqual(t, late, 4*slots)

	// A waiter gets the first slot that frees within its wait.
	waiter := make(chan result, 1)
	go send(waiter)
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range slots {
		assert.Equal(t, http.StatusOK, (<-held).code)
	}
	assert.Equal(t, http.StatusOK, (<-waiter).code)
	assert.LessOrEqual(t, maxInHandler.Load(), int64(slots), "never more than slots in the handler")
}
