package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// What the subcommands that run beside the hook (tcp-gateway, activity-stamper) share.

// serveMetrics serves a subcommand's metrics listener ln with handler (GET /metrics, /healthz,
// /readyz), until the returned function closes it.
func serveMetrics(ln net.Listener, handler http.Handler, logger *slog.Logger) (closeServer func()) {
	server := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go server.Serve(ln)
	return func() { server.Close() }
}

// metricsAndProbes serves a subcommand's GET /metrics, /healthz and /readyz (which fails once
// ready is false: shutdown began, or not ready yet).
func metricsAndProbes(registry *prometheus.Registry, ready *atomic.Bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		respondJSON(w, http.StatusOK, statusBody{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !ready.Load() {
			respondJSON(w, http.StatusServiceUnavailable, statusBody{Status: "not ready"})
			return
		}
		respondJSON(w, http.StatusOK, statusBody{Status: "ok"})
	})
	return mux
}

// logLevelVar is a subcommand's --log-level flag: the level of its JSON logs, described by levels
// (what each level logs), default info.
func logLevelVar(fs *flag.FlagSet, level *slog.Level, levels string) {
	fs.Func("log-level", "`level` of the JSON logs: "+levels+" (default info)", func(v string) error {
		l, ok := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}[strings.ToLower(v)]
		if !ok {
			return errors.New("expected debug, info, warn or error")
		}
		*level = l
		return nil
	})
}

// parseSubcommandFlags parses a subcommand's flags and refuses arguments; on -h it prints usage
// and the flags, and returns flag.ErrHelp.
func parseSubcommandFlags(fs *flag.FlagSet, args []string, stderr io.Writer, usage string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, usage+"\n\nFlags:")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return err
	}
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
