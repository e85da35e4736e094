//go:build e2enode

package node

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// The policy gate's measurement: this many new instances, this many at once.
const (
	gateStarts = 20
	gateBatch  = 4
)

// gateStart is what one new instance showed.
type gateStart struct {
	name     string
	answered map[string]int // denied target -> answered attempts
	attempts int            // attempts on denied targets
	self     int            // answered attempts on the control (its own port)
	firstAt  time.Duration  // first attempt after the Challenge's creation
	gate     float64        // the gate's own wait in seconds, from its log; -1: no gate
	answers  int            // probes the target answered before the gate opened
	running  time.Duration  // creation to phase Running
}

// TestPolicyGate measures the first moment of new instances with real packets: each instance's
// only container (the attacker) opens a new connection every 50 ms, from its very first moment,
// to db (a Pod outside any instance, TCP and UDP) and neighbour (another namespace's Pod), which
// every instance's NetworkPolicy denies, and to its own port (the control). With the policy gate
// (the hook's default), the attacker starts only once the Pod's policy drops packets to db, so no
// denied target answers any attempt of any start. Without it (CHALLENGE_HOOK_POLICY_GATE=false),
// kube-network-policies, which learns a Pod's IP from its status, lets the first attempts of most
// starts through. It prints, per start, the answers, the gate's wait and the time to Running.
func TestPolicyGate(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	if gateState() == "on" {
		gateTargetAnswersUnpolicedPods(ctx, t)
	}
	var (
		mu     sync.Mutex
		starts []gateStart
	)
	for round := range gateStarts / gateBatch {
		var wg sync.WaitGroup
		for i := range gateBatch {
			n := round*gateBatch + i
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := startGated(ctx, fmt.Sprintf("gate-%02d", n), n%2 == 1)
				if err != nil {
					t.Errorf("start %d: %v", n, err)
					return
				}
				mu.Lock()
				starts = append(starts, s)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	slices.SortFunc(starts, func(a, b gateStart) int { return cmp.Compare(a.name, b.name) })
	leaked := 0
	var gates, runnings []float64
	for _, s := range starts {
		total := 0
		for _, n := range s.answered {
			total += n
		}
		if total > 0 {
			leaked++
		}
		if s.gate >= 0 {
			gates = append(gates, s.gate)
		}
		runnings = append(runnings, s.running.Seconds())
		t.Logf("%s: denied targets answered %d of %d attempts %v; control answered %d; first attempt %.2fs after creation; gate %.3fs (its target answered %d probes first); Running after %.2fs",
			s.name, total, s.attempts, s.answered, s.self, s.firstAt.Seconds(), s.gate, s.answers, s.running.Seconds())
		if s.self == 0 {
			t.Errorf("%s: the control (the attacker's own port) never answered: the prober does not work", s.name)
		}
		if s.attempts == 0 {
			t.Errorf("%s: no attempt on a denied target", s.name)
		}
	}
	t.Logf("FIRST MOMENT: a denied target answered in %d of %d starts (gate: %s)", leaked, len(starts), gateState())
	if len(gates) > 0 {
		t.Logf("GATE WAIT: p50 %.3fs, max %.3fs over %d starts", percentile(gates, 50), percentile(gates, 100), len(gates))
	}
	t.Logf("CREATION TO RUNNING: p50 %.2fs, max %.2fs over %d starts", percentile(runnings, 50), percentile(runnings, 100), len(runnings))
	if leaked > 0 {
		t.Errorf("a denied target answered the first moment of %d of %d new instances: their containers ran before their NetworkPolicy was enforced", leaked, len(starts))
	}
}

// gateTargetAnswersUnpolicedPods is the control of the gate's target (docs/security.md's check): from
// a Pod that no NetworkPolicy selects, wait-for-policy must fail because db still answers. A target
// that never answered would open every gate at once, and the measurement would prove nothing.
func gateTargetAnswersUnpolicedPods(ctx context.Context, t *testing.T) {
	t.Helper()
	const name = "gate-control"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsPlatform},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr(false),
			EnableServiceLinks:           ptr(false),
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "gate", Image: policyGateImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"wait-for-policy", "--target=" + hostPort(targets["db"], 8080), "--timeout=3s"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if _, err := kube.CoreV1().Pods(nsPlatform).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods(nsPlatform).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	})
	var done *corev1.ContainerStateTerminated
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "the control gate's end", func() (bool, error) {
		p, err := kube.CoreV1().Pods(nsPlatform).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		done = p.Status.ContainerStatuses[0].State.Terminated
		return done != nil, nil
	})
	t.Logf("control: wait-for-policy from a Pod no policy selects exited %d: %s", done.ExitCode, done.Message)
	if done.ExitCode == 0 || !strings.Contains(done.Message, "still answers") {
		t.Fatalf("the gate's target does not answer a Pod that no policy selects (exit %d, %q): every gate would open at once", done.ExitCode, done.Message)
	}
}

func ptr[T any](v T) *T { return &v }

// gateState says how the hook under test was configured.
func gateState() string {
	if os.Getenv("CHALLENGE_HOOK_POLICY_GATE") == "false" {
		return "off (CHALLENGE_HOOK_POLICY_GATE=false)"
	}
	return "on"
}

// startGated creates one instance, waits until it is Running, reads what its attacker and its gate
// logged, and deletes it.
func startGated(ctx context.Context, name string, egress bool) (gateStart, error) {
	s := gateStart{name: name, answered: map[string]int{}, gate: -1}
	obj, err := decode(inlineChallenge(name, name, fmt.Sprintf(`
    containers:
      - name: attacker
        image: local/attacker:v1
        args: [-listen=:8080, -interval=50ms, self=tcp://127.0.0.1:8080, db=tcp://%s, db-udp=udp://%s, neighbour=tcp://%s]
        ports: [{name: ctl, containerPort: 8080}]
    terminationGracePeriodSeconds: 1
    egress: %v
    timeout: 30m
`, hostPort(targets["db"], 8080), hostPort(targets["db"], 1337), hostPort(targets["neighbour"], 8080), egress)))
	if err != nil {
		return s, err
	}
	obj.SetNamespace(nsCTF)
	created := time.Now()
	if err := e2eutil.CreateOrUpdate(ctx, dyn.Resource(chalGVR).Namespace(nsCTF), obj); err != nil {
		return s, err
	}
	defer func() {
		_ = dyn.Resource(chalGVR).Namespace(nsCTF).Delete(context.Background(), name, metav1.DeleteOptions{})
	}()
	if err := e2eutil.WaitUntil(ctx, 3*time.Minute, name+" Running", func() (bool, error) {
		got, err := getChallenge(ctx, name)
		if err != nil {
			return false, err
		}
		return status(got, "phase") == "Running", nil
	}); err != nil {
		return s, err
	}
	s.running = time.Since(created)
	time.Sleep(time.Second)

	logs, err := kube.CoreV1().Pods(nsCTF).GetLogs(name, &corev1.PodLogOptions{Container: "attacker"}).DoRaw(ctx)
	if err != nil {
		return s, fmt.Errorf("the attacker's log: %w", err)
	}
	first := time.Time{}
	sc := bufio.NewScanner(bytes.NewReader(logs))
	for sc.Scan() {
		var p probeResult
		if json.Unmarshal(sc.Bytes(), &p) != nil || p.Target == "" {
			continue
		}
		if first.IsZero() || p.T.Before(first) {
			first = p.T
		}
		switch {
		case p.Target == "self":
			if p.OK {
				s.self++
			}
		case p.OK:
			s.answered[p.Target]++
			s.attempts++
		default:
			s.attempts++
		}
	}
	s.firstAt = first.Sub(created)

	pod, err := kube.CoreV1().Pods(nsCTF).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return s, err
	}
	if len(pod.Spec.InitContainers) > 0 {
		gateLog, err := kube.CoreV1().Pods(nsCTF).GetLogs(name, &corev1.PodLogOptions{Container: pod.Spec.InitContainers[0].Name}).DoRaw(ctx)
		if err != nil {
			return s, fmt.Errorf("the gate's log: %w", err)
		}
		var target string
		var silences, probes int
		if _, err := fmt.Sscanf(string(gateLog), "policy enforced after %fs: %s dropped %d probes in a row (%d probes)", &s.gate, &target, &silences, &probes); err != nil {
			return s, fmt.Errorf("the gate's log %q: %w", gateLog, err)
		}
		s.answers = probes - silences
	}

	if err := dyn.Resource(chalGVR).Namespace(nsCTF).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return s, err
	}
	return s, e2eutil.WaitUntil(ctx, 2*time.Minute, name+" gone", func() (bool, error) {
		_, err := getChallenge(ctx, name)
		_, perr := kube.CoreV1().Pods(nsCTF).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(perr), nil
	})
}

// percentile of values (nearest rank); 100 is the maximum.
func percentile(values []float64, p int) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}
