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
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
	"github.com/challenge-hook/challenge-hook/internal/tcpgateway"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// defaultGatewayKeyFile is where the tcp-gateway component mounts the gateway key.
const defaultGatewayKeyFile = "/var/run/secrets/challenge-hook/tcp-gateway/key"

// runTCPGateway serves the TCP gateway: `challenge-hook tcp-gateway --key-file <file>`.
func runTCPGateway(ctx context.Context, args []string, stderr io.Writer) error {
	opts, err := parseTCPGatewayFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tcp-gateway: %w", err)
	}
	return serveTCPGateway(ctx, opts, stderr)
}

// tcpGatewayOptions are the gateway's flags.
type tcpGatewayOptions struct {
	cfg                   tcpgateway.Config
	listen, metricsListen string
	websocketListen       string // "": no WebSocket listener
	logLevel              slog.Level
}

// parseTCPGatewayFlags reads the gateway's flags and its key; it prints the usage on -h and then
// returns flag.ErrHelp.
func parseTCPGatewayFlags(args []string, stderr io.Writer) (tcpGatewayOptions, error) {
	cfg := tcpgateway.Defaults()
	listen, metricsListen, keyFile, websocketListen := ":1337", ":8082", "", ""
	logLevel := slog.LevelInfo
	fs := flag.NewFlagSet("tcp-gateway", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&listen, "listen", listen, "`address` players connect to")
	fs.StringVar(&metricsListen, "metrics-listen", metricsListen, "`address` serving GET /metrics, /healthz and /readyz")
	fs.StringVar(&websocketListen, "websocket-listen", websocketListen, "`address` players connect to with WebSocket (wsrx, websocat, a browser): GET /ws/<token> or /ws?token=<token> upgrades to the token's instance, OPTIONS or GET without upgrade answers 204 or 404 (empty: no WebSocket listener; the component: :8081)")
	fs.Func("trusted-proxies", "`CIDRs` (comma-separated, IPv4 or IPv6) of the proxies in front of the WebSocket listener, e.g. the Ingress controller's Pod network: from them, the player is the rightmost X-Forwarded-For address outside these CIDRs, for the limits per source and the PROXY header; from any other peer the header is ignored (empty: never read)",
		func(v string) error { return parseTrustedProxies(v, &cfg.TrustedProxies) })
	var serviceCIDRs []string
	flagfunc.Var(fs, "service-cidrs", "", "the cluster's Service CIDRs, e.g. 10.96.0.0/12 (the API server's --service-cluster-ip-range, as the hook's --service-cidrs; required): the only destinations the gateway dials, whatever a token names",
		flagfunc.CIDRs(&serviceCIDRs, "the cluster's Service CIDRs"))
	fs.StringVar(&keyFile, "key-file", keyFile, "`file` holding the gateway key, the hook's (required; in the component: "+defaultGatewayKeyFile+")")
	flagfunc.Var(fs, "token-timeout", cfg.TokenTimeout.String(), "a player has this `duration` from connecting to send the token line", flagfunc.PositiveDuration(&cfg.TokenTimeout))
	flagfunc.Var(fs, "max-line-bytes", fmt.Sprint(cfg.MaxLineBytes), "longest token or proof-of-work line, in `bytes` (without its end)", flagfunc.PositiveInt(&cfg.MaxLineBytes))
	flagfunc.Var(fs, "max-connections", fmt.Sprint(cfg.MaxConnections), "`number` of connections open at once, however far they got; at it, a newcomer takes the slot of a connection waiting for its token (of the source holding the most waiting beyond the instances its valid tokens reached in the last one to two minutes first: each distinct instance, up to 64, covers one of its waiting connections however often its token was presented; of sources holding as many beyond them, one in debt; of equals, the oldest), and is refused only when every connection is spliced; lowered, with a warning, to what the open-file limit carries", flagfunc.PositiveInt(&cfg.MaxConnections))
	flagfunc.Var(fs, "max-connections-per-token", fmt.Sprint(cfg.MaxConnectionsPerToken), "`number` of connections open at once to one instance port", flagfunc.PositiveInt(&cfg.MaxConnectionsPerToken))
	flagfunc.Var(fs, "max-bad-tokens-per-minute", fmt.Sprint(cfg.MaxBadTokensPerMinute), "`number` of connections a source address (IPv6: its /56) may end in a minute without a valid token (bad tokens, silence, early closes) and more than its valid tokens, before it is in debt (both counts halved each minute): then its bad tokens are answered after a second and, when the gateway is full, its connections waiting for a token give their slot before those of sources holding as many beyond the instances they reached; a valid token is served whatever its address did", flagfunc.PositiveInt(&cfg.MaxBadTokensPerMinute))
	flagfunc.Var(fs, "max-sources", fmt.Sprint(cfg.MaxSources), "`number` of source addresses whose debts and instances reached the gateway tracks (about 130 bytes each, and 8 bytes per instance reached, at most 650); when full, new sources go untracked", flagfunc.PositiveInt(&cfg.MaxSources))
	flagfunc.Var(fs, "proof-of-work-timeout", cfg.ProofOfWorkTimeout.String(), "a player has this `duration` to answer a proof of work (the python solver takes about a minute at 26 bits)", flagfunc.PositiveDuration(&cfg.ProofOfWorkTimeout))
	flagfunc.Var(fs, "dial-timeout", cfg.DialTimeout.String(), "an instance has this `duration` to accept a connection", flagfunc.PositiveDuration(&cfg.DialTimeout))
	flagfunc.Var(fs, "idle-timeout", cfg.IdleTimeout.String(), "close a spliced connection that moved no byte either way for this `duration` (closed within 1.25 times it)", flagfunc.PositiveDuration(&cfg.IdleTimeout))
	flagfunc.Var(fs, "shutdown-delay", cfg.ShutdownDelay.String(), "on SIGTERM, fail /readyz at once but go on accepting for this `duration`, so that the load balancer stops sending new players first (the component: 15s)", flagfunc.NonNegativeDuration(&cfg.ShutdownDelay))
	flagfunc.Var(fs, "drain-timeout", cfg.DrainTimeout.String(), "after the shutdown delay, stop accepting and let connections go on this `duration`, then tell those left to reconnect and close them (keep shutdown delay + drain timeout under the Pod's terminationGracePeriodSeconds)", flagfunc.NonNegativeDuration(&cfg.DrainTimeout))
	logLevelVar(fs, &logLevel, "debug (every refusal), info (every spliced connection's end), warn or error")
	if err := parseSubcommandFlags(fs, args, stderr, "Usage: challenge-hook tcp-gateway --key-file <file> [flags]\n\n"+
		"The TCP gateway: players connect with nc, send their instance's token at the prompt \""+tcpgateway.Prompt+"\"\n"+
		"and are spliced to their instance. Holds no Kubernetes credential: the token says where to go."); err != nil {
		return tcpGatewayOptions{}, err
	}
	if keyFile == "" {
		return tcpGatewayOptions{}, errors.New("--key-file is required: the gateway key, the same Secret the hook mints tokens with (in the component: " + defaultGatewayKeyFile + ")")
	}
	if len(serviceCIDRs) == 0 {
		return tcpGatewayOptions{}, errors.New("--service-cidrs is required: the cluster's Service CIDRs (the API server's --service-cluster-ip-range), the only destinations the gateway dials")
	}
	for _, cidr := range serviceCIDRs {
		cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, netip.MustParsePrefix(cidr))
	}
	key, err := readGatewayKey(keyFile)
	if err != nil {
		return tcpGatewayOptions{}, err
	}
	cfg.Key = key
	return tcpGatewayOptions{cfg: cfg, listen: listen, metricsListen: metricsListen, websocketListen: websocketListen, logLevel: logLevel}, nil
}

// parseTrustedProxies reads --trusted-proxies: CIDRs without host bits.
func parseTrustedProxies(v string, proxies *[]netip.Prefix) error {
	*proxies = nil
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(item)
		if err != nil {
			return fmt.Errorf("%q: expected CIDRs such as 10.244.0.0/16,fd00:10:244::/56", item)
		}
		if prefix.Masked() != prefix {
			return fmt.Errorf("%q has host bits set: did you mean %s?", item, prefix.Masked())
		}
		*proxies = append(*proxies, prefix)
	}
	return nil
}

// serveTCPGateway runs the gateway and its metrics listener until ctx ends.
func serveTCPGateway(ctx context.Context, opts tcpGatewayOptions, stderr io.Writer) error {
	cfg, listen, metricsListen := opts.cfg, opts.listen, opts.metricsListen
	// The line of each spliced connection waits up to tcpgateway.LogFlushDelay in a buffer, so that
	// it costs no write(2) of its own; warnings and errors are written at once, and what is held
	// on the way out.
	logWriter := tcpgateway.NewLogWriter(stderr)
	defer logWriter.Flush()
	logger := slog.New(tcpgateway.NewFlushingHandler(slog.NewJSONHandler(logWriter, &slog.HandlerOptions{Level: opts.logLevel}), logWriter, slog.LevelWarn))
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var openFiles syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &openFiles); err != nil {
		return fmt.Errorf("tcp-gateway: the open-file limit: %w", err)
	}
	maxConnections, err := fitMaxConnections(cfg.MaxConnections, uint64(openFiles.Cur), logger)
	if err != nil {
		return fmt.Errorf("tcp-gateway: %w", err)
	}
	cfg.MaxConnections = maxConnections
	gateway, err := tcpgateway.New(cfg, logger, registry)
	if err != nil {
		return fmt.Errorf("tcp-gateway: %w", err)
	}
	listeners, err := openGatewayListeners(listen, opts.websocketListen, metricsListen)
	if err != nil {
		return fmt.Errorf("tcp-gateway: %w", err)
	}
	var ready atomic.Bool
	ready.Store(true)
	defer serveMetrics(listeners.metrics, gatewayMetricsHandler(registry, &ready, gateway.Activity), logger)()
	stopReady := context.AfterFunc(ctx, func() { ready.Store(false) })
	defer stopReady()
	listeners.log(logger)
	logWriter.Flush()
	if err := listeners.serve(ctx, gateway); err != nil {
		return fmt.Errorf("tcp-gateway: %w", err)
	}
	return nil
}

// gatewayListeners are the gateway's listeners: the players' (TCP, and WebSocket when asked for)
// and the metrics'.
type gatewayListeners struct {
	tcp, websocket, metrics net.Listener // websocket nil: none
}

// openGatewayListeners listens on the addresses of the flags (websocketListen "": none); on an
// error, it closes what it opened.
func openGatewayListeners(listen, websocketListen, metricsListen string) (l gatewayListeners, err error) {
	defer func() {
		if err != nil {
			for _, ln := range []net.Listener{l.tcp, l.websocket, l.metrics} {
				if ln != nil {
					ln.Close()
				}
			}
		}
	}()
	if l.tcp, err = tcpgateway.Listen(listen); err != nil {
		return l, fmt.Errorf("--listen: %w", err)
	}
	if websocketListen != "" {
		// The same keep-alive as the TCP listener's: a player gone without a word frees its slot.
		if l.websocket, err = tcpgateway.Listen(websocketListen); err != nil {
			return l, fmt.Errorf("--websocket-listen: %w", err)
		}
	}
	if l.metrics, err = net.Listen("tcp", metricsListen); err != nil {
		return l, fmt.Errorf("--metrics-listen: %w", err)
	}
	return l, nil
}

// log logs the addresses listened on.
func (l gatewayListeners) log(logger *slog.Logger) {
	attrs := []any{slog.String("addr", l.tcp.Addr().String()), slog.String("metrics_addr", l.metrics.Addr().String())}
	if l.websocket != nil {
		attrs = append(attrs, slog.String("websocket_addr", l.websocket.Addr().String()))
	}
	logger.Info("listening", attrs...)
}

// serve runs the gateway on its players' listeners until ctx ends and each drained. Either
// failing ends the other: a gateway half serving would fail its players on one path while its
// readiness probe says ready.
func (l gatewayListeners) serve(ctx context.Context, gateway *tcpgateway.Gateway) error {
	if l.websocket == nil {
		return gateway.Serve(ctx, l.tcp)
	}
	group, ctx := errgroup.WithContext(ctx)
	group.Go(func() error { return gateway.Serve(ctx, l.tcp) })
	group.Go(func() error { return gateway.ServeWebSocket(ctx, l.websocket) })
	return group.Wait()
}

// fitMaxConnections lowers maxConnections, with a warning, to what an open-file limit carries:
// past it the gateway would run out of descriptors below its own cap and turn players away for
// the wrong reason. (Go raised the soft limit to the hard one at start-up.)
func fitMaxConnections(maxConnections int, openFiles uint64, logger *slog.Logger) (int, error) {
	if openFiles >= tcpgateway.Descriptors(maxConnections) {
		return maxConnections, nil
	}
	fits := tcpgateway.MaxConnectionsWithin(openFiles)
	if fits < 1 {
		return 0, fmt.Errorf("the open-file limit %d carries no connection (%d descriptors for 1): raise it (ulimit -n, or the container runtime's)", openFiles, tcpgateway.Descriptors(1))
	}
	logger.Warn("--max-connections lowered to what the open-file limit carries: raise the limit (ulimit -n, or the container runtime's) to keep the flag's value",
		slog.Int("max_connections", maxConnections), slog.Int("lowered_to", fits),
		slog.Uint64("open_file_limit", openFiles), slog.Uint64("needed", tcpgateway.Descriptors(maxConnections)))
	return fits, nil
}

// readGatewayKey reads the gateway key: the file's bytes without surrounding white space, as
// the hook reads it.
func readGatewayKey(path string) ([]byte, error) {
	key, err := readSecretFile("key-file", path)
	if err != nil {
		return nil, err
	}
	if len(key) < tcptoken.MinKeyBytes {
		return nil, fmt.Errorf("--key-file: the key in %s is %d bytes, fewer than the %d required: whoever guesses it mints tokens to every instance; "+
			"create one with: head -c 32 /dev/urandom | base64", path, len(key), tcptoken.MinKeyBytes)
	}
	return key, nil
}

// gatewayMetricsHandler serves the metrics and probes and the instances' activity, which the
// activity stamper reads (see tcpgateway.ActivityReport).
func gatewayMetricsHandler(registry *prometheus.Registry, ready *atomic.Bool, activity func(after time.Time) []tcpgateway.ServiceActivity) http.Handler {
	mux := metricsAndProbes(registry, ready)
	mux.HandleFunc("GET /activity", func(w http.ResponseWriter, r *http.Request) {
		var after time.Time
		if since := r.URL.Query().Get("since"); since != "" {
			var err error
			if after, err = time.Parse(time.RFC3339Nano, since); err != nil {
				respondJSON(w, http.StatusBadRequest, errorBody{Error: fmt.Sprintf("since=%q: not an RFC 3339 time (e.g. 2026-11-27T13:40:01.5Z)", since)})
				return
			}
		}
		respondJSON(w, http.StatusOK, tcpgateway.ActivityReport{Services: activity(after)})
	})
	return mux
}
