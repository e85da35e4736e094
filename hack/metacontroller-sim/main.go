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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("metacontroller-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	discoveryInterval := fs.Duration("discovery-interval", 30*time.Second, "how often CompositeControllers and the API's resources are read again")
	logLevel := fs.String("zap-log-level", "info", "info, debug, or a verbosity (4: one line per sync)")
	metricsAddress := fs.String("metrics-address", "127.0.0.1:9999", "where /metrics is served")
	healthAddress := fs.String("health-probe-bind-address", "127.0.0.1:8081", "where /healthz and /readyz are served")
	workers := fs.Int("workers", 5, "goroutines syncing parents, per controller")
	qps := fs.Float64("client-go-qps", 5, "API requests a second")
	burst := fs.Int("client-go-burst", 10, "API requests in a burst")
	targets := fs.String("target-label-selector", "", "the CompositeControllers to run, by their labels")
	if err := fs.Parse(args); err != nil {
		return err
	}
	verbosity, err := parseLogLevel(*logLevel)
	if err != nil {
		return err
	}
	selector, err := labels.Parse(*targets)
	if err != nil {
		return fmt.Errorf("--target-label-selector: %w", err)
	}
	config, err := restConfig(*kubeconfig, *qps, *burst)
	if err != nil {
		return err
	}
	log := cluster.NewLogger(stdout, verbosity)
	metrics := cluster.NewMetrics()
	var ready atomic.Bool
	health := http.NewServeMux()
	health.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	health.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "CompositeControllers not read yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 3)
	for _, s := range []struct {
		addr    string
		handler http.Handler
	}{{*healthAddress, health}, {*metricsAddress, metricsMux}} {
		listener, err := net.Listen("tcp", s.addr)
		if err != nil {
			return err
		}
		server := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
		go func() { errs <- server.Serve(listener) }()
		go func() { <-ctx.Done(); _ = server.Close() }()
	}
	log.Info("Starting the simulator of Metacontroller v4.17.2 (a test double, not Metacontroller)",
		"workers", *workers, "client-go-qps", *qps, "client-go-burst", *burst, "target-label-selector", *targets)
	go func() {
		errs <- cluster.Run(ctx, cluster.Options{Config: config, Workers: *workers, DiscoveryInterval: *discoveryInterval,
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
