//go:build e2enode

package node

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// probeControlPort is where every prober container takes its targets (POST /targets): not 8080
// or 1337, which the challenge server beside it serves.
const probeControlPort = 9090

// ctfboxServer is a pod's challenge server container, as an item of the pod's containers: the test
// image serving HTTP on 8080 and the flag on 1337, ready once /healthz answers. flag marks it as the
// container the instance's flag is given to.
func ctfboxServer(flag bool) string {
	return `
        - name: server
          image: local/ctfbox:v1
          ports: [{name: http, containerPort: 8080}, {name: flag, containerPort: 1337}]
          readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}` + flagLine(flag)
}

// ctfboxProber is a pod's prober container, as an item of the pod's containers: ctfbox probe,
// taking its targets on probeControlPort, starting with one, self (tcp://127.0.0.1:selfPort).
func ctfboxProber(selfPort int, flag bool) string {
	return fmt.Sprintf(`
        - name: probe
          image: local/ctfbox:v1
          command: [/ctfbox, probe, -listen=:%d, self=tcp://127.0.0.1:%d]`, probeControlPort, selfPort) + flagLine(flag)
}

// flagLine is the container field that gives it the flag, or nothing.
func flagLine(flag bool) string {
	if !flag {
		return ""
	}
	return "\n          flag: true"
}

// trioDefinition is an instance of three pods in the shape of examples/xss-admin-bot.yaml, with
// the test images: web (the challenge server and a prober) admits the bot on 8080, db (the server
// and a prober) admits web on 1337, and bot (a prober only, with the flag) admits nobody. Each
// prober starts with one target, its own Pod's port (the control that it works); the test gives
// it the others once every address is known.
func trioDefinition() string {
	return `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: ChallengeDefinition
metadata: {name: trio}
spec:
  pods:
    - name: web
      containers:` + ctfboxServer(false) + ctfboxProber(8080, false) + `
      internal:
        - {port: 8080, from: [bot]}
    - name: db
      containers:` + ctfboxServer(false) + ctfboxProber(1337, false) + `
      internal:
        - {port: 1337, from: [web]}
    - name: bot
      containers:` + ctfboxProber(probeControlPort, true) + `
  terminationGracePeriodSeconds: 2
  timeout: 30m
  maxLifetime: 2h
  flag: {dynamic: true, prefix: CTF, env: FLAG}
`
}

// probeTarget is what a prober connects to (its url; "" for the target it starts with) and
// whether the instance's policies allow it to answer.
type probeTarget struct {
	url     string
	allowed bool
}

// aimProber gives the prober container at podIP its targets, those with a URL (POST /targets on
// probeControlPort), from the host as root: the policy agent lets root's own sockets through
// (hack/node.sh).
func aimProber(t *testing.T, prober, podIP string, targets map[string]probeTarget) {
	t.Helper()
	var lines []string
	for name, target := range targets {
		if target.url != "" {
			lines = append(lines, name+"="+target.url)
		}
	}
	sort.Strings(lines)
	ctl := "http://" + hostPort(podIP, probeControlPort) + "/targets"
	resp, err := http.Post(ctl, "text/plain", strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatalf("give %s its targets: %v", prober, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("give %s its targets: HTTP %d", prober, resp.StatusCode)
	}
}

// readProberLog collects what the prober container of the Pod named pod has logged so far.
func readProberLog(ctx context.Context, t *testing.T, tl *timeline, pod string) *collector {
	t.Helper()
	c := newCollector(tl)
	stream, err := kube.CoreV1().Pods(nsCTF).GetLogs(pod, &corev1.PodLogOptions{Container: "probe"}).Stream(ctx)
	if err != nil {
		t.Fatalf("the log of %s's prober: %v", pod, err)
	}
	c.read(stream)
	stream.Close()
	return c
}

// trioPod is what a probe is aimed at: a Pod of one instance and its Service, if any.
type trioPod struct {
	pod   *corev1.Pod
	svcIP string // the ClusterIP of its Service ("" without one)
}

// TestComponents proves with real packets what an instance of several pods promises: two
// instances of trioDefinition (two owners) run at once; in each, the probers open a new connection
// to every target every 200 ms for several seconds. The bot reaches web:8080 by name (the hook's
// hostAliases entry, the web Service's ClusterIP), by Service IP and by Pod IP; web reaches db:1337
// by name and by IP; nothing else inside the instance answers: db reaches neither web nor bot, the
// bot does not reach db, web does not reach the bot, and ports a pod does not admit stay closed.
// No pod of one instance reaches any pod of the other, by Pod IP or Service ClusterIP, even on a
// port its own sibling of the same name may reach. Each prober's own port answers (the control).
func TestComponents(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	apply(ctx, t, trioDefinition())
	instances := []string{"trio-a", "trio-b"}
	for _, name := range instances {
		apply(ctx, t, challengeOf(name, "team-"+strings.TrimPrefix(name, "trio-"), "trio"))
		t.Cleanup(func() { deleteInstance(context.Background(), t, name, 2*time.Minute) })
	}
	for _, name := range instances {
		running := waitPhase(ctx, t, name, "Running", "", 3*time.Minute)
		t.Logf("%s Running (reason %s), endpoints %v", name, status(running, "reason"), running.Object["status"].(map[string]any)["endpoints"])
	}

	// Every address, by instance and pod.
	addr := map[string]map[string]trioPod{}
	for _, name := range instances {
		addr[name] = map[string]trioPod{}
		for _, pod := range []string{"web", "db", "bot"} {
			p, err := kube.CoreV1().Pods(nsCTF).Get(ctx, name+"--"+pod, metav1.GetOptions{})
			if err != nil || p.Status.PodIP == "" {
				t.Fatalf("Pod %s--%s: %v (IP %q)", name, pod, err, podIP(p))
			}
			tp := trioPod{pod: p}
			svc, err := kube.CoreV1().Services(nsCTF).Get(ctx, name+"--"+pod+"--internal", metav1.GetOptions{})
			switch {
			case err == nil:
				tp.svcIP = svc.Spec.ClusterIP
			case !apierrors.IsNotFound(err):
				t.Fatal(err)
			}
			addr[name][pod] = tp
		}
		if addr[name]["web"].svcIP == "" || addr[name]["db"].svcIP == "" {
			t.Fatalf("%s: web and db have internal ports, want an internal Service each: web %q, db %q", name, addr[name]["web"].svcIP, addr[name]["db"].svcIP)
		}
	}

	// The names a Pod resolves (its /etc/hosts, written by the kubelet from hostAliases). A name
	// is probed only when the Pod has it: a name not in /etc/hosts would be asked of the host's
	// resolver, off this machine.
	names := func(name, pod string) map[string]string {
		out := map[string]string{}
		for _, a := range addr[name][pod].pod.Spec.HostAliases {
			for _, h := range a.Hostnames {
				out[h] = a.IP
			}
		}
		return out
	}
	wantNames := map[string][]string{"web": {"db"}, "db": nil, "bot": {"web"}}
	for _, name := range instances {
		for pod, peers := range wantNames {
			got := names(name, pod)
			want := map[string]string{}
			for _, peer := range peers {
				want[peer] = addr[name][peer].svcIP
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Pod %s-%s: hostAliases %v, want %v (the Services' ClusterIPs)", name, pod, got, want)
			}
		}
	}

	// Targets per prober: name -> URL, and which answer. Everything not allowed must not.
	plan := map[string]map[string]probeTarget{} // "<instance>-<pod>" -> target name -> target
	for _, name := range instances {
		other := instances[0]
		if other == name {
			other = instances[1]
		}
		a, o := addr[name], addr[other]
		tcp := func(host string, port int) string { return fmt.Sprintf("tcp://%s", hostPort(host, int64(port))) }
		foreign := map[string]probeTarget{
			"other-web-pod": {tcp(o["web"].pod.Status.PodIP, 8080), false},
			"other-web-svc": {tcp(o["web"].svcIP, 8080), false},
			"other-db-pod":  {tcp(o["db"].pod.Status.PodIP, 1337), false},
			"other-db-svc":  {tcp(o["db"].svcIP, 1337), false},
			"other-bot-pod": {tcp(o["bot"].pod.Status.PodIP, probeControlPort), false},
		}
		with := func(ts map[string]probeTarget) map[string]probeTarget {
			for k, v := range foreign {
				ts[k] = v
			}
			return ts
		}
		plan[name+"--bot"] = with(map[string]probeTarget{
			"self":        {"", true}, // given at start
			"web-pod":     {tcp(a["web"].pod.Status.PodIP, 8080), true},
			"web-svc":     {tcp(a["web"].svcIP, 8080), true},
			"web-pod-tcp": {tcp(a["web"].pod.Status.PodIP, 1337), false}, // a port web does not admit
			"db-pod":      {tcp(a["db"].pod.Status.PodIP, 1337), false},
			"db-svc":      {tcp(a["db"].svcIP, 1337), false},
		})
		plan[name+"--web"] = with(map[string]probeTarget{
			"self":        {"", true},
			"db-pod":      {tcp(a["db"].pod.Status.PodIP, 1337), true},
			"db-svc":      {tcp(a["db"].svcIP, 1337), true},
			"db-pod-http": {tcp(a["db"].pod.Status.PodIP, 8080), false}, // a port db does not admit
			"bot-pod":     {tcp(a["bot"].pod.Status.PodIP, probeControlPort), false},
		})
		plan[name+"--db"] = with(map[string]probeTarget{
			"self":    {"", true},
			"web-pod": {tcp(a["web"].pod.Status.PodIP, 8080), false},
			"web-svc": {tcp(a["web"].svcIP, 8080), false},
			"bot-pod": {tcp(a["bot"].pod.Status.PodIP, probeControlPort), false},
		})
		if ip, ok := names(name, "bot")["web"]; ok && ip == a["web"].svcIP {
			plan[name+"--bot"]["web-name"] = probeTarget{"tcp://web:8080", true}
		}
		if ip, ok := names(name, "web")["db"]; ok && ip == a["db"].svcIP {
			plan[name+"--web"]["db-name"] = probeTarget{"tcp://db:1337", true}
		}
	}

	tl := &timeline{}
	tl.mark(t, "setup")
	for prober, targets := range plan {
		instance, pod, _ := strings.Cut(prober, "--")
		aimProber(t, prober, addr[instance][pod].pod.Status.PodIP, targets)
	}
	// Every target is attempted once per 200 ms from the moment the last prober got its targets.
	// A Service answers a moment after its Pod is ready (kube-proxy programs it from the
	// EndpointSlice), and a new connection waits for the policy agent's first verdict: the window
	// is counted from the moment every allowed target has answered once, and lasts 5 s.
	tl.mark(t, "probing")
	probers := make([]string, 0, len(plan))
	for prober := range plan {
		probers = append(probers, prober)
	}
	sort.Strings(probers)
	readAll := func() map[string]*collector {
		out := map[string]*collector{}
		for _, prober := range probers {
			out[prober] = readProberLog(ctx, t, tl, prober)
		}
		return out
	}
	var waiting []string
	err := e2eutil.WaitUntil(ctx, time.Minute, "every allowed target to answer once", func() (bool, error) {
		time.Sleep(time.Second)
		waiting = nil
		for prober, c := range readAll() {
			for tn, tg := range plan[prober] {
				if ok, _ := c.get("probing", tn); tg.allowed && ok == 0 {
					waiting = append(waiting, prober+" -> "+tn)
				}
			}
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		sort.Strings(waiting)
		t.Errorf("%v: never answered: %v", err, waiting)
	}
	tl.mark(t, "reached")
	time.Sleep(5 * time.Second)
	tl.mark(t, "done")

	logs := readAll()
	for _, prober := range probers {
		targets, c := plan[prober], logs[prober]
		var tnames []string
		for tn := range targets {
			tnames = append(tnames, tn)
		}
		sort.Slice(tnames, func(i, j int) bool {
			if targets[tnames[i]].allowed != targets[tnames[j]].allowed {
				return targets[tnames[i]].allowed
			}
			return tnames[i] < tnames[j]
		})
		c.table(t, "prober in "+prober, tnames)
		for _, tn := range tnames {
			judgeTarget(t, tl, prober, tn, c, targets[tn].allowed, true)
		}
	}
	for _, name := range instances {
		for _, want := range []string{name + "--bot web-name", name + "--web db-name"} {
			prober, tn, _ := strings.Cut(want, " ")
			if _, ok := plan[prober][tn]; !ok {
				t.Errorf("%s did not probe %s: its Pod has no hostAliases entry for it", prober, tn)
			}
		}
	}
}

// judgeTarget checks one prober's attempts at one target against the timeline's window, from
// "reached" (every allowed target had answered once) to "done": at least 10 attempts begun in it
// and ended before it closed (an attempt begun earlier may time out later), every one answered if
// the target is allowed. A denied target never answers: from the prober's first attempt when
// fromStart, else in the window, an earlier answer logged.
func judgeTarget(t *testing.T, tl *timeline, prober, target string, c *collector, allowed, fromStart bool) {
	t.Helper()
	reached, done := tl.spans("reached")[0][0], tl.spans("done")[0][0]
	all := c.results(target, time.Time{}, time.Now().Add(time.Hour))
	var judged []probeResult
	answered := 0
	for _, p := range all {
		if !p.T.Before(reached) && p.end().Before(done) {
			judged = append(judged, p)
			if p.OK {
				answered++
			}
		}
	}
	switch {
	case len(judged) < 10:
		t.Errorf("%s -> %s: %d attempts in 5 s, want 10 or more (the prober did not run)", prober, target, len(judged))
	case allowed && answered < len(judged):
		t.Errorf("%s -> %s: %d of %d attempts answered once every allowed target had answered, want all", prober, target, answered, len(judged))
		for _, p := range judged {
			if !p.OK {
				t.Logf("%s -> %s: attempt at %s failed: %s", prober, target, p.T.Format("15:04:05.000"), p.Err)
			}
		}
	case !allowed && answered > 0:
		t.Errorf("%s -> %s: %d of %d attempts answered in the window, want none", prober, target, answered, len(judged))
	}
	first := slices.IndexFunc(all, func(p probeResult) bool { return p.OK })
	switch {
	case !allowed && first >= 0 && fromStart:
		t.Errorf("%s -> %s: answered at %s, want never", prober, target, all[first].T.Format("15:04:05.000"))
	case !allowed && first >= 0:
		t.Logf("%s -> %s: answered at %s, before the window (%s; docs/security.md)", prober, target, all[first].T.Format("15:04:05.000"), reached.Format("15:04:05.000"))
	case allowed && first >= 0:
		t.Logf("%s -> %s: %d of %d answered in the window; first answer %.2fs after the targets were given, %d attempts ended before it",
			prober, target, answered, len(judged), all[first].end().Sub(tl.spans("probing")[0][0]).Seconds(), first)
	default:
		t.Logf("%s -> %s: %d of %d attempts answered in the window (allowed: %t)", prober, target, answered, len(judged), allowed)
	}
}

func podIP(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Status.PodIP
}

// deleteInstance deletes a Challenge and waits until it and every Pod it owned are gone.
func deleteInstance(ctx context.Context, t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	err := dyn.Resource(chalGVR).Namespace(nsCTF).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	e2eutil.WaitFor(ctx, t, timeout, "Challenge "+name+" and its Pods gone", func() (bool, error) {
		_, err := getChallenge(ctx, name)
		pods, perr := kube.CoreV1().Pods(nsCTF).List(ctx, metav1.ListOptions{})
		if perr != nil {
			return false, perr
		}
		left := slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return strings.HasPrefix(p.Name, name+"-") })
		return apierrors.IsNotFound(err) && !left, nil
	})
}
