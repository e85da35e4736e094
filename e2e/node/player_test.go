//go:build e2enode

package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// webDefinition is the README's ChallengeDefinition with the test challenge server: a dynamic flag
// in an environment variable, HTTP and raw TCP on node ports, the real readiness probe.
const webDefinition = `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: ChallengeDefinition
metadata: {name: web}
spec:
  containers:
    - name: web
      image: local/ctfbox:v1
      ports:
        - {name: http, containerPort: 8080}
        - {name: flag, containerPort: 1337}
      readinessProbe:
        httpGet: {path: /healthz, port: 8080}
        periodSeconds: 1
  expose:
    - {port: 8080, type: NodePort}
    - {port: 1337, type: NodePort}
  timeout: 30m
  maxLifetime: 2h
  flag: {dynamic: true, prefix: CTF, env: FLAG}
`

// selfReport is what the challenge server says about its own process (ctfbox /self).
type selfReport struct {
	Started             string   `json:"started"`
	PID                 int      `json:"pid"`
	UID                 int      `json:"uid"`
	GID                 int      `json:"gid"`
	CapEff              string   `json:"CapEff"`
	CapPrm              string   `json:"CapPrm"`
	CapBnd              string   `json:"CapBnd"`
	CapAmb              string   `json:"CapAmb"`
	NoNewPrivs          string   `json:"NoNewPrivs"`
	Seccomp             string   `json:"Seccomp"`
	RootWrite           string   `json:"rootWrite"`
	TmpWrite            string   `json:"tmpWrite"`
	TmpBytes            uint64   `json:"tmpBytes"`
	ServiceAccountToken bool     `json:"serviceAccountToken"`
	KubernetesEnv       []string `json:"kubernetesEnv"`
	FlagSource          string   `json:"flagSource"`
}

func hostPort(host string, port int64) string {
	return net.JoinHostPort(host, strconv.FormatInt(port, 10))
}

// tcpFlag connects to a raw TCP endpoint from the host, as a player would, and reads one line.
func tcpFlag(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return string(b), err
}

// readSelf asks the challenge server about its process, retrying for 30 s: kube-proxy programs a
// node port a moment after the Pod is ready, which is when the status says Running.
func readSelf(t *testing.T, addr string) selfReport {
	t.Helper()
	var body string
	err := e2eutil.WaitUntil(context.Background(), 30*time.Second, "GET http://"+addr+"/self", func() (bool, error) {
		var err error
		body, err = httpGet("http://" + addr + "/self")
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var s selfReport
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("GET /self: %v: %s", err, body)
	}
	return s
}

// verify asks the token hook's POST /flags/verify.
func verify(t *testing.T, definition, owner, flag string) bool {
	t.Helper()
	payload, _ := json.Marshal(map[string]string{"definition": definition, "owner": owner, "flag": flag})
	req, _ := http.NewRequest(http.MethodPost, "http://"+verifyAddr+"/flags/verify", bytes.NewReader(payload))
	req.Header.Set("Authorization", "Bearer "+verifyToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Correct bool `json:"correct"`
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil {
		t.Fatalf("POST /flags/verify: HTTP %d: %s", resp.StatusCode, body)
	}
	return out.Correct
}

// containerID is the Pod's first container's runtime id ("" while none runs).
func containerID(ctx context.Context, name string) string {
	p, err := kube.CoreV1().Pods(nsCTF).Get(ctx, name, metav1.GetOptions{})
	if err != nil || len(p.Status.ContainerStatuses) == 0 {
		return ""
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

var dynamicFlag = regexp.MustCompile(`^CTF\{[0-9a-f]{16,}\}$`)

// TestPlayerLoop is the README's loop for real: a ChallengeDefinition and a Challenge go Running
// when the real readiness probe passes; from the host, the player gets the flag at the NodePort
// endpoints of status.endpoints; /flags/verify says correct for it and false for another owner;
// stop, start and restart move a real process while the endpoints and the flag stay.
func TestPlayerLoop(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	apply(ctx, t, webDefinition)
	const name, owner = "web-team42", "team-42"
	created := time.Now()
	apply(ctx, t, challengeOf(name, owner, "web"))
	t.Cleanup(func() { deleteChallenge(context.Background(), t, name, 2*time.Minute) })
	running := waitPhase(ctx, t, name, "Running", "Ready", 2*time.Minute)
	t.Logf("TIME Challenge created to Running (real container, readiness probe passed): %.2fs", time.Since(created).Seconds())

	host, httpPort := endpoint(t, running, "http")
	_, flagPort := endpoint(t, running, "flag")
	if host != cfg.nodeIP {
		t.Errorf("endpoint host %s, want the node IP %s (--public-host)", host, cfg.nodeIP)
	}
	want := flagFor(t, nsCTF+"/web", owner, "CTF")
	if !dynamicFlag.MatchString(want) {
		t.Fatalf("challenge-hook flag printed %q", want)
	}
	// The player, from the host: raw TCP and HTTP at the NodePort endpoints.
	play := func(when string) selfReport {
		t.Helper()
		var got string
		e2eutil.WaitFor(ctx, t, 30*time.Second, "the flag at "+hostPort(host, flagPort)+" "+when, func() (bool, error) {
			var err error
			got, err = tcpFlag(hostPort(host, flagPort))
			return err == nil && got != "", err
		})
		if got != want {
			t.Errorf("%s: TCP endpoint served %q, want the owner's flag %q", when, got, want)
		}
		body, err := httpGet("http://" + hostPort(host, httpPort) + "/")
		if err != nil || strings.TrimSpace(body) != want {
			t.Errorf("%s: HTTP endpoint: %q, %v; want the flag", when, body, err)
		}
		return readSelf(t, hostPort(host, httpPort))
	}
	first := play("after creation")
	t.Logf("the player got %s from %s (TCP) and %s (HTTP); process %s", want, hostPort(host, flagPort), hostPort(host, httpPort), first.Started)
	if !verify(t, nsCTF+"/web", owner, want) {
		t.Errorf("/flags/verify: the served flag is not correct for %s", owner)
	}
	if verify(t, nsCTF+"/web", "team-7", want) {
		t.Errorf("/flags/verify: %s's flag is correct for team-7 too", owner)
	}
	if verify(t, nsCTF+"/web", owner, flagFor(t, nsCTF+"/web", "team-7", "CTF")) {
		t.Errorf("/flags/verify: team-7's flag is correct for %s", owner)
	}
	firstContainer := containerID(ctx, name)

	// Stop: the Pod and its process go, the Service (node ports) stays.
	t0 := time.Now()
	patchChallenge(ctx, t, name, `{"stopped":true}`)
	waitPhase(ctx, t, name, "Stopped", "", time.Minute)
	e2eutil.WaitFor(ctx, t, time.Minute, "the Pod gone after stop", func() (bool, error) {
		_, err := kube.CoreV1().Pods(nsCTF).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("TIME stop to Pod gone: %.2fs", time.Since(t0).Seconds())
	if _, err := tcpFlag(hostPort(host, flagPort)); err == nil {
		t.Errorf("stopped: the TCP endpoint still answers")
	}
	if _, err := kube.CoreV1().Services(nsCTF).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Errorf("stopped: the Service is gone: %v", err)
	}

	// Start: a new process at the same endpoints with the same flag.
	t0 = time.Now()
	patchChallenge(ctx, t, name, `{"stopped":false}`)
	again := waitPhase(ctx, t, name, "Running", "Ready", 2*time.Minute)
	t.Logf("TIME start to Running: %.2fs", time.Since(t0).Seconds())
	if h, p := endpoint(t, again, "flag"); h != host || p != flagPort {
		t.Errorf("started again: flag endpoint %s, want %s", hostPort(h, p), hostPort(host, flagPort))
	}
	second := play("after start")
	if second.Started == first.Started || containerID(ctx, name) == firstContainer {
		t.Errorf("started again: same process %s (container %s)", second.Started, firstContainer)
	}

	// Restart: the Pod is recreated; same endpoints and flag, a new process.
	secondContainer := containerID(ctx, name)
	t0 = time.Now()
	patchChallenge(ctx, t, name, fmt.Sprintf(`{"restartedAt":%q}`, time.Now().UTC().Format(time.RFC3339)))
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "a new container after restart", func() (bool, error) {
		id := containerID(ctx, name)
		return id != "" && id != secondContainer, nil
	})
	restarted := waitPhase(ctx, t, name, "Running", "Ready", 2*time.Minute)
	t.Logf("TIME restart to Running: %.2fs", time.Since(t0).Seconds())
	if h, p := endpoint(t, restarted, "http"); h != host || p != httpPort {
		t.Errorf("restarted: http endpoint %s, want %s", hostPort(h, p), hostPort(host, httpPort))
	}
	third := play("after restart")
	if third.Started == second.Started {
		t.Errorf("restarted: same process %s", third.Started)
	}
	t.Logf("processes: %s (created), %s (started again), %s (restarted)", first.Started, second.Started, third.Started)
}
