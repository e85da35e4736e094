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

	appsv1 "k8s.io/api/apps/v1"
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

// deniedAnswers counts the attempts on denied targets that were answered.
func (s gateStart) deniedAnswers() int {
	total := 0
	for _, n := range s.answered {
		total += n
	}
	return total
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
	starts := startGatedInBatches(ctx, t, "gate", gateStarts)

	slices.SortFunc(starts, func(a, b gateStart) int { return cmp.Compare(a.name, b.name) })
	leaked := 0
	var gates, runnings []float64
	for _, s := range starts {
		total := s.deniedAnswers()
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
// a Pod that no NetworkPolicy selects, wait-for-policy must fail because the target still answers.
// A target that never answered would open every gate at once, and the measurement would prove nothing.
func gateTargetAnswersUnpolicedPods(ctx context.Context, t *testing.T) {
	t.Helper()
	done := waitForPolicyUnpoliced(ctx, t, "gate-control", gateTarget, 3*time.Second)
	if done.ExitCode == 0 || !strings.Contains(done.Message, "still answers") {
		t.Fatalf("the gate's target does not answer a Pod that no policy selects (exit %d, %q): every gate would open at once", done.ExitCode, done.Message)
	}
}

// waitForPolicyUnpoliced runs wait-for-policy against target, for at most timeout, in a Pod of
// the platform's namespace (which no NetworkPolicy selects), and returns how it ended.
func waitForPolicyUnpoliced(ctx context.Context, t *testing.T, name, target string, timeout time.Duration) *corev1.ContainerStateTerminated {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsPlatform},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr(false),
			EnableServiceLinks:           ptr(false),
			SecurityContext:              restrictedPod(),
			Containers: []corev1.Container{{
				Name: "gate", Image: policyGateImage, ImagePullPolicy: corev1.PullNever,
				Args:            []string{"wait-for-policy", "--target=" + target, "--timeout=" + timeout.String()},
				SecurityContext: restrictedContainer(),
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
	e2eutil.WaitFor(ctx, t, 2*time.Minute, name+": wait-for-policy's end", func() (bool, error) {
		p, err := kube.CoreV1().Pods(nsPlatform).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, nil
		}
		done = p.Status.ContainerStatuses[0].State.Terminated
		return done != nil, nil
	})
	t.Logf("%s: wait-for-policy --target=%s from a Pod no policy selects exited %d: %s", name, target, done.ExitCode, done.Message)
	return done
}

// restrictedPod and restrictedContainer are the security contexts Pod Security "restricted" asks of
// the test's own Pods.
func restrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

func restrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func ptr[T any](v T) *T { return &v }

// gateState says how the hook under test was configured.
func gateState() string {
	if os.Getenv("CHALLENGE_HOOK_POLICY_GATE") == "false" {
		return "off (CHALLENGE_HOOK_POLICY_GATE=false)"
	}
	return "on"
}

// startGatedInBatches starts count instances (startGated, egress on every other one), gateBatch at
// once, named prefix-NN, and stops the test at the first batch with a failed start.
func startGatedInBatches(ctx context.Context, t *testing.T, prefix string, count int) []gateStart {
	t.Helper()
	var (
		mu     sync.Mutex
		starts []gateStart
		failed bool
	)
	for round := range count / gateBatch {
		var wg sync.WaitGroup
		for i := range gateBatch {
			n := round*gateBatch + i
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := startGated(ctx, fmt.Sprintf("%s-%02d", prefix, n), n%2 == 1)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("start %d: %v", n, err)
					failed = true
					return
				}
				starts = append(starts, s)
			}()
		}
		wg.Wait()
		if failed {
			t.FailNow()
		}
	}
	return starts
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

// policyGateTargetComponent is the policy gate's target as shipped; installPolicyGateTarget
// creates its objects.
const policyGateTargetComponent = "manifests/components/policy-gate-target/target.yaml"

// installPolicyGateTarget creates the objects of the policy-gate-target component as shipped but
// for the image (the hook binary under test), waits until both replicas run, and returns its
// Service's address: what an organizer sets as CHALLENGE_HOOK_POLICY_GATE_TARGET.
func installPolicyGateTarget(ctx context.Context) (string, error) {
	// The shipped namespace enforces Pod Security restricted: so does this one.
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "challenge-hook", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create namespace challenge-hook: %w", err)
	}
	var service *corev1.Service
	var deployment *appsv1.Deployment
	if _, err := createComponent(ctx, policyGateTargetComponent, func(obj any) {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			c := &o.Spec.Template.Spec.Containers[0]
			c.Image, c.ImagePullPolicy = policyGateImage, corev1.PullNever
			deployment = o
		case *corev1.Service:
			service = o
		}
	}); err != nil {
		return "", err
	}
	if deployment == nil || service == nil {
		return "", fmt.Errorf("%s has no Deployment or no Service", policyGateTargetComponent)
	}
	if err := e2eutil.WaitUntil(ctx, 2*time.Minute, "the policy gate target's replicas ready", func() (bool, error) {
		d, err := kube.AppsV1().Deployments(deployment.Namespace).Get(ctx, deployment.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return d.Status.ReadyReplicas == *deployment.Spec.Replicas && d.Status.UpdatedReplicas == *deployment.Spec.Replicas, nil
	}); err != nil {
		return "", err
	}
	got, err := kube.CoreV1().Services(service.Namespace).Get(ctx, service.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return hostPort(got.Spec.ClusterIP, int64(got.Spec.Ports[0].Port)), nil
}
