//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// TestIngressLogStamps runs examples/ingress-activity/stamp.sh as the docs show, with the real
// kubectl against the real API server: an ingress-nginx access log line of a request to an HTTP
// instance's upstream stamps its Service, and the hook, under the real Metacontroller, moves the
// Challenge's status.lastActivityAt to the stamp; a line of another upstream stamps nothing.
func TestIngressLogStamps(t *testing.T) {
	kubectl := os.Getenv("E2E_KUBECTL")
	if kubectl == "" {
		t.Fatal("E2E_KUBECTL is not set: run the e2e tests with `make e2e`")
	}
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "ingress-log", podSecurityRestricted)
	def := validDefinition("web")
	spec(def)["idleTimeout"] = "10m"
	createObject(ctx, t, c, ns, def)
	chals := c.dyn.Resource(chalGVR).Namespace(ns)
	for _, name := range []string{"used", "unused"} {
		createObject(ctx, t, c, ns, platformChallenge(name, "web", "team-"+name, ""))
	}
	status := func(name, field string) string {
		u, err := chals.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, _, _ := unstructured.NestedString(u.Object, "status", field)
		return v
	}
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "both Running", func() (bool, error) {
		return status("used", "phase") == "Running" && status("unused", "phase") == "Running", nil
	})
	services, err := c.dyn.Resource(serviceGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "ctf.challenge-hook.dev/challenge=used"})
	if err != nil || len(services.Items) == 0 {
		t.Fatalf("the Services of used: %d, err %v", len(services.Items), err)
	}
	svc := services.Items[0]
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	port, _ := ports[0].(map[string]any)["port"].(int64)
	upstream := fmt.Sprintf("%s-%s-%d", ns, svc.GetName(), port)
	before := map[string]string{"used": status("used", "lastActivityAt"), "unused": status("unused", "lastActivityAt")}

	time.Sleep(1100 * time.Millisecond) // a stamp in a later second than readyAt
	log := strings.Join([]string{
		`203.0.113.7 - - [27/Nov/2026:13:40:01 +0000] "GET / HTTP/1.1" 200 612 "-" "curl/8.5.0" 78 0.002 [` + upstream + `] [] 10.244.0.12:8080 612 0.002 200 4f1e8a3c`,
		`203.0.113.7 - - [27/Nov/2026:13:40:01 +0000] "GET / HTTP/1.1" 404 548 "-" "curl/8.5.0" 78 0.001 [upstream-default-backend] [] 127.0.0.1:8181 548 0.001 404 9b2c0d11`,
	}, "\n") + "\n"
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(c.root, "examples/ingress-activity/stamp.sh"))
	cmd.Env = append(os.Environ(), "KUBECTL="+kubectl, "NAMESPACES="+ns)
	cmd.Stdin = strings.NewReader(log)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stamp.sh: %v\n%s", err, out)
	}
	stampedAt := time.Now()

	u, err := c.dyn.Resource(serviceGVR).Namespace(ns).Get(ctx, svc.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stamp := u.GetAnnotations()[lastActivityAnnotation]
	if stamp == "" {
		t.Fatalf("stamp.sh wrote no %s on used's Service %s; its output:\n%s", lastActivityAnnotation, svc.GetName(), out)
	}
	e2eutil.WaitFor(ctx, t, 30*time.Second, "used's lastActivityAt at the stamp "+stamp, func() (bool, error) {
		return status("used", "lastActivityAt") == stamp, nil
	})
	if stamp == before["used"] {
		t.Errorf("used's lastActivityAt was already %s before the stamp", stamp)
	}
	unused, err := c.dyn.Resource(serviceGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "ctf.challenge-hook.dev/challenge=unused"})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range unused.Items {
		if u.GetAnnotations()[lastActivityAnnotation] != "" {
			t.Errorf("unused's Service %s, which served no request, was stamped: %v", u.GetName(), u.GetAnnotations())
		}
	}
	if got := status("unused", "lastActivityAt"); got != before["unused"] {
		t.Errorf("unused's lastActivityAt moved from %s to %s", before["unused"], got)
	}
	t.Logf("stamp.sh stamped used at %s (%s after its run ended); its lastActivityAt followed", stamp, time.Since(stampedAt).Round(time.Millisecond))
}
