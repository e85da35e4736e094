//go:build e2enode

package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

const (
	// stamperUsername is the activity stamper's ServiceAccount, as the API server names it.
	stamperUsername = "system:serviceaccount:challenge-hook:challenge-hook-activity-stamper"
	// nodeIdleTimeout is the idleTimeout of TestIdleThroughGateway's definition.
	nodeIdleTimeout = 30 * time.Second
)

// stamperRights are the activity-stamper component's objects that give its ServiceAccount its
// rights and bound them (RBAC, the admission policy), by kind, with their resources.
var stamperRights = map[string]schema.GroupVersionResource{
	"ServiceAccount":                   {Version: "v1", Resource: "serviceaccounts"},
	"ClusterRole":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"RoleBinding":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	"ValidatingAdmissionPolicy":        {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"},
}

// TestIdleThroughGateway: a TCP instance with idleTimeout 30s, reached by a player through the
// real TCP gateway (its two replicas, real packets), stamped by the activity stamper from the
// gateways' GET /activity: it stays Running while the player's sessions move bytes (one every
// 5 s for 75 s, each reading the flag), and stops (Stopped, Idle) once the player left, within its
// idleTimeout of the last session.
//
// The stamper runs on the node as its ServiceAccount (the component's RBAC, its RoleBinding in the
// namespace ctf, and admission policy are installed; the API server's impersonation gives the
// test's process that identity, and the stamp lands on the instance's Service), one
// process per gateway Pod: this node has no cluster DNS to resolve the component's headless
// Service, and its API server listens on loopback, out of a Pod's reach. What the component adds
// beside that (the Deployment, its NetworkPolicies) is checked by the manifests' tests and by
// make e2e.
func TestIdleThroughGateway(t *testing.T) {
	if tcpGatewayKey == "" {
		t.Skip("the hook under test has no --tcp-gateway-key-file")
	}
	ctx := e2eutil.TestContext(t)
	installTCPGateway(ctx, t)
	installStamperRights(ctx, t)

	apply(ctx, t, strings.Replace(strings.Replace(pwnDefinition, "name: pwn}", "name: pwn-idle}", 1),
		"timeout: 30m", "timeout: 30m\n  idleTimeout: "+nodeIdleTimeout.String(), 1))
	const name = "pwn-idle-team-a"
	apply(ctx, t, `
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: `+name+`}
spec:
  owner: team-idle
  definitionRef: {name: pwn-idle}
`)
	t.Cleanup(func() { deleteChallenge(context.Background(), t, name, 2*time.Minute) })
	running := waitPhase(ctx, t, name, "Running", "Ready", 2*time.Minute)
	token := tcpEndpointOf(t, running).Token
	want := flagFor(t, nsCTF+"/pwn-idle", "team-idle", "CTF")
	readyAt := status(running, "readyAt")

	pods, err := kube.CoreV1().Pods(tcpGatewayNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + tcpGatewayName})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the gateway's Pods: %d, err %v", len(pods.Items), err)
	}
	kubeconfig := e2eutil.ImpersonatingKubeconfig(t, stamperUsername)
	for i, pod := range pods.Items {
		metrics := freeLoopbackAddr(t)
		stop, err := startProcess(ctx, fmt.Sprintf("activity-stamper-%d", i), cfg.hookBin, []string{"activity-stamper",
			"--kubeconfig=" + kubeconfig, "--gateways=" + hostPort(pod.Status.PodIP, 8082), "--interval=1s", "--namespaces=" + nsCTF,
			"--metrics-listen=" + metrics, "--log-level=debug"}, "http://"+metrics+"/readyz")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}

	// The player: a session every 5 s for 75 s (two and a half idleTimeouts), each reading the flag
	// through the gateway; the instance stays Running all along.
	flagThroughGateway(ctx, t, token, want, "the first session")
	begin := time.Now()
	lastSession := time.Now()
	for time.Since(begin) < 75*time.Second {
		time.Sleep(5 * time.Second)
		obj, err := getChallenge(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if phase := status(obj, "phase"); phase != "Running" {
			t.Fatalf("%s into the player's sessions (one every 5 s, idleTimeout %s), the instance is %s/%s: %s; stamp %q, lastActivityAt %s",
				time.Since(begin).Round(time.Second), nodeIdleTimeout, phase, status(obj, "reason"), status(obj, "message"),
				serviceStamp(ctx, t, name), status(obj, "lastActivityAt"))
		}
		flagThroughGateway(ctx, t, token, want, fmt.Sprintf("a session %s in", time.Since(begin).Round(time.Second)))
		lastSession = time.Now()
	}
	obj, err := getChallenge(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	stampedTo := status(obj, "lastActivityAt")
	t.Logf("Running for %s of sessions; lastActivityAt %s (readyAt %s), the Service's stamp %s", time.Since(begin).Round(time.Second), stampedTo, readyAt,
		serviceStamp(ctx, t, name))
	if last, err := time.Parse(time.RFC3339, stampedTo); err != nil || time.Since(last) > nodeIdleTimeout/2 {
		t.Errorf("lastActivityAt %q after 75 s of sessions: want within %s of the last one", stampedTo, nodeIdleTimeout/2)
	}

	// The player left: Stopped (Idle) within the idleTimeout of the last session, and a sync.
	stopped := waitPhase(ctx, t, name, "Stopped", "Idle", nodeIdleTimeout+30*time.Second)
	after := time.Since(lastSession)
	t.Logf("Stopped/Idle %.1f s after the last session (idleTimeout %s): %s", after.Seconds(), nodeIdleTimeout, status(stopped, "message"))
	if after > nodeIdleTimeout+10*time.Second {
		t.Errorf("stopped %.1f s after the last session, want within the idleTimeout (%s) and a sync", after.Seconds(), nodeIdleTimeout)
	}
}

// installStamperRights creates the activity-stamper component's ServiceAccount, RBAC and
// admission policy as shipped (left for later tests; the node's teardown removes the cluster).
func installStamperRights(ctx context.Context, t *testing.T) {
	t.Helper()
	created := map[string]bool{}
	for _, file := range []string{"manifests/components/activity-stamper/stamper.yaml", "manifests/components/activity-stamper/policy.yaml"} {
		data, err := os.ReadFile(filepath.Join(cfg.root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			gvr, ok := stamperRights[obj.GetKind()]
			if !ok {
				continue
			}
			client := dyn.Resource(gvr)
			var err2 error
			if obj.GetNamespace() != "" {
				err2 = e2eutil.CreateOrUpdate(ctx, client.Namespace(obj.GetNamespace()), obj)
			} else {
				err2 = e2eutil.CreateOrUpdate(ctx, client, obj)
			}
			if err2 != nil {
				t.Fatalf("%s: create the %s %s: %v", file, obj.GetKind(), obj.GetName(), err2)
			}
			created[obj.GetKind()] = true
		}
	}
	for kind := range stamperRights {
		if !created[kind] {
			t.Fatalf("manifests/components/activity-stamper has no %s", kind)
		}
	}
}

// serviceStamp is the last-activity stamp of the Service of the Challenge name, where the stamper
// writes it.
func serviceStamp(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	services, err := kube.CoreV1().Services(nsCTF).List(ctx, metav1.ListOptions{LabelSelector: "ctf.challenge-hook.dev/challenge=" + name})
	if err != nil || len(services.Items) != 1 {
		t.Fatalf("the Service of %s: %d, err %v", name, len(services.Items), err)
	}
	return services.Items[0].Annotations["ctf.challenge-hook.dev/last-activity"]
}

// freeLoopbackAddr is an address on 127.0.0.1 with a port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
