package main

import (
	"context"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"golang.org/x/sync/semaphore"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// requestInfo collects what handlers learn about a request, for its one log line and the metrics.
type requestInfo struct {
	parent       string // namespace/name of the Challenge
	phase        string
	reason       string
	errorReason  string // machine word of a refused request, e.g. bad_request
	errorMessage string
}

type requestInfoKey struct{}

func requestInfoFrom(ctx context.Context) *requestInfo {
	info, _ := ctx.Value(requestInfoKey{}).(*requestInfo)
	return info
}

// isQuietRoute says whether a route is polled by kubelets or Prometheus; those requests are logged at
// debug level only.
func isQuietRoute(route string) bool {
	return route == "/healthz" || route == "/readyz" || route == "/metrics"
}

// logRequests writes one log line per request and counts it. It never logs bodies.
func logRequests(logger *slog.Logger, m *metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			info := &requestInfo{}
			ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
			next.ServeHTTP(ww, r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info)))

			status := ww.Status()
			if status == 0 {
				status = http.StatusOK // the handler wrote nothing: net/http answers 200
			}
			route := "unmatched"
			if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
				route = rc.RoutePattern()
			}
			m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			switch {
			case info.errorReason != "":
				m.syncErrors.WithLabelValues(info.errorReason).Inc()
			case info.phase == v1alpha1.PhaseError:
				m.syncErrors.WithLabelValues(info.reason).Inc()
			}

			level := slog.LevelInfo
			if isQuietRoute(route) {
				level = slog.LevelDebug
			}
			if status >= http.StatusInternalServerError {
				level = slog.LevelError
			}
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.Int("status", status),
				slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
				slog.Int("bytes", ww.BytesWritten()),
			}
			if info.parent != "" {
				attrs = append(attrs, slog.String("parent", info.parent))
			}
			if info.phase != "" {
				attrs = append(attrs, slog.String("phase", info.phase), slog.String("reason", info.reason))
			}
			if info.errorMessage != "" {
				attrs = append(attrs, slog.String("error", info.errorMessage))
			}
			logger.LogAttrs(r.Context(), level, "request", attrs...)
		})
	}
}

// recoverPanics turns a panic into a 500 JSON answer and one error log line with the stack, so that
// one bad request cannot take the hook down for every Challenge.
func recoverPanics(logger *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				recovered := recover()
				if recovered == nil {
					return
				}
				if recovered == http.ErrAbortHandler {
					panic(recovered) // net/http's own way to abort a response; it logs nothing
				}
				logger.Error("panic serving request",
					slog.String("method", r.Method), slog.String("path", r.URL.Path),
					slog.String("panic", fmt.Sprint(recovered)), slog.String("stack", string(debug.Stack())))
				if ww, ok := w.(middleware.WrapResponseWriter); ok && ww.Status() != 0 {
					return // headers are out; the client sees a truncated answer
				}
				respondError(w, r, http.StatusInternalServerError, "internal_error", "internal error")
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// isAcceptedMediaType accepts JSON, and what `curl -d` sends by default. A body is never parsed as a form.
func isAcceptedMediaType(mediaType string) bool {
	return mediaType == "application/json" || mediaType == "application/x-www-form-urlencoded"
}

// requireJSON refuses request bodies that do not claim to be JSON (no Content-Type is accepted).
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if contentType := r.Header.Get("Content-Type"); contentType != "" {
			mediaType, _, err := mime.ParseMediaType(contentType)
			if err != nil || !isAcceptedMediaType(mediaType) {
				respondError(w, r, http.StatusUnsupportedMediaType, "unsupported_media_type",
					fmt.Sprintf("unsupported Content-Type %q: send application/json", contentType))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// limitBody caps the request body; reading past the cap fails with *http.MaxBytesError.
func limitBody(maxBytes int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = http.MaxBytesReader(w, r.Body, maxBytes)
			next.ServeHTTP(w, r)
		})
	}
}

// limitBodies bounds the request bodies the hook holds at once to maxBytes in all, one request's
// included: a request takes its Content-Length from that budget before its body is read, waiting
// for it up to wait, and gives it back when answered; past the wait it gets 429 with Retry-After,
// as in limitConcurrency. A body that announces no length (chunked) takes, and may be, at most
// unannouncedBodyBytes. Reading past either bound fails with *http.MaxBytesError. So one request as
// large as several of the API server's largest objects (a Challenge bloated to its size limit, in
// its own finalize request or among an owner's related Challenges) is read, alone, while the usual
// small ones share the budget, and the bodies' memory has the same bound whatever their sizes
// (TestMaximalConcurrentLoadFitsTheMemoryLimit).
func limitBodies(maxBytes int64, wait time.Duration, flagName string) func(http.Handler) http.Handler {
	budget := semaphore.NewWeighted(maxBytes)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			weight, limit := r.ContentLength, maxBytes
			switch {
			case weight < 0:
				weight = min(unannouncedBodyBytes, maxBytes)
				limit = weight
			case weight > maxBytes:
				weight = maxBytes // read up to the bound, then 413
			}
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			err := budget.Acquire(ctx, weight)
			cancel()
			if err != nil {
				respondOverloaded(w, r, fmt.Sprintf("the hook holds %d bytes of requests already (%s): retry in 1s", maxBytes, flagName))
				return
			}
			defer budget.Release(weight)
			r.Body = http.MaxBytesReader(w, r.Body, limit)
			next.ServeHTTP(w, r)
		})
	}
}

// unannouncedBodyBytes bounds a request body sent without Content-Length (chunked): Metacontroller
// announces every one, so this is only a hand-made request's, and it takes no more of the budget.
const unannouncedBodyBytes = 1 << 20

// concurrencyWait is how long a request that finds every slot taken waits for one before it is
// answered 429 (limitConcurrency's wait): syncs take milliseconds, so a burst clears well within it, and it is far below
// Metacontroller's hook timeout (10 s in compositecontroller.yaml).
const concurrencyWait = time.Second

// limitConcurrency bounds the requests the hook reads and answers at once. Each holds its body,
// the decoded request and the encoded answer, several times the body (see
// TestMaximalConcurrentLoadFitsTheMemoryLimit); the bodies of Metacontroller's requests are
// bounded together too (limitBodies), so that the container's memory limit holds them whatever
// their sizes. A request that finds every slot taken waits up to
// wait, its body still unread; at most 4 × slots wait. Past either bound it gets 429
// with Retry-After, which Metacontroller honours: it syncs that parent again after that many
// seconds and changes nothing meanwhile.
// what names the requests in the 429's message, flagName the flag that sets slots.
func limitConcurrency(slots int, wait time.Duration, what, flagName string) func(http.Handler) http.Handler {
	limit := newConcurrencyLimit(slots, wait, what, flagName)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !limit.enter(w, r) {
				return
			}
			defer limit.leave()
			next.ServeHTTP(w, r)
		})
	}
}

// concurrencyLimit is limitConcurrency's bound, for a handler that takes it for part of its work
// (flag attribution).
type concurrencyLimit struct {
	inFlight       chan struct{}
	waiting        atomic.Int64
	maxWaiting     int64 // 4 × slots, unless the caller bounds the waiters otherwise
	wait           time.Duration
	what, flagName string
	advice         string // appended to the 429's message: what else the caller can do
	refused        func() // called for each 429; nil: nothing
}

func newConcurrencyLimit(slots int, wait time.Duration, what, flagName string) *concurrencyLimit {
	return &concurrencyLimit{inFlight: make(chan struct{}, slots), maxWaiting: int64(4 * slots), wait: wait, what: what, flagName: flagName}
}

// enter takes a slot, waiting for one up to l.wait when fewer than l.maxWaiting wait already;
// otherwise it answers 429 with Retry-After itself and returns false. A true must be followed by
// leave.
func (l *concurrencyLimit) enter(w http.ResponseWriter, r *http.Request) bool {
	select {
	case l.inFlight <- struct{}{}:
		return true
	default:
	}
	if l.waiting.Add(1) > l.maxWaiting {
		l.waiting.Add(-1)
		l.overloaded(w, r)
		return false
	}
	defer l.waiting.Add(-1)
	timer := time.NewTimer(l.wait)
	defer timer.Stop()
	select {
	case l.inFlight <- struct{}{}:
		return true
	case <-timer.C:
		l.overloaded(w, r)
		return false
	}
}

// leave gives back the slot enter took.
func (l *concurrencyLimit) leave() { <-l.inFlight }

func (l *concurrencyLimit) overloaded(w http.ResponseWriter, r *http.Request) {
	if l.refused != nil {
		l.refused()
	}
	respondOverloaded(w, r, fmt.Sprintf("the hook is answering %d %s already (%s): retry in 1s%s", cap(l.inFlight), l.what, l.flagName, l.advice))
}

// respondOverloaded answers 429 with Retry-After: 1, which Metacontroller honours (it syncs the
// parent again after that long and changes nothing meanwhile).
func respondOverloaded(w http.ResponseWriter, r *http.Request, message string) {
	w.Header().Set("Retry-After", "1")
	respondError(w, r, http.StatusTooManyRequests, "overloaded", message)
}
