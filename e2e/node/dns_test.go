//go:build e2enode

package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// The test node runs no CoreDNS (it would have to be built from source, and it would forward to
// the internet): ctfbox dns stands in for it, a Pod in kube-system with the labels the hook's
// default --dns-namespace and --dns-pod-labels select, behind a Service as kube-dns is, answering
// every A query with one fixed address, on UDP and TCP 53.
const (
	dnsNamespace = "kube-system"
	dnsPodName   = "dns-stand-in"
	dnsService   = "kube-dns"
)

var dnsTargets = []string{"svc-udp", "svc-tcp", "pod-udp", "pod-tcp"}

// TestDNS proves with real packets that an instance queries the cluster DNS only when its template
// asks (dns: true) or has internet egress: three instances, one of each, each asking the stand-in
// DNS server for an A record every 200 ms through its Service and at its Pod IP, over UDP and TCP,
// from its container's start. The instance with neither gets no answer, from its first query (the
// policy gate holds its container until its policy is enforced); the two others get every one in
// the 5 s measured from a second after they are Running. The host, as an unprivileged user, asks
// the same server meanwhile: the control that it answers.
func TestDNS(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	svcIP, podIP := startStandInDNS(ctx, t)
	probes := []string{
		"svc-udp=dns://" + hostPort(svcIP, 53), "svc-tcp=dnstcp://" + hostPort(svcIP, 53),
		"pod-udp=dns://" + hostPort(podIP, 53), "pod-tcp=dnstcp://" + hostPort(podIP, 53),
	}

	type instance struct {
		name, fields string
		answered     bool
		tl           *timeline
		c            *collector
	}
	instances := []*instance{
		{name: "dns-none", answered: false},
		{name: "dns-asked", fields: "dns: true", answered: true},
		{name: "dns-egress", fields: "egress: true", answered: true},
	}
	for _, in := range instances {
		in.tl = &timeline{}
		in.c = newCollector(in.tl)
		in.tl.mark(t, "starting")
		apply(ctx, t, inlineChallenge(in.name, in.name, fmt.Sprintf(`
    containers:
      - name: prober
        image: local/attacker:v1
        args: [-listen=:8080, %s]
        ports: [{name: ctl, containerPort: 8080}]
    %s
    timeout: 30m
    maxLifetime: 2h
`, joinQuoted(probes), in.fields)))
		t.Cleanup(func() { deleteChallenge(context.Background(), t, in.name, 2*time.Minute) })
	}
	hostTL := &timeline{}
	host := newCollector(hostTL)
	hostTL.mark(t, "starting")
	stopHost := startHostProber(t, host, "control-svc-udp=dns://"+hostPort(svcIP, 53), "control-svc-tcp=dnstcp://"+hostPort(svcIP, 53))
	defer stopHost()

	for _, in := range instances {
		waitPhase(ctx, t, in.name, "Running", "Ready", 2*time.Minute)
		go func() {
			stream, err := kube.CoreV1().Pods(nsCTF).GetLogs(in.name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
			if err != nil {
				t.Errorf("follow %s's log: %v", in.name, err)
				return
			}
			defer stream.Close()
			in.c.read(stream)
		}()
		pod, err := kube.CoreV1().Pods(nsCTF).Get(ctx, in.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Without DNS the Pod's resolver is loopback, where a lookup fails at once; with it the
		// cluster's, as every Pod's by default.
		wantPolicy := corev1.DNSClusterFirst
		if !in.answered {
			wantPolicy = corev1.DNSNone
		}
		if pod.Spec.DNSPolicy != wantPolicy {
			t.Errorf("%s: dnsPolicy %q, want %q (dnsConfig %+v)", in.name, pod.Spec.DNSPolicy, wantPolicy, pod.Spec.DNSConfig)
		}
	}
	// Answers are expected from a second after the last instance is Running (kube-proxy programs
	// the Service from its EndpointSlice a moment after the DNS Pod is ready).
	time.Sleep(time.Second)
	timelines := []*timeline{hostTL}
	for _, in := range instances {
		timelines = append(timelines, in.tl)
	}
	for _, tl := range timelines {
		tl.mark(t, "measured")
	}
	time.Sleep(5 * time.Second)
	for _, tl := range timelines {
		tl.mark(t, "after")
	}
	time.Sleep(time.Second) // the last lines of the instances' logs
	stopHost()

	for _, tg := range []string{"control-svc-udp", "control-svc-tcp"} {
		if ok, n := host.get("measured", tg); ok == 0 || ok != n {
			t.Fatalf("the host's queries to the stand-in DNS server (%s): %d answered of %d: the server does not answer, nothing below proves anything", tg, ok, n)
		}
	}
	host.table(t, "the host (uid 65534), control", []string{"control-svc-udp", "control-svc-tcp"})
	for _, in := range instances {
		in.c.table(t, fmt.Sprintf("%s (%s)", in.name, in.fields), dnsTargets)
		for _, tg := range dnsTargets {
			ok, n := in.c.get("measured", tg)
			switch {
			case n == 0:
				t.Errorf("%s: no query to %s measured: the prober does not run", in.name, tg)
			case in.answered && ok != n:
				t.Errorf("%s: %d of %d queries to %s answered, want every one", in.name, ok, n, tg)
			}
			if in.answered {
				continue
			}
			for _, phase := range []string{"starting", "measured", "after"} {
				if ok, n := in.c.get(phase, tg); ok > 0 {
					t.Errorf("%s, %s: %d of %d queries to %s answered, want none: an instance without dns or egress reaches the cluster DNS", in.name, phase, ok, n, tg)
				}
			}
		}
	}
}

// startStandInDNS runs the stand-in DNS server and its Service, and returns their addresses; the
// test's cleanup removes both.
func startStandInDNS(ctx context.Context, t *testing.T) (svcIP, podIP string) {
	t.Helper()
	labels := map[string]string{"k8s-app": "kube-dns"}
	yes, no, grace := true, false, int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: dnsPodName, Namespace: dnsNamespace, Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   &yes,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				// Port 53 without root or a capability: a namespaced sysctl that Kubernetes counts as safe.
				Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "53"}},
			},
			Containers: []corev1.Container{{
				Name: "dns", Image: "local/ctfbox:v1", ImagePullPolicy: corev1.PullNever,
				Command: []string{"/ctfbox", "dns", "-listen=:53"},
				Ports: []corev1.ContainerPort{
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(53)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: dnsService, Namespace: dnsNamespace, Labels: labels},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
		}},
	}
	e2eutil.WaitFor(ctx, t, time.Minute, "ServiceAccount default in "+dnsNamespace, func() (bool, error) {
		_, err := kube.CoreV1().ServiceAccounts(dnsNamespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if _, err := kube.CoreV1().Pods(dnsNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Pods(dnsNamespace).Delete(context.Background(), dnsPodName, metav1.DeleteOptions{})
	})
	created, err := kube.CoreV1().Services(dnsNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = kube.CoreV1().Services(dnsNamespace).Get(ctx, dnsService, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Services(dnsNamespace).Delete(context.Background(), dnsService, metav1.DeleteOptions{})
	})
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "the stand-in DNS server Ready", func() (bool, error) {
		got, err := kube.CoreV1().Pods(dnsNamespace).Get(ctx, dnsPodName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		podIP = got.Status.PodIP
		return podReady(got) && podIP != "", nil
	})
	t.Logf("stand-in DNS server: Service %s/%s %s, Pod %s", dnsNamespace, dnsService, created.Spec.ClusterIP, podIP)
	return created.Spec.ClusterIP, podIP
}

// joinQuoted writes strings as the items of a YAML flow sequence.
func joinQuoted(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(quoted, ", ")
}
