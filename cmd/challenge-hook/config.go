package main

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// envPrefix is prepended to a flag's name in upper snake case to find its environment fallback:
// --flag-key-file falls back to CHALLENGE_HOOK_FLAG_KEY_FILE.
const envPrefix = "CHALLENGE_HOOK_"

// envName is the environment variable a flag falls back to.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// hookConfig is the configuration shared by the server and the render subcommand: everything a
// sync answer depends on besides the request and the clock.
type hookConfig struct {
	sync              hooksync.Config
	flagKeyFile       string
	tcpGatewayKeyFile string
}

// serverConfig is the server's whole configuration, as parsed from flags and the environment.
type serverConfig struct {
	hook                  hookConfig
	listen                string
	clock                 time.Time // zero: the real clock
	tokenFile             string
	insecureNoToken       bool   // serve Metacontroller's routes without a token: demos only
	verifyListen          string // flag verification's own listener, served only with verifyTokenFile
	verifyTokenFile       string
	metricsListen         string // GET /metrics alone
	tlsCertFile           string
	tlsKeyFile            string
	maxRequestBytes       int64
	maxConcurrentRequests int
	maxVerifications      int // flag verifications answered at once
	maxAttributions       int // of them, with candidates, decoded and checked at once
	attributionRate       int // candidates attribution may check a second
	maxHeaderBytes        int64
	maxConnections        int // per listener
	readHeaderTimeout     time.Duration
	readTimeout           time.Duration
	writeTimeout          time.Duration
	idleTimeout           time.Duration
	shutdownDelay         time.Duration
	shutdownTimeout       time.Duration
	logLevel              slog.Level
}

// defaultVerifyListen is the flag-verification listener's address, when a verification token is set.
const defaultVerifyListen = ":8081"

// defaultMetricsListen is the metrics listener's address: a port of its own, so that the hook's
// NetworkPolicy can admit Prometheus there and nowhere else (the main port mints flags).
const defaultMetricsListen = ":8082"

// insecureNoTokenFlag serves Metacontroller's routes without a token. Its name says what it does,
// so that it stands out in a Deployment; the shipped manifests never set it (manifests_test.go).
const insecureNoTokenFlag = "insecure-serve-without-token"

// defaultMaxHeaderBytes bounds a request's headers, read before any credential is checked.
// Metacontroller sends five short headers (about 300 bytes with its token), Prometheus and the
// kubelet fewer: 16 KiB is 50 times that, and what nginx's default buffers hold. net/http reads
// 4 KiB more before it answers 431.
const defaultMaxHeaderBytes = 16 << 10

// defaultMaxConnections bounds each listener's open connections; more wait in the kernel's
// backlog until one closes. Sized in docs/benchmarks.md ("The hook's request limits").
const defaultMaxConnections = 64

// defaultMaxVerifications bounds the flag verifications answered at once: each is an HMAC over
// three short strings (microseconds), or one per candidate owner too (2.5 ms and half a megabyte
// at MaxFlagCandidates, BenchmarkFlagVerify), and a body of at most flagVerifyMaxBytes.
const defaultMaxVerifications = 16

// defaultMaxAttributions and defaultAttributionRate are flag attribution's budget
// (attributionBudget): one at a time, leaving Metacontroller's syncs the other cores, and 50,000
// candidates a second (ten verifications among 5,000 owners, about 5% of one core), measured
// against syncs in docs/benchmarks.md ("Flag verification").
const (
	defaultMaxAttributions = 1
	defaultAttributionRate = 50000
)

// defaultMaxRequestBytes bounds the bodies of Metacontroller's requests held at once, and so the
// largest one: a Challenge bloated to the API server's object size limit (1.5 MiB, etcd's) in its
// own sync requests, where with --max-instances-per-owner it travels twice (the parent, and among
// the owner's related Challenges; TestBloatedChallengeStaysWithinReach in e2e), or two such among
// another's related Challenges; 40 times the largest request a maximal template makes; sized in
// docs/benchmarks.md ("The hook's request limits"). A larger request gets 413.
const defaultMaxRequestBytes = 4 << 20

// defaultMaxConcurrentRequests bounds the sync, finalize and customize requests answered at once,
// within the Deployment's memory limit (TestMaximalConcurrentLoadFitsTheMemoryLimit; figures in
// docs/benchmarks.md, "The hook's request limits").
const defaultMaxConcurrentRequests = 8

// configFlags registers flags on a FlagSet and remembers which of them fall back to the environment.
type configFlags struct {
	fs      *flag.FlagSet
	withEnv []string
}

func newConfigFlags(name string) *configFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, usage is printed on -h only
	return &configFlags{fs: fs}
}

// env gives every flag that register adds an environment fallback; the usage text names the variable.
func (c *configFlags) env(register func(fs *flag.FlagSet)) {
	known := map[string]bool{}
	c.fs.VisitAll(func(f *flag.Flag) { known[f.Name] = true })
	register(c.fs)
	c.fs.VisitAll(func(f *flag.Flag) {
		if !known[f.Name] {
			// The variable goes before a default the usage names (a flag.Func flag's), as the flag
			// package prints its own defaults after the usage: one order for every flag.
			usage, def, hasDefault := strings.Cut(f.Usage, " (default ")
			f.Usage = fmt.Sprintf("%s (env %s)", usage, envName(f.Name))
			if hasDefault {
				f.Usage += " (default " + def
			}
			c.withEnv = append(c.withEnv, f.Name)
		}
	})
}

// parse applies the environment fallbacks, then the arguments: a flag wins over its environment
// variable, which wins over the default.
func (c *configFlags) parse(args []string, getenv func(string) string) error {
	for _, name := range c.withEnv {
		value := getenv(envName(name))
		if value == "" {
			continue
		}
		if err := c.fs.Set(name, value); err != nil {
			return fmt.Errorf("invalid value %q for %s (environment fallback of --%s): %w", value, envName(name), name, err)
		}
	}
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	return nil
}

// usage writes the flag defaults, for -h.
func (c *configFlags) usage(w io.Writer, synopsis string) {
	fmt.Fprintf(w, "Usage: %s\n\nFlags (a flag wins over its environment variable, which wins over the default):\n", synopsis)
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(io.Discard)
}

// addHookFlags registers the flags that shape sync answers, shared by the server and render: the
// sync configuration's own (sync.Config.RegisterFlags) and the flag key's file.
func addHookFlags(c *configFlags, cfg *hookConfig) {
	cfg.sync = hooksync.DefaultConfig()
	c.env(func(fs *flag.FlagSet) {
		cfg.sync.RegisterFlags(fs)
		fs.StringVar(&cfg.flagKeyFile, "flag-key-file", "", "`file` holding the HMAC key of dynamic flags (read once at start-up; empty: the server refuses dynamic flags, render prints a placeholder)")
		fs.StringVar(&cfg.tcpGatewayKeyFile, "tcp-gateway-key-file", "", "`file` holding the TCP gateway's key, at least 32 bytes and not the flag key's, with which the hook mints the tokens of TCP exposures (read once at start-up; the gateway holds the same key; empty: TCP exposures are refused, render prints a placeholder token)")
	})
}

// parseServerConfig parses the server's flags (args without the program name).
func parseServerConfig(args []string, getenv func(string) string) (serverConfig, *configFlags, error) {
	cfg := defaultServerConfig()
	c := newConfigFlags("challenge-hook")
	c.env(func(fs *flag.FlagSet) {
		flagfunc.Var(fs, "listen", cfg.listen, "address to serve on, `host:port`", flagfunc.HostPort(&cfg.listen))
		fs.Func("clock", "pin the clock to this RFC 3339 `time`, for demos and golden replays only: on a frozen clock no instance ever expires; logs a warning at start-up (empty: the real clock)",
			flagfunc.Time(&cfg.clock))
	})
	addHookFlags(c, &cfg.hook)
	c.env(cfg.registerServerFlags)
	if err := c.parse(args, getenv); err != nil {
		return cfg, c, err
	}
	if c.fs.NArg() > 0 {
		return cfg, c, fmt.Errorf("unexpected argument %q: the server takes flags only (the subcommands are render, flag and wait-for-policy)", c.fs.Arg(0))
	}
	verifyListenSet := false
	c.fs.Visit(func(f *flag.Flag) { verifyListenSet = verifyListenSet || f.Name == "verify-listen" }) // the environment's too
	return cfg, c, cfg.check(verifyListenSet)
}

// defaultServerConfig is the server's configuration without flags.
func defaultServerConfig() serverConfig {
	return serverConfig{
		listen:                ":8080",
		verifyListen:          defaultVerifyListen,
		metricsListen:         defaultMetricsListen,
		maxRequestBytes:       defaultMaxRequestBytes,
		maxConcurrentRequests: defaultMaxConcurrentRequests,
		maxVerifications:      defaultMaxVerifications,
		maxAttributions:       defaultMaxAttributions,
		attributionRate:       defaultAttributionRate,
		maxHeaderBytes:        defaultMaxHeaderBytes,
		maxConnections:        defaultMaxConnections,
		readHeaderTimeout:     5 * time.Second,
		readTimeout:           30 * time.Second,
		writeTimeout:          30 * time.Second,
		idleTimeout:           120 * time.Second,
		shutdownTimeout:       25 * time.Second,
		logLevel:              slog.LevelInfo,
	}
}

// registerServerFlags registers the server's own flags, besides --listen, --clock and the hook's.
func (cfg *serverConfig) registerServerFlags(fs *flag.FlagSet) {
	fs.StringVar(&cfg.tokenFile, "token-file", "", "`file` holding the bearer token Metacontroller sends to /sync, /finalize, /customize, /prepull/sync and /prepull/customize, required unless --"+insecureNoTokenFlag+"; it never verifies flags")
	fs.BoolVar(&cfg.insecureNoToken, insecureNoTokenFlag, false, "serve /sync, /finalize, /customize, /prepull/sync and /prepull/customize to any caller without a token: their answers hold every team's flag, so for a local demo only, never in a cluster")
	flagfunc.Var(fs, "verify-listen", cfg.verifyListen, "address of the flag-verification listener, `host:port`: POST /flags/verify only, served only with --verify-token-file", flagfunc.HostPort(&cfg.verifyListen))
	flagfunc.Var(fs, "metrics-listen", cfg.metricsListen, "address of the metrics listener, `host:port`: GET /metrics only, for Prometheus", flagfunc.HostPort(&cfg.metricsListen))
	fs.StringVar(&cfg.verifyTokenFile, "verify-token-file", "", "`file` holding the bearer token the platform sends to POST /flags/verify on --verify-listen; it opens nothing else, and must differ from --token-file's (empty: no flag verification)")
	fs.StringVar(&cfg.tlsCertFile, "tls-cert-file", "", "TLS certificate `file` (PEM), reloaded when it changes; needs --tls-key-file")
	fs.StringVar(&cfg.tlsKeyFile, "tls-key-file", "", "TLS private key `file` (PEM), reloaded when it changes; needs --tls-cert-file")
	flagfunc.Var(fs, "max-request-bytes", strconv.FormatInt(cfg.maxRequestBytes, 10), "request bodies held at once, and so the largest one accepted (`size`), in bytes or with a binary suffix such as 8Mi; raise the memory limit with it",
		flagfunc.ByteSize(&cfg.maxRequestBytes))
	flagfunc.Var(fs, "max-concurrent-requests", strconv.Itoa(cfg.maxConcurrentRequests), "`number` of sync, finalize and customize requests answered at once; more wait up to 1s, then get 429 with Retry-After",
		flagfunc.PositiveInt(&cfg.maxConcurrentRequests))
	flagfunc.Var(fs, "max-concurrent-verifications", strconv.Itoa(cfg.maxVerifications), "`number` of flag verifications answered at once; more wait up to 1s, then get 429 with Retry-After",
		flagfunc.PositiveInt(&cfg.maxVerifications))
	flagfunc.Var(fs, "max-concurrent-attributions", strconv.Itoa(cfg.maxAttributions), "`number` of flag verifications with candidates decoded and checked at once, within --max-concurrent-verifications; more wait up to 1s, then get 429 with Retry-After",
		flagfunc.PositiveInt(&cfg.maxAttributions))
	flagfunc.Var(fs, "attribution-candidates-per-second", strconv.Itoa(cfg.attributionRate), fmt.Sprintf("`number` of candidate owners flag verifications may check a second, from a bucket of one second's worth (at least %d); a verification that finds it short waits for it in its slot up to 1s, else gets 429 with Retry-After", hooksync.MaxFlagCandidates),
		flagfunc.PositiveInt(&cfg.attributionRate))
	flagfunc.Var(fs, "max-header-bytes", strconv.FormatInt(cfg.maxHeaderBytes, 10), "largest request header block accepted (`size`), in bytes or with a binary suffix such as 16Ki, on every listener; larger ones get 431",
		flagfunc.ByteSize(&cfg.maxHeaderBytes))
	flagfunc.Var(fs, "max-connections", strconv.Itoa(cfg.maxConnections), "`number` of connections each listener holds open at once; more wait for one to close",
		flagfunc.PositiveInt(&cfg.maxConnections))
	flagfunc.Var(fs, "read-header-timeout", cfg.readHeaderTimeout.String(), "`duration` allowed to read request headers", flagfunc.PositiveDuration(&cfg.readHeaderTimeout))
	flagfunc.Var(fs, "read-timeout", cfg.readTimeout.String(), "`duration` allowed to read a whole request", flagfunc.PositiveDuration(&cfg.readTimeout))
	flagfunc.Var(fs, "write-timeout", cfg.writeTimeout.String(), "`duration` allowed from the end of the request headers to the end of the response", flagfunc.PositiveDuration(&cfg.writeTimeout))
	flagfunc.Var(fs, "idle-timeout", cfg.idleTimeout.String(), "how long (`duration`) an idle keep-alive connection stays open", flagfunc.PositiveDuration(&cfg.idleTimeout))
	flagfunc.Var(fs, "shutdown-delay", "", "on SIGTERM, keep serving (with /readyz failing) this `duration` before closing the listener, so load balancers stop sending traffic",
		flagfunc.NonNegativeDuration(&cfg.shutdownDelay))
	flagfunc.Var(fs, "shutdown-timeout", cfg.shutdownTimeout.String(), "on SIGTERM, the longest `duration` until exit, shutdown delay and in-flight requests included", flagfunc.PositiveDuration(&cfg.shutdownTimeout))
	flagfunc.Var(fs, "log-level", strings.ToLower(cfg.logLevel.String()), "`level`: debug, info, warn or error", func(v string) error {
		level, ok := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}[strings.ToLower(v)]
		if !ok {
			return errors.New("expected debug, info, warn or error")
		}
		cfg.logLevel = level
		return nil
	})
}

// check refuses a configuration the server cannot serve safely or at all; verifyListenSet says
// whether --verify-listen was given (its default is not checked against --listen).
func (cfg *serverConfig) check(verifyListenSet bool) error {
	if (cfg.tlsCertFile == "") != (cfg.tlsKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file (CHALLENGE_HOOK_TLS_CERT_FILE, CHALLENGE_HOOK_TLS_KEY_FILE) must be set together")
	}
	if err := checkNetworkFlags(cfg.hook.sync); err != nil {
		return err
	}
	if gate := cfg.hook.sync.PolicyGate; gate.Enabled && gate.Image == "" {
		return errors.New("--policy-gate-image (CHALLENGE_HOOK_POLICY_GATE_IMAGE) is empty: every instance Pod starts with the policy gate, an init container of this hook's image " +
			"that holds the challenge's containers until the Pod's NetworkPolicy is enforced; set it to this hook's image, or pass --policy-gate=false")
	}
	if err := cfg.hook.sync.CheckTrust(); err != nil {
		return err
	}
	if err := cfg.checkListeners(verifyListenSet); err != nil {
		return err
	}
	if cfg.shutdownDelay >= cfg.shutdownTimeout {
		return fmt.Errorf("--shutdown-delay (%s) must be shorter than --shutdown-timeout (%s), which includes it", cfg.shutdownDelay, cfg.shutdownTimeout)
	}
	return nil
}

// checkListeners refuses flag verification or metrics on another listener's address: each has
// its own, so that the hook's NetworkPolicy admits each caller to its own alone.
func (cfg *serverConfig) checkListeners(verifyListenSet bool) error {
	if cfg.verifyTokenFile == "" && verifyListenSet {
		return fmt.Errorf("--verify-listen %s is set but --verify-token-file is not: flag verification is served only with its own token; "+
			"pass --verify-token-file, or drop --verify-listen to serve no flag verification", cfg.verifyListen)
	}
	if _, port, _ := net.SplitHostPort(cfg.listen); cfg.verifyTokenFile != "" && cfg.verifyListen == cfg.listen && port != "0" {
		return fmt.Errorf("--verify-listen and --listen are both %s: flag verification needs a listener of its own, so that the hook's NetworkPolicy can admit the platform to it alone", cfg.listen)
	}
	for _, other := range []struct{ name, addr string }{{"listen", cfg.listen}, {"verify-listen", cfg.verifyListen}} {
		if other.name == "verify-listen" && cfg.verifyTokenFile == "" {
			continue // nothing listens there
		}
		if _, port, _ := net.SplitHostPort(cfg.metricsListen); cfg.metricsListen == other.addr && port != "0" {
			return fmt.Errorf("--metrics-listen and --%s are both %s: metrics need a listener of their own, so that the hook's NetworkPolicy can admit Prometheus to it alone", other.name, other.addr)
		}
	}
	return nil
}

// checkTokenRequired refuses to serve Metacontroller's routes without its token, unless
// --insecure-serve-without-token says so: their answers hold every team's flag.
func checkTokenRequired(cfg serverConfig) error {
	if cfg.tokenFile == "" && !cfg.insecureNoToken {
		return fmt.Errorf("--token-file is not set: /sync, /finalize, /customize, /prepull/sync and /prepull/customize answer with every team's flag, so the hook serves them "+
			"only to callers with Metacontroller's token; pass --token-file=<file> holding the token of the Secret that the CompositeController's "+
			"authorization.secretRef names (manifests/hook-deployment.yaml does), or --%s for a local demo without one", insecureNoTokenFlag)
	}
	if cfg.tokenFile != "" && cfg.insecureNoToken {
		return fmt.Errorf("--token-file and --%s are both set: pass one (the token, in a cluster)", insecureNoTokenFlag)
	}
	return nil
}

// readSecretFile reads a key or token file, trimming surrounding whitespace. Errors name the flag
// and the file, never the content.
func readSecretFile(flagName, path string) ([]byte, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flagName, err)
	}
	trimmed := strings.TrimSpace(string(content))
	if trimmed == "" {
		return nil, fmt.Errorf("--%s: file %s is empty", flagName, path)
	}
	return []byte(trimmed), nil
}

// minFlagKeyBytes is the shortest flag key accepted. Every player holds an HMAC of a known input
// (their own flag over their definition and owner), so a short key is brute-forced offline, and
// then every flag is minted: 32 bytes is HMAC-SHA256's own key strength.
const minFlagKeyBytes = 32

// loadFlagKey reads the dynamic-flag key when a file is configured.
func (h *hookConfig) loadFlagKey() error {
	if h.flagKeyFile == "" {
		return nil
	}
	key, err := readFlagKey(h.flagKeyFile)
	if err != nil {
		return err
	}
	h.sync.FlagKey = key
	return nil
}

// loadTCPGatewayKey reads the TCP gateway's key when a file is configured; after loadFlagKey, as
// it must differ from the flag key.
func (h *hookConfig) loadTCPGatewayKey() error {
	if h.tcpGatewayKeyFile == "" {
		return nil
	}
	key, err := readSecretFile("tcp-gateway-key-file", h.tcpGatewayKeyFile)
	if err != nil {
		return err
	}
	if len(key) < tcptoken.MinKeyBytes {
		return fmt.Errorf("--tcp-gateway-key-file: the key in %s is %d bytes, fewer than the %d required: a player who guesses it mints a token to any instance; "+
			"generate one with: head -c 32 /dev/urandom | base64", h.tcpGatewayKeyFile, len(key), tcptoken.MinKeyBytes)
	}
	if bytes.Equal(key, h.sync.FlagKey) {
		return fmt.Errorf("--tcp-gateway-key-file %s holds the same key as --flag-key-file %s: the gateway holds its key, and must not be able to mint every team's flag; "+
			"generate a separate one: head -c 32 /dev/urandom | base64", h.tcpGatewayKeyFile, h.flagKeyFile)
	}
	h.sync.TCPGateway.Key = key
	return nil
}

// readFlagKey reads a flag key file (whitespace trimmed) and refuses a key shorter than
// minFlagKeyBytes. The error names the file and the length, never the key.
func readFlagKey(path string) ([]byte, error) {
	key, err := readSecretFile("flag-key-file", path)
	if err != nil {
		return nil, err
	}
	if len(key) < minFlagKeyBytes {
		return nil, fmt.Errorf("--flag-key-file: the key in %s is %d bytes, fewer than the %d required: every player holds an HMAC of their own flag under it, "+
			"so a short key is guessed offline and then every flag is minted; generate one with: head -c 32 /dev/urandom | base64",
			path, len(key), minFlagKeyBytes)
	}
	return key, nil
}

// checkNetworkFlags refuses CIDR flags that would leave an instance's NetworkPolicy rule admitting
// nothing: Pod CIDRs that together cover every IPv4 address (a NodePort or LoadBalancer exposure
// would admit no player), or blocked ranges that do (egress: true would reach nothing).
func checkNetworkFlags(cfg hooksync.Config) error {
	if coversIPv4(cfg.PodCIDRs) {
		return fmt.Errorf("--pod-cidrs %s cover every IPv4 address: NodePort and LoadBalancer exposures admit players from outside the Pod networks, "+
			"so they would admit nobody; pass only the cluster's Pod CIDRs, e.g. 10.244.0.0/16", strings.Join(cfg.PodCIDRs, ","))
	}
	blocked := slices.Concat(cfg.PodCIDRs, cfg.ServiceCIDRs, cfg.NodeCIDRs, cfg.APIServerCIDRs)
	if coversIPv4(blocked) {
		return fmt.Errorf("--pod-cidrs, --service-cidrs, --node-cidrs and --api-server-cidrs together cover every IPv4 address (%s): "+
			"they are never an egress destination, so egress: true would reach nothing; pass only the cluster's own ranges", strings.Join(blocked, ","))
	}
	return nil
}

// coversIPv4 says whether the union of IPv4 CIDRs (in canonical form) is all of 0.0.0.0/0.
func coversIPv4(cidrs []string) bool {
	type span struct{ first, last uint64 }
	var spans []span
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil || !p.Addr().Is4() {
			continue
		}
		a := p.Masked().Addr().As4()
		first := uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
		spans = append(spans, span{first, first + 1<<(32-p.Bits()) - 1})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.first, b.first) })
	var next uint64 // the first address not covered yet
	for _, s := range spans {
		if s.first > next {
			return false
		}
		next = max(next, s.last+1)
	}
	return next == 1<<32
}
