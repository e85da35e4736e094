package sync

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// TestTCPTokenLeadsToTheInstancesOwnService: the token of a TCP endpoint opens, with the gateway's
// key and no other, to the observed ClusterIP of the exposure's own Service and the Service port
// the hook declared for the exposure's container port, with the exposure's options.
func TestTCPTokenLeadsToTheInstancesOwnService(t *testing.T) {
	req, cfg := routedCase(t, "tcp-creating-to-running-proof-of-work-and-proxy-protocol")
	resp := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.PhaseRunning, resp.Status.Phase, resp.Status.Message)
	svc, found := findByName(req.Children.Services, "crypto-oracle-team9")
	require.True(t, found)
	declared := declaredServicePorts(t, resp, "crypto-oracle-team9")
	want := map[string]tcptoken.Target{
		"oracle": {Service: netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), uint16(declared[1337])), ProofOfWorkBits: 22},
		"admin":  {Service: netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), uint16(declared[8000])), ProxyProtocol: true},
	}
	require.Len(t, resp.Status.Endpoints, len(want))
	for _, ep := range resp.Status.Endpoints {
		require.Equal(t, "tcp.challenges.localhost", ep.Host)
		require.Equal(t, int32(1337), ep.Port)
		require.Equal(t, "nc tcp.challenges.localhost 1337", ep.Command)
		got, err := tcptoken.Open(cfg.TCPGateway.Key, ep.Token)
		require.NoError(t, err, ep.Name)
		require.Equal(t, want[ep.Name], got, ep.Name)
		_, err = tcptoken.Open([]byte(strings.Repeat("k", tcptoken.MinKeyBytes)), ep.Token)
		require.ErrorIs(t, err, tcptoken.ErrInvalid, "another key opens the token")
		require.NotContains(t, ep.Token, "team-9", "the token carries the owner in the clear")
	}
}

// declaredServicePorts maps the container ports of the Service the answer declares to its ports.
func declaredServicePorts(t *testing.T, resp Response, name string) map[int32]int32 {
	out := map[int32]int32{}
	for _, child := range resp.Children {
		var svc corev1.Service
		raw, err := json.Marshal(child)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &svc))
		if svc.Kind == "Service" && svc.Name == name {
			for _, p := range svc.Spec.Ports {
				out[int32(p.TargetPort.IntValue())] = p.Port
			}
		}
	}
	require.NotEmpty(t, out, "no Service %s declared", name)
	return out
}

// TestTCPEndpointOnlyOnceItsServiceIsObserved: the token names an address, so a TCP endpoint is
// published only once the exposure's own Service is observed among the instance's children with
// a ClusterIP and the Service port the hook declared for it: before, the address may be nobody's
// or another's (a Service of that name that is not the instance's, or one still of its old ports).
func TestTCPEndpointOnlyOnceItsServiceIsObserved(t *testing.T) {
	const service = "pwn-echo-team42"
	req, cfg := routedCase(t, "tcp-2-creating-to-running-token-published")
	require.Equal(t, v1alpha1.PhaseRunning, Sync(req, goldenNow, cfg).Status.Phase)
	for _, tc := range []struct {
		name    string
		change  func(svc *ObservedService) bool // false: the Service is not observed
		waiting string
	}{
		{"no Service", func(*ObservedService) bool { return false }, "the ClusterIP of Service " + service},
		{"no ClusterIP yet", func(svc *ObservedService) bool { svc.Spec.ClusterIP = ""; return true }, "the ClusterIP of Service " + service},
		{"headless", func(svc *ObservedService) bool { svc.Spec.ClusterIP = corev1.ClusterIPNone; return true }, "the ClusterIP of Service " + service},
		{"IPv6", func(svc *ObservedService) bool { svc.Spec.ClusterIP = "fd00::17"; return true }, "an IPv4 ClusterIP of Service " + service},
		{"the ports before it was TCP", func(svc *ObservedService) bool {
			svc.Spec.Ports = []corev1.ServicePort{{Name: "pwn", Port: 1337, TargetPort: intstr.FromInt32(1337), Protocol: corev1.ProtocolTCP, NodePort: 31337}}
			return true
		}, "port "},
		{"its port to another container port", func(svc *ObservedService) bool {
			svc.Spec.Ports[0].TargetPort = intstr.FromInt32(22)
			return true
		}, "port "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, cfg := routedCase(t, "tcp-2-creating-to-running-token-published")
			var observed []ObservedService
			for _, svc := range req.Children.Services {
				if svc.Metadata.Name != service || tc.change(&svc) {
					observed = append(observed, svc)
				}
			}
			req.Children.Services = observed
			resp := Sync(req, goldenNow, cfg)
			require.Empty(t, resp.Status.Endpoints)
			require.Equal(t, v1alpha1.PhaseCreating, resp.Status.Phase)
			require.True(t, strings.HasPrefix(resp.Status.Message, "waiting for "+tc.waiting), resp.Status.Message)
			require.Contains(t, childKindsIn(t, resp), "Service/"+service, "the Service is declared")
		})
	}
}

// TestNoTokenOutsideTheServiceCIDRs: the hook mints no token for a ClusterIP outside --service-cidrs
// (loopback, a metadata address, an address of a range the hook was not told), nor without
// --service-cidrs: the instance is Error with what to set, and keeps every child it declared.
func TestNoTokenOutsideTheServiceCIDRs(t *testing.T) {
	const service = "pwn-echo-team42"
	for _, tc := range []struct {
		clusterIP string
		cidrs     []string
		says      string
	}{
		{"127.0.0.1", []string{"10.96.0.0/12"}, "the ClusterIP 127.0.0.1 of Service " + service + " is outside --service-cidrs (10.96.0.0/12)"},
		{"169.254.169.254", []string{"10.96.0.0/12"}, "the ClusterIP 169.254.169.254 of Service " + service + " is outside --service-cidrs"},
		{"10.96.0.1", []string{"10.100.0.0/16", "10.101.0.0/16"}, "the ClusterIP 10.96.0.1 of Service " + service + " is outside --service-cidrs (10.100.0.0/16,10.101.0.0/16)"},
		{"10.96.41.17", nil, "the hook has no --service-cidrs"},
	} {
		t.Run(tc.clusterIP, func(t *testing.T) {
			req, cfg := routedCase(t, "tcp-2-creating-to-running-token-published")
			cfg.ServiceCIDRs = tc.cidrs
			for i := range req.Children.Services {
				if req.Children.Services[i].Metadata.Name == service {
					req.Children.Services[i].Spec.ClusterIP = tc.clusterIP
				}
			}
			resp := Sync(req, goldenNow, cfg)
			require.Empty(t, resp.Status.Endpoints, "no token")
			require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
			require.True(t, strings.HasPrefix(resp.Status.Message, tc.says), resp.Status.Message)
			require.Contains(t, resp.Status.Message, "set --service-cidrs")
			kinds := childKindsIn(t, resp)
			require.Contains(t, kinds, "Service/"+service, "the Service is kept")
			require.Contains(t, kinds, "Pod/"+service, "the Pod is kept")
		})
	}
}

// TestTCPServicePortsAreDerivedFromTheUID: a TCP exposure's Service port is in the range, depends
// on the Challenge's uid (a Challenge of the same name created again draws another one), is
// stable, and never takes a port another exposure of the Service holds.
func TestTCPServicePortsAreDerivedFromTheUID(t *testing.T) {
	component := func(expose ...v1alpha1.Expose) *component {
		c := &component{name: "shell", spec: v1alpha1.PodTemplate{Expose: expose}}
		return c
	}
	instanceOf := func(uid string) *instance {
		return &instance{parent: Challenge{Metadata: ChallengeMeta{Name: "pwn", Namespace: "ctf", UID: uid}}}
	}
	tcp := component(v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeTCP})
	seen := map[int32]bool{}
	for i := range 200 {
		ports := tcpServicePorts(instanceOf(fmt.Sprintf("uid-%d", i)), tcp)
		port := ports[1337]
		require.GreaterOrEqual(t, port, int32(tcpServicePortMin))
		require.Less(t, port, int32(tcpServicePortMin+tcpServicePortCount))
		require.Equal(t, ports, tcpServicePorts(instanceOf(fmt.Sprintf("uid-%d", i)), tcp), "not stable")
		seen[port] = true
	}
	require.Greater(t, len(seen), 190, "200 uids drew only %d ports", len(seen))

	// An HTTP exposure of the same pod keeps its container port on the Service: a TCP port that
	// would draw it takes the next one up.
	in := instanceOf("uid-7")
	drawn := tcpServicePorts(in, tcp)[1337]
	both := component(v1alpha1.Expose{Port: drawn, Type: v1alpha1.ExposeHTTP}, v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeTCP})
	require.Equal(t, drawn+1, tcpServicePorts(in, both)[1337])
	// Two TCP exposures never share a Service port, whichever the hash gives.
	many := component()
	for p := range int32(8) {
		many.spec.Expose = append(many.spec.Expose, v1alpha1.Expose{Port: 1000 + p, Type: v1alpha1.ExposeTCP})
	}
	ports := tcpServicePorts(in, many)
	require.Len(t, ports, 8)
	distinct := map[int32]bool{}
	for _, p := range ports {
		distinct[p] = true
	}
	require.Len(t, distinct, 8)
}

// TestTCPGatewayNotConfiguredKeepsEverything: a hook without a TCP gateway (no address, or no key)
// refuses a template that exposes a port as TCP, saying which flags to set, and keeps every child
// of a running instance as it was.
func TestTCPGatewayNotConfiguredKeepsEverything(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		flags  []string
	}{
		{"no address", func(cfg *Config) { cfg.TCPGateway.Host = "" }, []string{"--tcp-gateway-address"}},
		{"no key", func(cfg *Config) { cfg.TCPGateway.Key = nil }, []string{"--tcp-gateway-key-file"}},
		{"a short key", func(cfg *Config) { cfg.TCPGateway.Key = cfg.TCPGateway.Key[:tcptoken.MinKeyBytes-1] }, []string{"--tcp-gateway-key-file"}},
		{"neither", func(cfg *Config) { cfg.TCPGateway = TCPGateway{} }, []string{"--tcp-gateway-address", "--tcp-gateway-key-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, cfg := routedCase(t, "tcp-2-creating-to-running-token-published")
			tc.change(&cfg)
			resp := Sync(req, goldenNow, cfg)
			require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
			require.Equal(t, v1alpha1.ReasonTCPGatewayNotConfigured, resp.Status.Reason)
			for _, flag := range tc.flags {
				require.Contains(t, resp.Status.Message, flag)
			}
			require.Len(t, resp.Children, req.Children.Count(), "every observed child is kept")
			for _, child := range resp.Children {
				require.IsType(t, keptChild{}, child, "a child is rebuilt rather than kept")
			}
		})
	}
}

// TestTCPExposureValidation: a TCP exposure needs a TCP container port; the gateway's options
// belong to TCP exposures alone, and a proof of work must fit in a token.
func TestTCPExposureValidation(t *testing.T) {
	template := func(protocol string, expose v1alpha1.Expose) v1alpha1.DefinitionSpec {
		return v1alpha1.DefinitionSpec{
			Containers: []v1alpha1.Container{{Name: "pwn", Image: "x", Ports: []v1alpha1.ContainerPort{{ContainerPort: 1337, Protocol: protocol}}}},
			Expose:     []v1alpha1.Expose{expose},
		}
	}
	for _, tc := range []struct {
		name     string
		template v1alpha1.DefinitionSpec
		want     string // "" valid
	}{
		{"TCP", template("TCP", v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeTCP, ProofOfWorkBits: tcptoken.MaxProofOfWorkBits, ProxyProtocol: true}), ""},
		{"UDP port", template("UDP", v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeTCP}), "spec.expose[0].port: Invalid value: 1337: TCP needs a TCP port, this one is UDP"},
		{"too much work", template("TCP", v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeTCP, ProofOfWorkBits: tcptoken.MaxProofOfWorkBits + 1}), "spec.expose[0].proofOfWorkBits: Invalid value: 29: not between 0 and 28"},
		{"negative work", template("TCP", v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeTCP, ProofOfWorkBits: -1}), "spec.expose[0].proofOfWorkBits: Invalid value: -1"},
		{"work on a NodePort", template("TCP", v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeNodePort, ProofOfWorkBits: 20}), "spec.expose[0].proofOfWorkBits: Forbidden: only TCP exposures"},
		{"PROXY on HTTP", template("TCP", v1alpha1.Expose{Port: 1337, Type: v1alpha1.ExposeHTTP, ProxyProtocol: true}), "spec.expose[0].proxyProtocol: Forbidden: only TCP exposures"},
		{"mixed with NodePort", v1alpha1.DefinitionSpec{
			Containers: []v1alpha1.Container{{Name: "pwn", Image: "x", Ports: []v1alpha1.ContainerPort{{ContainerPort: 1337}, {ContainerPort: 1338}}}},
			Expose:     []v1alpha1.Expose{{Port: 1337, Type: v1alpha1.ExposeTCP}, {Port: 1338, Type: v1alpha1.ExposeNodePort}},
		}, "TCP and NodePort cannot be mixed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ValidateDefinition(tc.template, field.NewPath("spec"))
			if tc.want == "" {
				require.Empty(t, errs)
				return
			}
			require.Contains(t, errs.ToAggregate().Error(), tc.want)
		})
	}
}

// TestTCPTokenForTheInstancesWholeLife: the token stays the same while the instance lives
// (stopped and started, restarted, extended: its Service, and so its ClusterIP and port, stay), and
// a Challenge of the same name created again, whose Service were to get the same ClusterIP, gets
// another token that leads to another port.
func TestTCPTokenForTheInstancesWholeLife(t *testing.T) {
	const name = "tcp-2-creating-to-running-token-published"
	tokenOf := func(t *testing.T, change func(req *Request)) string {
		req, cfg := routedCase(t, name)
		change(&req)
		resp := Sync(req, goldenNow, cfg)
		require.Equal(t, v1alpha1.PhaseRunning, resp.Status.Phase, resp.Status.Message)
		require.Len(t, resp.Status.Endpoints, 1)
		return resp.Status.Endpoints[0].Token
	}
	token := tokenOf(t, func(*Request) {})

	req, cfg := routedCase(t, name)
	req.Parent.Spec.Stopped = true
	stopped := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.PhaseStopped, stopped.Status.Phase)
	require.Contains(t, childKindsIn(t, stopped), "Service/pwn-echo-team42", "a stopped instance keeps its Service, so its address")

	for what, change := range map[string]func(*Request){
		"started again": func(req *Request) { req.Parent.Spec.Stopped = false },
		"restarted": func(req *Request) {
			req.Parent.Spec.RestartedAt = "2026-11-01T12:04:00Z"
			req.Children.Pods[0].Metadata.Annotations.RestartedAt = req.Parent.Spec.RestartedAt
		},
		"extended": func(req *Request) { req.Parent.Spec.ExpiresAt = "2026-11-01T12:50:00Z" },
	} {
		require.Equal(t, token, tokenOf(t, change), what)
	}

	successor := tokenOf(t, func(req *Request) {
		req.Parent.Metadata.UID = "0b9f3c2e-1d4a-4e6b-8f70-5a2c9d1e3b47"
		// Its Service as the hook declares it for the new uid, at the old one's ClusterIP.
		declared := declaredServicePorts(t, Sync(*req, goldenNow, cfg), "pwn-echo-team42")
		req.Children.Services[0].Spec.Ports[0].Port = declared[1337]
	})
	require.NotEqual(t, token, successor)
	was, err := tcptoken.Open(cfg.TCPGateway.Key, token)
	require.NoError(t, err)
	now, err := tcptoken.Open(cfg.TCPGateway.Key, successor)
	require.NoError(t, err)
	require.Equal(t, was.Service.Addr(), now.Service.Addr(), "the test gives both the same ClusterIP")
	require.NotEqual(t, was.Service.Port(), now.Service.Port(), "the successor's Service port is the deleted instance's")
}
