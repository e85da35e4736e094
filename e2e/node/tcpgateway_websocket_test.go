//go:build e2enode

package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// wsEchoDefinition is a TCP instance that sends back what it is sent: ctfbox's DNS server over
// TCP, which answers each query with the query itself but for four header bytes it sets (ctfbox's
// dnsReply; no answer record for a type other than A). The query's name is up to 255 bytes of any
// value, so a stream of queries of random names is a stream of random, non-UTF-8 bytes whose every
// byte comes back where the test can predict it: an echo, with no image of its own.
const wsEchoDefinition = `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: ChallengeDefinition
metadata: {name: wsecho}
spec:
  containers:
    - name: echo
      image: local/ctfbox:v1
      command: [/ctfbox, dns, -listen=:5353]
      ports:
        - {name: echo, containerPort: 5353}
      readinessProbe:
        tcpSocket: {port: 5353}
        periodSeconds: 1
  expose:
    - {port: 5353, type: TCP}
  timeout: 30m
`

// wsEchoBytes is how much the round trip sends (and gets back): the 1 MiB.
const wsEchoBytes = 1 << 20

// TestTCPGatewayWebSocket proves the gateway's WebSocket listener with real packets, as the
// component ships it (its websocket port, on both replicas): from the host, a Pod-less client
// standing for wsrx or websocat opens GET /ws/<token> at the Service's websocket port and 1 MiB of
// random bytes makes the round trip to a real instance and back byte for byte, in binary messages
// cut anywhere (and a few queries in text messages, as websocat sends without -b), ending with
// the gateway's close frame once the instance ended; the OPTIONS probe answers 204 on each
// replica's Pod address. A forged token (the instance's with one character changed) and a token of
// another key reach nothing: 404 to the probe (OPTIONS and GET) and to the upgrade by path and by
// query, and no connection spliced to any instance meanwhile (the gateways' counter, which counts
// every connection they make to an instance, the probes of the valid token included).
func TestTCPGatewayWebSocket(t *testing.T) {
	if tcpGatewayKey == "" {
		t.Skip("the hook under test has no --tcp-gateway-key-file")
	}
	ctx := e2eutil.TestContext(t)
	installTCPGateway(ctx, t)
	addr, pods := websocketAddrs(ctx, t)
	apply(ctx, t, wsEchoDefinition)
	apply(ctx, t, challengeOf("wsecho-team-a", "team-a", "wsecho"))
	t.Cleanup(func() { deleteChallenge(context.Background(), t, "wsecho-team-a", 2*time.Minute) })
	token := tcpEndpointOf(t, waitPhase(ctx, t, "wsecho-team-a", "Running", "Ready", 2*time.Minute)).Token

	for _, pod := range pods {
		if status := probeWebSocket(t, http.MethodOptions, "http://"+pod+"/ws/"+token); status != http.StatusNoContent {
			t.Errorf("OPTIONS on the replica at %s with the instance's token: %d, want 204", pod, status)
		}
	}
	// kube-proxy and the policy agent learn the new Pod a moment after it is ready: until then the
	// gateway cannot reach it. Retried until one round trip goes through, which then must be exact.
	var last error
	err := e2eutil.WaitUntil(ctx, 30*time.Second, "a round trip through the WebSocket listener", func() (bool, error) {
		last = wsEchoRoundTrip(t, addr, token)
		return last == nil || !errors.Is(last, errNotThrough), nil
	})
	if err != nil || last != nil {
		t.Fatalf("round trip through ws://%s/ws/<token>: %v (%v)", addr, last, err)
	}

	forgedTokensReachNothing(ctx, t, addr, pods, token)
}

// websocketAddrs is where the host reaches the WebSocket listener: the gateway Service's port
// named websocket (its node port when it has one, as a load balancer sends there; else its
// cluster address), and each gateway Pod's address on its container port named websocket.
func websocketAddrs(ctx context.Context, t *testing.T) (string, []string) {
	t.Helper()
	services, err := kube.CoreV1().Services(tcpGatewayNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var addr string
	for _, svc := range services.Items {
		for _, p := range svc.Spec.Ports {
			switch {
			case p.Name != "websocket" || addr != "":
			case p.NodePort != 0:
				addr = hostPort(cfg.nodeIP, int64(p.NodePort))
			default:
				addr = hostPort(svc.Spec.ClusterIP, int64(p.Port))
			}
		}
	}
	if addr == "" {
		t.Fatalf("no Service of %s has a port named websocket", tcpGatewayComponent)
	}
	list, err := kube.CoreV1().Pods(tcpGatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tcpGatewayName})
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, pod := range list.Items {
		if port := containerPort(pod, "websocket"); port != 0 && pod.DeletionTimestamp == nil {
			pods = append(pods, hostPort(pod.Status.PodIP, int64(port)))
		}
	}
	if len(pods) != 2 {
		t.Fatalf("want the gateway's two replicas with a container port named websocket, got %v", pods)
	}
	t.Logf("the WebSocket listener: %s (Service), %v (Pods)", addr, pods)
	return addr, pods
}

func containerPort(pod corev1.Pod, name string) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// probeWebSocket sends a request without upgrade (wsrx's probe is OPTIONS) and returns its status,
// 0 when none came.
func probeWebSocket(t *testing.T, method, url string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// errNotThrough is a round trip that did not reach the instance: tried again.
var errNotThrough = errors.New("not through to the instance")

// wsEchoRoundTrip sends wsEchoBytes of DNS queries of random names through the WebSocket listener
// at addr to the echo instance, and checks that exactly the predicted answers come back, then
// the gateway's close frame once its end of input reached the instance and the instance closed.
func wsEchoRoundTrip(t *testing.T, addr, token string) error {
	ws, resp, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+addr+"/ws/"+token, nil)
	if err != nil {
		if resp != nil {
			return fmt.Errorf("upgrade refused, %s: %w", resp.Status, err)
		}
		return fmt.Errorf("%w: %v", errNotThrough, err)
	}
	defer ws.Close()
	if p := ws.Subprotocol(); p != "" {
		return fmt.Errorf("subprotocol %q selected, none offered", p)
	}
	sent, want := dnsQueryStream(wsEchoBytes)
	ws.SetWriteDeadline(time.Now().Add(time.Minute))
	ws.SetReadDeadline(time.Now().Add(time.Minute))
	go writeInPieces(ws, sent)
	got, closeErr := readMessages(ws, len(want))
	var ce *websocket.CloseError
	if errors.As(closeErr, &ce) && ce.Code == websocket.CloseTryAgainLater {
		// The gateway could not reach the instance (yet): its line, then close 1013.
		return fmt.Errorf("%w: %q, close %d %s", errNotThrough, got, ce.Code, ce.Text)
	}
	if len(got) == 0 {
		return fmt.Errorf("%w: nothing came back (%v)", errNotThrough, closeErr)
	}
	if !bytes.Equal(got, want) {
		at := 0
		for at < min(len(got), len(want)) && got[at] == want[at] {
			at++
		}
		return fmt.Errorf("%d bytes came back, want %d; the first difference at byte %d (%v)", len(got), len(want), at, closeErr)
	}
	if !errors.As(closeErr, &ce) {
		return fmt.Errorf("after the round trip: %v, want the gateway's close frame (the instance ended)", closeErr)
	}
	t.Logf("round trip: %d bytes sent, %d came back byte for byte, then close %d", len(sent), len(got), ce.Code)
	return nil
}

// dnsQueryStream is at least n bytes of TCP-framed DNS queries (RFC 1035 4.2.2: a 2-byte length,
// then the query), each of one TXT question whose name is four labels of random bytes, and what
// ctfbox's DNS server answers to them. The first ten names are in printable ASCII: they go in text
// messages (writeInPieces), as websocat sends without -b.
func dnsQueryStream(n int) (sent, want []byte) {
	for i := 0; len(sent) < n; i++ {
		q := []byte{0, 0, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0} // ID, RD, one question
		rand.Read(q[:2])
		for range 4 {
			label := make([]byte, 63)
			rand.Read(label)
			if i < 10 {
				for j := range label {
					label[j] = 'a' + label[j]%26
				}
			}
			q = append(append(q, byte(len(label))), label...)
		}
		q = append(q, 0, 0, 16, 0, 1) // the root, TXT, IN
		a := bytes.Clone(q)
		a[2] = 0x80 | 0x04 | q[2]&0x79 // QR, AA, the query's RD
		sent = append(binary.BigEndian.AppendUint16(sent, uint16(len(q))), q...)
		want = append(binary.BigEndian.AppendUint16(want, uint16(len(a))), a...)
	}
	return sent, want
}

// writeInPieces sends b in messages of random sizes (1 byte to 64 KiB, cut anywhere in a query):
// the first ten queries in text messages, the rest in binary ones; then a close frame, the end of
// the player's input, which the gateway passes on.
func writeInPieces(ws *websocket.Conn, b []byte) {
	textEnd := 10 * (2 + 12 + 4*64 + 5)
	for len(b) > 0 {
		var r [2]byte
		rand.Read(r[:])
		size := min(len(b), 1+int(binary.BigEndian.Uint16(r[:])))
		kind := websocket.BinaryMessage
		if textEnd > 0 {
			kind, size = websocket.TextMessage, min(size, textEnd)
			textEnd -= size
		}
		if err := ws.WriteMessage(kind, b[:size]); err != nil {
			return
		}
		b = b[size:]
	}
	ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
}

// readMessages reads messages until want bytes came, then one more read: the error that ended the
// stream (the close frame's, expected). Every message must be binary.
func readMessages(ws *websocket.Conn, want int) ([]byte, error) {
	var got []byte
	for {
		kind, p, err := ws.ReadMessage()
		if err != nil {
			return got, err
		}
		if kind != websocket.BinaryMessage {
			return got, fmt.Errorf("a message of type %d from the gateway, want binary (2)", kind)
		}
		got = append(got, p...)
		if len(got) > want {
			return got, fmt.Errorf("more than the %d bytes sent back", want)
		}
	}
}

// forgedTokensReachNothing: the instance's token with its last character changed, and a token of
// another key for the same Service, get 404 from the probe and the upgrade, by path and by query,
// at the Service and at each replica; meanwhile no gateway splices a connection (the valid
// token's probes neither: a probe dials nothing), and the gateways count the refusals.
func forgedTokensReachNothing(ctx context.Context, t *testing.T, addr string, pods []string, token string) {
	t.Helper()
	forged := []byte(token)
	forged[len(forged)-1] = map[bool]byte{true: 'b', false: 'a'}[forged[len(forged)-1] == 'a']
	foreign, err := tcptoken.Mint(bytes.Repeat([]byte{'k'}, tcptoken.MinKeyBytes), openToken(t, token))
	if err != nil {
		t.Fatal(err)
	}
	spliced := func() float64 { return gatewayCounter(ctx, t, "challenge_hook_tcp_gateway_spliced_total", "") }
	refused := func() float64 {
		return gatewayCounter(ctx, t, "challenge_hook_tcp_gateway_refused_total", `reason="invalid_token"`)
	}
	splicedBefore, refusedBefore := spliced(), refused()
	upgrades := 0
	for _, at := range append([]string{addr}, pods...) {
		if status := probeWebSocket(t, http.MethodOptions, "http://"+at+"/ws/"+token); status != http.StatusNoContent {
			t.Errorf("OPTIONS at %s with the instance's token: %d, want 204", at, status)
		}
		for what, bad := range map[string]string{"a forged token": string(forged), "a token of another key": foreign} {
			for _, url := range []string{"/ws/" + bad, "/ws?token=" + bad} {
				for _, method := range []string{http.MethodOptions, http.MethodGet} {
					if status := probeWebSocket(t, method, "http://"+at+url); status != http.StatusNotFound {
						t.Errorf("%s %s (%s) at %s: %d, want 404", method, url, what, at, status)
					}
				}
				refusedUpgrade(t, what, "ws://"+at+url)
				upgrades++
			}
		}
	}
	splicedAfter, refusedAfter := spliced(), refused()
	if splicedAfter != splicedBefore {
		t.Errorf("the gateways spliced %v connections to instances during the forged tokens and the probes, want none", splicedAfter-splicedBefore)
	}
	if refusedAfter-refusedBefore < float64(upgrades) {
		t.Errorf("the gateways counted %v invalid tokens, want at least the %d forged upgrades", refusedAfter-refusedBefore, upgrades)
	}
	t.Logf("forged tokens at the Service and both replicas: %d upgrades and %d probes answered 404; the gateways counted %v invalid tokens and spliced %v connections (of %v in all)",
		upgrades, 2*upgrades, refusedAfter-refusedBefore, splicedAfter-splicedBefore, splicedAfter)
}

// refusedUpgrade: an upgrade of url is refused with 404 and one short line, and no WebSocket.
func refusedUpgrade(t *testing.T, what, url string) {
	t.Helper()
	ws, resp, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial(url, nil)
	if err == nil {
		ws.Close()
		t.Errorf("an upgrade with %s (%s) was accepted", what, url)
		return
	}
	if resp == nil {
		t.Errorf("an upgrade with %s (%s): no answer: %v", what, url, err)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusNotFound || strings.Count(string(body), "\n") != 1 || len(body) > 200 {
		t.Errorf("an upgrade with %s (%s): %s %q, want 404 and the gateway's one short line", what, url, resp.Status, body)
	}
}

// gatewayCounter sums a counter over the gateway's Pods (their metrics port, 8082), the series
// whose labels contain labels ("" for all).
func gatewayCounter(ctx context.Context, t *testing.T, name, labels string) float64 {
	t.Helper()
	list, err := kube.CoreV1().Pods(tcpGatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tcpGatewayName})
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, pod := range list.Items {
		resp, err := http.Get("http://" + hostPort(pod.Status.PodIP, 8082) + "/metrics")
		if err != nil {
			t.Fatalf("the metrics of gateway Pod %s: %v", pod.Name, err)
		}
		scanner := bufio.NewScanner(resp.Body)
		for scanner.Scan() {
			series, value, ok := strings.Cut(scanner.Text(), " ")
			if ok && (series == name || strings.HasPrefix(series, name+"{") && strings.Contains(series, labels)) {
				v, err := strconv.ParseFloat(value, 64)
				if err != nil {
					t.Fatalf("gateway Pod %s: %q: %v", pod.Name, scanner.Text(), err)
				}
				sum += v
			}
		}
		resp.Body.Close()
	}
	return sum
}
