package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
	"github.com/challenge-hook/challenge-hook/internal/platform"
)

// minRCTFTokenBytes is the least an rCTF token holds: whoever has it starts and deletes every
// team's instances.
const minRCTFTokenBytes = 32

// platformOptions are the platform component's flags.
type platformOptions struct {
	listen        string
	metricsListen string
	tokenFile     string
	namespaces    []string
	kubeconfig    string
	apiQPS        int
	creates       platform.RateLimit
	logLevel      slog.Level
}

// runPlatform is `challenge-hook platform`: rCTF v2's instancer contract over Challenges
// (internal/platform).
func runPlatform(ctx context.Context, args []string, stderr io.Writer) error {
	opts, err := parsePlatformFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("platform: %w", err)
	}
	return servePlatform(ctx, opts, stderr)
}

// parsePlatformFlags reads the component's flags; it prints the usage on -h and then returns
// flag.ErrHelp.
func parsePlatformFlags(args []string, stderr io.Writer) (platformOptions, error) {
	opts := platformOptions{
		listen:        ":8080",
		metricsListen: ":8082",
		apiQPS:        20,
		creates:       platform.RateLimit{Burst: 5, Every: 12 * time.Second},
		logLevel:      slog.LevelInfo,
	}
	fs := flag.NewFlagSet("platform", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flagfunc.Var(fs, "listen", opts.listen, "`host:port` serving rCTF's instancer contract, {apiUrl}/v1/instances/", flagfunc.HostPort(&opts.listen))
	fs.StringVar(&opts.metricsListen, "metrics-listen", opts.metricsListen, "`address` serving GET /metrics, /healthz and /readyz (ready once the watches have listed)")
	fs.StringVar(&opts.tokenFile, "rctf-token-file", "", "`file` holding the token rCTF sends as rctfAuthToken (its instancer's authToken), at least 32 bytes (required)")
	flagfunc.Var(fs, "namespaces", "", "comma-separated `names` of the event's namespaces, where ChallengeDefinitions are marked for rCTF and their Challenges are created; one watch each, where the component's RoleBindings are (required)",
		flagfunc.Namespaces(&opts.namespaces))
	fs.StringVar(&opts.kubeconfig, "kubeconfig", "", "`file` of the API server's address and credential (default: the Pod's ServiceAccount, in the cluster)")
	flagfunc.Var(fs, "api-qps", fmt.Sprint(opts.apiQPS), "`number` of API requests a second at most (bursts of twice as many): only starts, extensions and deletions reach the API server; polls are answered from the watches", flagfunc.PositiveInt(&opts.apiQPS))
	flagfunc.Var(fs, "team-starts", fmt.Sprint(opts.creates.Burst), "`number` of instances a team may create at once, then one per --team-start-interval", flagfunc.PositiveInt(&opts.creates.Burst))
	flagfunc.Var(fs, "team-start-interval", opts.creates.Every.String(), "a team's starts refill one every `duration`", flagfunc.PositiveDuration(&opts.creates.Every))
	logLevelVar(fs, &opts.logLevel, "debug (every poll), info (every start, extension and deletion), warn or error")
	if err := parseSubcommandFlags(fs, args, stderr, "Usage: challenge-hook platform --rctf-token-file <file> --namespaces <names> [flags]\n\n"+
		"The platform component: serves rCTF v2's instancer contract (the provider instancers/docker) over Challenges,\n"+
		"so that rCTF starts, shows, extends and stops each team's instance with no code of the organizer's. Needs\n"+
		"challenges create, get, list, watch, patch and delete and challengedefinitions get, list and watch in --namespaces, and nothing else."); err != nil {
		return platformOptions{}, err
	}
	if opts.tokenFile == "" {
		return platformOptions{}, errors.New("--rctf-token-file is required: rCTF's authToken, which opens every team's instances")
	}
	if len(opts.namespaces) == 0 {
		return platformOptions{}, errors.New("--namespaces is required: the component acts only in the event's namespaces")
	}
	return opts, nil
}

// servePlatform runs the component until ctx ends.
func servePlatform(ctx context.Context, opts platformOptions, stderr io.Writer) error {
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: opts.logLevel}))
	klogOnce.Do(func() { klog.SetSlogLogger(logger) }) // see serveActivityStamper
	c, err := newPlatformComponent(opts, logger)
	if err != nil {
		return fmt.Errorf("platform: %w", err)
	}
	ln, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return fmt.Errorf("platform: --listen: %w", err)
	}
	defer ln.Close()
	metricsLn, err := net.Listen("tcp", opts.metricsListen)
	if err != nil {
		return fmt.Errorf("platform: --metrics-listen: %w", err)
	}
	var ready atomic.Bool
	defer serveMetrics(metricsLn, metricsAndProbes(c.registry, &ready), logger)()
	logger.Info("listening", slog.String("addr", ln.Addr().String()), slog.String("metrics_addr", metricsLn.Addr().String()),
		slog.String("api_server", c.apiServer), slog.Any("namespaces", opts.namespaces))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !waitForWatches(ctx, c.kube, logger, opts.namespaces) {
		return nil
	}
	server := &http.Server{
		Handler:           c.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	ready.Store(true)
	logger.Info("serving rCTF's instancer contract at /v1/instances/")
	select {
	case err := <-served:
		return fmt.Errorf("platform: %w", err)
	case <-ctx.Done():
	}
	ready.Store(false)
	shutdown, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	return server.Shutdown(shutdown)
}

// platformComponent is the component's parts, built from its flags: its watches, its handler of
// rCTF's contract, and its metrics (the requests' and the Challenge series).
type platformComponent struct {
	kube      *platform.Kube
	handler   http.Handler
	registry  *prometheus.Registry
	apiServer string
}

func newPlatformComponent(opts platformOptions, logger *slog.Logger) (platformComponent, error) {
	token, err := readSecretFile("rctf-token-file", opts.tokenFile)
	if err != nil {
		return platformComponent{}, err
	}
	if len(token) < minRCTFTokenBytes {
		return platformComponent{}, fmt.Errorf("--rctf-token-file: the token in %s is %d bytes, fewer than %d: whoever guesses it starts and deletes every team's instances; "+
			"create one with: head -c 32 /dev/urandom | base64", opts.tokenFile, len(token), minRCTFTokenBytes)
	}
	config, err := kubeConfig(opts.kubeconfig)
	if err != nil {
		return platformComponent{}, err
	}
	config.UserAgent = "challenge-hook-platform"
	config.QPS, config.Burst = float32(opts.apiQPS), 2*opts.apiQPS
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return platformComponent{}, fmt.Errorf("the API client: %w", err)
	}
	kube, err := platform.NewKube(client, opts.namespaces)
	if err != nil {
		return platformComponent{}, err
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registry.MustRegister(platform.NewChallengeCollector(kube))
	instancer := platform.NewInstancer(kube, time.Now, logger, opts.creates)
	handler := platform.NewHandler(instancer, token, platform.NewMetrics(registry), logger)
	return platformComponent{kube: kube, handler: handler, registry: registry, apiServer: config.Host}, nil
}

// waitForWatches waits until the watches have listed (false: ctx ended first), and says what to
// check when that takes a minute.
func waitForWatches(ctx context.Context, kube *platform.Kube, logger *slog.Logger, namespaces []string) bool {
	synced := make(chan bool, 1)
	go func() { synced <- kube.Start(ctx) }()
	select {
	case ok := <-synced:
		return ok
	case <-ctx.Done():
		return false
	case <-time.After(time.Minute):
		logger.Warn("the watches of Challenges and ChallengeDefinitions have not listed in a minute: check the component's RoleBinding in each of --namespaces and that the API server is reachable",
			slog.Any("namespaces", namespaces))
		return <-synced
	}
}
