package sync

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// Config is the hook's configuration: everything the answer depends on besides the request and the clock.
type Config struct {
	// PublicHost is the host players use for NodePort endpoints (a node's public name or address).
	PublicHost string
	// IngressDomain is the parent domain of per-instance HTTP hosts: <instanceId>.<IngressDomain>.
	IngressDomain string
	// IngressClassName is set on Ingress children when not empty.
	IngressClassName string
	// IngressScheme is "http" or "https": the scheme of HTTP endpoint URLs.
	IngressScheme string
	// ClusterDomain is the cluster's DNS suffix, for ClusterIP endpoints.
	ClusterDomain string
	// DefaultTimeout is an instance's lifetime when neither the Challenge nor its definition sets one.
	DefaultTimeout time.Duration
	// DefaultMaxLifetime caps the lifetime, extensions included, when the definition sets no maxLifetime.
	DefaultMaxLifetime time.Duration
	// ExpiryWarning is how long before its deadline an instance's ExpiringSoon condition is True
	// (and the hook asks to be woken then); zero never warns.
	ExpiryWarning time.Duration
	// FlagKey is the HMAC key for dynamic flags; empty means dynamic flags are refused.
	FlagKey []byte
	// DynamicFlagPlaceholder, when FlagKey is empty, is every dynamic flag instead of a refusal: for
	// `render` without a key, never for a serving hook.
	DynamicFlagPlaceholder string

	// PrePullImage is this hook's image, whose static /pause the pre-pull DaemonSets copy and run
	// in place of each image's own program (package prepull); empty: no pre-pull.
	PrePullImage string

	// PolicyGate holds every instance Pod's containers until its NetworkPolicy is enforced.
	PolicyGate PolicyGate

	// Where the cluster's networks and platform Pods are, for each instance's NetworkPolicy.
	// CIDRs are IPv4 prefixes in canonical form (the hook's flags check them).

	// PodCIDRs are the cluster's Pod networks: never an egress destination, and the sources a
	// NodePort or LoadBalancer exposure refuses. Empty: every private and CGNAT range stands in.
	PodCIDRs []string
	// ServiceCIDRs are the cluster's Service networks: never an egress destination.
	ServiceCIDRs []string
	// NodeCIDRs and APIServerCIDRs are the nodes' and the API server's addresses, never an egress
	// destination; needed only where they are public (private ranges are refused anyway).
	NodeCIDRs      []string
	APIServerCIDRs []string
	// DNS selects the cluster DNS Pods, the only in-cluster egress destination (port 53) of the Pods
	// whose template sets dns: true or egress: true.
	DNS PodPeer
	// NodeLocalDNS is the address of a node-local DNS cache, also allowed on port 53; empty: none.
	NodeLocalDNS string
	// IngressController selects the ingress controller's Pods, the only source of HTTP exposures.
	IngressController PodPeer

	// Gateway, when set, is the Gateway API Gateway that routes players to instances: HTTP exposures
	// become HTTPRoutes attached to it instead of Ingresses, and TLS exposures (which need it)
	// become TLSRoutes.
	Gateway *GatewayRef
	// GatewaySectionName is the listener of the Gateway that HTTPRoutes attach to (empty: every
	// listener that admits them).
	GatewaySectionName string
	// GatewayTLSSectionName is the listener of the Gateway that TLSRoutes attach to (empty: every
	// listener that admits them).
	GatewayTLSSectionName string
	// GatewayTLSPort is the port of the Gateway's TLS listener, the port of TLS endpoints.
	GatewayTLSPort int32
	// GatewayDataPlane selects the Gateway's Pods, the only source of routed exposures when a
	// Gateway is set. Empty namespace: the Gateway's; no labels: the Gateway API's
	// gateway.networking.k8s.io/gateway-name=<name>.
	GatewayDataPlane PodPeer

	// TCPGateway is the shared gateway (challenge-hook tcp-gateway) that carries plain TCP to
	// TCP exposures, each reached with a token the hook mints.
	TCPGateway TCPGateway

	// Trust switches: how much the hook believes of a Challenge, whose author (the platform, or a
	// co-tenant in another namespace) is not the organizer who writes ChallengeDefinitions.

	// RefuseInlineTemplates refuses every Challenge with an inline spec.template (InvalidSpec):
	// then only ChallengeDefinitions say which images and commands run.
	RefuseInlineTemplates bool
	// DefinitionNamespaces, when not empty, are the only namespaces a spec.definitionRef may point
	// to: a reference elsewhere is refused (InvalidSpec), and Customize does not even ask
	// Metacontroller for it. Empty: any namespace. They are also the only namespaces whose
	// definitions the pre-pull controller serves (none when empty).
	DefinitionNamespaces []string
	// DefinitionGrants are the only pairs of namespaces across which a spec.definitionRef may
	// point: by default a Challenge uses only the definitions of its own namespace.
	DefinitionGrants []DefinitionGrant

	// PrePullMaxImagesPerDefinition caps the images (containers on every node) of one
	// definition's pre-pull DaemonSet, PrePullMaxImages those of every definition together; a
	// definition over either gets no DaemonSet (TooManyImages).
	PrePullMaxImagesPerDefinition int
	PrePullMaxImages              int
	// MaxInstancesPerOwner is how many instances of one owner in one namespace hold a place (see
	// holdsPlace) at once; the others are Queued, in creation order. Zero: no limit, and the
	// customize hook relates no Challenge to another.
	MaxInstancesPerOwner int
}

// TCPGateway is where players reach TCP exposures and what mints their tokens. The hook never
// talks to the gateway: a token (internal/tcptoken) carries the instance's ClusterIP Service
// address, authenticated with the key both hold.
type TCPGateway struct {
	// Host and Port are the address players connect to with nc (--tcp-gateway-address); an empty
	// Host: no gateway, and a template that exposes a port as TCP is refused.
	Host string
	Port int32
	// Key mints the tokens; shorter than tcptoken.MinKeyBytes: no gateway.
	Key []byte
	// WebSocketURL is the gateway's public WebSocket URL ending in /ws/ (--tcp-gateway-websocket-url),
	// e.g. wss://tcp.ctf.example.org/ws/: each TCP endpoint's webSocketURL is it followed by the
	// token; empty: endpoints have none (the gateway's WebSocket listener is not exposed).
	WebSocketURL string
	// TokenPlaceholder, when Key is empty, is every token instead of a refusal: for `render`
	// without a key, never for a serving hook.
	TokenPlaceholder string
	// Pods selects the gateway's Pods, the only source a TCP exposure admits.
	Pods PodPeer
}

// Configured: the hook can publish TCP exposures (an address, and a key or render's placeholder).
func (g TCPGateway) Configured() bool {
	return g.Host != "" && (len(g.Key) >= tcptoken.MinKeyBytes || g.TokenPlaceholder != "")
}

// PodPeer selects Pods by namespace and, optionally, labels.
type PodPeer struct {
	Namespace string
	Labels    map[string]string
}

// PolicyGate is the init container that starts every instance Pod: it holds the player's containers
// until, from inside the Pod's network namespace, Target stops answering, that is until the policy
// agent enforces the Pod's NetworkPolicy (which denies Target). Policy agents that learn a Pod from
// its status (the kubelet posts it once the sandbox runs) otherwise let its first packets through.
type PolicyGate struct {
	// Enabled adds the init container to every instance Pod (DefaultConfig: true).
	Enabled bool
	// Image is the hook's image: the init container runs its /challenge-hook wait-for-policy.
	Image string
	// Target is the IPv4 host:port probed: a destination every instance's NetworkPolicy denies and
	// that answers (accepts or refuses) a Pod no policy selects. Empty: the Pod's node
	// (status.hostIP) on the kubelet's port.
	Target string
	// Timeout bounds one attempt: then the init container fails, the instance shows Error, and the
	// kubelet runs it again with its back-off.
	Timeout time.Duration
}

// ReleaseImage is the image of this release of the hook (manifests/kustomization.yaml's, which a
// test keeps equal): the policy gate's by default.
const ReleaseImage = "ghcr.io/challenge-hook/challenge-hook:v0.1.0"

// DefaultConfig returns the configuration the binary starts with when nothing is set.
func DefaultConfig() Config {
	return Config{
		PublicHost:         "localhost",
		IngressDomain:      "challenges.localhost",
		IngressScheme:      "http",
		ClusterDomain:      "cluster.local",
		DefaultTimeout:     30 * time.Minute,
		DefaultMaxLifetime: 24 * time.Hour,
		ExpiryWarning:      5 * time.Minute,
		DNS:                PodPeer{Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		IngressController:  PodPeer{Namespace: "ingress-nginx"},
		GatewayTLSPort:     443,
		PolicyGate:         PolicyGate{Enabled: true, Image: ReleaseImage, Timeout: defaultPolicyGateTimeout},
		TCPGateway:         TCPGateway{Pods: PodPeer{Namespace: "challenge-hook", Labels: map[string]string{"app.kubernetes.io/name": "challenge-hook-tcp-gateway"}}},

		PrePullMaxImagesPerDefinition: defaultPrePullMaxImagesPerDefinition,
		PrePullMaxImages:              defaultPrePullMaxImages,
	}
}

// The pre-pull caps' defaults. A typical definition has one to three images, and one of several
// pods seldom more than eight. On every node, each pre-pulled image is a pause container
// (requesting 1m CPU and 4Mi memory, 2.2 MiB resident) and, above all, the image on disk, and each
// definition a Pod of the node's --max-pods (110 by default): 32 images in all is at most 128 Mi
// requested and 32 Pods, leaving most of a node to the instances.
const (
	defaultPrePullMaxImagesPerDefinition = 8
	defaultPrePullMaxImages              = 32
)

// RegisterFlags registers the flags that set c on fs, c's current values as their defaults. It is
// the one parser of the hook's configuration: the binary's server and render use it, and so do the
// golden tests, for testdata/dev.flags and each case's flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.registerEndpointFlags(fs)
	c.registerPodFlags(fs)
	c.registerNetworkFlags(fs)
	c.registerTrustFlags(fs)
}

// registerEndpointFlags registers where players reach instances: node ports, Ingresses, a Gateway.
func (c *Config) registerEndpointFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.PublicHost, "public-host", c.PublicHost, "`host` players use for NodePort endpoints")
	fs.StringVar(&c.IngressDomain, "ingress-domain", c.IngressDomain, "parent `domain` of per-instance HTTP hosts <instanceId>.<domain>")
	fs.StringVar(&c.IngressClassName, "ingress-class", c.IngressClassName, "`class` name of Ingress children (empty: the cluster default)")
	flagfunc.Var(fs, "ingress-scheme", c.IngressScheme, "`scheme` of HTTP endpoint URLs: http or https", flagfunc.OneOf(&c.IngressScheme, "http", "https"))
	flagfunc.Var(fs, "gateway", "", "Gateway API Gateway (`namespace/name`) that routes players: HTTP exposures become HTTPRoutes instead of Ingresses, TLS exposures TLSRoutes (empty: Ingresses, and no TLS exposures)",
		func(v string) error {
			if v == "" {
				c.Gateway = nil
				return nil
			}
			ref, err := ParseGatewayRef(v)
			if err != nil {
				return err
			}
			c.Gateway = &ref
			return nil
		})
	fs.StringVar(&c.GatewaySectionName, "gateway-section-name", c.GatewaySectionName, "`listener` of the Gateway that HTTPRoutes attach to (empty: every listener that admits them)")
	fs.StringVar(&c.GatewayTLSSectionName, "gateway-tls-section-name", c.GatewayTLSSectionName, "`listener` of the Gateway that TLSRoutes attach to (empty: every listener that admits them)")
	flagfunc.Var(fs, "gateway-tls-port", strconv.Itoa(int(c.GatewayTLSPort)), "`port` of the Gateway's TLS listener, given to players in TLS endpoints", flagfunc.Port(&c.GatewayTLSPort))
	flagfunc.Var(fs, "gateway-pod-namespace", c.GatewayDataPlane.Namespace, "`namespace` of the Gateway's data-plane Pods, the only source of HTTP and TLS exposures with --gateway (empty: the Gateway's namespace)",
		flagfunc.Namespace(&c.GatewayDataPlane.Namespace))
	flagfunc.Var(fs, "gateway-pod-labels", flagfunc.JoinLabels(c.GatewayDataPlane.Labels), "`labels` (k=v,...) of the Gateway's data-plane Pods (empty: gateway.networking.k8s.io/gateway-name=<the Gateway's name>)",
		flagfunc.Labels(&c.GatewayDataPlane.Labels))
	flagfunc.Var(fs, "tcp-gateway-address", joinHostPort(c.TCPGateway.Host, c.TCPGateway.Port),
		"public `host:port` of the TCP gateway (manifests/components/tcp-gateway), e.g. tcp.ctf.example.org:1337: players of TCP exposures connect there with nc and type their instance's token; needs --tcp-gateway-key-file (empty: TCP exposures are refused, TCPGatewayNotConfigured)",
		func(v string) error {
			host, port, err := parsePublicAddress(v)
			if err != nil {
				return err
			}
			c.TCPGateway.Host, c.TCPGateway.Port = host, port
			return nil
		})
	flagfunc.Var(fs, "tcp-gateway-websocket-url", c.TCPGateway.WebSocketURL,
		"public WebSocket `URL` of the TCP gateway, ws:// or wss:// with the path /ws/ and no 'ws' in its host (wsrx rewrites it), e.g. wss://tcp.ctf.example.org/ws/: each TCP endpoint's webSocketURL is it followed by the instance's token, for wsrx, websocat -b and the player page's terminal (empty: no WebSocket URL in endpoints)",
		func(v string) error {
			u, err := parseWebSocketBase(v)
			if err != nil {
				return err
			}
			c.TCPGateway.WebSocketURL = u
			return nil
		})
}

// registerPodFlags registers what the hook gives every instance's Pod besides the template: the
// pre-pull and policy gate images, the lifetime defaults.
func (c *Config) registerPodFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.PrePullImage, "prepull-image", c.PrePullImage, "`image` of this hook, whose /pause the pre-pull DaemonSets run (manifests/components/prepull; empty: POST /prepull/sync answers 503)")
	fs.BoolVar(&c.PolicyGate.Enabled, "policy-gate", c.PolicyGate.Enabled, "start every instance Pod with an init container (--policy-gate-image) that holds the challenge's containers until the Pod's NetworkPolicy is enforced; false: they may send and receive their first packets before it, on policy agents that learn a Pod from its status (kube-network-policies, kind's)")
	fs.StringVar(&c.PolicyGate.Image, "policy-gate-image", c.PolicyGate.Image, "`image` of this hook, whose /challenge-hook wait-for-policy the policy gate runs (changing it recreates every running instance's Pod: change it between events)")
	flagfunc.Var(fs, "policy-gate-target", c.PolicyGate.Target, "IPv4 `address:port` the policy gate probes from inside each new Pod: every instance's NetworkPolicy must deny it, and it must answer (accept or refuse) a Pod no policy selects (empty: the Pod's node on the kubelet port 10250)",
		flagfunc.IPv4AddrPort(&c.PolicyGate.Target))
	flagfunc.Var(fs, "policy-gate-timeout", c.PolicyGate.Timeout.String(), "how long (`duration`) the policy gate waits for the NetworkPolicy to be enforced before it fails (the instance shows Error and the kubelet retries)", flagfunc.PositiveDuration(&c.PolicyGate.Timeout))
	flagfunc.Var(fs, "prepull-max-images-per-definition", strconv.Itoa(c.PrePullMaxImagesPerDefinition),
		"most distinct images (`number`) one definition's pre-pull DaemonSet holds, each a container on every node; a definition with more is not pre-pulled (TooManyImages)",
		flagfunc.PositiveInt(&c.PrePullMaxImagesPerDefinition))
	flagfunc.Var(fs, "prepull-max-images", strconv.Itoa(c.PrePullMaxImages),
		"most images (`number`) the pre-pull DaemonSets of every definition hold together on each node, taken by the definitions in the order they were created; one that does not fit is not pre-pulled (TooManyImages)",
		flagfunc.PositiveInt(&c.PrePullMaxImages))
	flagfunc.Var(fs, "max-instances-per-owner", strconv.Itoa(c.MaxInstancesPerOwner),
		"most instances (`number`) one owner runs at once in a namespace; the owner's others are Queued and start in creation order as these end; with a limit, every Challenge must carry the label "+LabelOwner+"=<spec.owner> (0: no limit)",
		flagfunc.NonNegativeInt(&c.MaxInstancesPerOwner))
	fs.StringVar(&c.ClusterDomain, "cluster-domain", c.ClusterDomain, "cluster DNS `suffix`, for ClusterIP endpoints")
	flagfunc.Var(fs, "default-timeout", c.DefaultTimeout.String(), "instance lifetime (`duration`) when neither the Challenge nor its definition sets one", flagfunc.PositiveDuration(&c.DefaultTimeout))
	flagfunc.Var(fs, "default-max-lifetime", c.DefaultMaxLifetime.String(), "lifetime cap (`duration`), extensions included, when the definition sets no maxLifetime", flagfunc.PositiveDuration(&c.DefaultMaxLifetime))
	flagfunc.Var(fs, "expiry-warning", c.ExpiryWarning.String(), "how long (`duration`) before expiry the ExpiringSoon condition is True, and before an idle stop IdleSoon (at most half the idleTimeout); the hook asks to be woken then (0s: never)", flagfunc.NonNegativeDuration(&c.ExpiryWarning))
}

// registerNetworkFlags registers where the cluster's networks and platform Pods are, for each
// instance's NetworkPolicy.
func (c *Config) registerNetworkFlags(fs *flag.FlagSet) {
	flagfunc.Var(fs, "pod-cidrs", "", "the cluster's Pod `CIDRs`, comma-separated: refused as egress destinations and as NodePort/LoadBalancer sources (empty: every private and CGNAT range)",
		flagfunc.CIDRs(&c.PodCIDRs, "the cluster's Pod CIDRs, e.g. 10.244.0.0/16 (kubectl get nodes -o jsonpath='{.items[*].spec.podCIDR}' lists each node's part)"))
	flagfunc.Var(fs, "service-cidrs", "", "the cluster's Service `CIDRs`, comma-separated: refused as egress destinations",
		flagfunc.CIDRs(&c.ServiceCIDRs, "the cluster's Service CIDRs, e.g. 10.96.0.0/12 (the API server's --service-cluster-ip-range)"))
	flagfunc.Var(fs, "node-cidrs", "", "the nodes' `CIDRs`, comma-separated: refused as egress destinations (needed where nodes have public addresses)",
		flagfunc.CIDRs(&c.NodeCIDRs, "the nodes' own addresses, e.g. 203.0.113.0/24 (kubectl get nodes -o wide)"))
	flagfunc.Var(fs, "api-server-cidrs", "", "the API server's `CIDRs`, comma-separated: refused as egress destinations (needed where its endpoint is public)",
		flagfunc.CIDRs(&c.APIServerCIDRs, "the API server's own addresses, e.g. 203.0.113.10/32 (kubectl -n default get endpointslices -l kubernetes.io/service-name=kubernetes)"))
	flagfunc.Var(fs, "dns-namespace", c.DNS.Namespace, "`namespace` of the cluster DNS Pods, the only in-cluster egress destination (port 53) of instances with dns: true or egress: true", flagfunc.Namespace(&c.DNS.Namespace))
	flagfunc.Var(fs, "dns-pod-labels", flagfunc.JoinLabels(c.DNS.Labels), "`labels` (k=v,...) of the cluster DNS Pods", flagfunc.Labels(&c.DNS.Labels))
	flagfunc.Var(fs, "node-local-dns", c.NodeLocalDNS, "`address` of a node-local DNS cache, also allowed on port 53 (empty: none)", flagfunc.IPv4(&c.NodeLocalDNS))
	flagfunc.Var(fs, "ingress-controller-namespace", c.IngressController.Namespace, "`namespace` of the ingress controller's Pods, the only source of HTTP exposures",
		flagfunc.Namespace(&c.IngressController.Namespace))
	flagfunc.Var(fs, "ingress-controller-pod-labels", flagfunc.JoinLabels(c.IngressController.Labels), "`labels` (k=v,...) of the ingress controller's Pods (empty: every Pod of its namespace)",
		flagfunc.Labels(&c.IngressController.Labels))
	flagfunc.Var(fs, "tcp-gateway-namespace", c.TCPGateway.Pods.Namespace, "`namespace` of the TCP gateway's Pods, the only source of TCP exposures",
		flagfunc.Namespace(&c.TCPGateway.Pods.Namespace))
	flagfunc.Var(fs, "tcp-gateway-pod-labels", flagfunc.JoinLabels(c.TCPGateway.Pods.Labels), "`labels` (k=v,...) of the TCP gateway's Pods (empty: every Pod of its namespace)",
		flagfunc.Labels(&c.TCPGateway.Pods.Labels))
}

// registerTrustFlags registers what the hook believes of a Challenge, whose author is the
// platform, not the organizer.
func (c *Config) registerTrustFlags(fs *flag.FlagSet) {
	fs.BoolFunc("inline-templates", "accept Challenges with an inline spec.template; false: only ChallengeDefinitions say what runs, and an inline template is refused (InvalidSpec) (default "+
		strconv.FormatBool(!c.RefuseInlineTemplates)+")", func(v string) error {
		allow, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("expected true or false")
		}
		c.RefuseInlineTemplates = !allow
		return nil
	})
	flagfunc.Var(fs, "definition-namespaces", "", "the only `namespaces` (comma-separated) a spec.definitionRef may point to; others are refused (InvalidSpec) and never fetched (empty: any)",
		flagfunc.Namespaces(&c.DefinitionNamespaces))
	flagfunc.Var(fs, "definition-grants", joinGrants(c.DefinitionGrants), "`pairs` <challenge-namespace>=<definition-namespace> (comma-separated; * in the first stands for any run of characters, e.g. team-*=ctf): "+
		"the Challenges of the first may use the ChallengeDefinitions of the second, and so hold every owner's dynamic flags of them; a Challenge uses its own namespace's definitions only, without a grant (refused: InvalidSpec, never fetched)",
		func(v string) error {
			grants, err := ParseDefinitionGrants(v)
			if err != nil {
				return err
			}
			c.DefinitionGrants = grants
			return nil
		})
}

// parsePublicAddress parses the host:port players connect to: a DNS name or an IP address, and a
// port; empty is none.
func parsePublicAddress(v string) (string, int32, error) {
	if v == "" {
		return "", 0, nil
	}
	const expected = "expected the public host:port players connect to, such as tcp.ctf.example.org:1337 or 203.0.113.7:1337"
	host, portText, err := net.SplitHostPort(v)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", expected, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("%s: port %q is not between 1 and 65535", expected, portText)
	}
	if _, err := netip.ParseAddr(host); err != nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
		return "", 0, fmt.Errorf("%s: host %q is neither a DNS name (lower case) nor an IP address", expected, host)
	}
	return host, int32(port), nil
}

// parseWebSocketBase checks the gateway's public WebSocket URL, to which each endpoint appends its
// token: ws:// or wss://, a host players resolve, the path /ws/ (the gateway serves GET
// /ws/<token>), nothing after it; empty is none. It reaches shells (websocat -b <url>) and the
// player page's Content-Security-Policy, so it holds only what URLs of that shape are made of. The
// host holds no "ws": wsrx's desktop client probes a mapping every 5 s at its URL with every "ws"
// replaced by "http", and drops it when the probe fails (the gateway answers /http/<token>, but
// a renamed host is another site).
func parseWebSocketBase(v string) (string, error) {
	if v == "" {
		return "", nil
	}
	const expected = "expected the TCP gateway's public WebSocket URL, ws:// or wss://, a host and an optional port, and the path /ws/, such as wss://tcp.ctf.example.org/ws/"
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: %w", expected, err)
	case u.Scheme != "ws" && u.Scheme != "wss":
		return "", fmt.Errorf("%s: the scheme is %q: write ws:// or wss:// (wss behind TLS)", expected, u.Scheme)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.HasSuffix(v, "?") || strings.HasSuffix(v, "#"):
		return "", fmt.Errorf("%s: remove the user, query or fragment: the token follows the path", expected)
	case u.Path != "/ws/" || u.RawPath != "":
		return "", fmt.Errorf("%s: the path %q must be /ws/, where the gateway serves its WebSocket listener (the token follows it)", expected, u.Path)
	case strings.Contains(u.Host, "ws"):
		return "", fmt.Errorf("%s: the host %q holds \"ws\", which wsrx's desktop client replaces with \"http\" in the URL it probes every 5 s, and then drops the mapping: give the gateway a name without it", expected, u.Host)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return "", fmt.Errorf("%s: port %q is not between 1 and 65535", expected, port)
		}
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil && !ip.Is4() || err != nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
		return "", fmt.Errorf("%s: host %q is neither a DNS name (lower case) nor an IPv4 address", expected, host)
	}
	return v, nil
}

// joinHostPort is host:port, or empty without a host.
func joinHostPort(host string, port int32) string {
	if host == "" {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}
