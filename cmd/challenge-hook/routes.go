package main

import "github.com/go-chi/chi/v5"

// addRoutes is the server's whole API surface, in one place.
func addRoutes(r chi.Router, cfg serverConfig, token []byte, now clock, m *metrics, h *health) {
	r.NotFound(handleNotFound())
	r.MethodNotAllowed(handleMethodNotAllowed())
	r.Get("/healthz", handleHealthz())
	r.Get("/readyz", handleReadyz(h))
	r.Method("GET", "/metrics", m.handler())
	r.Group(func(r chi.Router) {
		r.Use(requireBearerToken(token), requireJSON, limitBody(cfg.maxRequestBytes))
		r.Post("/sync", handleSync(cfg.hook.sync, now, m, false))
		r.Post("/finalize", handleSync(cfg.hook.sync, now, m, true))
		r.Post("/customize", handleCustomize(cfg.hook.sync))
	})
	// Flag verification answers whether a guess is right, so it exists only behind a token: without
	// one, the hook's NetworkPolicy admitting Metacontroller alone would be its only protection.
	if len(token) == 0 {
		r.Post(flagVerifyPath, handleFlagVerifyDisabled())
		return
	}
	r.Group(func(r chi.Router) {
		r.Use(requireBearerToken(token), requireJSON, limitBody(flagVerifyMaxBytes))
		r.Post(flagVerifyPath, handleFlagVerify(cfg.hook.sync.FlagKey))
	})
}
