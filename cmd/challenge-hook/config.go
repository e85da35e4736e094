package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

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
	sync        hooksync.Config
	flagKeyFile string
}

// serverConfig is the server's whole configuration, as parsed from flags and the environment.
type serverConfig struct {
	hook                  hookConfig
	listen                string
	clock                 time.Time // zero: the real clock
	tokenFile             string
	verifyListen          string // flag verification's own listener, served only with verifyTokenFile
	verifyTokenFile       string
	tlsCertFile           string
	tlsKeyFile            string
	maxRequestBytes       int64
	maxConcurrentRequests int
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

// defaultMaxRequestBytes bounds a request body, sized from the largest real request with a margin.
// Metacontroller sends whole live objects: every child with its status, managedFields and its
// metacontroller.k8s.io/last-applied-configuration annotation, the parent, the related
// definition. The largest recorded request (testdata/upgrade-deployment-child-replaced-by-pod:
// a Challenge, its definition and 5 live children, one a Deployment) is 25,885 bytes as
// Metacontroller sends it (compact JSON; 44,053 indented in the file); the Gateway cases, with 7
// child types, are 22.6 KB; a live child weighs 1.9 KB (Secret) to 6.2 KB (Pod). What grows a
// request beyond that is the template, which it carries up to 4 times: the definition (or the
// inline template), kubectl's last-applied annotation on it, the live Pod's spec and the Pod's
// last-applied annotation. The recorded templates are at most 536 bytes; say one 30 times that,
// 16 KiB (8 containers with long commands and env), and a Challenge with 7 children comes to
// about 40 + 4 × 16 = 104 KiB. 1 MiB is 10 times that and 40 times the largest recorded request:
// room for a template of 230 KiB. A larger request gets 413 (logged, and
// Metacontroller retries) until the organizer raises --max-request-bytes together with the
// memory limit: at 8 maximal requests at once, 1 MiB measured a 62 to 75 MiB peak, 8 MiB 182 MiB.
const defaultMaxRequestBytes = 1 << 20

// defaultMaxConcurrentRequests bounds the sync, finalize and customize requests answered at once.
// Metacontroller calls the hook from its --workers goroutines (5 by default; 20 measured no
// faster), spread over the hook's two replicas, so 8 per replica seldom makes one wait; 8 maximal
// requests at once measured a 62 to 75 MiB peak against the Deployment's 128 Mi (16: 102 MiB; see
// TestMaximalConcurrentLoadFitsTheMemoryLimit).
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

// env registers a flag with an environment fallback; the usage text names the variable.
func (c *configFlags) env(value flag.Value, name, usage string) {
	c.fs.Var(value, name, fmt.Sprintf("%s (env %s)", usage, envName(name)))
	c.withEnv = append(c.withEnv, name)
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

// addHookFlags registers the flags that shape sync answers, shared by the server and render.
func addHookFlags(c *configFlags, cfg *hookConfig) {
	cfg.sync = hooksync.DefaultConfig()
	c.env((*stringValue)(&cfg.sync.PublicHost), "public-host", "`host` players use for NodePort endpoints")
	c.env((*stringValue)(&cfg.sync.IngressDomain), "ingress-domain", "parent `domain` of per-instance HTTP hosts <instanceId>.<domain>")
	c.env((*stringValue)(&cfg.sync.IngressClassName), "ingress-class", "`class` name of Ingress children (empty: the cluster default)")
	c.env(&choiceValue{p: &cfg.sync.IngressScheme, choices: []string{"http", "https"}}, "ingress-scheme", "`scheme` of HTTP endpoint URLs: http or https")
	c.env(&gatewayValue{p: &cfg.sync.Gateway}, "gateway", "Gateway API Gateway (`namespace/name`) that routes players: HTTP exposures become HTTPRoutes instead of Ingresses, TLS exposures TLSRoutes (empty: Ingresses, and no TLS exposures)")
	c.env((*stringValue)(&cfg.sync.GatewaySectionName), "gateway-section-name", "`listener` of the Gateway that HTTPRoutes attach to (empty: every listener that admits them)")
	c.env((*stringValue)(&cfg.sync.GatewayTLSSectionName), "gateway-tls-section-name", "`listener` of the Gateway that TLSRoutes attach to (empty: every listener that admits them)")
	c.env((*portValue)(&cfg.sync.GatewayTLSPort), "gateway-tls-port", "`port` of the Gateway's TLS listener, given to players in TLS endpoints")
	c.env((*namespaceValue)(&cfg.sync.GatewayDataPlane.Namespace), "gateway-pod-namespace", "`namespace` of the Gateway's data-plane Pods, the only source of HTTP and TLS exposures with --gateway (empty: the Gateway's namespace)")
	c.env((*labelsValue)(&cfg.sync.GatewayDataPlane.Labels), "gateway-pod-labels", "`labels` (k=v,...) of the Gateway's data-plane Pods (empty: gateway.networking.k8s.io/gateway-name=<the Gateway's name>)")
	c.env((*stringValue)(&cfg.sync.ClusterDomain), "cluster-domain", "cluster DNS `suffix`, for ClusterIP endpoints")
	c.env((*positiveDuration)(&cfg.sync.DefaultTimeout), "default-timeout", "instance lifetime (`duration`) when neither the Challenge nor its definition sets one")
	c.env((*positiveDuration)(&cfg.sync.DefaultMaxLifetime), "default-max-lifetime", "lifetime cap (`duration`), extensions included, when the definition sets no maxLifetime")
	c.env((*nonNegativeDuration)(&cfg.sync.ExpiryWarning), "expiry-warning", "how long (`duration`) before expiry the ExpiringSoon condition is True; the hook asks to be woken then (0s: never)")
	c.env((*stringValue)(&cfg.flagKeyFile), "flag-key-file", "`file` holding the HMAC key of dynamic flags (read once at start-up; empty: the server refuses dynamic flags, render prints a placeholder)")
	// Where the cluster's networks and platform Pods are, for each instance's NetworkPolicy.
	c.env(&cidrList{p: &cfg.sync.PodCIDRs, instead: "the cluster's Pod CIDRs, e.g. 10.244.0.0/16 (kubectl get nodes -o jsonpath='{.items[*].spec.podCIDR}' lists each node's part)"},
		"pod-cidrs", "the cluster's Pod `CIDRs`, comma-separated: refused as egress destinations and as NodePort/LoadBalancer sources (empty: every private and CGNAT range)")
	c.env(&cidrList{p: &cfg.sync.ServiceCIDRs, instead: "the cluster's Service CIDRs, e.g. 10.96.0.0/12 (the API server's --service-cluster-ip-range)"},
		"service-cidrs", "the cluster's Service `CIDRs`, comma-separated: refused as egress destinations")
	c.env(&cidrList{p: &cfg.sync.NodeCIDRs, instead: "the nodes' own addresses, e.g. 203.0.113.0/24 (kubectl get nodes -o wide)"},
		"node-cidrs", "the nodes' `CIDRs`, comma-separated: refused as egress destinations (needed where nodes have public addresses)")
	c.env(&cidrList{p: &cfg.sync.APIServerCIDRs, instead: "the API server's own addresses, e.g. 203.0.113.10/32 (kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes)"},
		"api-server-cidrs", "the API server's `CIDRs`, comma-separated: refused as egress destinations (needed where its endpoint is public)")
	c.env((*namespaceValue)(&cfg.sync.DNS.Namespace), "dns-namespace", "`namespace` of the cluster DNS Pods, the only in-cluster egress destination (port 53)")
	c.env((*labelsValue)(&cfg.sync.DNS.Labels), "dns-pod-labels", "`labels` (k=v,...) of the cluster DNS Pods")
	c.env((*ipv4Value)(&cfg.sync.NodeLocalDNS), "node-local-dns", "`address` of a node-local DNS cache, also allowed on port 53 (empty: none)")
	c.env((*namespaceValue)(&cfg.sync.IngressController.Namespace), "ingress-controller-namespace", "`namespace` of the ingress controller's Pods, the only source of HTTP exposures")
	c.env((*labelsValue)(&cfg.sync.IngressController.Labels), "ingress-controller-pod-labels", "`labels` (k=v,...) of the ingress controller's Pods (empty: every Pod of its namespace)")
	// What the hook believes of a Challenge, whose author is the platform, not the organizer.
	c.env(&allowValue{refuse: &cfg.sync.RefuseInlineTemplates}, "inline-templates", "accept Challenges with an inline spec.template; false: only ChallengeDefinitions say what runs, and an inline template is refused (InvalidSpec)")
	c.env((*namespaceList)(&cfg.sync.DefinitionNamespaces), "definition-namespaces", "the only `namespaces` (comma-separated) a spec.definitionRef may point to; others are refused (InvalidSpec) and never fetched (empty: any)")
}

// parseServerConfig parses the server's flags (args without the program name).
func parseServerConfig(args []string, getenv func(string) string) (serverConfig, *configFlags, error) {
	cfg := serverConfig{
		listen:                ":8080",
		verifyListen:          defaultVerifyListen,
		maxRequestBytes:       defaultMaxRequestBytes,
		maxConcurrentRequests: defaultMaxConcurrentRequests,
		readHeaderTimeout:     5 * time.Second,
		readTimeout:           30 * time.Second,
		writeTimeout:          30 * time.Second,
		idleTimeout:           120 * time.Second,
		shutdownTimeout:       25 * time.Second,
		logLevel:              slog.LevelInfo,
	}
	c := newConfigFlags("challenge-hook")
	c.env((*listenValue)(&cfg.listen), "listen", "address to serve on, `host:port`")
	c.env((*clockValue)(&cfg.clock), "clock", "pin the clock to this RFC 3339 `time`, for demos and golden replays only: on a frozen clock no instance ever expires; logs a warning at start-up (empty: the real clock)")
	addHookFlags(c, &cfg.hook)
	c.env((*stringValue)(&cfg.tokenFile), "token-file", "`file` holding the bearer token Metacontroller sends to /sync, /finalize and /customize (empty: no token required); it never verifies flags")
	c.env((*listenValue)(&cfg.verifyListen), "verify-listen", "address of the flag-verification listener, `host:port`: POST /flags/verify only, served only with --verify-token-file")
	c.env((*stringValue)(&cfg.verifyTokenFile), "verify-token-file", "`file` holding the bearer token the platform sends to POST /flags/verify on --verify-listen; it opens nothing else, and must differ from --token-file's (empty: no flag verification)")
	c.env((*stringValue)(&cfg.tlsCertFile), "tls-cert-file", "TLS certificate `file` (PEM), reloaded when it changes; needs --tls-key-file")
	c.env((*stringValue)(&cfg.tlsKeyFile), "tls-key-file", "TLS private key `file` (PEM), reloaded when it changes; needs --tls-cert-file")
	c.env((*byteSize)(&cfg.maxRequestBytes), "max-request-bytes", "largest request body accepted (`size`), in bytes or with a binary suffix such as 1Mi; raise the memory limit with it")
	c.env((*positiveInt)(&cfg.maxConcurrentRequests), "max-concurrent-requests", "`number` of sync, finalize and customize requests answered at once; more wait up to 1s, then get 429 with Retry-After")
	c.env((*positiveDuration)(&cfg.readHeaderTimeout), "read-header-timeout", "`duration` allowed to read request headers")
	c.env((*positiveDuration)(&cfg.readTimeout), "read-timeout", "`duration` allowed to read a whole request")
	c.env((*positiveDuration)(&cfg.writeTimeout), "write-timeout", "`duration` allowed from the end of the request headers to the end of the response")
	c.env((*positiveDuration)(&cfg.idleTimeout), "idle-timeout", "how long (`duration`) an idle keep-alive connection stays open")
	c.env((*nonNegativeDuration)(&cfg.shutdownDelay), "shutdown-delay", "on SIGTERM, keep serving (with /readyz failing) this `duration` before closing the listener, so load balancers stop sending traffic")
	c.env((*positiveDuration)(&cfg.shutdownTimeout), "shutdown-timeout", "on SIGTERM, the longest `duration` until exit, shutdown delay and in-flight requests included")
	c.env(&logLevelValue{p: &cfg.logLevel}, "log-level", "`level`: debug, info, warn or error")
	if err := c.parse(args, getenv); err != nil {
		return cfg, c, err
	}
	if c.fs.NArg() > 0 {
		return cfg, c, fmt.Errorf("unexpected argument %q: the server takes flags only (the subcommands are render and flag)", c.fs.Arg(0))
	}
	if (cfg.tlsCertFile == "") != (cfg.tlsKeyFile == "") {
		return cfg, c, errors.New("--tls-cert-file and --tls-key-file (CHALLENGE_HOOK_TLS_CERT_FILE, CHALLENGE_HOOK_TLS_KEY_FILE) must be set together")
	}
	if err := checkNetworkFlags(cfg.hook.sync); err != nil {
		return cfg, c, err
	}
	verifyListenSet := false
	c.fs.Visit(func(f *flag.Flag) { verifyListenSet = verifyListenSet || f.Name == "verify-listen" }) // the environment's too
	if cfg.verifyTokenFile == "" && verifyListenSet {
		return cfg, c, fmt.Errorf("--verify-listen %s is set but --verify-token-file is not: flag verification is served only with its own token; "+
			"pass --verify-token-file, or drop --verify-listen to serve no flag verification", cfg.verifyListen)
	}
	if _, port, _ := net.SplitHostPort(cfg.listen); cfg.verifyTokenFile != "" && cfg.verifyListen == cfg.listen && port != "0" {
		return cfg, c, fmt.Errorf("--verify-listen and --listen are both %s: flag verification needs a listener of its own, so that the hook's NetworkPolicy can admit the platform to it alone", cfg.listen)
	}
	if cfg.shutdownDelay >= cfg.shutdownTimeout {
		return cfg, c, fmt.Errorf("--shutdown-delay (%s) must be shorter than --shutdown-timeout (%s), which includes it", cfg.shutdownDelay, cfg.shutdownTimeout)
	}
	return cfg, c, nil
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

// Flag values. Each one validates in Set, so that the error names the flag or variable it came from.

type stringValue string

func (s *stringValue) String() string     { return string(*s) }
func (s *stringValue) Set(v string) error { *s = stringValue(v); return nil }

// cidrList is a comma-separated list of IPv4 CIDRs, each its network address (10.244.0.0/16, not
// 10.244.1.0/16): instances get no IPv6 ingress or egress, so IPv6 ranges would have no effect.
// Each CIDR becomes an except entry under 0.0.0.0/0 in every instance's NetworkPolicy, which the
// API server accepts only as a strict subset: 0.0.0.0/0 itself is refused here, saying instead
// what to pass.
type cidrList struct {
	p       *[]string
	instead string // what the flag should hold, for the error
}

func (c *cidrList) String() string {
	if c.p == nil {
		return ""
	}
	return strings.Join(*c.p, ",")
}

func (c *cidrList) Set(v string) error {
	var out []string
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil || !p.Addr().Is4() {
			return fmt.Errorf("%q: expected IPv4 CIDRs such as 10.244.0.0/16,10.245.0.0/16", item)
		}
		if p.Masked() != p {
			return fmt.Errorf("%q has host bits set: did you mean %s?", item, p.Masked())
		}
		if p.Bits() == 0 {
			return fmt.Errorf("%q is every IPv4 address: each CIDR is an except entry under 0.0.0.0/0 in the instances' NetworkPolicies, "+
				"which must be a strict subset of it (the API server would refuse every policy); pass %s", item, c.instead)
		}
		out = append(out, p.String())
	}
	*c.p = out
	return nil
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

// labelsValue is a comma-separated list of label=value pairs; empty means no labels.
type labelsValue map[string]string

func (l *labelsValue) String() string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(*l)) {
		pairs = append(pairs, k+"="+(*l)[k])
	}
	return strings.Join(pairs, ",")
}

func (l *labelsValue) Set(v string) error {
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("%q: expected label=value pairs such as app.kubernetes.io/name=ingress-nginx", pair)
		}
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			return fmt.Errorf("label %q: %s", key, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return fmt.Errorf("label value %q: %s", value, strings.Join(errs, "; "))
		}
		out[key] = value
	}
	*l = out
	return nil
}

// allowValue is a boolean flag, true by default, stored as its negation (a refuse switch whose
// zero value allows).
type allowValue struct{ refuse *bool }

func (a *allowValue) IsBoolFlag() bool { return true }
func (a *allowValue) String() string {
	if a.refuse == nil {
		return "true"
	}
	return strconv.FormatBool(!*a.refuse)
}

func (a *allowValue) Set(v string) error {
	allow, err := strconv.ParseBool(v)
	if err != nil {
		return errors.New("expected true or false")
	}
	*a.refuse = !allow
	return nil
}

// namespaceList is a comma-separated list of namespace names; empty means none listed.
type namespaceList []string

func (n *namespaceList) String() string { return strings.Join(*n, ",") }
func (n *namespaceList) Set(v string) error {
	var out []string
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(item); len(errs) > 0 {
			return fmt.Errorf("%q: expected namespace names such as ctf,ctf-definitions: %s", item, strings.Join(errs, "; "))
		}
		if !slices.Contains(out, item) {
			out = append(out, item)
		}
	}
	*n = out
	return nil
}

type namespaceValue string

func (n *namespaceValue) String() string { return string(*n) }
func (n *namespaceValue) Set(v string) error {
	if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
		return fmt.Errorf("expected a namespace name: %s", strings.Join(errs, "; "))
	}
	*n = namespaceValue(v)
	return nil
}

// ipv4Value is one IPv4 address, or empty.
type ipv4Value string

func (a *ipv4Value) String() string { return string(*a) }
func (a *ipv4Value) Set(v string) error {
	if v == "" {
		*a = ""
		return nil
	}
	addr, err := netip.ParseAddr(v)
	if err != nil || !addr.Is4() {
		return errors.New("expected an IPv4 address such as 169.254.20.10, or empty for none")
	}
	*a = ipv4Value(addr.String())
	return nil
}

type listenValue string

func (l *listenValue) String() string { return string(*l) }
func (l *listenValue) Set(v string) error {
	if _, _, err := net.SplitHostPort(v); err != nil {
		return fmt.Errorf("expected host:port such as :8080 or 127.0.0.1:8080: %w", err)
	}
	*l = listenValue(v)
	return nil
}

type positiveDuration time.Duration

func (d *positiveDuration) String() string { return time.Duration(*d).String() }
func (d *positiveDuration) Set(v string) error {
	parsed, err := time.ParseDuration(v)
	if err != nil || parsed <= 0 {
		return errors.New("expected a positive duration such as 30s, 30m or 1h")
	}
	*d = positiveDuration(parsed)
	return nil
}

type nonNegativeDuration time.Duration

func (d *nonNegativeDuration) String() string { return time.Duration(*d).String() }
func (d *nonNegativeDuration) Set(v string) error {
	parsed, err := time.ParseDuration(v)
	if err != nil || parsed < 0 {
		return errors.New("expected a duration such as 0s, 5s or 1m")
	}
	*d = nonNegativeDuration(parsed)
	return nil
}

type clockValue time.Time

func (c *clockValue) String() string {
	if time.Time(*c).IsZero() {
		return ""
	}
	return time.Time(*c).Format(time.RFC3339)
}

func (c *clockValue) Set(v string) error {
	if v == "" {
		*c = clockValue(time.Time{})
		return nil
	}
	parsed, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return errors.New("expected an RFC 3339 time such as 2026-11-01T12:05:00Z, or empty for the real clock")
	}
	*c = clockValue(parsed.UTC())
	return nil
}

type positiveInt int

func (p *positiveInt) String() string { return strconv.Itoa(int(*p)) }
func (p *positiveInt) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return errors.New("expected a positive whole number such as 8")
	}
	*p = positiveInt(n)
	return nil
}

type byteSize int64

func (b *byteSize) String() string { return fmt.Sprint(int64(*b)) }
func (b *byteSize) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		return errors.New("expected a positive size such as 8388608 or 8Mi")
	}
	*b = byteSize(q.Value())
	return nil
}

type choiceValue struct {
	p       *string
	choices []string
}

func (c *choiceValue) String() string {
	if c.p == nil {
		return ""
	}
	return *c.p
}

func (c *choiceValue) Set(v string) error {
	for _, choice := range c.choices {
		if v == choice {
			*c.p = v
			return nil
		}
	}
	return fmt.Errorf("expected one of %s", strings.Join(c.choices, ", "))
}

type gatewayValue struct{ p **hooksync.GatewayRef }

func (g *gatewayValue) String() string {
	if g.p == nil || *g.p == nil {
		return ""
	}
	return (*g.p).String()
}

func (g *gatewayValue) Set(v string) error {
	if v == "" {
		*g.p = nil
		return nil
	}
	ref, err := hooksync.ParseGatewayRef(v)
	if err != nil {
		return err
	}
	*g.p = &ref
	return nil
}

type portValue int32

func (p *portValue) String() string { return fmt.Sprint(int32(*p)) }
func (p *portValue) Set(v string) error {
	port, err := strconv.ParseInt(v, 10, 32)
	if err != nil || port < 1 || port > 65535 {
		return errors.New("expected a port between 1 and 65535")
	}
	*p = portValue(port)
	return nil
}

type logLevelValue struct{ p *slog.Level }

func (l *logLevelValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.ToLower(l.p.String())
}

func (l *logLevelValue) Set(v string) error {
	switch strings.ToLower(v) {
	case "debug":
		*l.p = slog.LevelDebug
	case "info":
		*l.p = slog.LevelInfo
	case "warn":
		*l.p = slog.LevelWarn
	case "error":
		*l.p = slog.LevelError
	default:
		return errors.New("expected debug, info, warn or error")
	}
	return nil
}
