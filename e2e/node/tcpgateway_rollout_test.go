//go:build e2enode

package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// sessionDefinition exposes ctfbox's HTTP server as TCP: a keep-alive connection through the
// gateway is a session that stays open as long as the player asks.
const sessionDefinition = `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: ChallengeDefinition
metadata: {name: session}
spec:
  containers:
    - name: web
      image: local/ctfbox:v1
      ports:
        - {name: http, containerPort: 8080}
      readinessProbe:
        httpGet: {path: /healthz, port: 8080}
        periodSeconds: 1
  expose:
    - {port: 8080, type: TCP}
  timeout: 30m
  flag: {dynamic: true, prefix: CTF, env: FLAG}
`

// restartLine is what the gateway tells the players still connected when its drain ends.
const restartLine = "gateway restarting, reconnect"

// TestTCPGatewayRollout rolls the gateway component out (a new ReplicaSet, as `kubectl rollout
// restart` makes) while a player's session is open through it and new players keep arriving: no
// new player is turned away (the old Pods fail their readiness at once and go on accepting for
// --shutdown-delay while kube-proxy takes them out of the Service), the open session goes on
// through the shutdown delay and is then told to reconnect, and the same token works at once on
// the new Pods.
func TestTCPGatewayRollout(t *testing.T) {
	if tcpGatewayKey == "" {
		t.Skip("the hook under test has no --tcp-gateway-key-file")
	}
	ctx := e2eutil.TestContext(t)
	installTCPGateway(ctx, t)
	apply(ctx, t, sessionDefinition)
	apply(ctx, t, `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: session-team-a}
spec:
  owner: team-a
  definitionRef: {name: session}
`)
	t.Cleanup(func() { deleteChallenge(context.Background(), t, "session-team-a", 2*time.Minute) })
	token := tcpEndpointOf(t, waitPhase(ctx, t, "session-team-a", "Running", "Ready", 2*time.Minute)).Token
	e2eutil.WaitFor(ctx, t, 30*time.Second, "a request through the gateway", func() (bool, error) {
		return oneRequestThroughGateway(token) == nil, nil
	})

	session, err := openSession(token)
	if err != nil {
		t.Fatalf("open the session: %v", err)
	}
	defer session.conn.Close()
	sessionEnded := make(chan sessionEnd, 1)
	go func() { sessionEnded <- session.keepAsking() }()

	// New players every 100 ms from before the rollout until it is over.
	stopArrivals := make(chan struct{})
	var arrivals sync.WaitGroup
	var mu sync.Mutex
	var admitted int
	var turnedAway []string
	arrivals.Add(1)
	go func() {
		defer arrivals.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopArrivals:
				return
			case <-tick.C:
			}
			arrivals.Add(1)
			go func() {
				defer arrivals.Done()
				err := oneRequestThroughGateway(token)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					turnedAway = append(turnedAway, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
				} else {
					admitted++
				}
			}()
		}
	}()

	time.Sleep(2 * time.Second)
	rolloutStart := time.Now()
	restart := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, rolloutStart.Format(time.RFC3339))
	if _, err := kube.AppsV1().Deployments(tcpGatewayNamespace).Patch(ctx, tcpGatewayName, types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{}); err != nil {
		t.Fatalf("roll the gateway out: %v", err)
	}
	e2eutil.WaitFor(ctx, t, 3*time.Minute, "the rollout done and the old Pods gone", func() (bool, error) {
		d, err := kube.AppsV1().Deployments(tcpGatewayNamespace).Get(ctx, tcpGatewayName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := kube.CoreV1().Pods(tcpGatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tcpGatewayName})
		if err != nil {
			return false, err
		}
		return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == 2 && d.Status.ReadyReplicas == 2 &&
			d.Status.Replicas == 2 && len(pods.Items) == 2, nil
	})
	rolloutTook := time.Since(rolloutStart)
	time.Sleep(2 * time.Second)
	close(stopArrivals)
	arrivals.Wait()
	t.Logf("rollout: %s; new players admitted %d, turned away %d", rolloutTook.Round(time.Millisecond), admitted, len(turnedAway))
	if len(turnedAway) > 0 {
		t.Errorf("%d of %d new players were turned away during the rollout: %s", len(turnedAway), admitted+len(turnedAway), strings.Join(turnedAway, "; "))
	}
	if admitted < 100 {
		t.Errorf("only %d new players during the rollout: the test did not probe it", admitted)
	}

	select {
	case end := <-sessionEnded:
		t.Logf("the open session: %d requests answered, ended %s after the rollout began: %s", end.answered, end.at.Sub(rolloutStart).Round(time.Millisecond), end.how)
		if !strings.Contains(end.how, restartLine) {
			t.Errorf("the open session ended without being told to reconnect: %s", end.how)
		}
		if lasted := end.at.Sub(rolloutStart); lasted < 15*time.Second {
			t.Errorf("the open session ended %s after the rollout began, before the gateway's --shutdown-delay (15s)", lasted.Round(time.Millisecond))
		}
	case <-time.After(time.Minute):
		t.Errorf("the open session was neither told to reconnect nor closed a minute after the rollout")
	}
	if err := oneRequestThroughGateway(token); err != nil {
		t.Errorf("the same token after the rollout: %v", err)
	}
}

// gatewaySession is a player's keep-alive HTTP connection to the instance through the gateway.
type gatewaySession struct {
	conn net.Conn
	r    *bufio.Reader
}

// sessionEnd is how a session ended: the requests answered, when, and what the player read last.
type sessionEnd struct {
	answered int
	at       time.Time
	how      string
}

// openSession connects through the gateway with token and asks once.
func openSession(token string) (*gatewaySession, error) {
	c, err := net.DialTimeout("tcp", tcpGatewayAddr(), 2*time.Second)
	if err != nil {
		return nil, err
	}
	s := &gatewaySession{conn: c, r: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	prompt := make([]byte, len("token: "))
	if _, err := io.ReadFull(s.r, prompt); err != nil {
		c.Close()
		return nil, fmt.Errorf("read the prompt: %w", err)
	}
	if _, err := io.WriteString(c, token+"\n"); err != nil {
		c.Close()
		return nil, err
	}
	if err := s.ask(); err != nil {
		c.Close()
		return nil, err
	}
	return s, nil
}

// ask sends one request on the session and reads its answer.
func (s *gatewaySession) ask() error {
	s.conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(s.conn, "GET /healthz HTTP/1.1\r\nHost: instance\r\n\r\n"); err != nil {
		return err
	}
	// The status line, read here: the gateway's line to reconnect comes instead of one.
	status, err := s.r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read the answer: %w (got %q)", err, status)
	}
	if !strings.HasPrefix(status, "HTTP/") {
		rest, _ := io.ReadAll(io.LimitReader(s.r, 1024))
		return fmt.Errorf("the gateway wrote %q, then %q", status, rest)
	}
	resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(status), s.r)), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// keepAsking asks every 500 ms until the session ends.
func (s *gatewaySession) keepAsking() sessionEnd {
	answered := 0
	for {
		if err := s.ask(); err != nil {
			return sessionEnd{answered: answered, at: time.Now(), how: err.Error()}
		}
		answered++
		time.Sleep(500 * time.Millisecond)
	}
}

// oneRequestThroughGateway is a new player: connect, token, one request, its answer.
func oneRequestThroughGateway(token string) error {
	s, err := openSession(token)
	if err != nil {
		return err
	}
	return s.conn.Close()
}
