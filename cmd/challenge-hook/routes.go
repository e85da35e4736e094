package main

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
)

// credentials are the hook's two bearer tokens; each grants its own listener's routes only.
type credentials struct {
	hook   credential // Metacontroller's: /sync, /finalize, /customize, /prepull/sync, /prepull/customize
	verify credential // the platform's: /flags/verify
}

func newCredentials(hookToken, verifyToken []byte) credentials {
	return credentials{
		hook:   newCredential("Metacontroller's token (--token-file)", "/sync, /finalize, /customize, /prepull/sync and /prepull/customize", hookToken),
		verify: newCredential("the flag-verification token (--verify-token-file)", flagVerifyPath, verifyToken),
	}
}

// The hook's whole API surface, in one place: three listeners, each with its own routes, so that
// the hook's NetworkPolicy can admit Metacontroller to the first, the platform to the second and
// Prometheus to the third only. The first two have a credential of their own each; the third
// serves metrics alone, which hold no flag.

// prePullSyncPath and prePullCustomizePath are the pre-pull controller's hooks.
const (
	prePullSyncPath      = "/prepull/sync"
	prePullCustomizePath = "/prepull/customize"
)

// metricsPath is Prometheus' route, on the metrics listener alone.
const metricsPath = "/metrics"

// addHookRoutes are the main listener's (--listen): Metacontroller's hooks and the probes.
// There is no /flags/verify and no /metrics here, whatever the token.
func addHookRoutes(r chi.Router, cfg serverConfig, creds credentials, now clock, m *metrics, h *health) {
	r.NotFound(handleNotFound())
	r.MethodNotAllowed(handleMethodNotAllowed())
	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(h))
	r.Group(func(r chi.Router) {
		r.Use(requireBearerToken(creds.hook, creds.verify), requireJSON, limitConcurrency(cfg.maxConcurrentRequests, concurrencyWait, "requests", "--max-concurrent-requests"),
			limitBodies(cfg.maxRequestBytes, concurrencyWait, requestLimitFlag))
		r.Post("/sync", handleSync(cfg.hook.sync, now, m, false))
		r.Post("/finalize", handleSync(cfg.hook.sync, now, m, true))
		r.Post("/customize", handleCustomize(cfg.hook.sync))
		// The pre-pull controller's (manifests/components/prepull), on ChallengeDefinitions.
		r.Post(prePullSyncPath, handlePrePull(cfg.hook.sync))
		r.Post(prePullCustomizePath, handlePrePullCustomize(cfg.hook.sync))
	})
	r.HandleFunc(flagVerifyPath, handleElsewhere(flagVerifyPath, "flag verification has its own listener (--verify-listen) and token (--verify-token-file)"))
	r.HandleFunc(metricsPath, handleElsewhere(metricsPath, "metrics have their own listener (--metrics-listen)"))
}

// addVerifyRoutes are the flag-verification listener's (--verify-listen), served only with a
// verification token: POST /flags/verify and nothing else.
func addVerifyRoutes(r chi.Router, cfg serverConfig, creds credentials, m *metrics) {
	r.NotFound(handleOnlyRoute("POST " + flagVerifyPath))
	r.MethodNotAllowed(handleMethodNotAllowed())
	r.Group(func(r chi.Router) {
		r.Use(requireBearerToken(creds.verify, creds.hook), requireJSON,
			limitConcurrency(cfg.maxVerifications, concurrencyWait, "flag verifications", "--max-concurrent-verifications"),
			limitBody(flagVerifyMaxBytes))
		// Attribution's budget is real time's, whatever --clock says.
		budget := newAttributionBudget(cfg.maxAttributions, cfg.maxVerifications, cfg.attributionRate, concurrencyWait, time.Now, m)
		r.Post(flagVerifyPath, handleFlagVerify(cfg.hook.sync.FlagKey, budget))
	})
}

// addMetricsRoutes are the metrics listener's (--metrics-listen): GET /metrics and nothing else.
func addMetricsRoutes(r chi.Router, m *metrics) {
	r.NotFound(handleOnlyRoute("GET " + metricsPath))
	r.MethodNotAllowed(handleMethodNotAllowed())
	r.Method(http.MethodGet, metricsPath, m.handler())
}
