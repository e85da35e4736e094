package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

func TestConfigDefaults(t *testing.T) {
	cfg, _, err := parseServerConfig(nil, noEnv)
	require.NoError(t, err)
	assert.Equal(t, ":8080", cfg.listen)
	assert.True(t, cfg.clock.IsZero(), "no --clock means the real clock")
	assert.Equal(t, hooksync.DefaultConfig(), cfg.hook.sync)
	assert.Equal(t, int64(4<<20), cfg.maxRequestBytes)
	assert.Equal(t, 8, cfg.maxConcurrentRequests)
	assert.Equal(t, 5*time.Second, cfg.readHeaderTimeout)
	assert.Equal(t, 30*time.Second, cfg.readTimeout)
	assert.Equal(t, 30*time.Second, cfg.writeTimeout)
	assert.Equal(t, 120*time.Second, cfg.idleTimeout)
	assert.Equal(t, 25*time.Second, cfg.shutdownTimeout)
	assert.Equal(t, slog.LevelInfo, cfg.logLevel)
}

func TestConfigPrecedence(t *testing.T) {
	env := envMap(map[string]string{
		"CHALLENGE_HOOK_LISTEN":            "127.0.0.1:9000",
		"CHALLENGE_HOOK_INGRESS_DOMAIN":    "env.example",
		"CHALLENGE_HOOK_DEFAULT_TIMEOUT":   "45m",
		"CHALLENGE_HOOK_MAX_REQUEST_BYTES": "1Mi",
		"CHALLENGE_HOOK_CLOCK":             "2026-11-01T12:05:00Z",
		"CHALLENGE_HOOK_LOG_LEVEL":         "debug",
		"CHALLENGE_HOOK_EXPIRY_WARNING":    "2m",
	})
	cfg, _, err := parseServerConfig([]string{"--ingress-domain=flag.example", "--default-timeout", "10m"}, env)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:9000", cfg.listen, "env over default")
	assert.Equal(t, "flag.example", cfg.hook.sync.IngressDomain, "flag over env")
	assert.Equal(t, 10*time.Minute, cfg.hook.sync.DefaultTimeout, "flag over env")
	assert.Equal(t, int64(1<<20), cfg.maxRequestBytes)
	assert.Equal(t, time.Date(2026, 11, 1, 12, 5, 0, 0, time.UTC), cfg.clock)
	assert.Equal(t, slog.LevelDebug, cfg.logLevel)
	assert.Equal(t, 2*time.Minute, cfg.hook.sync.ExpiryWarning, "env over default")
	assert.Equal(t, "http", cfg.hook.sync.IngressScheme, "default")
}

func TestConfigErrorsNameTheFlagAndWhatIsExpected(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		wants []string
	}{
		{"bad duration flag", []string{"--default-timeout=soon"}, nil, []string{"default-timeout", "positive duration"}},
		{"negative duration flag", []string{"--read-timeout=-1s"}, nil, []string{"read-timeout", "positive duration"}},
		{"bad duration env", nil, map[string]string{"CHALLENGE_HOOK_IDLE_TIMEOUT": "forever"}, []string{"CHALLENGE_HOOK_IDLE_TIMEOUT", "--idle-timeout", "positive duration"}},
		{"bad clock", []string{"--clock=yesterday"}, nil, []string{"clock", "RFC 3339"}},
		{"bad clock env", nil, map[string]string{"CHALLENGE_HOOK_CLOCK": "2026-11-01"}, []string{"CHALLENGE_HOOK_CLOCK", "RFC 3339"}},
		{"negative expiry warning", []string{"--expiry-warning=-5m"}, nil, []string{"expiry-warning", "duration"}},
		{"bad listen", []string{"--listen=8080"}, nil, []string{"listen", "host:port"}},
		{"bad scheme", []string{"--ingress-scheme=ftp"}, nil, []string{"ingress-scheme", "http, https"}},
		{"gateway without namespace", []string{"--gateway=ctf"}, nil, []string{"gateway", "<namespace>/<name>"}},
		{"bad gateway namespace env", nil, map[string]string{"CHALLENGE_HOOK_GATEWAY": "Gateway_System/ctf"}, []string{"CHALLENGE_HOOK_GATEWAY", `namespace "Gateway_System"`}},
		{"bad gateway TLS port", []string{"--gateway-tls-port=0"}, nil, []string{"gateway-tls-port", "between 1 and 65535"}},
		{"bad log level", nil, map[string]string{"CHALLENGE_HOOK_LOG_LEVEL": "loud"}, []string{"CHALLENGE_HOOK_LOG_LEVEL", "debug, info, warn or error"}},
		{"bad size", []string{"--max-request-bytes=lots"}, nil, []string{"max-request-bytes", "positive size"}},
		{"zero size", []string{"--max-request-bytes=0"}, nil, []string{"max-request-bytes", "positive size"}},
		{"unknown flag", []string{"--colour=red"}, nil, []string{"colour"}},
		{"positional argument", []string{"serve"}, nil, []string{`"serve"`, "render", "flag"}},
		{"cert without key", []string{"--tls-cert-file=a.pem"}, nil, []string{"--tls-cert-file", "--tls-key-file", "together"}},
		{"delay not shorter than timeout", []string{"--shutdown-delay=30s"}, nil, []string{"--shutdown-delay", "--shutdown-timeout"}},
		{"bad CIDR", []string{"--pod-cidrs=10.244.0.0/16,10.244.0.0"}, nil, []string{"pod-cidrs", `"10.244.0.0"`, "IPv4 CIDRs"}},
		{"IPv6 CIDR", []string{"--service-cidrs=fd00::/108"}, nil, []string{"service-cidrs", "IPv4 CIDRs"}},
		{"CIDR with host bits", nil, map[string]string{"CHALLENGE_HOOK_NODE_CIDRS": "192.168.1.7/24"}, []string{"CHALLENGE_HOOK_NODE_CIDRS", "did you mean 192.168.1.0/24"}},
		{"bad labels", []string{"--dns-pod-labels=k8s-app"}, nil, []string{"dns-pod-labels", "label=value"}},
		{"bad label value", []string{"--ingress-controller-pod-labels=app=a b"}, nil, []string{"ingress-controller-pod-labels", `"a b"`}},
		{"empty namespace", []string{"--ingress-controller-namespace="}, nil, []string{"ingress-controller-namespace", "namespace name"}},
		{"bad node-local DNS", []string{"--node-local-dns=169.254.20.10/32"}, nil, []string{"node-local-dns", "IPv4 address"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseServerConfig(tt.args, envMap(tt.env))
			require.Error(t, err)
			for _, want := range tt.wants {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

func TestNetworkConfig(t *testing.T) {
	env := envMap(map[string]string{"CHALLENGE_HOOK_SERVICE_CIDRS": "10.96.0.0/12", "CHALLENGE_HOOK_DNS_POD_LABELS": "k8s-app=coredns"})
	cfg, _, err := parseServerConfig([]string{
		"--pod-cidrs=10.244.0.0/16, 10.245.0.0/16", "--api-server-cidrs=203.0.113.10/32", "--node-local-dns=169.254.20.10",
		"--ingress-controller-namespace=traefik", "--ingress-controller-pod-labels=app.kubernetes.io/name=traefik,role=edge",
	}, env)
	require.NoError(t, err)
	got := cfg.hook.sync
	assert.Equal(t, []string{"10.244.0.0/16", "10.245.0.0/16"}, got.PodCIDRs)
	assert.Equal(t, []string{"10.96.0.0/12"}, got.ServiceCIDRs)
	assert.Equal(t, []string{"203.0.113.10/32"}, got.APIServerCIDRs)
	assert.Empty(t, got.NodeCIDRs)
	assert.Equal(t, hooksync.PodPeer{Namespace: "kube-system", Labels: map[string]string{"k8s-app": "coredns"}}, got.DNS)
	assert.Equal(t, "169.254.20.10", got.NodeLocalDNS)
	assert.Equal(t, hooksync.PodPeer{Namespace: "traefik", Labels: map[string]string{"app.kubernetes.io/name": "traefik", "role": "edge"}}, got.IngressController)
}

func TestGatewayFlags(t *testing.T) {
	env := envMap(map[string]string{"CHALLENGE_HOOK_GATEWAY_TLS_SECTION_NAME": "tls"})
	cfg, _, err := parseServerConfig([]string{"--gateway=gateway-system/ctf", "--gateway-section-name=https", "--gateway-tls-port=8443"}, env)
	require.NoError(t, err)
	assert.Equal(t, &hooksync.GatewayRef{Namespace: "gateway-system", Name: "ctf"}, cfg.hook.sync.Gateway)
	assert.Equal(t, "https", cfg.hook.sync.GatewaySectionName)
	assert.Equal(t, "tls", cfg.hook.sync.GatewayTLSSectionName)
	assert.Equal(t, int32(8443), cfg.hook.sync.GatewayTLSPort)

	cfg, _, err = parseServerConfig([]string{"--gateway="}, envMap(map[string]string{"CHALLENGE_HOOK_GATEWAY": "gateway-system/ctf"}))
	require.NoError(t, err)
	assert.Nil(t, cfg.hook.sync.Gateway, "an empty flag turns the environment's Gateway off: Ingresses")
}

func TestHelpPrintsUsageAndSucceeds(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"challenge-hook", "-h"}, noEnv, &stdout, &stderr)
	require.NoError(t, err)
	if missing := missingPart(stderr.String(), "Usage: challenge-hook", "-flag-key-file", "CHALLENGE_HOOK_FLAG_KEY_FILE", "-shutdown-timeout", "render"); missing != "" {
		t.Errorf("usage lacks %q:\n%s", missing, stderr.String())
	}
}

func TestSecretFilesAreCheckedAtStartWithoutPrintingThem(t *testing.T) {
	dir := t.TempDir()
	blank := filepath.Join(dir, "blank.key")
	require.NoError(t, os.WriteFile(blank, []byte(" \n\t\n"), 0o600))
	missing := filepath.Join(dir, "missing.key")
	tests := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"empty flag key", []string{"--flag-key-file=" + blank}, []string{"--flag-key-file", blank, "empty"}},
		{"empty token", []string{"--token-file=" + blank}, []string{"--token-file", blank, "empty"}},
		{"missing token", []string{"--token-file=" + missing}, []string{"--token-file", missing}},
		{"missing certificate", []string{"--tls-cert-file=" + missing, "--tls-key-file=" + missing}, []string{"--tls-cert-file", missing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"challenge-hook", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}, withoutTokenUnlessGiven(tt.args)...), noEnv, &stdout, &stderr)
			require.Error(t, err)
			for _, want := range tt.wants {
				assert.Contains(t, err.Error(), want)
			}
		})
	}

	// A readable key is trimmed and never appears in the logs.
	key := filepath.Join(dir, "flag.key")
	require.NoError(t, os.WriteFile(key, []byte("s3cr3t-flag-key-material-of-32-bytes\n\n"), 0o600))
	cfg, _, err := parseServerConfig([]string{"--flag-key-file=" + key}, noEnv)
	require.NoError(t, err)
	require.NoError(t, cfg.hook.loadFlagKey())
	assert.Equal(t, []byte("s3cr3t-flag-key-material-of-32-bytes"), cfg.hook.sync.FlagKey)

	r := startRun(t, "--listen=127.0.0.1:0", "--flag-key-file="+key, "--log-level=debug")
	require.NoError(t, r.stop(t))
	assert.Contains(t, r.logs.String(), `"flag_key_loaded":true`)
	assert.False(t, strings.Contains(r.logs.String(), "s3cr3t"), "the logs show the flag key")
}

// A flag key shorter than 32 bytes is refused by everything that reads one: the server at
// start-up, render and flag. The error says how long it is and how to make a good one, and never
// shows the key.
func TestShortFlagKeyIsRefused(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	const shortKey = "only-31-bytes-of-key-material-x" // whitespace is trimmed first
	require.Len(t, shortKey, minFlagKeyBytes-1)
	require.NoError(t, os.WriteFile(short, []byte(shortKey+"\n"), 0o600))
	exact := filepath.Join(dir, "exact.key")
	require.NoError(t, os.WriteFile(exact, []byte(shortKey+"y"), 0o600))
	challenge := filepath.Join("..", "..", "examples", "inline.yaml")

	for _, tt := range []struct {
		name string
		args []string
	}{
		{"server", []string{"--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--" + insecureNoTokenFlag, "--flag-key-file=" + short}},
		{"render", []string{"render", "-f", challenge, "--flag-key-file=" + short}},
		{"flag", []string{"flag", "--definition=ctf/web", "--owner=team-7", "--flag-key-file=" + short}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"challenge-hook"}, tt.args...), noEnv, &stdout, &stderr)
			require.Error(t, err)
			if missing := missingPart(err.Error(), "--flag-key-file", short, "31 bytes", "32 required", "head -c 32 /dev/urandom"); missing != "" {
				t.Errorf("error lacks %q: %v", missing, err)
			}
			assert.NotContains(t, err.Error(), shortKey)
			assert.Empty(t, stdout.String(), "nothing is rendered or printed with a short key")
		})
	}

	// Exactly 32 bytes is enough.
	var stdout bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"challenge-hook", "flag", "--definition=ctf/web", "--owner=team-7", "--flag-key-file=" + exact}, noEnv, &stdout, &bytes.Buffer{}))
	assert.True(t, strings.HasPrefix(stdout.String(), "flag{"), stdout.String())
}

func TestTrustSwitchFlags(t *testing.T) {
	cfg, _, err := parseServerConfig(nil, noEnv)
	require.NoError(t, err)
	assert.False(t, cfg.hook.sync.RefuseInlineTemplates, "inline templates are accepted by default")
	assert.Empty(t, cfg.hook.sync.DefinitionNamespaces, "any namespace by default")
	assert.Empty(t, cfg.hook.sync.DefinitionGrants, "by default a Challenge uses only its own namespace's definitions")

	cfg, _, err = parseServerConfig([]string{"--definition-grants=team-*=ctf,ctf-staging=ctf"}, noEnv)
	require.NoError(t, err)
	assert.Equal(t, []hooksync.DefinitionGrant{{ChallengeNamespaces: "team-*", DefinitionNamespace: "ctf"}, {ChallengeNamespaces: "ctf-staging", DefinitionNamespace: "ctf"}},
		cfg.hook.sync.DefinitionGrants)
	cfg, _, err = parseServerConfig(nil, envMap(map[string]string{"CHALLENGE_HOOK_DEFINITION_GRANTS": "team-*=ctf"}))
	require.NoError(t, err)
	assert.Equal(t, []hooksync.DefinitionGrant{{ChallengeNamespaces: "team-*", DefinitionNamespace: "ctf"}}, cfg.hook.sync.DefinitionGrants, "env fallback")

	cfg, _, err = parseServerConfig([]string{"--inline-templates=false", "--definition-namespaces=ctf-definitions, ctf,ctf"}, noEnv)
	require.NoError(t, err)
	assert.True(t, cfg.hook.sync.RefuseInlineTemplates)
	assert.Equal(t, []string{"ctf-definitions", "ctf"}, cfg.hook.sync.DefinitionNamespaces)

	env := envMap(map[string]string{"CHALLENGE_HOOK_INLINE_TEMPLATES": "false", "CHALLENGE_HOOK_DEFINITION_NAMESPACES": "ctf"})
	cfg, _, err = parseServerConfig(nil, env)
	require.NoError(t, err)
	assert.True(t, cfg.hook.sync.RefuseInlineTemplates, "env over default")
	assert.Equal(t, []string{"ctf"}, cfg.hook.sync.DefinitionNamespaces)
	cfg, _, err = parseServerConfig([]string{"--inline-templates", "--definition-namespaces="}, env)
	require.NoError(t, err)
	assert.False(t, cfg.hook.sync.RefuseInlineTemplates, "a bare boolean flag is true, and wins over the environment")
	assert.Empty(t, cfg.hook.sync.DefinitionNamespaces, "an empty flag means any namespace again")

	for _, tt := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"--inline-templates=no"}, []string{"inline-templates", "true or false"}},
		{[]string{"--definition-namespaces=ctf,CTF_Defs"}, []string{"definition-namespaces", `"CTF_Defs"`, "namespace names"}},
		{[]string{"--definition-grants=team-*"}, []string{"definition-grants", "<challenge-namespace>=<definition-namespace>"}},
		{[]string{"--definition-namespaces=ctf", "--definition-grants=team-*=ctf-staging"}, []string{"--definition-grants team-*=ctf-staging", "--definition-namespaces=ctf leaves out"}},
	} {
		_, _, err := parseServerConfig(tt.args, noEnv)
		if assert.Error(t, err, "%v", tt.args) {
			for _, want := range tt.wants {
				assert.Contains(t, err.Error(), want)
			}
		}
	}
}

// CIDR flags end up as except entries under 0.0.0.0/0 in every instance's NetworkPolicy: one that
// the API server would refuse (0.0.0.0/0 is not a strict subset of itself), or a set that would
// leave a rule admitting nothing, stops the hook at start-up and render, saying what to pass.
func TestCIDRFlagsThatBreakPoliciesAreRefused(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		wants []string
	}{
		{"pod CIDRs every address", []string{"--pod-cidrs=0.0.0.0/0"}, nil,
			[]string{"pod-cidrs", `"0.0.0.0/0" is every IPv4 address`, "strict subset", "the cluster's Pod CIDRs, e.g. 10.244.0.0/16", "spec.podCIDR"}},
		{"service CIDRs every address among others", []string{"--service-cidrs=10.96.0.0/12,0.0.0.0/0"}, nil,
			[]string{"service-cidrs", `"0.0.0.0/0"`, "--service-cluster-ip-range"}},
		{"node CIDRs every address, from the environment", nil, map[string]string{"CHALLENGE_HOOK_NODE_CIDRS": "0.0.0.0/0"},
			[]string{"CHALLENGE_HOOK_NODE_CIDRS", "--node-cidrs", "strict subset", "nodes' own addresses"}},
		{"API server CIDRs every address", []string{"--api-server-cidrs=0.0.0.0/0"}, nil,
			[]string{"api-server-cidrs", "strict subset", "endpointslices"}},
		{"pod CIDRs that cover every address together", []string{"--pod-cidrs=0.0.0.0/1,128.0.0.0/1"}, nil,
			[]string{"--pod-cidrs 0.0.0.0/1,128.0.0.0/1 cover every IPv4 address", "admit nobody", "e.g. 10.244.0.0/16"}},
		{"blocked ranges that cover every address together", []string{"--pod-cidrs=10.244.0.0/16", "--service-cidrs=0.0.0.0/1", "--node-cidrs=128.0.0.0/2,192.0.0.0/2"}, nil,
			[]string{"together cover every IPv4 address", "egress: true would reach nothing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parseServerConfig(tt.args, envMap(tt.env))
			require.Error(t, err)
			if missing := missingPart(err.Error(), tt.wants...); missing != "" {
				t.Errorf("error lacks %q: %v", missing, err)
			}
			// render builds the same policies, and refuses the same flags.
			err = run(t.Context(), append([]string{"challenge-hook", "render", "-f", "../../examples/inline.yaml"}, tt.args...), envMap(tt.env), &bytes.Buffer{}, &bytes.Buffer{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wants[0])
		})
	}

	// Large but partial ranges are valid policies: accepted.
	cfg, _, err := parseServerConfig([]string{"--pod-cidrs=0.0.0.0/1", "--service-cidrs=128.0.0.0/2"}, noEnv)
	require.NoError(t, err)
	assert.Equal(t, []string{"0.0.0.0/1"}, cfg.hook.sync.PodCIDRs)
}

func TestCoversIPv4(t *testing.T) {
	for _, tt := range []struct {
		cidrs []string
		want  bool
	}{
		{nil, false},
		{[]string{"0.0.0.0/0"}, true},
		{[]string{"0.0.0.0/1", "128.0.0.0/1"}, true},
		{[]string{"128.0.0.0/1", "0.0.0.0/2", "64.0.0.0/2"}, true},
		{[]string{"0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3", "224.0.0.0/3"}, true},
		{[]string{"0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3"}, false},
		{[]string{"0.0.0.0/1", "0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/8"}, true},
		{[]string{"0.0.0.0/1", "128.0.0.1/32", "128.0.0.0/1"}, true},
		{[]string{"10.0.0.0/8", "172.16.0.0/12"}, false},
		{[]string{"0.0.0.0/1", "128.0.0.0/1", "255.255.255.255/32"}, true},
		{[]string{"0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/2"}, true},
		{[]string{"1.0.0.0/8", "0.0.0.0/8", "2.0.0.0/7", "4.0.0.0/6", "8.0.0.0/5", "16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1"}, true},
		{[]string{"1.0.0.0/8", "2.0.0.0/7", "4.0.0.0/6", "8.0.0.0/5", "16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1"}, false},
	} {
		assert.Equal(t, tt.want, coversIPv4(tt.cidrs), "%v", tt.cidrs)
	}
}

// Without --pod-cidrs or --service-cidrs the hook still serves, and says what it assumes and why
// that matters; with them, it says nothing.
func TestUnsetNetworksWarnAtStartup(t *testing.T) {
	warnings := func(logs string) map[string]map[string]any {
		found := map[string]map[string]any{}
		for line := range strings.Lines(logs) {
			var entry map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &entry), "log line %q", line)
			msg, _ := entry["msg"].(string)
			for _, flag := range []string{"--pod-cidrs", "--service-cidrs"} {
				if entry["level"] == "WARN" && strings.HasPrefix(msg, flag+" is not set") {
					found[flag] = entry
				}
			}
		}
		return found
	}
	_, logs := newTestServer(t)
	found := warnings(logs.String())
	require.Len(t, found, 2, "logs:\n%s", logs)
	if missing := missingPart(found["--pod-cidrs"]["msg"].(string), "every private and CGNAT range", "refuse players on private networks", "set --pod-cidrs"); missing != "" {
		t.Errorf("--pod-cidrs warning lacks %q: %s", missing, found["--pod-cidrs"]["msg"])
	}
	assert.Equal(t, "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16", found["--pod-cidrs"]["assumed"])
	if missing := missingPart(found["--service-cidrs"]["msg"].(string), "egress: true", "set --service-cidrs"); missing != "" {
		t.Errorf("--service-cidrs warning lacks %q: %s", missing, found["--service-cidrs"]["msg"])
	}

	_, logs = newTestServer(t, "--pod-cidrs=10.244.0.0/16", "--service-cidrs=10.96.0.0/12")
	assert.Empty(t, warnings(logs.String()))
}

// The TCP gateway's key mints every token, so the hook refuses one shorter than
// tcptoken.MinKeyBytes and one equal to the flag key (the gateway, which holds its key, must not
// mint flags), at start-up and in render; the errors say what to do and never show the key. A
// file that does not exist is logged, and the hook serves without a gateway.
func TestTCPGatewayKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	const shortKey = "only-31-bytes-of-key-material-x"
	const flagKey = "s3cr3t-flag-key-material-of-32-bytes"
	short := write("short.key", shortKey+"\n")
	flag := write("flag.key", flagKey+"\n")
	sameAsFlag := write("same.key", "\n"+flagKey)
	gateway := write("gateway.key", "s3cr3t-tcp-gateway-key-material-32b\n")
	challenge := filepath.Join("..", "..", "examples", "inline.yaml")
	for _, tt := range []struct {
		name, file, secret string
		wants              []string
	}{
		{"short", short, shortKey, []string{"--tcp-gateway-key-file", short, "31 bytes", "32 required", "head -c 32 /dev/urandom"}},
		{"the flag key", sameAsFlag, flagKey, []string{"--tcp-gateway-key-file", sameAsFlag, "same key as --flag-key-file", "separate one"}},
	} {
		for _, cmd := range []struct {
			name string
			args []string
		}{
			{"server", []string{"--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--" + insecureNoTokenFlag}},
			{"render", []string{"render", "-f", challenge}},
		} {
			t.Run(tt.name+"/"+cmd.name, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				args := append(append([]string{"challenge-hook"}, cmd.args...), "--flag-key-file="+flag, "--tcp-gateway-key-file="+tt.file)
				err := run(t.Context(), args, noEnv, &stdout, &stderr)
				require.Error(t, err)
				if missing := missingPart(err.Error(), tt.wants...); missing != "" {
					t.Errorf("error lacks %q: %v", missing, err)
				}
				assert.NotContains(t, err.Error(), tt.secret)
				assert.Empty(t, stdout.String())
			})
		}
	}

	cfg, _, err := parseServerConfig([]string{"--flag-key-file=" + flag, "--tcp-gateway-key-file=" + gateway, "--tcp-gateway-address=tcp.ctf.example.org:1337"}, noEnv)
	require.NoError(t, err)
	require.NoError(t, cfg.hook.loadFlagKey())
	require.NoError(t, cfg.hook.loadTCPGatewayKey())
	assert.Equal(t, []byte("s3cr3t-tcp-gateway-key-material-32b"), cfg.hook.sync.TCPGateway.Key)
	assert.True(t, cfg.hook.sync.TCPGateway.Configured())

	r := startRun(t, "--listen=127.0.0.1:0", "--tcp-gateway-key-file="+gateway, "--tcp-gateway-address=tcp.ctf.example.org:1337")
	require.NoError(t, r.stop(t))
	assert.Contains(t, r.logs.String(), `"tcp_gateway":true`)
	assert.NotContains(t, r.logs.String(), "s3cr3t")

	missing := filepath.Join(dir, "missing.key")
	r = startRun(t, "--listen=127.0.0.1:0", "--tcp-gateway-key-file="+missing, "--tcp-gateway-address=tcp.ctf.example.org:1337")
	require.NoError(t, r.stop(t))
	assert.Contains(t, r.logs.String(), "TCP gateway key file does not exist")
	assert.Contains(t, r.logs.String(), "the TCP gateway is half configured")
	assert.Contains(t, r.logs.String(), `"tcp_gateway":false`)
}

func TestTCPGatewayAddress(t *testing.T) {
	for value, want := range map[string]hooksync.TCPGateway{
		"tcp.ctf.example.org:1337": {Host: "tcp.ctf.example.org", Port: 1337},
		"203.0.113.7:31337":        {Host: "203.0.113.7", Port: 31337},
		"[2001:db8::7]:1337":       {Host: "2001:db8::7", Port: 1337},
		"":                         {},
	} {
		cfg, _, err := parseServerConfig([]string{"--tcp-gateway-address=" + value}, noEnv)
		require.NoError(t, err, value)
		got := cfg.hook.sync.TCPGateway
		assert.Equal(t, want, hooksync.TCPGateway{Host: got.Host, Port: got.Port}, value)
	}
	for _, value := range []string{"tcp.ctf.example.org", "tcp.ctf.example.org:0", "tcp.ctf.example.org:65536", ":1337", "TCP.ctf.example.org:1337", "tcp;rm -rf:1337"} {
		_, _, err := parseServerConfig([]string{"--tcp-gateway-address=" + value}, noEnv)
		require.Error(t, err, value)
		assert.Contains(t, err.Error(), "expected the public host:port players connect to", value)
	}
}
