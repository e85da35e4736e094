package main

import "github.com/go-chi/chi/v5"

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

// The hook's whole API surface, in one place: two listeners, each with its own routes and its own
// credential, so that the hook's NetworkPolicy can admit Metacontroller to the first and the
// platform to the second only.

// prePullSyncPath and prePullCustomizePath are the pre-pull controller's hooks.
const (
	prePullSyncPath      = "/prepull/sync"
	prePullCustomizePath = "/prepull/customize"
)

// addHookRoutes are the main listener's (--listen): Metacontroller's hooks, probes and metrics.
// There is no /flags/verify here, whatever the token.
func addHookRoutes(r chi.Router, cfg serverConfig, creds credentials, now clock, m *metrics, h *health) {
	r.NotFound(handleNotFound())
	r.MethodNotAllowed(handleMethodNotAllowed())
	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(h))
	r.Method("GET", "/metrics", m.handler())
	r.Group(func(r chi.Router) {
		r.Use(requireBearerToken(creds.hook, creds.verify), requireJSON, limitConcurrency(cfg.maxConcurrentRequests, concurrencyWait), limitBody(cfg.maxRequestBytes))
		r.Post("/sync", handleSync(cfg.hook.sync, now, m, false))
		r.Post("/finalize", handleSync(cfg.hook.sync, now, m, true))
		r.Post("/customize", handleCustomize(cfg.hook.sync))
		// The pre-pull controller's (manifests/components/prepull), on ChallengeDefinitions.
		r.Post(prePullSyncPath, handlePrePull(cfg.hook.sync))
		r.Post(prePullCustomizePath, handlePrePullCustomize(cfg.hook.sync))
	})
	r.HandleFunc(flagVerifyPath, handleFlagVerifyElsewhere())
}

// addVerifyRoutes are the flag-verification listener's (--verify-listen), served only with a
// verification token: POST /flags/verify and nothing else.
func addVerifyRoutes(r chi.Router, cfg serverConfig, creds credentials) {
	r.NotFound(handleVerifyNotFound())
	r.MethodNotAllowed(handleMethodNotAllowed())
	r.Group(func(r chi.Router) {
		r.Use(requireBearerToken(creds.verify, creds.hook), requireJSON, limitBody(flagVerifyMaxBytes))
		r.Post(flagVerifyPath, handleFlagVerify(cfg.hook.sync.FlagKey))
	})
}
