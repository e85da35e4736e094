//go:build e2enode

package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// The TCP gateway on the test node: the objects of manifests/components/tcp-gateway as shipped,
// but for the image (the hook binary under test, local/challenge-hook:v1), a short time to present
// the token, and the LoadBalancer Service's node port, fixed so that the hook (started before any
// test) publishes it: the node has no load balancer, and a cloud's sends to that node port too.
const (
	tcpGatewayNamespace = "challenge-hook"
	tcpGatewayName      = "challenge-hook-tcp-gateway"
	tcpGatewayKeySecret = "challenge-hook-tcp-gateway-key"
	tcpGatewayNodePort  = 31337
	// tcpGatewayTokenTimeout is the gateway's --token-timeout here: a player who sends no token
	// is closed after it.
	tcpGatewayTokenTimeout = 2 * time.Second
	tcpGatewayComponent    = "manifests/components/tcp-gateway/gateway.yaml"
)

// tcpGatewayKey is the gateway key (the Secret's value and the hook's --tcp-gateway-key-file), or
// "" when the hook under test has no TCP gateway (setUp).
var tcpGatewayKey string

// tcpGatewayAddr is the address the hook publishes for TCP exposures, and players connect to.
func tcpGatewayAddr() string { return hostPort(cfg.nodeIP, tcpGatewayNodePort) }

// pwnDefinition is a pwn-style challenge: raw TCP on 1337 (ctfbox writes the owner's dynamic flag
// and closes) through the TCP gateway, and nothing else exposed (8080 serves the readiness probe
// and the flag too: no player may reach it).
const pwnDefinition = `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: ChallengeDefinition
metadata: {name: pwn}
spec:
  containers:
    - name: pwn
      image: local/ctfbox:v1
      ports:
        - {name: http, containerPort: 8080}
        - {name: pwn, containerPort: 1337}
      readinessProbe:
        httpGet: {path: /healthz, port: 8080}
        periodSeconds: 1
  expose:
    - {port: 1337, type: TCP}
  timeout: 30m
  maxLifetime: 2h
  flag: {dynamic: true, prefix: CTF, env: FLAG}
`

// tcpEndpoint is a TCP exposure's entry in status.endpoints.
type tcpEndpoint struct {
	Host, Token, Command string
	Port                 int64
}

// tcpEndpointOf is the Challenge's one endpoint with a token.
func tcpEndpointOf(t *testing.T, obj *unstructured.Unstructured) tcpEndpoint {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(obj.Object, "status", "endpoints")
	var found []tcpEndpoint
	for _, raw := range eps {
		ep, _ := raw.(map[string]any)
		if token, _ := ep["token"].(string); token != "" {
			e := tcpEndpoint{Token: token}
			e.Host, _ = ep["host"].(string)
			e.Port, _ = ep["port"].(int64)
			e.Command, _ = ep["command"].(string)
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("Challenge %s: want one endpoint with a token, got %v", obj.GetName(), eps)
	}
	return found[0]
}

// playerResult is what a player got from the gateway.
type playerResult struct {
	prompt string // what the gateway wrote before the token
	got    string // everything after, until the connection closed
	closed bool   // the connection closed (EOF) within the read deadline
	took   time.Duration
}

// playGateway is a player at the gateway, as `nc` (or pwntools' sendlineafter) is: connect, read
// the prompt, send the token line (none when token is "") and then after, read everything until
// the connection closes or wait passes.
func playGateway(addr, token, after string, wait time.Duration) (playerResult, error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return playerResult{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	r := bufio.NewReader(c)
	var res playerResult
	prompt := make([]byte, len("token: "))
	if _, err := io.ReadFull(r, prompt); err != nil {
		return res, fmt.Errorf("read the prompt: %w (got %q)", err, prompt)
	}
	res.prompt = string(prompt)
	if token != "" {
		if _, err := io.WriteString(c, token+"\n"+after); err != nil {
			return res, fmt.Errorf("send the token: %w", err)
		}
	}
	rest, err := io.ReadAll(r)
	res.got, res.took = string(rest), time.Since(start)
	var timeout net.Error
	switch {
	case err == nil:
		res.closed = true
	case errors.As(err, &timeout) && timeout.Timeout():
	default:
		res.closed = true // reset by the gateway: closed all the same
	}
	return res, nil
}

// flagThroughGateway retries a player with a valid token until a flag comes (kube-proxy and the
// policy agent learn a new Pod a moment after it is ready, when the status says Running; until
// then the gateway answers that the instance is not reachable), and checks it is want.
func flagThroughGateway(ctx context.Context, t *testing.T, token, want, when string) {
	t.Helper()
	var last playerResult
	var lastErr error
	err := e2eutil.WaitUntil(ctx, 30*time.Second, "the flag through the gateway "+when, func() (bool, error) {
		last, lastErr = playGateway(tcpGatewayAddr(), token, "", 5*time.Second)
		return lastErr == nil && dynamicFlagAnywhere.MatchString(last.got), nil
	})
	if err != nil {
		t.Fatalf("%s: %v; last answer %q, error %v", when, err, last.got, lastErr)
	}
	if last.prompt != "token: " {
		t.Errorf("%s: the gateway's prompt is %q, want %q", when, last.prompt, "token: ")
	}
	if got := strings.TrimSpace(last.got); got != want {
		t.Errorf("%s: the gateway led to %q, want the owner's flag %q", when, got, want)
	}
	if !last.closed {
		t.Errorf("%s: the instance closed after the flag, the player's connection did not end", when)
	}
}

// httpRequest follows the token where a refused connection could lead to an HTTP server (which
// says nothing until asked): ctfbox answers GET / with its flag.
const httpRequest = "GET / HTTP/1.0\r\n\r\n"

// refusedByGateway: a connection with this token (or none), followed by an HTTP request, gets no
// flag of any team, only the gateway's one short line, and is closed within within.
func refusedByGateway(t *testing.T, what, token string, within time.Duration, flags ...string) playerResult {
	t.Helper()
	after := ""
	if token != "" {
		after = httpRequest
	}
	res, err := playGateway(tcpGatewayAddr(), token, after, within+3*time.Second)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return res
	}
	for _, flag := range flags {
		if strings.Contains(res.got, flag) {
			t.Errorf("%s: the gateway led to an instance: got %q", what, res.got)
		}
	}
	if dynamicFlagAnywhere.MatchString(res.got) {
		t.Errorf("%s: got a flag: %q", what, res.got)
	}
	if !res.closed {
		t.Errorf("%s: the connection was still open after %s (got %q)", what, res.took.Round(time.Millisecond), res.got)
	} else if res.took > within+time.Second {
		t.Errorf("%s: closed after %s, want within %s", what, res.took.Round(time.Millisecond), within)
	}
	if len(res.got) > 200 || strings.Count(res.got, "\n") != 1 {
		t.Errorf("%s: want the gateway's one short line, got %q", what, res.got)
	}
	t.Logf("%s: %q, closed after %s", what, strings.TrimSpace(res.got), res.took.Round(time.Millisecond))
	return res
}

var dynamicFlagAnywhere = regexp.MustCompile(`CTF\{[0-9a-f]{16,}\}`)

// TestTCPGateway proves the TCP gateway with real packets: the gateway runs as the component ships
// it (two replicas of the hook's image, its NetworkPolicy enforced, no ServiceAccount token), two
// teams' instances of a pwn challenge run behind it, and the host, standing for a player, connects
// to the one published address: team A's token leads to A's instance (its flag), B's to B's; a
// forged token, a token the gateway key signed for an address outside the instances or for an
// instance's unexposed port, no token at all (after the deadline), a token of a deleted instance
// and that same token once a Challenge of the same name runs again lead nowhere, each with one
// short line and a close. Stop and start keep the token working. The instances' port refuses
// every other source (TestTCPGatewayOnlyTheGatewayReachesTheInstance).
func TestTCPGateway(t *testing.T) {
	if tcpGatewayKey == "" {
		t.Skip("the hook under test has no --tcp-gateway-key-file")
	}
	ctx := e2eutil.TestContext(t)
	installTCPGateway(ctx, t)
	apply(ctx, t, pwnDefinition)
	teams := map[string]string{"pwn-team-a": "team-a", "pwn-team-b": "team-b"}
	for name, owner := range teams {
		apply(ctx, t, fmt.Sprintf(`
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: %s}
spec:
  owner: %s
  definitionRef: {name: pwn}
`, name, owner))
		t.Cleanup(func() { deleteChallenge(context.Background(), t, name, 2*time.Minute) })
	}
	endpoints, flags := map[string]tcpEndpoint{}, map[string]string{}
	for name, owner := range teams {
		running := waitPhase(ctx, t, name, "Running", "Ready", 2*time.Minute)
		ep := checkTCPEndpoint(ctx, t, running)
		endpoints[name], flags[name] = ep, flagFor(t, nsCTF+"/pwn", owner, "CTF")
	}
	a, b := endpoints["pwn-team-a"], endpoints["pwn-team-b"]
	if a.Token == b.Token {
		t.Fatalf("both teams have the token %s", a.Token)
	}

	// Each team's token leads to its own instance; the token is case-insensitive.
	flagThroughGateway(ctx, t, a.Token, flags["pwn-team-a"], "team A's token")
	flagThroughGateway(ctx, t, b.Token, flags["pwn-team-b"], "team B's token")
	flagThroughGateway(ctx, t, strings.ToUpper(a.Token), flags["pwn-team-a"], "team A's token in upper case")
	allFlags := []string{flags["pwn-team-a"], flags["pwn-team-b"]}

	// Forged: A's token with one character changed (which would otherwise still name A's
	// Service), and a token of another key.
	forged := []byte(a.Token)
	forged[len(forged)-1] = map[bool]byte{true: 'b', false: 'a'}[forged[len(forged)-1] == 'a']
	refusedByGateway(t, "a forged token (A's, last character changed)", string(forged), time.Second, allFlags...)
	otherKey := bytes.Repeat([]byte{'k'}, tcptoken.MinKeyBytes)
	target := openToken(t, a.Token)
	foreign, err := tcptoken.Mint(otherKey, target)
	if err != nil {
		t.Fatal(err)
	}
	refusedByGateway(t, "a token of another key for A's Service", foreign, time.Second, allFlags...)
	refusedByGateway(t, "no token, until the deadline", "", tcpGatewayTokenTimeout, allFlags...)

	// Signed with the gateway key, as a leaked key or a compromised gateway could: the gateway's
	// own NetworkPolicy lets it reach only instances, and each instance admits it on its exposed
	// port only.
	bPod, err := kube.CoreV1().Pods(nsCTF).Get(ctx, "pwn-team-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for what, addr := range map[string]string{
		"a signed token for a Pod outside any instance (platform/db:8080)":    hostPort(targets["db"], 8080),
		"a signed token for a Pod outside any instance (platform/db:1337)":    hostPort(targets["db"], 1337),
		"a signed token for B's Pod on its unexposed port 8080":               hostPort(bPod.Status.PodIP, 8080),
		"a signed token for the other namespace's Pod (other/neighbour:8080)": hostPort(targets["neighbour"], 8080),
	} {
		token, err := tcptoken.Mint([]byte(tcpGatewayKey), tcptoken.Target{Service: netip.MustParseAddrPort(addr)})
		if err != nil {
			t.Fatal(err)
		}
		res := refusedByGateway(t, what, token, 10*time.Second, flags["pwn-team-b"])
		if strings.Contains(res.got, "platform-secret") || strings.Contains(res.got, "HTTP/") {
			t.Errorf("%s: reached the Pod: %q", what, res.got)
		}
	}
	// The gateway's own loopback (its metrics and probes on 8082), which no NetworkPolicy sees: the
	// gateway dials nothing outside its --service-cidrs.
	loopback, err := tcptoken.Mint([]byte(tcpGatewayKey), tcptoken.Target{Service: netip.MustParseAddrPort("127.0.0.1:8082")})
	if err != nil {
		t.Fatal(err)
	}
	if res := refusedByGateway(t, "a signed token for the gateway's own loopback (its metrics port)", loopback, 10*time.Second); res.got != "this token leads to no instance\n" {
		t.Errorf("a signed token for the gateway's loopback: %q, want the gateway's refusal", res.got)
	}
	// The control: a signed token for B's Pod on its exposed port does get there, so the refusals
	// above are the policies', not the signing's.
	direct, err := tcptoken.Mint([]byte(tcpGatewayKey), tcptoken.Target{Service: netip.MustParseAddrPort(hostPort(bPod.Status.PodIP, 1337))})
	if err != nil {
		t.Fatal(err)
	}
	flagThroughGateway(ctx, t, direct, flags["pwn-team-b"], "a signed token for B's Pod on its exposed port (the control)")

	// Stop and start: the same token leads to the new process.
	patchChallenge(ctx, t, "pwn-team-a", `{"stopped":true}`)
	waitPhase(ctx, t, "pwn-team-a", "Stopped", "", time.Minute)
	waitPodGone(ctx, t, "pwn-team-a")
	refusedByGateway(t, "A's token while A is stopped", a.Token, 10*time.Second, allFlags...)
	patchChallenge(ctx, t, "pwn-team-a", `{"stopped":false}`)
	started := waitPhase(ctx, t, "pwn-team-a", "Running", "Ready", 2*time.Minute)
	if again := checkTCPEndpoint(ctx, t, started); again != a {
		t.Errorf("started again: endpoint %+v, want the same as before %+v", again, a)
	}
	flagThroughGateway(ctx, t, a.Token, flags["pwn-team-a"], "A's token after stop and start")

	// Deleted: A's token leads nowhere, then neither to a Challenge of the same name and owner
	// created again, whose own new token leads to it.
	aService := openToken(t, a.Token).Service
	deleteChallenge(ctx, t, "pwn-team-a", 2*time.Minute)
	e2eutil.WaitFor(ctx, t, time.Minute, "A's Service gone", func() (bool, error) {
		_, err := kube.CoreV1().Services(nsCTF).Get(ctx, "pwn-team-a", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	refusedByGateway(t, "the deleted instance's token", a.Token, 10*time.Second, allFlags...)
	apply(ctx, t, `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: pwn-team-a}
spec:
  owner: team-a
  definitionRef: {name: pwn}
`)
	successor := checkTCPEndpoint(ctx, t, waitPhase(ctx, t, "pwn-team-a", "Running", "Ready", 2*time.Minute))
	if successor.Token == a.Token {
		t.Fatalf("the same-named successor has the deleted instance's token %s", a.Token)
	}
	t.Logf("the deleted instance's token named %s; its successor's names %s", aService, openToken(t, successor.Token).Service)
	flagThroughGateway(ctx, t, successor.Token, flags["pwn-team-a"], "the successor's own token")
	refusedByGateway(t, "the deleted instance's token, its successor running", a.Token, 10*time.Second, allFlags...)
	flagThroughGateway(ctx, t, b.Token, flags["pwn-team-b"], "team B's token, at the end")
}

// checkTCPEndpoint checks a Running TCP instance's endpoint: the published gateway address, the
// nc line, and a token that the gateway key opens to the instance's own Service, a ClusterIP
// Service without node ports on a port other than the container's.
func checkTCPEndpoint(ctx context.Context, t *testing.T, running *unstructured.Unstructured) tcpEndpoint {
	t.Helper()
	ep := tcpEndpointOf(t, running)
	if hostPort(ep.Host, ep.Port) != tcpGatewayAddr() {
		t.Errorf("%s: endpoint %s, want the gateway's %s", running.GetName(), hostPort(ep.Host, ep.Port), tcpGatewayAddr())
	}
	if want := fmt.Sprintf("nc %s %d", ep.Host, ep.Port); ep.Command != want {
		t.Errorf("%s: command %q, want %q", running.GetName(), ep.Command, want)
	}
	if len(ep.Token) != tcptoken.Length {
		t.Errorf("%s: token of %d characters, want %d", running.GetName(), len(ep.Token), tcptoken.Length)
	}
	target := openToken(t, ep.Token)
	svc, err := kube.CoreV1().Services(nsCTF).Get(ctx, running.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: its Service: %v", running.GetName(), err)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("%s: Service of type %s, want ClusterIP", running.GetName(), svc.Spec.Type)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%d->%s", p.Port, p.TargetPort.String()))
		if p.NodePort != 0 {
			t.Errorf("%s: Service port %d has node port %d", running.GetName(), p.Port, p.NodePort)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.IntValue() != 1337 || svc.Spec.Ports[0].Port == 1337 {
		t.Errorf("%s: Service ports %v, want one, derived, to 1337", running.GetName(), ports)
	}
	if want := hostPort(svc.Spec.ClusterIP, int64(svc.Spec.Ports[0].Port)); target.Service.String() != want {
		t.Errorf("%s: the token leads to %s, want its own Service %s", running.GetName(), target.Service, want)
	}
	return ep
}

func openToken(t *testing.T, token string) tcptoken.Target {
	t.Helper()
	target, err := tcptoken.Open([]byte(tcpGatewayKey), token)
	if err != nil {
		t.Fatalf("the gateway key does not open the published token: %v", err)
	}
	return target
}

// TestTCPGatewayOnlyTheGatewayReachesTheInstance: a TCP instance's port answers the gateway's Pods
// and nobody else, with real packets, by Pod IP and Service: not the node (an unprivileged process
// on the host), not a Pod with the gateway's labels in another namespace or in the instances'
// namespace, not another Pod of the gateway's namespace, not another instance. Each prober's own
// port and a Pod no policy guards answer it (the controls), and the gateway leads a player there
// meanwhile.
func TestTCPGatewayOnlyTheGatewayReachesTheInstance(t *testing.T) {
	if tcpGatewayKey == "" {
		t.Skip("the hook under test has no --tcp-gateway-key-file")
	}
	ctx := e2eutil.TestContext(t)
	installTCPGateway(ctx, t)
	apply(ctx, t, pwnDefinition)
	const victim, attacker = "pwn-victim", "pwn-attacker"
	apply(ctx, t, `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: `+victim+`}
spec:
  owner: team-victim
  definitionRef: {name: pwn}
`)
	t.Cleanup(func() { deleteChallenge(context.Background(), t, victim, 2*time.Minute) })
	// Another instance, with internet egress (its own policy's most open egress).
	apply(ctx, t, fmt.Sprintf(`
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: %s}
spec:
  owner: team-attacker
  template:
    containers:
      - name: attacker
        image: local/ctfbox:v1
        command: [/ctfbox, probe, -listen=:%d, self=tcp://127.0.0.1:%d]
        ports: [{name: ctl, containerPort: %d}]
    egress: true
    timeout: 30m
    maxLifetime: 2h
`, attacker, probeControlPort, probeControlPort, probeControlPort))
	t.Cleanup(func() { deleteChallenge(context.Background(), t, attacker, 2*time.Minute) })

	// Probers outside any instance (no policy selects them: only the victim's policy judges them).
	gatewayLabels := map[string]string{"app.kubernetes.io/name": tcpGatewayName, "app.kubernetes.io/component": "tcp-gateway"}
	probers := map[string]*corev1.Pod{
		"other/gateway-lookalike":        proberPod("gateway-lookalike", nsOther, gatewayLabels),
		"ctf/gateway-lookalike":          proberPod("gateway-lookalike", nsCTF, gatewayLabels),
		"challenge-hook/not-the-gateway": proberPod("not-the-gateway", tcpGatewayNamespace, map[string]string{"app": "not-the-gateway"}),
	}
	for _, p := range probers {
		if _, err := kube.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		})
	}

	running := waitPhase(ctx, t, victim, "Running", "Ready", 2*time.Minute)
	ep := checkTCPEndpoint(ctx, t, running)
	want := flagFor(t, nsCTF+"/pwn", "team-victim", "CTF")
	flagThroughGateway(ctx, t, ep.Token, want, "the victim's token")
	waitPhase(ctx, t, attacker, "Running", "", 2*time.Minute)
	victimPod, err := kube.CoreV1().Pods(nsCTF).Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	service := openToken(t, ep.Token).Service.String()
	denied := map[string]string{
		"victim-pod": "tcp://" + hostPort(victimPod.Status.PodIP, 1337),
		"victim-svc": "tcp://" + service,
	}
	controls := map[string]string{"control-neighbour": "tcp://" + hostPort(targets["neighbour"], 8080)}

	ips := map[string]string{}
	for name, p := range probers {
		e2eutil.WaitFor(ctx, t, 2*time.Minute, "prober "+name+" Ready", func() (bool, error) {
			got, err := kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			ips[name] = got.Status.PodIP
			return podReady(got), nil
		})
	}
	atk, err := kube.CoreV1().Pods(nsCTF).Get(ctx, attacker, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ips["ctf/"+attacker] = atk.Status.PodIP

	tl := &timeline{}
	tl.mark(t, "setup")
	var lines []string
	for name, url := range denied {
		lines = append(lines, name+"="+url)
	}
	var controlLines []string
	for name, url := range controls {
		controlLines = append(controlLines, name+"="+url)
	}
	sort.Strings(lines)
	sort.Strings(controlLines)
	for name, ip := range ips {
		given := lines
		if name != "ctf/"+attacker { // the attacker instance's own policy admits nothing in the cluster
			given = append(append([]string{}, lines...), controlLines...)
		}
		// From the host as root: the policy agent lets root's own sockets through (hack/node.sh).
		resp, err := http.Post("http://"+hostPort(ip, probeControlPort)+"/targets", "text/plain", strings.NewReader(strings.Join(given, "\n")))
		if err != nil {
			t.Fatalf("give %s its targets: %v", name, err)
		}
		resp.Body.Close()
	}
	hostCollector := newCollector(tl)
	stopHost := startHostProber(t, hostCollector, append(append([]string{}, lines...), "control-self-pod="+"tcp://"+hostPort(ips["other/gateway-lookalike"], probeControlPort))...)
	defer stopHost()
	tl.mark(t, "probing")

	readLogs := func() map[string]*collector {
		out := map[string]*collector{}
		for name := range ips {
			ns, pod, _ := strings.Cut(name, "/")
			c := newCollector(tl)
			stream, err := kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).Stream(ctx)
			if err != nil {
				t.Fatalf("the log of prober %s: %v", name, err)
			}
			c.read(stream)
			stream.Close()
			out[name] = c
		}
		return out
	}
	// The window opens once every control has answered once, and lasts 5 s; a player reaches the
	// victim through the gateway meanwhile.
	err = e2eutil.WaitUntil(ctx, time.Minute, "every control to answer once", func() (bool, error) {
		time.Sleep(time.Second)
		for name, c := range readLogs() {
			for _, tn := range append([]string{"self"}, keys(controls)...) {
				if tn != "self" && name == "ctf/"+attacker {
					continue
				}
				if ok, _ := c.get("probing", tn); ok == 0 {
					return false, nil
				}
			}
		}
		ok, _ := hostCollector.get("probing", "control-self-pod")
		return ok > 0, nil
	})
	if err != nil {
		t.Error(err)
	}
	tl.mark(t, "reached")
	flagThroughGateway(ctx, t, ep.Token, want, "the victim's token while the probers run")
	time.Sleep(5 * time.Second)
	tl.mark(t, "done")
	stopHost()

	logs := readLogs()
	names := keys(logs)
	for _, name := range names {
		c := logs[name]
		tnames := append(keys(denied), "self")
		if name != "ctf/"+attacker {
			tnames = append(tnames, keys(controls)...)
		}
		c.table(t, "prober "+name, tnames)
		for _, tn := range tnames {
			_, isDenied := denied[tn]
			judgeTarget(t, tl, name, tn, c, !isDenied, true)
		}
	}
	hostCollector.table(t, "the host (uid 65534)", append(keys(denied), "control-self-pod"))
	for tn := range denied {
		judgeTarget(t, tl, "host", tn, hostCollector, false, true)
	}
	judgeTarget(t, tl, "host", "control-self-pod", hostCollector, true, false)
}

// proberPod is a Pod outside any instance running ctfbox probe (targets given over POST /targets
// on probeControlPort), restricted.
func proberPod(name, ns string, labels map[string]string) *corev1.Pod {
	yes, no, grace := true, false, int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "probe", Image: "local/ctfbox:v1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"/ctfbox", "probe", fmt.Sprintf("-listen=:%d", probeControlPort), fmt.Sprintf("self=tcp://127.0.0.1:%d", probeControlPort)},
				Ports:   []corev1.ContainerPort{{Name: "ctl", ContainerPort: probeControlPort}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(probeControlPort)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// installTCPGateway creates the component's objects (gateway.yaml) as shipped but for the
// image, the token deadline and the fixed node port, with the key's Secret, and waits until both
// replicas are ready and the published address answers with the prompt. The objects stay for
// the next test (they are the install, as the hook's flags are); node teardown removes them.
func installTCPGateway(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := kube.AppsV1().Deployments(tcpGatewayNamespace).Get(ctx, tcpGatewayName, metav1.GetOptions{}); err == nil {
		return // an earlier test installed it
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: tcpGatewayKeySecret, Namespace: tcpGatewayNamespace},
		StringData: map[string]string{"key": tcpGatewayKey},
	}
	if _, err := kube.CoreV1().Secrets(tcpGatewayNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The shipped namespace enforces Pod Security restricted: so does this one.
	if _, err := kube.CoreV1().Namespaces().Patch(ctx, tcpGatewayNamespace, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The policy first (createComponent), as the hook orders an instance's: the gateway's Pods
	// never run without it (a token of a deleted instance names an address that only the policy
	// keeps on this machine).
	kinds, err := createComponent(ctx, tcpGatewayComponent, func(obj any) {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			c := &o.Spec.Template.Spec.Containers[0]
			c.Image, c.ImagePullPolicy = policyGateImage, corev1.PullNever
			// Bad tokens and missing ones in a row, from the one source this test has: keep the
			// bad-token delay out of the way (internal/tcpgateway's tests prove it). The Pod range
			// beside the node's Service range, so that signed tokens for Pods reach the second
			// wall, the NetworkPolicies, and TestTCPGateway shows that it holds on its own.
			c.Args = append(c.Args, "--token-timeout="+tcpGatewayTokenTimeout.String(), "--max-bad-tokens-per-minute=1000", "--log-level=debug",
				"--service-cidrs="+cfg.serviceCIDR+","+cfg.podCIDR)
		case *corev1.Service:
			if o.Spec.Type == corev1.ServiceTypeLoadBalancer {
				o.Spec.Ports[0].NodePort = tcpGatewayNodePort
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ServiceAccount", "Deployment", "PodDisruptionBudget", "Service", "NetworkPolicy"} {
		if kinds[kind] == 0 {
			t.Fatalf("%s has no %s", tcpGatewayComponent, kind)
		}
	}
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "the gateway's two replicas ready", func() (bool, error) {
		d, err := kube.AppsV1().Deployments(tcpGatewayNamespace).Get(ctx, tcpGatewayName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return d.Status.ReadyReplicas == 2 && d.Status.UpdatedReplicas == 2, nil
	})
	pods, err := kube.CoreV1().Pods(tcpGatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tcpGatewayName})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("gateway Pod %s mounts a ServiceAccount token", p.Name)
		}
		for _, v := range p.Spec.Volumes {
			if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil }) {
				t.Errorf("gateway Pod %s has a ServiceAccount token volume %s", p.Name, v.Name)
			}
		}
	}
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the prompt at "+tcpGatewayAddr(), func() (bool, error) {
		res, err := playGateway(tcpGatewayAddr(), "", "", 2*time.Second)
		return err == nil && res.prompt == "token: ", nil
	})
}
