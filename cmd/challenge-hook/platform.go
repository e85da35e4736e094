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
	"net/url"
	"os"
	"strings"
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

	// The player page's: served on pageListen only with a link key.
	pageListen          string
	linkKeyFile         string
	linkPreviousKeyFile string
	pageOrigin          string
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
		pageListen:    ":8081",
		apiQPS:        20,
		creates:       platform.RateLimit{Burst: 5, Every: 12 * time.Second},
		logLevel:      slog.LevelInfo,
	}
	fs := platformFlagSet(&opts)
	if err := parseSubcommandFlags(fs, args, stderr, "Usage: challenge-hook platform --rctf-token-file <file> --namespaces <names> [flags]\n\n"+
		"The platform component: serves rCTF v2's instancer contract (the provider instancers/docker) over Challenges,\n"+
		"so that rCTF starts, shows, extends and stops each team's instance with no code of the organizer's, and, with\n"+
		"--link-key-file, the player page, where a link a CTF platform signs shows a team its instance. Needs\n"+
		"challenges create, get, list, watch, patch and delete and challengedefinitions get, list and watch in --namespaces, and nothing else."); err != nil {
		return platformOptions{}, err
	}
	if err := opts.check(); err != nil {
		return platformOptions{}, err
	}
	return opts, nil
}

// platformFlagSet declares the component's flags into opts, whose values are their defaults.
func platformFlagSet(opts *platformOptions) *flag.FlagSet {
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
	flagfunc.Var(fs, "page-listen", opts.pageListen, "`host:port` serving the player page (/i/...), only with --link-key-file", flagfunc.HostPort(&opts.pageListen))
	fs.StringVar(&opts.linkKeyFile, "link-key-file", "", "`file` holding the key a CTF platform signs the player page's links with (HMAC-SHA256), at least 32 bytes; "+
		"a file that does not exist is logged and the page is not served (empty: no player page)")
	fs.StringVar(&opts.linkPreviousKeyFile, "link-previous-key-file", "", "`file` holding the previous link key, whose links and sessions still open the page during a rotation "+
		"(a file that does not exist is ignored)")
	flagfunc.Var(fs, "page-origin", "", "the player page's public `origin`, such as https://play.ctf.example.org: the only Origin its actions are taken from, "+
		"and Secure cookies when it is https (required with --link-key-file)", pageOrigin(&opts.pageOrigin))
	logLevelVar(fs, &opts.logLevel, "debug (every poll), info (every start, extension and deletion), warn or error")
	return fs
}

// check refuses options the component cannot run with.
func (opts platformOptions) check() error {
	switch {
	case opts.tokenFile == "":
		return errors.New("--rctf-token-file is required: rCTF's authToken, which opens every team's instances")
	case len(opts.namespaces) == 0:
		return errors.New("--namespaces is required: the component acts only in the event's namespaces")
	case opts.linkKeyFile == "" && (opts.pageOrigin != "" || opts.linkPreviousKeyFile != ""):
		return errors.New("--page-origin and --link-previous-key-file need --link-key-file: the player page is served only with its link key")
	case opts.linkKeyFile != "" && opts.pageOrigin == "":
		return errors.New("--page-origin is required with --link-key-file: the page takes actions only from its own origin, such as https://play.ctf.example.org")
	}
	if opts.linkKeyFile == "" {
		return nil
	}
	for _, other := range []struct{ name, addr string }{{"listen", opts.listen}, {"metrics-listen", opts.metricsListen}} {
		if _, port, _ := net.SplitHostPort(opts.pageListen); opts.pageListen == other.addr && port != "0" {
			return fmt.Errorf("--page-listen and --%s are both %s: the player page needs a listener of its own, which players reach through the Ingress", other.name, other.addr)
		}
	}
	return nil
}

// pageOrigin parses an origin: http or https, a host, and nothing after it (a trailing slash
// and the scheme's default port are dropped), as a browser sends it in Origin.
func pageOrigin(p *string) func(string) error {
	return func(v string) error {
		u, err := url.Parse(strings.TrimSuffix(v, "/"))
		switch {
		case err != nil:
			return err
		case u.Scheme != "https" && u.Scheme != "http":
			return fmt.Errorf("%q: expected an https (or http) origin such as https://play.ctf.example.org", v)
		case u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
			return fmt.Errorf("%q: expected scheme://host[:port] and nothing else, such as https://play.ctf.example.org", v)
		}
		host := strings.ToLower(u.Host)
		host = strings.TrimSuffix(host, map[string]string{"https": ":443", "http": ":80"}[u.Scheme])
		*p = u.Scheme + "://" + host
		return nil
	}
}

// servePlatform runs the component until ctx ends.
func servePlatform(ctx context.Context, opts platformOptions, stderr io.Writer) error {
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: opts.logLevel}))
	klogOnce.Do(func() { klog.SetSlogLogger(logger) }) // see serveActivityStamper
	c, err := newPlatformComponent(opts, logger)
	if err != nil {
		return fmt.Errorf("platform: %w", err)
	}
	lns, err := listenPlatform(opts, c.page != nil)
	if err != nil {
		return fmt.Errorf("platform: %w", err)
	}
	defer lns.close()
	var ready atomic.Bool
	defer serveMetrics(lns.metrics, metricsAndProbes(c.registry, &ready), logger)()
	attrs := []any{slog.String("addr", lns.rctf.Addr().String()), slog.String("metrics_addr", lns.metrics.Addr().String())}
	if lns.page != nil {
		attrs = append(attrs, slog.String("page_addr", lns.page.Addr().String()))
	}
	logger.Info("listening", append(attrs, slog.String("api_server", c.apiServer), slog.Any("namespaces", opts.namespaces))...)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !waitForWatches(ctx, c.kube, logger, opts.namespaces) {
		return nil
	}
	servers := []platformServer{{c.handler, lns.rctf, "serving rCTF's instancer contract at /v1/instances/"}}
	if lns.page != nil {
		servers = append(servers, platformServer{c.page, lns.page, "serving the player page at /i/"})
	}
	return servePlatformUntilDone(ctx, servers, &ready, logger)
}

// platformListeners are the component's listeners: rCTF's, the metrics', and the player page's
// (nil without the page).
type platformListeners struct {
	rctf, metrics, page net.Listener
}

func listenPlatform(opts platformOptions, page bool) (platformListeners, error) {
	var lns platformListeners
	var err error
	if lns.rctf, err = net.Listen("tcp", opts.listen); err != nil {
		return lns, fmt.Errorf("--listen: %w", err)
	}
	if lns.metrics, err = net.Listen("tcp", opts.metricsListen); err != nil {
		lns.close()
		return platformListeners{}, fmt.Errorf("--metrics-listen: %w", err)
	}
	if !page {
		return lns, nil
	}
	if lns.page, err = net.Listen("tcp", opts.pageListen); err != nil {
		lns.close()
		return platformListeners{}, fmt.Errorf("--page-listen: %w", err)
	}
	return lns, nil
}

func (lns platformListeners) close() {
	for _, ln := range []net.Listener{lns.rctf, lns.metrics, lns.page} {
		if ln != nil {
			ln.Close()
		}
	}
}

// platformServer is a handler served on a listener, and what the log says once it is.
type platformServer struct {
	handler http.Handler
	ln      net.Listener
	serving string
}

// servePlatformUntilDone serves each server until ctx ends (ready meanwhile), then lets the
// requests in flight on all of them finish, within 10 s.
func servePlatformUntilDone(ctx context.Context, servers []platformServer, ready *atomic.Bool, logger *slog.Logger) error {
	failed := make(chan error, len(servers))
	running := make([]*http.Server, len(servers))
	for i, s := range servers {
		running[i] = &http.Server{
			Handler:           s.handler,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		go func() { failed <- running[i].Serve(s.ln) }()
		logger.Info(s.serving, slog.String("addr", s.ln.Addr().String()))
	}
	ready.Store(true)
	select {
	case err := <-failed:
		for _, server := range running {
			server.Close()
		}
		return fmt.Errorf("platform: %w", err)
	case <-ctx.Done():
	}
	ready.Store(false)
	shutdown, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	done := make(chan error, len(running))
	for _, server := range running {
		go func() { done <- server.Shutdown(shutdown) }()
	}
	var errs error
	for range running {
		errs = errors.Join(errs, <-done)
	}
	return errs
}

// platformComponent is the component's parts, built from its flags: its watches, its handler of
// rCTF's contract, and its metrics (the requests' and the Challenge series).
type platformComponent struct {
	kube      *platform.Kube
	handler   http.Handler
	page      http.Handler // nil without a link key
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
	linkKeys, err := readLinkKeys(opts, logger)
	if err != nil {
		return platformComponent{}, err
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
	c := platformComponent{kube: kube, handler: platform.NewHandler(instancer, token, platform.NewMetrics(registry), logger), registry: registry, apiServer: config.Host}
	if linkKeys != nil {
		c.page = platform.NewPageHandler(instancer, kube, platform.PageOptions{Keys: linkKeys, Origin: opts.pageOrigin, Actions: platform.DefaultPageActions})
	}
	return c, nil
}

// readLinkKeys reads the player page's link keys, the current one first: none without
// --link-key-file, or when its file does not exist (in-cluster it comes from an optional Secret:
// the component serves rCTF all the same, and the page once the key exists and it restarts).
func readLinkKeys(opts platformOptions, logger *slog.Logger) ([][]byte, error) {
	if opts.linkKeyFile == "" {
		return nil, nil
	}
	var keys [][]byte
	for _, f := range []struct{ flag, file string }{{"link-key-file", opts.linkKeyFile}, {"link-previous-key-file", opts.linkPreviousKeyFile}} {
		if f.file == "" {
			continue
		}
		if _, err := os.Stat(f.file); errors.Is(err, os.ErrNotExist) {
			if f.flag == "link-key-file" {
				logger.Warn("link key file does not exist: no player page (nothing listens on --page-listen) until it exists and the component restarts",
					slog.String("link_key_file", f.file))
				return nil, nil
			}
			continue // no rotation under way
		}
		key, err := readSecretFile(f.flag, f.file)
		if err != nil {
			return nil, err
		}
		if len(key) < platform.MinLinkKeyBytes {
			return nil, fmt.Errorf("--%s: the key in %s is %d bytes, fewer than %d: whoever guesses it opens every team's page; "+
				"create one with: head -c 32 /dev/urandom | base64", f.flag, f.file, len(key), platform.MinLinkKeyBytes)
		}
		keys = append(keys, key)
	}
	return keys, nil
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
