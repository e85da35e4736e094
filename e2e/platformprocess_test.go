//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// platformComponentRole names the platform component's ClusterRole and its RoleBinding, as
// manifests/components/platform ships them.
const platformComponentRole = "challenge-hook-platform-component"

// platformProcess is a `challenge-hook platform` that startPlatformComponent runs.
type platformProcess struct {
	contractURL string // rCTF's instancer contract, {apiUrl}/v1/instances/ (--listen)
	metricsURL  string // GET /metrics (--metrics-listen)
	token       string // rCTF's token, which its --rctf-token-file holds
	pageURL     string // the player page's origin, http://127.0.0.1:<port> (--page-listen, --page-origin); "" without a link key
}

// startPlatformComponent runs `challenge-hook platform` (E2E_HOOK_BIN, else bin/challenge-hook)
// for ns, as the component's ServiceAccount (an impersonating kubeconfig) with the rights
// manifests/components/platform grants it there (bindPlatformComponent), with a fresh rCTF token
// of 32 random bytes and both listeners on free loopback ports. It returns once the component is
// ready (/readyz: its watches have listed, and it serves rCTF's contract), and stops it when the
// test ends: SIGTERM by its PID, a clean exit expected, the tail of its log when the test failed.
// Given a link key (variadic, so that the callers without a page are unchanged), it also serves
// the player page: --link-key-file, --page-listen on a free loopback port and --page-origin that
// origin, ready once the page's stylesheet answers.
func startPlatformComponent(ctx context.Context, t *testing.T, c *cluster, ns string, linkKey ...byte) *platformProcess {
	t.Helper()
	username := bindPlatformComponent(ctx, t, c, ns)
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(secret)
	tokenFile := filepath.Join(t.TempDir(), "rctf-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("E2E_HOOK_BIN")
	if bin == "" {
		bin = filepath.Join(c.root, "bin", "challenge-hook")
	}
	addr, metricsAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	args := []string{"platform", "--kubeconfig=" + e2eutil.ImpersonatingKubeconfig(t, username), "--namespaces=" + ns,
		"--rctf-token-file=" + tokenFile, "--listen=" + addr, "--metrics-listen=" + metricsAddr, "--log-level=debug"}
	pageURL := ""
	if len(linkKey) > 0 {
		keyFile := filepath.Join(t.TempDir(), "link.key")
		if err := os.WriteFile(keyFile, linkKey, 0o600); err != nil {
			t.Fatal(err)
		}
		pageAddr := freeLoopbackAddr(t)
		pageURL = "http://" + pageAddr
		args = append(args, "--link-key-file="+keyFile, "--page-listen="+pageAddr, "--page-origin="+pageURL)
	}
	cmd := exec.Command(bin, args...)
	dieWithParent(cmd)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	proc, err := e2eutil.Start(cmd)
	if err != nil {
		t.Fatalf("the platform component: %v", err)
	}
	t.Cleanup(func() {
		proc.Stop(syscall.SIGTERM, 10*time.Second)
		if err := proc.Err(); err != nil {
			t.Errorf("the platform component (pid %d) did not exit cleanly on SIGTERM: %v", proc.Pid(), err)
		}
		if t.Failed() {
			t.Logf("the platform component's log (last 16 KiB):\n%s", tail(logs.String(), 16384))
		}
	})
	readyz := "http://" + metricsAddr + "/readyz"
	probes := []string{readyz}
	if pageURL != "" {
		probes = append(probes, pageURL+"/i/assets/page.css")
	}
	probe := &http.Client{Timeout: 2 * time.Second}
	e2eutil.WaitFor(ctx, t, 60*time.Second, "the platform component to be ready ("+readyz+")", func() (bool, error) {
		select {
		case <-proc.Exited():
			t.Fatalf("the platform component (pid %d) exited: %v", proc.Pid(), proc.Err())
		default:
		}
		for _, url := range probes {
			resp, err := probe.Get(url)
			if err != nil {
				return false, err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
			}
		}
		return true, nil
	})
	return &platformProcess{contractURL: "http://" + addr + "/v1/instances/", metricsURL: "http://" + metricsAddr + "/metrics", token: token, pageURL: pageURL}
}

// bindPlatformComponent gives the component's ServiceAccount the rights that
// manifests/components/platform, rendered in an organizer's overlay, grants it in ns: the
// component's ClusterRole under a name of the test's (<name>-<ns>, deleted when the test ends), so
// that tests running in parallel share no cluster-wide object, and its RoleBinding moved into ns
// (deleted with it), referring to that ClusterRole. It returns the ServiceAccount's username once
// the binding is in force, having checked that it grants no Secret (the flags).
func bindPlatformComponent(ctx context.Context, t *testing.T, c *cluster, ns string) (username string) {
	t.Helper()
	var role, binding *unstructured.Unstructured
	serviceAccounts := map[string]bool{}
	for _, obj := range renderOverlay(ctx, t, c, "manifests/components/platform") {
		switch kind, name := obj.GetKind(), obj.GetName(); {
		case kind == "ClusterRole" && name == platformComponentRole:
			role = obj
		case kind == "RoleBinding" && name == platformComponentRole:
			binding = obj
		case kind == "ServiceAccount":
			serviceAccounts[obj.GetNamespace()+"/"+name] = true
		}
	}
	if role == nil || binding == nil {
		t.Fatalf("manifests/components/platform: ClusterRole %s %v, RoleBinding %s %v: want both", platformComponentRole, role != nil, platformComponentRole, binding != nil)
	}
	if ref, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name"); ref != role.GetName() {
		t.Fatalf("the platform component's RoleBinding refers to ClusterRole %q, want %s", ref, role.GetName())
	}
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	var subject map[string]any
	if len(subjects) == 1 {
		subject, _ = subjects[0].(map[string]any)
	}
	if subject["kind"] != "ServiceAccount" || !serviceAccounts[fmt.Sprintf("%v/%v", subject["namespace"], subject["name"])] {
		t.Fatalf("the platform component's RoleBinding binds %v, want the component's ServiceAccount alone (the component has %v)", subjects, serviceAccounts)
	}
	username = fmt.Sprintf("system:serviceaccount:%v:%v", subject["namespace"], subject["name"])

	role.SetName(role.GetName() + "-" + ns)
	binding.SetNamespace(ns)
	if err := unstructured.SetNestedField(binding.Object, role.GetName(), "roleRef", "name"); err != nil {
		t.Fatal(err)
	}
	createUntilCleanup(ctx, t, c, role)
	createUntilCleanup(ctx, t, c, binding)

	component := impersonating(t, username, "platform-component-e2e")
	e2eutil.WaitFor(ctx, t, 15*time.Second, "the platform component's RoleBinding to take effect", func() (bool, error) {
		_, err := component.Resource(chalGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	checkForbidden(t, "list Secrets as the platform component", func() error {
		_, err := component.Resource(secretGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	return username
}
