package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/challenge-hook/challenge-hook/prepull"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// clock tells the time; the server reads it once per sync.
type clock func() time.Time

// health is the server's readiness: true while serving, false before start and once shutdown began.
type health struct {
	ready atomic.Bool
}

type statusBody struct {
	Status string `json:"status"`
}

// handleHealthz answers liveness probes: the process serves HTTP.
func handleHealthz() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		respondJSON(w, http.StatusOK, statusBody{Status: "ok"})
	}
}

// handleReadyz answers readiness probes: 503 once shutdown began, so traffic moves elsewhere.
func handleReadyz(h *health) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.ready.Load() {
			respondJSON(w, http.StatusServiceUnavailable, statusBody{Status: "not ready"})
			return
		}
		respondJSON(w, http.StatusOK, statusBody{Status: "ok"})
	}
}

func handleNotFound() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		respondError(w, r, http.StatusNotFound, "", fmt.Sprintf("no route %s: this listener serves POST /sync, /finalize, /customize, /prepull/sync and /prepull/customize, GET /healthz and /readyz", r.URL.Path))
	}
}

// handleElsewhere answers 404 for a route that a listener of its own serves: the main listener's
// answer for /metrics and /flags/verify, saying where they are (where).
func handleElsewhere(path, where string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		respondError(w, r, http.StatusNotFound, "", fmt.Sprintf("no route %s on this listener: %s", path, where))
	}
}

// handleOnlyRoute answers 404 for everything but the one route (method and path) that a
// listener of its own serves: the metrics and the flag-verification listeners.
func handleOnlyRoute(route string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		respondError(w, r, http.StatusNotFound, "", fmt.Sprintf("no route %s: this listener serves %s only", r.URL.Path, route))
	}
}

func handleMethodNotAllowed() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		respondError(w, r, http.StatusMethodNotAllowed, "", fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
	}
}

// handleSync serves /sync and /finalize. finalize forces the finalize path whatever the body says.
func handleSync(cfg hooksync.Config, now clock, m *metrics, finalize bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r, syncLimitHint(cfg))
		if !ok {
			return
		}
		start := time.Now()
		req, err := hooksync.DecodeRequest(body)
		if err != nil {
			respondDecodeError(w, r, err)
			return
		}
		if finalize {
			req.Finalizing = true
		}
		info := requestInfoFrom(r.Context())
		if info != nil {
			info.parent = req.Parent.Metadata.Namespace + "/" + req.Parent.Metadata.Name
		}
		resp := hooksync.Sync(req, now(), cfg)
		encoded, err := hooksync.EncodeResponse(resp)
		if err != nil {
			respondError(w, r, http.StatusInternalServerError, "internal_error", "encoding the response failed")
			return
		}
		m.syncDuration.Observe(time.Since(start).Seconds())
		m.phases.WithLabelValues(resp.Status.Phase).Inc()
		if info != nil {
			info.phase, info.reason = resp.Status.Phase, resp.Status.Reason
		}
		respondBytes(w, http.StatusOK, encoded)
	}
}

// handleCustomize serves /customize: which related objects the sync hook needs.
func handleCustomize(cfg hooksync.Config) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r, requestLimitFlag)
		if !ok {
			return
		}
		req, err := hooksync.DecodeCustomizeRequest(body)
		if err != nil {
			respondDecodeError(w, r, err)
			return
		}
		if info := requestInfoFrom(r.Context()); info != nil {
			info.parent = req.Parent.Metadata.Namespace + "/" + req.Parent.Metadata.Name
		}
		respondJSON(w, http.StatusOK, hooksync.Customize(req, cfg))
	}
}

// handlePrePull serves /prepull/sync, the pre-pull controller's sync hook (a CompositeController on
// ChallengeDefinitions, manifests/components/prepull). Without --prepull-image it answers 503, so
// that Metacontroller changes nothing and retries, and says what to set.
func handlePrePull(cfg hooksync.Config) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if cfg.PrePullImage == "" {
			respondError(w, r, http.StatusServiceUnavailable, "prepull_not_configured",
				"pre-pull is not configured: start the hook with --prepull-image (its own image), as manifests/components/prepull does")
			return
		}
		body, ok := readBody(w, r, requestLimitFlag)
		if !ok {
			return
		}
		req, err := prepull.DecodeRequest(body)
		if err != nil {
			respondDecodeError(w, r, err)
			return
		}
		if info := requestInfoFrom(r.Context()); info != nil {
			info.parent = req.Parent.Metadata.Namespace + "/" + req.Parent.Metadata.Name
		}
		respondJSON(w, http.StatusOK, prepull.Sync(req, cfg))
	}
}

// handlePrePullCustomize serves /prepull/customize: the definitions whose images count against the
// pre-pull total (prepull.Customize). It needs no --prepull-image: it builds nothing.
func handlePrePullCustomize(cfg hooksync.Config) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := readBody(w, r, requestLimitFlag)
		if !ok {
			return
		}
		req, err := prepull.DecodeCustomizeRequest(body)
		if err != nil {
			respondDecodeError(w, r, err)
			return
		}
		if info := requestInfoFrom(r.Context()); info != nil {
			info.parent = req.Parent.Metadata.Namespace + "/" + req.Parent.Metadata.Name
		}
		respondJSON(w, http.StatusOK, prepull.Customize(req, cfg))
	}
}

// requestLimitFlag is what sets the body limit of Metacontroller's routes, for their 413.
const requestLimitFlag = "--max-request-bytes"

// syncLimitHint is what the 413 of a sync or finalize request says besides the limit: what sets
// it and, with the per-owner limit, what makes a request grow and what to do. Metacontroller puts
// the answer's body in the Warning event SyncError on the Challenge, where an organizer looks.
func syncLimitHint(cfg hooksync.Config) string {
	if cfg.MaxInstancesPerOwner == 0 {
		return requestLimitFlag
	}
	return requestLimitFlag + "; with --max-instances-per-owner a sync request carries every Challenge of the parent's owner" +
		" in its namespace: delete the owner's ended Challenges (their deletion always finishes), or raise " + requestLimitFlag +
		` (docs/platform.md, "A limit per owner")`
}

// readBody reads the (size-limited) request body, answering 413 or 400 itself when it cannot;
// limitSetBy says in the 413 what sets the limit. JSON is UTF-8, and what Metacontroller and the
// API server encode always is: a body that is not is refused before decoding, where each invalid
// byte would become a 3-byte U+FFFD and the answer that echoes it up to 3 times the body (a
// hand-crafted request's way past the memory bound).
func readBody(w http.ResponseWriter, r *http.Request, limitSetBy string) ([]byte, bool) {
	body, err := readAll(r)
	if err == nil && !utf8.Valid(body) {
		respondError(w, r, http.StatusBadRequest, "bad_request", "request body is not valid UTF-8, as JSON must be")
		return nil, false
	}
	if err == nil {
		return body, true
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		if info := requestInfoFrom(r.Context()); info != nil {
			info.parent = parentOfPrefix(body)
		}
		respondError(w, r, http.StatusRequestEntityTooLarge, "too_large",
			fmt.Sprintf("request body is larger than %d bytes (%s)", tooLarge.Limit, limitSetBy))
		return nil, false
	}
	respondError(w, r, http.StatusBadRequest, "bad_request", fmt.Sprintf("reading the request body: %v", err))
	return nil, false
}

// parentOfPrefix names the parent ("<namespace>/<name>") of a request of which only a prefix was
// read (a body over the limit), for the request log: Metacontroller writes the parent right after
// the controller, within the first few kilobytes. Empty when the prefix does not hold the whole
// parent.
func parentOfPrefix(prefix []byte) string {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key != "parent" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return ""
			}
			continue
		}
		var parent struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if dec.Decode(&parent) != nil || parent.Metadata.Name == "" {
			return ""
		}
		return parent.Metadata.Namespace + "/" + parent.Metadata.Name
	}
	return ""
}

// respondDecodeError answers 400 for a request the hook cannot understand, 500 for anything else.
func respondDecodeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, hooksync.ErrBadRequest) {
		respondError(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	respondError(w, r, http.StatusInternalServerError, "internal_error", "decoding the request failed")
}

// preallocateLimit bounds the buffer allocated on a client's word (its Content-Length) before any
// byte arrives: a larger body grows the buffer as it is read, up to the --max-request-bytes cap.
const preallocateLimit = 1 << 20

// readAll reads the body into one buffer of the announced size when there is one (Metacontroller
// sends Content-Length), instead of growing a buffer from 512 bytes as io.ReadAll does. The body is
// still capped by limitBody.
func readAll(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	body := make([]byte, 0, min(r.ContentLength, preallocateLimit)+1)
	for {
		n, err := r.Body.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		if errors.Is(err, io.EOF) {
			return body, nil
		}
		if err != nil {
			return body, err
		}
		if len(body) == cap(body) {
			rest, err := io.ReadAll(r.Body)
			return append(body, rest...), err
		}
	}
}
