package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
	"github.com/challenge-hook/challenge-hook/internal/stamper"
)

// defaultStamperGateways is the headless Service of manifests/components/activity-stamper: every
// gateway Pod's address, ready or not, on its metrics port.
const defaultStamperGateways = "challenge-hook-tcp-gateway-activity.challenge-hook.svc:8082"

// activityStamperOptions are the stamper's flags.
type activityStamperOptions struct {
	cfg           stamper.Config
	namespaces    []string
	metricsListen string
	kubeconfig    string
	apiQPS        int
	logLevel      slog.Level
}

// runActivityStamper is `challenge-hook activity-stamper`: it reads the TCP gateways' activity and
// stamps the instances' Services with it (internal/stamper).
func runActivityStamper(ctx context.Context, args []string, stderr io.Writer) error {
	opts, err := parseActivityStamperFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("activity-stamper: %w", err)
	}
	return serveActivityStamper(ctx, opts, stderr)
}

// parseActivityStamperFlags reads the stamper's flags; it prints the usage on -h and then returns
// flag.ErrHelp.
func parseActivityStamperFlags(args []string, stderr io.Writer) (activityStamperOptions, error) {
	opts := activityStamperOptions{
		cfg:           stamper.Config{Gateways: defaultStamperGateways, Interval: 2 * time.Second, Timeout: 5 * time.Second},
		metricsListen: ":8082",
		apiQPS:        20,
		logLevel:      slog.LevelInfo,
	}
	fs := flag.NewFlagSet("activity-stamper", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flagfunc.Var(fs, "gateways", opts.cfg.Gateways, "`host:port` of the TCP gateways' activity: host resolves, at every poll, to each gateway Pod's address (the component's headless Service), port is their metrics port, which serves GET /activity",
		flagfunc.HostPort(&opts.cfg.Gateways))
	flagfunc.Var(fs, "interval", opts.cfg.Interval.String(), "poll every gateway every `duration`", flagfunc.PositiveDuration(&opts.cfg.Interval))
	flagfunc.Var(fs, "timeout", opts.cfg.Timeout.String(), "a gateway has this `duration` to answer a poll", flagfunc.PositiveDuration(&opts.cfg.Timeout))
	flagfunc.Var(fs, "namespaces", "", "comma-separated `names` of the namespaces of the instances, one watch each, where the stamper's RoleBindings are (default: every namespace, which needs a ClusterRoleBinding)",
		flagfunc.Namespaces(&opts.namespaces))
	fs.StringVar(&opts.metricsListen, "metrics-listen", opts.metricsListen, "`address` serving GET /metrics, /healthz and /readyz (ready once the watches of Services have listed)")
	fs.StringVar(&opts.kubeconfig, "kubeconfig", "", "`file` of the API server's address and credential (default: the Pod's ServiceAccount, in the cluster)")
	flagfunc.Var(fs, "api-qps", fmt.Sprint(opts.apiQPS), "`number` of API requests a second at most (bursts of twice as many): stamps are coalesced to one per instance per quarter of its idleTimeout, so 2,000 instances in use with a 15m idleTimeout write about 9 a second", flagfunc.PositiveInt(&opts.apiQPS))
	logLevelVar(fs, &opts.logLevel, "debug (every stamp), info, warn or error")
	if err := parseSubcommandFlags(fs, args, stderr, "Usage: challenge-hook activity-stamper [flags]\n\n"+
		"The activity stamper: polls every TCP gateway's GET /activity and writes what it saw, at most once per\n"+
		"instance per quarter of its idleTimeout, as the annotation "+stamper.AnnotationLastActivity+" of the instance's\n"+
		"Service, which the hook's idle clock reads. Needs services get, list, watch and patch in --namespaces, and nothing else."); err != nil {
		return activityStamperOptions{}, err
	}
	return opts, nil
}

// klogOnce sets klog's logger, which is the process's (see serveActivityStamper).
var klogOnce sync.Once

// serveActivityStamper runs the stamper and its metrics listener until ctx ends.
func serveActivityStamper(ctx context.Context, opts activityStamperOptions, stderr io.Writer) error {
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: opts.logLevel}))
	// client-go logs through klog (a watch that fails, say, for want of a right): the same JSON
	// lines. klog's logger is the process's, read by every informer without a lock: it is set once,
	// before the first informer starts (a test process runs several stampers, one after another).
	klogOnce.Do(func() { klog.SetSlogLogger(logger) })
	config, err := kubeConfig(opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("activity-stamper: %w", err)
	}
	config.UserAgent = "challenge-hook-activity-stamper"
	config.QPS, config.Burst = float32(opts.apiQPS), 2*opts.apiQPS
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("activity-stamper: the API client: %w", err)
	}
	kube, err := stamper.NewKube(client, opts.namespaces)
	if err != nil {
		return fmt.Errorf("activity-stamper: %w", err)
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s, err := stamper.New(opts.cfg, kube, logger, stamper.NewMetrics(registry), stamper.Options{})
	if err != nil {
		return fmt.Errorf("activity-stamper: %w", err)
	}
	metricsLn, err := net.Listen("tcp", opts.metricsListen)
	if err != nil {
		return fmt.Errorf("activity-stamper: --metrics-listen: %w", err)
	}
	var ready atomic.Bool
	defer serveMetrics(metricsLn, metricsAndProbes(registry, &ready), logger)()
	logger.Info("listening", slog.String("metrics_addr", metricsLn.Addr().String()), slog.String("gateways", opts.cfg.Gateways),
		slog.String("api_server", config.Host))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	synced := make(chan bool, 1)
	go func() { synced <- kube.Start(ctx) }()
	select {
	case ok := <-synced:
		if !ok {
			return nil // stopped before the watches listed
		}
	case <-ctx.Done():
		return nil
	case <-time.After(time.Minute):
		logger.Warn("the watches of Services have not listed in a minute: check the stamper's RoleBinding in each of --namespaces (services get, list, watch, patch) and that the API server is reachable",
			slog.Any("namespaces", opts.namespaces))
		if !<-synced {
			return nil
		}
	}
	ready.Store(true)
	stopReady := context.AfterFunc(ctx, func() { ready.Store(false) })
	defer stopReady()
	logger.Info("watching the instances' Services; polling the gateways", slog.Duration("interval", opts.cfg.Interval), slog.Any("namespaces", opts.namespaces))
	s.Run(ctx)
	return nil
}

// kubeConfig is the API server's address and credential: the kubeconfig file, or the Pod's
// ServiceAccount.
func kubeConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return config, nil
	}
	config, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("not in a Pod with a ServiceAccount token (give --kubeconfig outside the cluster): %w", err)
	}
	return config, nil
}
