package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/net/netutil"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// newServer builds the main listener's HTTP handler: middleware, then every route.
// cfg.hook.sync.FlagKey must already be loaded; a credential not set means no authentication
// (for Metacontroller's, only with --insecure-serve-without-token).
func newServer(cfg serverConfig, creds credentials, logger *slog.Logger, now clock, m *metrics, h *health) http.Handler {
	r := chi.NewRouter()
	r.Use(logRequests(logger, m), recoverPanics(logger))
	addHookRoutes(r, cfg, creds, now, m, h)
	return r
}

// newVerifyServer builds the flag-verification listener's HTTP handler; creds.verify must be set.
func newVerifyServer(cfg serverConfig, creds credentials, logger *slog.Logger, m *metrics) http.Handler {
	r := chi.NewRouter()
	r.Use(logRequests(logger, m), recoverPanics(logger))
	addVerifyRoutes(r, cfg, creds, m)
	return r
}

// newMetricsServer builds the metrics listener's HTTP handler. Its requests are counted too.
func newMetricsServer(logger *slog.Logger, m *metrics) http.Handler {
	r := chi.NewRouter()
	r.Use(logRequests(logger, m), recoverPanics(logger))
	addMetricsRoutes(r, m)
	return r
}

// app is the server as run builds it from its configuration; tests build it the same way.
type app struct {
	cfg            serverConfig
	logger         *slog.Logger
	handler        http.Handler // the main listener's
	verifyHandler  http.Handler // the flag-verification listener's; nil without a verification token
	metricsHandler http.Handler // the metrics listener's
	health         *health
	certs          *certReloader // nil without TLS
}

// newApp reads the files the configuration names and wires the server. Logs go to logOut as JSON.
func newApp(cfg serverConfig, logOut io.Writer) (*app, error) {
	if err := checkTokenRequired(cfg); err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: cfg.logLevel}))
	dropMissingOptionalFiles(&cfg, logger)
	if err := cfg.hook.loadFlagKey(); err != nil {
		return nil, err
	}
	if err := cfg.hook.loadTCPGatewayKey(); err != nil {
		return nil, err
	}
	warnHalfConfiguredTCPGateway(logger, cfg.hook.sync.TCPGateway)
	hookToken, verifyToken, err := readTokens(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.insecureNoToken {
		logger.Warn("serving /sync, /finalize, /customize, /prepull/sync and /prepull/customize without a token (--"+insecureNoTokenFlag+"): whoever reaches --listen "+
			"mints every team's flag; for a local demo only, never in a cluster", slog.String("listen", cfg.listen))
	}
	warnUnsetNetworks(logger, cfg.hook.sync)
	now := startupClock(cfg, logger)
	a := &app{cfg: cfg, logger: logger, health: &health{}}
	if cfg.tlsCertFile != "" {
		certs, err := newCertReloader(cfg.tlsCertFile, cfg.tlsKeyFile, logger)
		if err != nil {
			return nil, err
		}
		a.certs = certs
	}
	creds := newCredentials(hookToken, verifyToken)
	m := newMetrics()
	a.handler = newServer(cfg, creds, logger, now, m, a.health)
	a.metricsHandler = newMetricsServer(logger, m)
	if creds.verify.set {
		a.verifyHandler = newVerifyServer(cfg, creds, logger, m)
	}
	return a, nil
}

// dropMissingOptionalFiles forgets the flag key, TCP gateway key and verification token files that
// do not exist, with a warning: in-cluster they come from optional Secrets, and the hook serves
// without them.
func dropMissingOptionalFiles(cfg *serverConfig, logger *slog.Logger) {
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
	if file := cfg.hook.tcpGatewayKeyFile; file != "" {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			// As the flag key: the hook serves without it, and Challenges that expose a port as
			// TCP say TCPGatewayNotConfigured until the key exists and the hook restarts.
			logger.Warn("TCP gateway key file does not exist: TCP exposures are refused until it exists and the hook restarts",
				slog.String("tcp_gateway_key_file", file))
			cfg.hook.tcpGatewayKeyFile = ""
		}
	}
	if file := cfg.verifyTokenFile; file != "" {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			// Also an optional Secret in-cluster: the hook serves Metacontroller all the same, and
			// flag verification (its listener) starts with the hook once the token exists.
			logger.Warn("verification token file does not exist: no flag verification (nothing listens on --verify-listen) until it exists and the hook restarts",
				slog.String("verify_token_file", file))
			cfg.verifyTokenFile = ""
		}
	}
}

// warnHalfConfiguredTCPGateway warns when only one of the TCP gateway's address and key is set:
// TCP exposures are then refused.
func warnHalfConfiguredTCPGateway(logger *slog.Logger, gateway hooksync.TCPGateway) {
	if (gateway.Host == "") != (len(gateway.Key) == 0) {
		logger.Warn("the TCP gateway is half configured: TCP exposures are refused (TCPGatewayNotConfigured) until both --tcp-gateway-address and --tcp-gateway-key-file are set",
			slog.Bool("tcp_gateway_address_set", gateway.Host != ""), slog.Bool("tcp_gateway_key_loaded", len(gateway.Key) > 0))
	}
}

// readTokens reads Metacontroller's token and the verification token, where their files are set,
// and refuses one token for both.
func readTokens(cfg serverConfig) (hookToken, verifyToken []byte, err error) {
	if cfg.tokenFile != "" {
		if hookToken, err = readSecretFile("token-file", cfg.tokenFile); err != nil {
			return nil, nil, err
		}
	}
	if cfg.verifyTokenFile != "" {
		if verifyToken, err = readSecretFile("verify-token-file", cfg.verifyTokenFile); err != nil {
			return nil, nil, err
		}
		if bytes.Equal(verifyToken, hookToken) {
			return nil, nil, fmt.Errorf("--verify-token-file %s holds the same token as --token-file %s: each credential must grant only what it names "+
				"(whoever verifies flags must not be able to call /sync and read every flag in its answers); generate a separate one",
				cfg.verifyTokenFile, cfg.tokenFile)
		}
	}
	return hookToken, verifyToken, nil
}

// startupClock is the real clock, or the one --clock pins (with a warning).
func startupClock(cfg serverConfig, logger *slog.Logger) clock {
	pinned := cfg.clock
	if pinned.IsZero() {
		return time.Now
	}
	// Loud, because a production hook on a frozen clock never expires an instance.
	logger.Warn("clock pinned by --clock: for demos and golden replays only; instances never expire on a frozen clock",
		slog.String("clock", pinned.Format(time.RFC3339)))
	return func() time.Time { return pinned }
}

// serve serves the main listener ln, the metrics listener metricsLn and, with a verification
// token, the flag-verification listener verifyLn (nil otherwise) until ctx is cancelled, then
// shuts them down gracefully: /readyz fails at once, the listeners stay open for
// --shutdown-delay so load balancers notice, then in-flight requests finish within what is left
// of --shutdown-timeout.
//
// Every listener is bounded before any credential is checked: at most --max-connections open
// connections (more wait in the kernel's backlog), --max-header-bytes of headers read within
// --read-header-timeout, so that callers without a token cannot grow the hook's memory.
func (a *app) serve(ctx context.Context, ln, verifyLn, metricsLn net.Listener) error {
	listeners := []servedListener{{ln, a.handler}, {metricsLn, a.metricsHandler}}
	if verifyLn != nil {
		listeners = append(listeners, servedListener{verifyLn, a.verifyHandler})
	}
	servers, serveErr := a.startServers(listeners)
	a.health.ready.Store(true)
	a.logListening(ln, verifyLn, metricsLn)

	select {
	case err := <-serveErr:
		a.health.ready.Store(false)
		for _, srv := range servers {
			_ = srv.Close()
		}
		return err
	case <-ctx.Done():
	}
	return a.shutdown(servers, serveErr)
}

// servedListener is a listener and the handler that serves it.
type servedListener struct {
	ln      net.Listener
	handler http.Handler
}

// startServers serves each listener with the configured bounds, in the background. Each server's
// end is sent on the returned channel.
func (a *app) startServers(listeners []servedListener) ([]*http.Server, <-chan error) {
	servers := make([]*http.Server, len(listeners))
	serveErr := make(chan error, len(listeners))
	for i, l := range listeners {
		srv := &http.Server{
			Handler:           l.handler,
			MaxHeaderBytes:    int(a.cfg.maxHeaderBytes),
			ReadHeaderTimeout: a.cfg.readHeaderTimeout,
			ReadTimeout:       a.cfg.readTimeout,
			WriteTimeout:      a.cfg.writeTimeout,
			IdleTimeout:       a.cfg.idleTimeout,
			ErrorLog:          slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
		}
		if a.certs != nil {
			srv.TLSConfig = a.certs.tlsConfig()
		}
		servers[i] = srv
		// netutil.LimitListener (golang.org/x/net, the Go team's) holds Accept while the listener
		// has its number of connections open, and frees a slot when one closes.
		limited := netutil.LimitListener(l.ln, a.cfg.maxConnections)
		go func() {
			var err error
			if a.certs != nil {
				err = srv.ServeTLS(limited, "", "")
			} else {
				err = srv.Serve(limited)
			}
			serveErr <- fmt.Errorf("serving on %s: %w", l.ln.Addr(), err)
		}()
	}
	return servers, serveErr
}

// logListening logs where the hook serves and what it serves with (the tests read this line).
func (a *app) logListening(ln, verifyLn, metricsLn net.Listener) {
	scheme := "http"
	if a.certs != nil {
		scheme = "https"
	}
	attrs := []any{slog.String("addr", ln.Addr().String()), slog.String("metrics_addr", metricsLn.Addr().String()), slog.String("scheme", scheme),
		slog.Bool("token_required", a.cfg.tokenFile != ""), slog.Bool("flag_key_loaded", len(a.cfg.hook.sync.FlagKey) > 0),
		slog.Bool("flag_verification", verifyLn != nil), slog.Bool("tcp_gateway", a.cfg.hook.sync.TCPGateway.Configured())}
	if verifyLn != nil {
		attrs = append(attrs, slog.String("verify_addr", verifyLn.Addr().String()))
	}
	a.logger.Info("listening", attrs...)
}

// shutdown stops the servers gracefully: /readyz already fails; they keep serving for
// --shutdown-delay, then in-flight requests finish within what is left of --shutdown-timeout.
func (a *app) shutdown(servers []*http.Server, serveErr <-chan error) error {
	a.health.ready.Store(false)
	deadline := time.Now().Add(a.cfg.shutdownTimeout)
	a.logger.Info("shutting down", slog.String("delay", a.cfg.shutdownDelay.String()), slog.String("timeout", a.cfg.shutdownTimeout.String()))
	time.Sleep(a.cfg.shutdownDelay)

	shutdownCtx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	shutdownErrs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() { shutdownErrs[i] = srv.Shutdown(shutdownCtx) })
	}
	wg.Wait()
	if err := errors.Join(shutdownErrs...); err != nil {
		for _, srv := range servers {
			_ = srv.Close() // the deadline passed: drop what is left
		}
		return fmt.Errorf("graceful shutdown within %s: %w", a.cfg.shutdownTimeout, err)
	}
	for range servers {
		if err := <-serveErr; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
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
