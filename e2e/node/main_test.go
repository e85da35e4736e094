//go:build e2enode

// Package node tests challenge-hook on a REAL node: the real Metacontroller, a kubelet running
// containers with containerd and runc, kube-proxy, and kube-network-policies enforcing the hook's
// NetworkPolicies on real packets. hack/e2e-node.sh (`make e2e-node`) starts all of it and the
// test images (hack/testimages: a challenge server and an attacker); TestMain serves the hook
// binary on loopback and registers it with Metacontroller through compositecontroller.yaml.
package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// Namespaces: the instances', the platform's (a Pod outside any instance, standing in for the API
// server, kubelets, the metadata service and the platform database) and another tenant's.
const (
	nsCTF      = "ctf"
	nsPlatform = "platform"
	nsOther    = "other"
	verifyAddr = "127.0.0.1:25082" // a second hook, with a token: the only one serving /flags/verify
	// policyGateImage is the hook binary as an image (hack/build-images.sh with HOOK_BIN).
	policyGateImage = "local/challenge-hook:v1"
)

var (
	chalGVR = schema.GroupVersionResource{Group: "ctf.challenge-hook.dev", Version: "v1alpha1", Resource: "challenges"}
	defGVR  = schema.GroupVersionResource{Group: "ctf.challenge-hook.dev", Version: "v1alpha1", Resource: "challengedefinitions"}
	crdGVR  = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	ccGVR   = schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"}
)

// env is what hack/e2e-node.sh passes.
type env struct {
	root        string // repository root
	hookBin     string
	hookAddr    string
	resync      int
	nodeIP      string
	podCIDR     string
	serviceCIDR string
	kubeletPort string
	ctfbox      string // the test images' binary, for the host side (the player)
	logDir      string
}

var (
	cfg         env
	kube        kubernetes.Interface
	dyn         dynamic.Interface
	verifyToken string
	// targets are the Pods outside any instance: IP by name ("db" in platform, "neighbour" in other).
	targets = map[string]string{}
	// gateTarget is the hook's --policy-gate-target: the Service of the policy-gate-target
	// component (its ClusterIP, port 9).
	gateTarget string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	fmt.Println("e2e-node: Metacontroller's part is played by " + e2eutil.Controller())
	var err error
	if cfg, err = readEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node:", err)
		return 1
	}
	stop, err := setUp()
	defer stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node setup:", err)
		return 1
	}
	return m.Run()
}

func readEnv() (env, error) {
	e := env{
		root: os.Getenv("E2E_REPO_ROOT"), hookBin: os.Getenv("E2E_NODE_HOOK_BIN"), hookAddr: os.Getenv("E2E_NODE_HOOK_ADDR"),
		nodeIP: os.Getenv("E2E_NODE_IP"), podCIDR: os.Getenv("E2E_NODE_POD_CIDR"), serviceCIDR: os.Getenv("E2E_NODE_SERVICE_CIDR"),
		kubeletPort: os.Getenv("E2E_NODE_KUBELET_PORT"), ctfbox: os.Getenv("E2E_NODE_CTFBOX"),
	}
	var err error
	e.resync, err = strconv.Atoi(os.Getenv("E2E_NODE_RESYNC_SECONDS"))
	if e.root == "" || e.hookBin == "" || e.hookAddr == "" || e.nodeIP == "" || e.ctfbox == "" || os.Getenv("KUBECONFIG") == "" || err != nil {
		return e, errors.New("E2E_REPO_ROOT, E2E_NODE_* or KUBECONFIG not set: run these tests with `make e2e-node`")
	}
	e.logDir = filepath.Join(filepath.Dir(filepath.Dir(os.Getenv("KUBECONFIG"))), "logs")
	return e, nil
}

// setUp starts the hooks, installs the CRDs and the CompositeController, and creates the
// namespaces and the Pods outside any instance. stop undoes what outlives the test binary.
func setUp() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return stop, err
	}
	rc.QPS, rc.Burst = 100, 200
	if kube, err = kubernetes.NewForConfig(rc); err != nil {
		return stop, err
	}
	if dyn, err = dynamic.NewForConfig(rc); err != nil {
		return stop, err
	}

	// The Pods outside any instance come first: db is the policy gate's target.
	for _, ns := range []string{nsCTF, nsPlatform, nsOther} {
		_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
		}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return stop, err
		}
	}
	// Pod Security admission needs the namespace's default ServiceAccount (controller-manager).
	for _, ns := range []string{nsCTF, nsPlatform, nsOther} {
		if err := e2eutil.WaitUntil(ctx, time.Minute, "ServiceAccount default in "+ns, func() (bool, error) {
			_, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			return stop, err
		}
	}
	for name, ns := range map[string]string{"db": nsPlatform, "neighbour": nsOther} {
		ip, err := startTargetPod(ctx, ns, name)
		if err != nil {
			return stop, err
		}
		targets[name] = ip
	}
	fmt.Printf("targets outside any instance: platform/db %s, other/neighbour %s\n", targets["db"], targets["neighbour"])

	// The hook Metacontroller calls, with a token for POST /flags/verify (stateless: an HMAC under
	// the flag key). The hook serves it on a listener of its own (--verify-listen,
	// --verify-token-file); a hook binary without --verify-listen (E2E_NODE_HOOK_BIN) serves it on
	// the main listener with --token-file, which Metacontroller would then have to send too: for
	// such a binary, a second process serves verification.
	verifyToken = strconv.FormatInt(time.Now().UnixNano(), 36) + "-e2e-node-verify"
	tokenFile := filepath.Join(cfg.logDir, "verify.token")
	if err := os.WriteFile(tokenFile, []byte(verifyToken), 0o600); err != nil {
		return stop, err
	}
	// Metacontroller's token: in the Secret every CompositeController's authorization names (the
	// README's install step), and the hook's --token-file; Metacontroller sends it from the Secret.
	hookToken := strconv.FormatInt(time.Now().UnixNano(), 36) + "-e2e-node-metacontroller"
	hookTokenFile := filepath.Join(cfg.logDir, "metacontroller.token")
	if err := os.WriteFile(hookTokenFile, []byte(hookToken), 0o600); err != nil {
		return stop, err
	}
	common := []string{
		"--flag-key-file=" + filepath.Join(cfg.root, "testdata/flag.key"), "--public-host=" + cfg.nodeIP,
		"--pod-cidrs=" + cfg.podCIDR, "--service-cidrs=" + cfg.serviceCIDR, "--node-cidrs=" + cfg.nodeIP + "/32",
	}
	help, _ := exec.Command(cfg.hookBin, "-h").CombinedOutput()
	if bytes.Contains(help, []byte("-metrics-listen")) {
		common = append(common, "--metrics-listen=127.0.0.1:0") // nothing here scrapes it
	}
	if bytes.Contains(help, []byte("-policy-gate-image")) {
		// The policy gate runs this hook binary (hack/build-images.sh) and waits, in each new Pod,
		// until the policy-gate-target component's Service, which every instance's policy denies,
		// stops answering. (The default target, the node's kubelet port, is never denied by
		// kube-network-policies: see docs/security.md.) A hook binary without that component's
		// command (E2E_NODE_HOOK_BIN) waits for db instead. CHALLENGE_HOOK_POLICY_GATE=false in
		// the environment turns the gate off.
		gateTarget = hostPort(targets["db"], 8080)
		if bytes.Contains(help, []byte("policy-gate-target (")) {
			if gateTarget, err = installPolicyGateTarget(ctx); err != nil {
				return stop, err
			}
		}
		fmt.Printf("policy gate target: %s\n", gateTarget)
		common = append(common, "--policy-gate-image="+policyGateImage, "--policy-gate-target="+gateTarget)
	}
	if bytes.Contains(help, []byte("-tcp-gateway-key-file")) {
		// The TCP gateway's key, as the README's install creates it (32 random bytes in base64): the
		// hook mints tokens with it, the gateway (TestTCPGateway) opens them with it. The address is
		// the gateway Service's node port on the node, which the tests fix.
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return stop, err
		}
		tcpGatewayKey = base64.StdEncoding.EncodeToString(key)
		keyFile := filepath.Join(cfg.logDir, "tcp-gateway.key")
		if err := os.WriteFile(keyFile, []byte(tcpGatewayKey), 0o600); err != nil {
			return stop, err
		}
		common = append(common, "--tcp-gateway-key-file="+keyFile, "--tcp-gateway-address="+tcpGatewayAddr())
	}
	hooks := [][]string{append([]string{"hook", "--listen=" + cfg.hookAddr, "--token-file=" + hookTokenFile}, common...)}
	if bytes.Contains(help, []byte("-verify-listen")) {
		hooks[0] = append(hooks[0], "--verify-listen="+verifyAddr, "--verify-token-file="+tokenFile)
	} else {
		hooks = append(hooks, append([]string{"hook-verify", "--listen=" + verifyAddr, "--token-file=" + tokenFile}, common...))
	}
	for _, h := range hooks {
		s, err := startProcess(ctx, h[0], cfg.hookBin, h[1:], "http://"+strings.TrimPrefix(h[1], "--listen=")+"/readyz")
		if err != nil {
			return stop, err
		}
		stops = append(stops, s)
	}

	if err := installCRDs(ctx); err != nil {
		return stop, err
	}
	if err := installTokenSecret(ctx, hookToken); err != nil {
		return stop, err
	}
	cc, err := compositeController()
	if err != nil {
		return stop, err
	}
	if err := e2eutil.CreateOrUpdate(ctx, dyn.Resource(ccGVR), cc); err != nil {
		return stop, fmt.Errorf("install the CompositeController: %w", err)
	}
	return stop, nil
}

// startProcess runs a binary in its own process group, logs to cfg.logDir/<name>.log, and waits
// until readyURL answers 200. The returned func stops it (SIGTERM, then SIGKILL after 10 s).
func startProcess(ctx context.Context, name, bin string, args []string, readyURL string) (func(), error) {
	logFile, err := os.Create(filepath.Join(cfg.logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	proc, err := e2eutil.Start(cmd)
	if err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	stop := func() {
		proc.Stop(syscall.SIGTERM, 10*time.Second)
		_ = logFile.Close()
	}
	err = e2eutil.WaitUntil(ctx, 30*time.Second, name+" ready", func() (bool, error) {
		select {
		case <-proc.Exited():
			return false, fmt.Errorf("%s exited, see %s", name, logFile.Name())
		default:
		}
		resp, err := http.Get(readyURL)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return stop, err
}

func installCRDs(ctx context.Context) error {
	paths, _ := filepath.Glob(filepath.Join(cfg.root, "manifests", "crd-*.yaml"))
	if len(paths) == 0 {
		return errors.New("no manifests/crd-*.yaml")
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		crd, err := decode(string(data))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := e2eutil.CreateOrUpdate(ctx, dyn.Resource(crdGVR), crd); err != nil {
			return err
		}
		if err := e2eutil.WaitUntil(ctx, 30*time.Second, "CRD "+crd.GetName()+" Established", func() (bool, error) {
			got, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// installTokenSecret creates the hook's namespace and the Secret challenge-hook-token (key "token")
// that the shipped CompositeController's authorization names.
func installTokenSecret(ctx context.Context, token string) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "challenge-hook"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace challenge-hook: %w", err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "challenge-hook-token", Namespace: "challenge-hook"},
		StringData: map[string]string{"token": token},
	}
	_, err = kube.CoreV1().Secrets("challenge-hook").Create(ctx, secret, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = kube.CoreV1().Secrets("challenge-hook").Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create the Secret challenge-hook-token: %w", err)
	}
	return nil
}

// compositeController is compositecontroller.yaml with webhook urls to the hook on loopback and a
// short resync period, and nothing else changed: the webhooks' authorization stays, so that
// Metacontroller sends the token of the Secret it names.
func compositeController() (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(filepath.Join(cfg.root, "compositecontroller.yaml"))
	if err != nil {
		return nil, err
	}
	cc, err := decode(string(data))
	if err != nil {
		return nil, err
	}
	hooks, _, _ := unstructured.NestedMap(cc.Object, "spec", "hooks")
	if len(hooks) == 0 {
		return nil, errors.New("compositecontroller.yaml has no spec.hooks")
	}
	for _, raw := range hooks {
		webhook, _ := raw.(map[string]any)["webhook"].(map[string]any)
		path, _ := webhook["path"].(string)
		delete(webhook, "service")
		delete(webhook, "path")
		webhook["url"] = "http://" + cfg.hookAddr + path
	}
	if err := unstructured.SetNestedMap(cc.Object, hooks, "spec", "hooks"); err != nil {
		return nil, err
	}
	return cc, unstructured.SetNestedField(cc.Object, int64(cfg.resync), "spec", "resyncPeriodSeconds")
}

// startTargetPod runs the challenge server, restricted, outside any instance, and returns its IP.
func startTargetPod(ctx context.Context, ns, name string) (string, error) {
	pod, err := decode(fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, labels: {app: %s}}
spec:
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: server
    image: local/ctfbox:v1
    imagePullPolicy: Never
    env: [{name: FLAG, value: "platform-secret-%s"}]
    ports: [{containerPort: 8080}, {containerPort: 1337}, {containerPort: 1337, protocol: UDP}]
    securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
    readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
`, name, ns, name, name))
	if err != nil {
		return "", err
	}
	var p corev1.Pod
	if err := fromUnstructured(pod, &p); err != nil {
		return "", err
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, &p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	var ip string
	err = e2eutil.WaitUntil(ctx, 2*time.Minute, "Pod "+ns+"/"+name+" Ready", func() (bool, error) {
		got, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ip = got.Status.PodIP
		return podReady(got) && ip != "", nil
	})
	return ip, err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ---------------------------------------------------------------- small helpers

func decode(doc string) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

func fromUnstructured(u *unstructured.Unstructured, out any) error {
	data, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return yaml.Unmarshal(data, out)
}

// ---------------------------------------------------------------- Challenges

// challengeOf is a Challenge named name, of owner, that runs the ChallengeDefinition definition.
func challengeOf(name, owner, definition string) string {
	return challengeYAML(name, owner, "\n  definitionRef: {name: "+definition+"}\n")
}

// inlineChallenge is a Challenge named name, of owner, with an inline template: YAML lines
// indented by four spaces, as under spec.template, after a newline.
func inlineChallenge(name, owner, template string) string {
	return challengeYAML(name, owner, "\n  template:"+template)
}

// challengeYAML is a Challenge named name, of owner, with the rest of its spec: YAML lines
// indented by two spaces, after a newline.
func challengeYAML(name, owner, spec string) string {
	return fmt.Sprintf("apiVersion: ctf.challenge-hook.dev/v1alpha1\nkind: Challenge\nmetadata: {name: %s}\nspec:\n  owner: %s%s", name, owner, spec)
}

// apply creates a Challenge or ChallengeDefinition from YAML in the ctf namespace.
func apply(ctx context.Context, t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj, err := decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	obj.SetNamespace(nsCTF)
	gvr := chalGVR
	if obj.GetKind() == "ChallengeDefinition" {
		gvr = defGVR
	}
	if err := e2eutil.CreateOrUpdate(ctx, dyn.Resource(gvr).Namespace(nsCTF), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func getChallenge(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	return dyn.Resource(chalGVR).Namespace(nsCTF).Get(ctx, name, metav1.GetOptions{})
}

func status(obj *unstructured.Unstructured, field string) string {
	s, _, _ := unstructured.NestedString(obj.Object, "status", field)
	return s
}

// waitPhase waits until the Challenge's status.phase is phase (and reason, when not empty).
func waitPhase(ctx context.Context, t *testing.T, name, phase, reason string, timeout time.Duration) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	err := e2eutil.WaitUntil(ctx, timeout, fmt.Sprintf("Challenge %s phase %s %s", name, phase, reason), func() (bool, error) {
		var err error
		got, err = getChallenge(ctx, name)
		if err != nil {
			return false, err
		}
		return status(got, "phase") == phase && (reason == "" || status(got, "reason") == reason), nil
	})
	if err != nil {
		if got != nil {
			t.Logf("last status of %s: phase %s, reason %s, message %q", name, status(got, "phase"), status(got, "reason"), status(got, "message"))
		}
		t.Fatal(err)
	}
	return got
}

func patchChallenge(ctx context.Context, t *testing.T, name, spec string) {
	t.Helper()
	if _, err := dyn.Resource(chalGVR).Namespace(nsCTF).Patch(ctx, name, "application/merge-patch+json", []byte(`{"spec":`+spec+`}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch Challenge %s with %s: %v", name, spec, err)
	}
}

// deleteChallenge deletes a Challenge and waits until it and its Pod are gone.
func deleteChallenge(ctx context.Context, t *testing.T, name string, timeout time.Duration) {
	t.Helper()
	err := dyn.Resource(chalGVR).Namespace(nsCTF).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	e2eutil.WaitFor(ctx, t, timeout, "Challenge "+name+" and its Pod gone", func() (bool, error) {
		_, err := getChallenge(ctx, name)
		_, perr := kube.CoreV1().Pods(nsCTF).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(perr), nil
	})
}

// endpoint is status.endpoints[] by name.
func endpoint(t *testing.T, obj *unstructured.Unstructured, name string) (host string, port int64) {
	t.Helper()
	eps, _, _ := unstructured.NestedSlice(obj.Object, "status", "endpoints")
	for _, raw := range eps {
		ep, _ := raw.(map[string]any)
		if ep["name"] == name {
			host, _ = ep["host"].(string)
			port, _ = ep["port"].(int64)
			return host, port
		}
	}
	t.Fatalf("Challenge %s: no endpoint %q in %v", obj.GetName(), name, eps)
	return "", 0
}

// flagFor is the dynamic flag the hook's key gives owner on definition (challenge-hook flag).
func flagFor(t *testing.T, definition, owner, prefix string) string {
	t.Helper()
	var out, stderr bytes.Buffer
	cmd := exec.Command(cfg.hookBin, "flag", "--definition", definition, "--owner", owner, "--prefix", prefix,
		"--flag-key-file", filepath.Join(cfg.root, "testdata/flag.key"))
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("challenge-hook flag: %v: %s", err, stderr.String())
	}
	return strings.TrimSpace(out.String())
}

// createComponent creates the objects of a component's file as shipped, NetworkPolicies first,
// after edit has changed what the test must (the image, ...), and counts them by kind. Objects
// that exist already (an earlier test's) are left as they are.
func createComponent(ctx context.Context, file string, edit func(obj any)) (map[string]int, error) {
	data, err := os.ReadFile(filepath.Join(cfg.root, file))
	if err != nil {
		return nil, err
	}
	var docs []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, doc)
		}
	}
	isPolicy := func(doc string) bool { return strings.Contains(doc, "\nkind: NetworkPolicy\n") }
	sort.SliceStable(docs, func(i, j int) bool { return isPolicy(docs[i]) && !isPolicy(docs[j]) })
	kinds := map[string]int{}
	for i, doc := range docs {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
		}
		var obj any
		switch meta.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "Service":
			obj = &corev1.Service{}
		case "NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		default:
			return nil, fmt.Errorf("%s: a %s the test does not install", file, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
		}
		edit(obj)
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.Deployment:
			_, err = kube.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *policyv1.PodDisruptionBudget:
			_, err = kube.PolicyV1().PodDisruptionBudgets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Service:
			_, err = kube.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *networkingv1.NetworkPolicy:
			_, err = kube.NetworkingV1().NetworkPolicies(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("%s: create the %s: %w", file, meta.Kind, err)
		}
		kinds[meta.Kind]++
	}
	return kinds, nil
}
