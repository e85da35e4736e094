package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-chi/chi/v5"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// newServer builds the hook's HTTP handler: middleware, then every route. cfg.hook.sync.FlagKey must
// already be loaded; token empty means no authentication.
func newServer(cfg serverConfig, token []byte, logger *slog.Logger, now clock, m *metrics, h *health) http.Handler {
	r := chi.NewRouter()
	r.Use(logRequests(logger, m), recoverPanics(logger))
	addRoutes(r, cfg, token, now, m, h)
	return r
}

// app is the server as run builds it from its configuration; tests build it the same way.
type app struct {
	cfg     serverConfig
	logger  *slog.Logger
	handler http.Handler
	health  *health
	certs   *certReloader // nil without TLS
}

// newApp reads the files the configuration names and wires the server. Logs go to logOut as JSON.
func newApp(cfg serverConfig, logOut io.Writer) (*app, error) {
	logger := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: cfg.logLevel}))
	if file := cfg.hook.flagKeyFile; file != "" {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			// In-cluster the key comes from an optional Secret: without it the hook still serves, and
			// Challenges that ask for a dynamic flag say FlagKeyMissing until the key exists and the
			// hook restarts.
			logger.Warn("flag key file does not exist: dynamic flags are refused until it exists and the hook restarts",
				slog.String("flag_key_file", file))
			cfg.hook.flagKeyFile = ""
		}
	}
	if err := cfg.hook.loadFlagKey(); err != nil {
		return nil, err
	}
	var token []byte
	if cfg.tokenFile != "" {
		var err error
		if token, err = readSecretFile("token-file", cfg.tokenFile); err != nil {
			return nil, err
		}
	}
	warnUnsetNetworks(logger, cfg.hook.sync)
	now := clock(time.Now)
	if pinned := cfg.clock; !pinned.IsZero() {
		// Loud, because a production hook on a frozen clock never expires an instance.
		logger.Warn("clock pinned by --clock: for demos and golden replays only; instances never expire on a frozen clock",
			slog.String("clock", pinned.Format(time.RFC3339)))
		now = func() time.Time { return pinned }
	}
	a := &app{cfg: cfg, logger: logger, health: &health{}}
	if cfg.tlsCertFile != "" {
		certs, err := newCertReloader(cfg.tlsCertFile, cfg.tlsKeyFile, logger)
		if err != nil {
			return nil, err
		}
		a.certs = certs
	}
	a.handler = newServer(cfg, token, logger, now, newMetrics(), a.health)
	return a, nil
}

// serve serves on ln until ctx is cancelled, then shuts down gracefully: /readyz fails at once, the
// listener stays open for --shutdown-delay so load balancers notice, then in-flight requests finish
// within what is left of --shutdown-timeout.
func (a *app) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: a.cfg.readHeaderTimeout,
		ReadTimeout:       a.cfg.readTimeout,
		WriteTimeout:      a.cfg.writeTimeout,
		IdleTimeout:       a.cfg.idleTimeout,
		ErrorLog:          slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
	}
	scheme := "http"
	if a.certs != nil {
		srv.TLSConfig = a.certs.tlsConfig()
		scheme = "https"
	}
	serveErr := make(chan error, 1)
	go func() {
		if a.certs != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	a.health.ready.Store(true)
	a.logger.Info("listening", slog.String("addr", ln.Addr().String()), slog.String("scheme", scheme),
		slog.Bool("token_required", a.cfg.tokenFile != ""), slog.Bool("flag_key_loaded", len(a.cfg.hook.sync.FlagKey) > 0))

	select {
	case err := <-serveErr:
		a.health.ready.Store(false)
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}

	a.health.ready.Store(false)
	deadline := time.Now().Add(a.cfg.shutdownTimeout)
	a.logger.Info("shutting down", slog.String("delay", a.cfg.shutdownDelay.String()), slog.String("timeout", a.cfg.shutdownTimeout.String()))
	time.Sleep(a.cfg.shutdownDelay)

	shutdownCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close() // the deadline passed: drop what is left
		return fmt.Errorf("graceful shutdown within %s: %w", a.cfg.shutdownTimeout, err)
	}
	if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	a.logger.Info("stopped")
	return nil
}

// warnUnsetNetworks says at start-up what the hook assumes when the cluster's Pod or Service CIDRs
// are not given, and why that matters: each instance's NetworkPolicy is built from them.
func warnUnsetNetworks(logger *slog.Logger, cfg hooksync.Config) {
	if len(cfg.PodCIDRs) == 0 {
		logger.Warn("--pod-cidrs is not set: every private and CGNAT range stands in for the Pod networks, so NodePort and LoadBalancer exposures "+
			"refuse players on private networks too, and admit Pods whose network lies outside those ranges; set --pod-cidrs to the cluster's Pod CIDRs",
			slog.String("assumed", "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16"))
	}
	if len(cfg.ServiceCIDRs) == 0 {
		logger.Warn("--service-cidrs is not set: no Service network is blocked as an egress destination besides the ranges always blocked "+
			"(private, CGNAT, link-local and the other special-purpose ones), which hold the usual 10.96.0.0/12; a Service network outside them "+
			"is reachable from instances with egress: true; set --service-cidrs to the cluster's Service CIDRs",
			slog.String("assumed", "no Service CIDRs"))
	}
}
