package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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

// limitBodies holds the bodies in flight to the budget: small requests share it, one as large as
// the budget waits for them and then holds it alone (the next small one waits for it, up to the
// wait, then gets 429 saying the flag), and a body that announces no length may be no larger than
// unannouncedBodyBytes.
func TestLimitBodies(t *testing.T) {
	const budget = 4 << 20
	release := make(chan struct{})
	var inHandler atomic.Int64
	handler := limitBodies(budget, 300*time.Millisecond, "--max-request-bytes")(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler.Add(1)
		defer inHandler.Add(-1)
		body, ok := readBody(w, r, "--max-request-bytes")
		if !ok {
			return
		}
		<-release
		respondJSON(w, http.StatusOK, statusBody{Status: fmt.Sprint(len(body))})
	}))
	srv := httptest.NewServer(handler)
	defer srv.Close()
	send := func(body io.Reader, length int64) (int, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL, body)
		require.NoError(t, err)
		req.ContentLength = length
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(answer)
	}
	small := bytes.Repeat([]byte(" "), 512<<10)
	large := bytes.Repeat([]byte(" "), budget)
	codes := make(chan int, 16)

	// Seven small requests (3.5 MiB) in the handler at once.
	for range 7 {
		go func() { code, _ := send(bytes.NewReader(small), int64(len(small))); codes <- code }()
	}
	require.Eventually(t, func() bool { return inHandler.Load() == 7 }, 5*time.Second, time.Millisecond)
	// The large one does not fit beside them: it waits, then is told to retry.
	code, answer := send(bytes.NewReader(large), budget)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, answer, "--max-request-bytes")
	close(release)
	for range 7 {
		assert.Equal(t, http.StatusOK, <-codes)
	}

	// Alone, the large one is read whole; a byte more is 413.
	code, answer = send(bytes.NewReader(large), budget)
	assert.Equal(t, http.StatusOK, code, answer)
	assert.Contains(t, answer, fmt.Sprint(budget))
	code, answer = send(bytes.NewReader(append(large, ' ')), budget+1)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Contains(t, answer, fmt.Sprintf("larger than %d bytes", budget))

	// Without Content-Length (chunked): up to unannouncedBodyBytes.
	code, _ = send(io.MultiReader(bytes.NewReader(small)), -1)
	assert.Equal(t, http.StatusOK, code)
	code, answer = send(io.MultiReader(bytes.NewReader(make([]byte, unannouncedBodyBytes+1))), -1)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code)
	assert.Contains(t, answer, fmt.Sprintf("larger than %d bytes", unannouncedBodyBytes))
}
