// Command metacontroller-sim plays Metacontroller v4.17.2's part against a real API server for the
// project's end-to-end tests and benchmarks, with Metacontroller's command line
// (internal/mcsim/cluster). It is a test double: it ships in no image and no manifest, and the
// suites it runs say so. A real Metacontroller runs them instead when METACONTROLLER_BIN names one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/challenge-hook/challenge-hook/internal/mcsim/cluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "metacontroller-sim:", err)
		os.Exit(1)
	}
}

// options are the simulator's flags, under Metacontroller's names.
type options struct {
	kubeconfig        string
	discoveryInterval time.Duration
	logLevel          string
	metricsAddress    string
	healthAddress     string
	workers           int
	qps               float64
	burst             int
	targets           string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("metacontroller-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	fs.DurationVar(&o.discoveryInterval, "discovery-interval", 30*time.Second, "how often CompositeControllers and the API's resources are read again")
	fs.StringVar(&o.logLevel, "zap-log-level", "info", "info, debug, or a verbosity (4: one line per sync)")
	fs.StringVar(&o.metricsAddress, "metrics-address", "127.0.0.1:9999", "where /metrics is served")
	fs.StringVar(&o.healthAddress, "health-probe-bind-address", "127.0.0.1:8081", "where /healthz and /readyz are served")
	fs.IntVar(&o.workers, "workers", 5, "goroutines syncing parents, per controller")
	fs.Float64Var(&o.qps, "client-go-qps", 5, "API requests a second")
	fs.IntVar(&o.burst, "client-go-burst", 10, "API requests in a burst")
	fs.StringVar(&o.targets, "target-label-selector", "", "the CompositeControllers to run, by their labels")
	err := fs.Parse(args)
	return o, err
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	verbosity, err := parseLogLevel(o.logLevel)
	if err != nil {
		return err
	}
	selector, err := labels.Parse(o.targets)
	if err != nil {
		return fmt.Errorf("--target-label-selector: %w", err)
	}
	config, err := restConfig(o.kubeconfig, o.qps, o.burst)
	if err != nil {
		return err
	}
	log := cluster.NewLogger(stdout, verbosity)
	metrics := cluster.NewMetrics()
	var ready atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Room for both servers' errors and the simulator's: none of them blocks on a select gone.
	errs := make(chan error, 3)
	if err := serveHTTP(ctx, o.healthAddress, healthHandler(&ready), errs); err != nil {
		return err
	}
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	if err := serveHTTP(ctx, o.metricsAddress, metricsMux, errs); err != nil {
		return err
	}
	log.Info("Starting the simulator of Metacontroller v4.17.2 (a test double, not Metacontroller)",
		"workers", o.workers, "client-go-qps", o.qps, "client-go-burst", o.burst, "target-label-selector", o.targets)
	go func() {
		errs <- cluster.Run(ctx, cluster.Options{Config: config, Workers: o.workers, DiscoveryInterval: o.discoveryInterval,
			Controllers: selector, Log: log, Metrics: metrics, Ready: func() { ready.Store(true) }})
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		if errors.Is(err, http.ErrServerClosed) || ctx.Err() != nil {
			return nil
		}
		return err
	}
}

// healthHandler serves /healthz, and /readyz once ready is set (the CompositeControllers read).
func healthHandler(ready *atomic.Bool) http.Handler {
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "CompositeControllers not read yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	return health
}

// serveHTTP listens on addr at once (so that a taken address fails the start) and serves handler
// in the background until ctx ends; the server's end is sent to errs.
func serveHTTP(ctx context.Context, addr string, handler http.Handler, errs chan<- error) error {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { errs <- server.Serve(listener) }()
	go func() { <-ctx.Done(); _ = server.Close() }()
	return nil
}

// restConfig reaches the API server of kubeconfig at most qps requests a second (burst at once),
// as --client-go-qps and --client-go-burst limit Metacontroller's client.
func restConfig(kubeconfig string, qps float64, burst int) (*rest.Config, error) {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	config.QPS, config.Burst = float32(qps), burst
	config.UserAgent = "metacontroller-sim"
	return config, nil
}

// parseLogLevel reads --zap-log-level as Metacontroller does: a level name or a verbosity.
func parseLogLevel(s string) (int, error) {
	switch s {
	case "info":
		return 0, nil
	case "debug":
		return 1, nil
	case "error", "warn":
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("--zap-log-level %q: want info, debug, error or a verbosity >= 0", s)
	}
	return n, nil
}
