//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// The TCP gateway as the hook is told about it under test: its key (testdata/tcp-gateway.key, a
// demo key distinct from testdata/flag.key) and the address players would connect to.
const (
	tcpGatewayKeyFile = "testdata/tcp-gateway.key"
	tcpGatewayAddress = "tcp.challenges.localhost:1337"
)

// swapInHook points the suite's CompositeController at a hook of its own serving with flags (on
// top of the flag key and the public host), until restore is called or the test ends. The
// suite's controller and hook are what every other test uses, so the test must run while no
// other does: it is not parallel, and the swap back is checked by the suite's probe.
func swapInHook(ctx context.Context, t *testing.T, c *cluster, flags ...string) (hook *hookProcess, restore func()) {
	t.Helper()
	hook = newHookProcess(c.root, freeLoopbackAddr(t), append([]string{"--flag-key-file=testdata/flag.key", "--public-host=" + publicHost}, flags...)...)
	if err := hook.start(); err != nil {
		t.Fatal(err)
	}
	cc, err := testCompositeController(c.root, "http://"+hook.addr, int(shared.resync/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ccs := c.dyn.Resource(schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"})
	restored := false
	restore = func() {
		if restored {
			return
		}
		restored = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := e2eutil.CreateOrUpdate(ctx, ccs, shared.controller); err != nil {
			t.Errorf("restore the suite's CompositeController: %v", err)
			return
		}
		if err := shared.probe(ctx, c); err != nil {
			t.Errorf("after restoring the suite's CompositeController: %v", err)
		}
		hook.stop(syscall.SIGTERM)
	}
	t.Cleanup(func() {
		restore()
		hook.stop(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("challenge-hook %s log:\n%s", strings.Join(flags, " "), tail(hook.logs.String(), 8192))
		}
	})
	if err := e2eutil.CreateOrUpdate(ctx, ccs, cc); err != nil {
		t.Fatal(err)
	}
	return hook, restore
}

// TestTCPExposureUnderMetacontroller: a Challenge exposing a port as TCP under the real
// Metacontroller. The suite's hook has no TCP gateway configured: the instance is Error with
// reason TCPGatewayNotConfigured, naming what to set, and nothing of it runs. Served by a hook
// with the gateway key and address, the same Challenge goes Running: a ClusterIP Service without
// node ports on a port derived from the Challenge (not the container's), a NetworkPolicy whose one
// ingress rule admits the gateway's Pods on the exposed port, and an endpoint with the gateway's
// address, the nc line and a token that the key opens to that Service; settled, nothing is written
// again. Served again by a hook without the gateway, it says Error and why, and its children stay
// exactly as they are.
func TestTCPExposureUnderMetacontroller(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "tcp-gw", podSecurityRestricted)
	chal := validChallenge("pwn")
	template(chal)["expose"] = []any{map[string]any{"port": int64(8080), "type": "TCP"}}

	// Under the suite's hook: no gateway configured.
	w, created := startChallenge(ctx, t, c, ns, chal)
	refused := w.next(t, 90*time.Second, "Error TCPGatewayNotConfigured", func(e statusEvent) bool {
		return e.phase == "Error" && e.reason == "TCPGatewayNotConfigured"
	})
	for _, want := range []string{"--tcp-gateway-address", "--tcp-gateway-key-file", "manifests/components/tcp-gateway"} {
		if !strings.Contains(refused.message, want) {
			t.Errorf("the reason's message %q does not name %s", refused.message, want)
		}
	}
	t.Logf("without the gateway: %s", refused)
	if pods := ofResource(childrenOf(ctx, t, c, ns, created.GetUID()), "pods"); len(pods) > 0 {
		t.Errorf("a Pod runs without the gateway configured: %s", pods[0].GetName())
	}

	// Under a hook with the gateway.
	// The Service range of hack/cluster.sh: the hook mints tokens only inside it.
	hook, restore := swapInHook(ctx, t, c, "--tcp-gateway-key-file="+tcpGatewayKeyFile, "--tcp-gateway-address="+tcpGatewayAddress, "--service-cidrs=10.96.0.0/16")
	running := w.phase(t, 2*time.Minute, "Running")
	t.Logf("with the gateway: %s", running)
	children := childrenOf(ctx, t, c, ns, created.GetUID())
	services := ofResource(children, "services")
	if len(services) != 1 {
		t.Fatalf("want one Service, got %d", len(services))
	}
	svc := services[0]
	if typ, _, _ := unstructured.NestedString(svc.Object, "spec", "type"); typ != "ClusterIP" {
		t.Errorf("Service %s of type %q, want ClusterIP", svc.GetName(), typ)
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 {
		t.Fatalf("Service %s ports %v, want one", svc.GetName(), ports)
	}
	port := ports[0].(map[string]any)
	servicePort, _ := port["port"].(int64)
	if _, ok := port["nodePort"]; ok || servicePort == 8080 || fmt.Sprint(port["targetPort"]) != "8080" {
		t.Errorf("Service %s port %v: want a derived port to 8080 without a node port", svc.GetName(), port)
	}
	clusterIP, _, _ := unstructured.NestedString(svc.Object, "spec", "clusterIP")

	policies := ofResource(children, "networkpolicies.networking.k8s.io")
	if len(policies) != 1 {
		t.Fatalf("want one NetworkPolicy, got %d", len(policies))
	}
	ingress, _, _ := unstructured.NestedSlice(policies[0].Object, "spec", "ingress")
	if len(ingress) != 1 {
		t.Fatalf("NetworkPolicy %s: ingress %v, want one rule (the gateway's)", policies[0].GetName(), ingress)
	}
	rule := ingress[0].(map[string]any)
	from, _ := rule["from"].([]any)
	rulePorts, _ := rule["ports"].([]any)
	if len(from) != 1 || len(rulePorts) != 1 {
		t.Fatalf("NetworkPolicy %s rule %v: want one peer and one port", policies[0].GetName(), rule)
	}
	peer := from[0].(map[string]any)
	namespace, _, _ := unstructured.NestedString(peer, "namespaceSelector", "matchLabels", "kubernetes.io/metadata.name")
	name, _, _ := unstructured.NestedString(peer, "podSelector", "matchLabels", "app.kubernetes.io/name")
	if namespace != "challenge-hook" || name != "challenge-hook-tcp-gateway" {
		t.Errorf("NetworkPolicy %s admits %v, want the gateway's Pods (challenge-hook, app.kubernetes.io/name=challenge-hook-tcp-gateway)", policies[0].GetName(), peer)
	}
	if p := rulePorts[0].(map[string]any); fmt.Sprint(p["port"]) != "8080" || p["protocol"] != "TCP" {
		t.Errorf("NetworkPolicy %s admits the gateway on %v, want 8080/TCP", policies[0].GetName(), p)
	}

	endpoints, _, _ := unstructured.NestedSlice(running.obj.Object, "status", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("endpoints %v, want one", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	if got := fmt.Sprintf("%v:%v", ep["host"], ep["port"]); got != tcpGatewayAddress || ep["protocol"] != "TCP" {
		t.Errorf("endpoint %v, want TCP at %s", ep, tcpGatewayAddress)
	}
	if want := "nc " + strings.Replace(tcpGatewayAddress, ":", " ", 1); ep["command"] != want {
		t.Errorf("endpoint command %q, want %q", ep["command"], want)
	}
	key, err := os.ReadFile(filepath.Join(c.root, tcpGatewayKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	token, _ := ep["token"].(string)
	target, err := tcptoken.Open([]byte(strings.TrimSpace(string(key))), token)
	if err != nil {
		t.Fatalf("the gateway key does not open the endpoint's token %q: %v", token, err)
	}
	if want := fmt.Sprintf("%s:%d", clusterIP, servicePort); target.Service.String() != want {
		t.Errorf("the token leads to %s, want the instance's Service %s", target.Service, want)
	}

	// Settled: over two resync periods the hook is asked again and nothing is written.
	versions := map[string]string{}
	for id, child := range children {
		versions[id] = child.GetResourceVersion()
	}
	chalVersion := running.obj.GetResourceVersion()
	syncs := syncsLogged(hook, ns, "pwn")
	time.Sleep(2*shared.resync + time.Second)
	if after := syncsLogged(hook, ns, "pwn"); after < syncs+2 {
		t.Errorf("%d syncs logged over two resync periods, want 2 or more: the settle check saw nothing", after-syncs)
	}
	for id, child := range childrenOf(ctx, t, c, ns, created.GetUID()) {
		if versions[id] != child.GetResourceVersion() {
			t.Errorf("%s was written again after the instance settled", id)
		}
	}
	now, err := c.dyn.Resource(chalGVR).Namespace(ns).Get(ctx, "pwn", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.GetResourceVersion() != chalVersion {
		t.Errorf("the Challenge was written again after it settled: %s", w.history())
	}

	// Back to a hook without the gateway: Error and why, every child kept as it is.
	restore()
	w.next(t, 90*time.Second, "Error TCPGatewayNotConfigured again", func(e statusEvent) bool {
		return e.phase == "Error" && e.reason == "TCPGatewayNotConfigured"
	})
	time.Sleep(2*shared.resync + time.Second)
	kept := childrenOf(ctx, t, c, ns, created.GetUID())
	for id, child := range children {
		got, ok := kept[id]
		switch {
		case !ok:
			t.Errorf("%s was deleted when the hook lost the gateway", id)
		case got.GetUID() != child.GetUID() || got.GetResourceVersion() != versions[id] && !strings.HasPrefix(id, "pods "):
			t.Errorf("%s was replaced or rewritten when the hook lost the gateway", id)
		}
	}
	if ids := slices.Sorted(maps.Keys(kept)); len(ids) != len(children) {
		t.Errorf("children %v, want the %d of the running instance", ids, len(children))
	}
}

// TestTCPGatewayComponentInstall: an organizer's overlay of manifests/ with the component
// manifests/components/tcp-gateway renders with kubectl kustomize; the API server accepts every
// object it adds, and the hook's Deployment as the component patches it (a server-side dry run,
// under another name); the gateway's two Pods are admitted in the hook's namespace, which enforces
// Pod Security "restricted", and mount no ServiceAccount token.
func TestTCPGatewayComponentInstall(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	objs := renderOverlay(ctx, t, c, "manifests/components/tcp-gateway")
	const gateway = "challenge-hook-tcp-gateway"
	created := map[string]bool{}
	for _, obj := range objs {
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		switch {
		case obj.GetKind() == "Namespace" && obj.GetName() == "challenge-hook":
			// The shipped namespace, Pod Security "restricted", over the one the suite made.
			if err := e2eutil.CreateOrUpdate(ctx, client, obj); err != nil {
				t.Fatal(err)
			}
		case obj.GetKind() == "Deployment" && obj.GetName() == "challenge-hook":
			obj.SetName("challenge-hook-tcp-gateway-dry-run")
			if _, err := client.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("the hook's Deployment, as the component patches it: %v", err)
			}
		case strings.HasPrefix(obj.GetName(), gateway):
			if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			}
			created[obj.GetKind()+" "+obj.GetName()] = true
			t.Cleanup(func() {
				_ = client.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{})
			})
		}
	}
	for _, want := range []string{"ServiceAccount " + gateway, "Deployment " + gateway, "PodDisruptionBudget " + gateway,
		"Service " + gateway, "Service " + gateway + "-metrics", "NetworkPolicy " + gateway} {
		if !created[want] {
			t.Errorf("the component adds no %s (it added %v)", want, slices.Sorted(maps.Keys(created)))
		}
	}
	e2eutil.WaitFor(ctx, t, 60*time.Second, "the gateway's two Pods to be admitted", func() (bool, error) {
		pods, err := c.dyn.Resource(podGVR).Namespace("challenge-hook").List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=" + gateway,
		})
		if err != nil || len(pods.Items) != 2 {
			return false, err
		}
		for _, pod := range pods.Items {
			if mount, set, _ := unstructured.NestedBool(pod.Object, "spec", "automountServiceAccountToken"); mount || !set {
				t.Errorf("gateway Pod %s mounts a ServiceAccount token", pod.GetName())
			}
		}
		return true, nil
	})
}

// renderOverlay is what kubectl kustomize renders of an organizer's overlay: manifests/ with the
// given components (directories relative to the repository root).
func renderOverlay(ctx context.Context, t *testing.T, c *cluster, components ...string) []*unstructured.Unstructured {
	t.Helper()
	kubectl := os.Getenv("E2E_KUBECTL")
	if kubectl == "" {
		t.Fatal("E2E_KUBECTL is not set: run the e2e tests with `make e2e`")
	}
	overlay := t.TempDir()
	relative := func(dir string) string {
		rel, err := filepath.Rel(overlay, filepath.Join(c.root, dir))
		if err != nil {
			t.Fatal(err)
		}
		return rel
	}
	var paths []string
	for _, component := range components {
		paths = append(paths, relative(component))
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%s]\ncomponents: [%s]\n",
		relative("manifests"), strings.Join(paths, ", "))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	source := "kubectl kustomize <overlay with " + strings.Join(components, ", ") + ">"
	rendered, err := exec.CommandContext(ctx, kubectl, "kustomize", overlay).Output()
	if err != nil {
		t.Fatalf("%s: %v", source, err)
	}
	objs, err := decodeYAMLObjects(rendered, source)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
