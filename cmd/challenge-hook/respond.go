package main

import (
	"net/http"
	"strconv"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Error string `json:"error"`
}

// respondJSON writes v as JSON with the hook's one encoder.
func respondJSON(w http.ResponseWriter, status int, v any) {
	body, err := hooksync.EncodeResponse(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":"encoding the response failed"}` + "\n")
	}
	respondBytes(w, status, body)
}

// respondBytes writes an already encoded JSON body.
func respondBytes(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// A known length spares net/http the chunked encoding of answers larger than its buffer.
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client went away; the request log records the short write
}

// respondError writes a JSON error. reason, when not empty, is counted in
// challenge_hook_sync_errors_total and logged with the request.
func respondError(w http.ResponseWriter, r *http.Request, status int, reason, message string) {
	if info := requestInfoFrom(r.Context()); info != nil {
		info.errorReason = reason
		info.errorMessage = message
	}
	respondJSON(w, status, errorBody{Error: message})
}
