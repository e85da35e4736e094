package platform

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// MaxRequestBytes bounds a request body: rCTF's largest, a create, holds the challenge's
// instancer configuration (a few KB with every default of the docker provider filled in) and
// its flags.
const MaxRequestBytes = 64 << 10

// NewHandler serves rCTF's instancer contract at /v1/instances/ (rCTF keeps the trailing slash;
// the path without it is served too): PUT creates, POST gets, PATCH extends, DELETE deletes, each
// only with the rCTF token.
func NewHandler(instancer *Instancer, rctfToken []byte, metrics *Metrics, logger *slog.Logger) http.Handler {
	h := &handler{instancer: instancer, tokenSum: sha256.Sum256(rctfToken), metrics: metrics, logger: logger}
	r := chi.NewRouter()
	for _, path := range []string{"/v1/instances/", "/v1/instances"} {
		for method := range kindOfMethod {
			r.Method(method, path, h)
		}
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		respond(w, http.StatusNotFound, errorBody{Kind: kindError, Message: "not found: rCTF's apiUrl is this component's address, and every request goes to /v1/instances/"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		respond(w, http.StatusMethodNotAllowed, errorBody{Kind: kindError, Message: "method " + r.Method + " not allowed: PUT, POST, PATCH or DELETE"})
	})
	return r
}

type handler struct {
	instancer *Instancer
	// tokenSum is the SHA-256 of the rCTF token: comparing fixed-size digests takes the same
	// time whatever the length of what a caller sends.
	tokenSum [sha256.Size]byte
	metrics  *Metrics
	logger   *slog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	kind := kindOfMethod[r.Method]
	f, answer, refused := h.serve(r)
	status := http.StatusOK
	var body any = answer
	result := answer.Status
	if refused != nil {
		status, body, result = refused.status, errorBody{Kind: kindError, Message: refused.message}, "error"
	}
	respond(w, status, body)
	elapsed := time.Since(start)
	h.metrics.observe(kind, result, elapsed)
	level := slog.LevelDebug
	if refused != nil || kind != kindGet {
		level = slog.LevelInfo
	}
	h.logger.Log(r.Context(), level, "request", slog.String("kind", kind), slog.String("team", f.TeamID),
		slog.String("challenge", f.ChallengeIntegrationID), slog.Int("status", status), slog.String("result", result),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000))
}

// serve decodes, authenticates and answers one request.
func (h *handler) serve(r *http.Request) (form, details, *instancerError) {
	var f form
	body := http.MaxBytesReader(nil, r.Body, MaxRequestBytes)
	if err := json.NewDecoder(body).Decode(&f); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return form{}, details{}, refuse(http.StatusRequestEntityTooLarge, "the request is larger than %d bytes", MaxRequestBytes)
		}
		return form{}, details{}, refuse(http.StatusBadRequest, "the body is no JSON object of rCTF's instancer contract: %v", err)
	}
	sum := sha256.Sum256([]byte(f.RCTFAuthToken))
	if subtle.ConstantTimeCompare(sum[:], h.tokenSum[:]) != 1 {
		return form{}, details{}, refuse(http.StatusUnauthorized, "wrong rctfAuthToken: rCTF's authToken must be the component's token (the Secret challenge-hook-rctf-token)")
	}
	if refused := checkForm(&f, r.Method); refused != nil {
		return f, details{}, refused
	}
	// A start, an extension or a deletion finishes even if rCTF stops waiting: half of one
	// would leave the team's instance as nobody asked.
	ctx := context.WithoutCancel(r.Context())
	var d details
	var refused *instancerError
	switch f.Kind {
	case kindGet:
		d, refused = h.instancer.Get(&f)
	case kindCreate:
		d, refused = h.instancer.Create(ctx, &f)
	case kindRenew:
		d, refused = h.instancer.Renew(ctx, &f)
	case kindDelete:
		d, refused = h.instancer.Delete(ctx, &f)
	}
	return f, d, refused
}

func respond(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(body)
}

// Metrics are the component's request counts and durations.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the component's metrics on registry.
func NewMetrics(registry prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "challenge_hook_platform_requests_total",
			Help: "rCTF instancer requests, by kind (instancerGetInstanceForm, ...) and result (the status answered, or error).",
		}, []string{"kind", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "challenge_hook_platform_request_duration_seconds",
			Help:    "Time to answer an rCTF instancer request, by kind.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"kind"}),
	}
	registry.MustRegister(m.requests, m.duration)
	return m
}

func (m *Metrics) observe(kind, result string, elapsed time.Duration) {
	if kind == "" {
		kind = "unknown"
	}
	m.requests.WithLabelValues(kind, result).Inc()
	m.duration.WithLabelValues(kind).Observe(elapsed.Seconds())
}
