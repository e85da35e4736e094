//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

var secretGVR = podGVR.GroupVersion().WithResource("secrets")

// The platform's identity in manifests/platform-rbac.yaml, and the flag key the suite's hook
// signs flags with.
const (
	platformServiceAccount = "ctf-platform"
	platformRBACFile       = "manifests/platform-rbac.yaml"
	suiteFlagKeyFile       = "testdata/flag.key"
)

// TestPlatform plays a CTF platform under Metacontroller with nothing but the platform's RBAC
// (manifests/platform-rbac.yaml, bound to a ServiceAccount the client impersonates): it starts an
// instance, stops it, starts it again, restarts it, checks the owner's flag after the instance
// expired, and deletes instances, the calls of docs/platform.md one by one.
func TestPlatform(t *testing.T) {
	t.Parallel()
	admin := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := admin.createNamespace(ctx, t, "platform", podSecurityRestricted)
	platform := platformCluster(ctx, t, admin, ns)

	// The organizer (admin) publishes a challenge with a dynamic flag; the platform only reads it.
	def := lifecycleChallenge("pwn-heap", "ghcr.io/example/pwn:1.0", "")
	def.SetKind("ChallengeDefinition")
	def.Object["spec"] = template(def)
	template(def)["flag"] = map[string]any{"dynamic": true, "env": "FLAG", "prefix": "CTF"}
	createObject(ctx, t, admin, ns, def)
	if _, err := platform.dyn.Resource(defGVR).Namespace(ns).Get(ctx, def.GetName(), metav1.GetOptions{}); err != nil {
		t.Fatalf("the platform cannot read the ChallengeDefinition: %v", err)
	}
	// 40s: enough for Running, stop, start and restart, short enough to wait for the expiry.
	const owner = "team-7"
	w, chal := startChallenge(ctx, t, platform, ns, platformChallenge("pwn-heap-team7", def.GetName(), owner, "40s"))
	// A second player's instance, with the default lifetime: the one the platform deletes running.
	otherW, other := startChallenge(ctx, t, platform, ns, platformChallenge("pwn-heap-team8", def.GetName(), "team-8", ""))
	challenges := platform.dyn.Resource(chalGVR).Namespace(ns)
	patch := func(spec string) *unstructured.Unstructured {
		t.Helper()
		patched, err := challenges.Patch(ctx, chal.GetName(), types.MergePatchType, []byte(`{"spec":`+spec+`}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("patch %s: %v", spec, err)
		}
		return patched
	}
	// syncedRunning waits for Running computed from the Challenge's generation at least gen (an
	// earlier Running may still be queued in the watch).
	syncedRunning := func(gen int64, timeout time.Duration) statusEvent {
		t.Helper()
		return w.next(t, timeout, fmt.Sprintf("Running for generation %d", gen), func(e statusEvent) bool {
			observed, _, _ := unstructured.NestedInt64(e.obj.Object, "status", "observedGeneration")
			return e.phase == "Running" && observed >= gen
		})
	}

	// Start.
	running := w.phase(t, 60*time.Second, "Running")
	id := statusString(running.obj, "instanceId")
	endpoints := statusEndpoints(t, running.obj)
	expiresAt := statusTime(t, running.obj, "expiresAt")
	firstPod := onePod(ctx, t, admin, ns, chal.GetUID())
	service := oneChild(ctx, t, admin, ns, chal.GetUID(), "services")
	t.Logf("Running: instance %s at %s, expires %s", id, endpoints, expiresAt.Format(time.RFC3339))

	// The flag is the hook's HMAC of (definition, owner): the organizer's CLI prints it. The Secret
	// the instance reads it from is the admin's to cross-check, and the platform's to be refused.
	flag := printFlag(ctx, t, ns+"/"+def.GetName(), owner, "CTF")
	secret := oneChild(ctx, t, admin, ns, chal.GetUID(), "secrets")
	if stored, _, _ := unstructured.NestedString(secret.Object, "data", "flag"); stored != base64.StdEncoding.EncodeToString([]byte(flag)) {
		t.Errorf("the instance's Secret %s does not hold the flag `challenge-hook flag` prints", secret.GetName())
	}
	checkForbidden(t, "get the instance's flag Secret", func() error {
		_, err := platform.dyn.Resource(secretGVR).Namespace(ns).Get(ctx, secret.GetName(), metav1.GetOptions{})
		return err
	})
	checkForbidden(t, "list Secrets", func() error {
		_, err := platform.dyn.Resource(secretGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	checkForbidden(t, "list Pods", func() error {
		_, err := platform.dyn.Resource(podGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err
	})
	checkForbidden(t, "write the Challenge's status", func() error {
		_, err := challenges.Patch(ctx, chal.GetName(), types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
		return err
	})

	// Stop: the Pod goes; the record, instance id, Service (so the host and port) and expiry stay.
	patch(`{"stopped":true}`)
	stopped := w.phase(t, 30*time.Second, "Stopped")
	if got := statusString(stopped.obj, "instanceId"); got != id {
		t.Errorf("Stopped with instance id %q, want %q", got, id)
	}
	if got := statusTime(t, stopped.obj, "expiresAt"); !got.Equal(expiresAt) {
		t.Errorf("Stopped with expiresAt %s, want %s (the lifetime keeps running)", got.Format(time.RFC3339), expiresAt.Format(time.RFC3339))
	}
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the stopped instance's Pod to be gone", func() (bool, error) {
		return len(ofResource(childrenOf(ctx, t, admin, ns, chal.GetUID()), "pods")) == 0, nil
	})
	if kept := oneChild(ctx, t, admin, ns, chal.GetUID(), "services"); kept.GetUID() != service.GetUID() {
		t.Errorf("stopping replaced the Service (uid %s, was %s): the player's port would change", kept.GetUID(), service.GetUID())
	}

	// Start again: Running, same instance id, same endpoints, a new Pod.
	startedAgain := syncedRunning(patch(`{"stopped":false}`).GetGeneration(), 30*time.Second)
	checkSameInstance(t, "started again", startedAgain.obj, id, endpoints)
	secondPod := onePod(ctx, t, admin, ns, chal.GetUID())
	if secondPod.GetUID() == firstPod.GetUID() {
		t.Errorf("started again with the stopped Pod %s (uid %s), want a new one", secondPod.GetName(), secondPod.GetUID())
	}

	// Restart: a new Pod for the new spec.restartedAt, same instance id and host.
	restartedAt := time.Now().UTC().Format(time.RFC3339)
	restarted := syncedRunning(patch(`{"restartedAt":"`+restartedAt+`"}`).GetGeneration(), 30*time.Second)
	checkSameInstance(t, "restarted", restarted.obj, id, endpoints)
	thirdPod := onePod(ctx, t, admin, ns, chal.GetUID())
	if thirdPod.GetUID() == secondPod.GetUID() {
		t.Errorf("restarted, yet Pod %s is the same (uid %s)", thirdPod.GetName(), thirdPod.GetUID())
	}
	if got := thirdPod.GetAnnotations()["ctf.challenge-hook.dev/restarted-at"]; got != restartedAt {
		t.Errorf("restarted Pod's restarted-at annotation %q, want %q", got, restartedAt)
	}
	if !strings.Contains(w.history(), "restarting: Pod") {
		t.Errorf("no \"restarting\" status between the restart and Running again")
	}

	// Expiry: the workload and everything around it go, the record stays Expired.
	expired := w.phase(t, time.Until(expiresAt)+30*time.Second, "Expired")
	if got := statusString(expired.obj, "instanceId"); got != id {
		t.Errorf("Expired with instance id %q, want %q", got, id)
	}
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the expired instance's children to be gone", func() (bool, error) {
		return len(childrenOf(ctx, t, admin, ns, chal.GetUID())) == 0, nil
	})

	// The owner's flag still scores after expiry; a wrong one, or another owner's, does not.
	verifier := flagVerifier(t)
	for _, tc := range []struct {
		what, owner, flag string
		want              bool
	}{
		{"the owner's flag after expiry", owner, flag, true},
		{"the owner's flag with another prefix", owner, "flag" + strings.TrimPrefix(flag, "CTF"), true},
		{"a wrong flag", owner, flipLastHexDigit(flag), false},
		{"the flag submitted for another owner", "team-8", flag, false},
	} {
		if got := verifier.verify(ctx, t, ns+"/"+def.GetName(), tc.owner, tc.flag); got != tc.want {
			t.Errorf("%s: correct = %v, want %v", tc.what, got, tc.want)
		}
	}

	// Delete: the running instance is Terminating, then gone with its children; the expired record
	// goes too.
	otherW.phase(t, 30*time.Second, "Running")
	if len(childrenOf(ctx, t, admin, ns, other.GetUID())) == 0 {
		t.Fatal("the running instance to delete has no children")
	}
	for _, name := range []string{other.GetName(), chal.GetName()} {
		if err := challenges.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete Challenge %s: %v", name, err)
		}
	}
	otherW.phase(t, 30*time.Second, "Terminating")
	otherW.gone(t, 60*time.Second)
	w.gone(t, 60*time.Second)
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the deleted instance's children to be gone", func() (bool, error) {
		return len(childrenOf(ctx, t, admin, ns, other.GetUID())) == 0, nil
	})
	t.Logf("phases of the played instance: %v", w.phases())
}

// platformChallenge is the Challenge a platform creates when owner clicks start: a reference to
// the definition, an optional lifetime.
func platformChallenge(name, definition, owner, timeout string) *unstructured.Unstructured {
	chal := lifecycleChallenge(name, "unused", timeout)
	delete(spec(chal), "template")
	spec(chal)["owner"] = owner
	chal.SetLabels(map[string]string{ownerLabel: owner})
	spec(chal)["definitionRef"] = map[string]any{"name": definition}
	return chal
}

// platformCluster applies manifests/platform-rbac.yaml as docs/platform.md says (ServiceAccount and
// RoleBinding moved to ns) and returns a cluster handle whose every call impersonates the
// platform's ServiceAccount, once the binding is in force.
func platformCluster(ctx context.Context, t *testing.T, admin *cluster, ns string) *cluster {
	t.Helper()
	objs, err := readYAMLObjects(filepath.Join(admin.root, platformRBACFile))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, obj := range objs {
		kinds[obj.GetKind()] = true
		if obj.GetNamespace() != "" {
			obj.SetNamespace(ns)
		}
		if obj.GetKind() == "RoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, raw := range subjects {
				raw.(map[string]any)["namespace"] = ns
			}
			if err := unstructured.SetNestedSlice(obj.Object, subjects, "subjects"); err != nil {
				t.Fatal(err)
			}
		}
		client, err := admin.resourceFor(obj)
		if err != nil {
			t.Fatal(err)
		}
		// Another test may apply the same ClusterRole meanwhile.
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return e2eutil.CreateOrUpdate(ctx, client, obj) }); err != nil {
			t.Fatalf("apply %s: %v", platformRBACFile, err)
		}
	}
	for _, kind := range []string{"ClusterRole", "ServiceAccount", "RoleBinding"} {
		if !kinds[kind] {
			t.Fatalf("%s has no %s", platformRBACFile, kind)
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + platformServiceAccount}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("impersonating client: %v", err)
	}
	platform := &cluster{dyn: dyn, mapper: admin.mapper, root: admin.root}
	// The RBAC authorizer learns of the new binding through its informers.
	e2eutil.WaitFor(ctx, t, 15*time.Second, "the platform's RoleBinding to take effect", func() (bool, error) {
		_, err := dyn.Resource(chalGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		return err == nil, err
	})
	return platform
}

// checkForbidden: the call is refused by authorization (403), not merely failed.
func checkForbidden(t *testing.T, what string, call func() error) {
	t.Helper()
	if err := call(); !apierrors.IsForbidden(err) {
		t.Errorf("the platform may %s: err = %v, want Forbidden", what, err)
	}
}

func statusString(obj *unstructured.Unstructured, field string) string {
	s, _, _ := unstructured.NestedString(obj.Object, "status", field)
	return s
}

// statusEndpoints is status.endpoints as JSON, for comparing the host and port across restarts.
func statusEndpoints(t *testing.T, obj *unstructured.Unstructured) string {
	t.Helper()
	endpoints, _, _ := unstructured.NestedSlice(obj.Object, "status", "endpoints")
	if len(endpoints) == 0 {
		t.Fatalf("no status.endpoints in %v", obj.Object["status"])
	}
	data, err := json.Marshal(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// checkSameInstance: the Challenge still has instance id id and endpoints endpoints.
func checkSameInstance(t *testing.T, when string, obj *unstructured.Unstructured, id, endpoints string) {
	t.Helper()
	if got := statusString(obj, "instanceId"); got != id {
		t.Errorf("%s with instance id %q, want %q", when, got, id)
	}
	if got := statusEndpoints(t, obj); got != endpoints {
		t.Errorf("%s with endpoints %s, want %s", when, got, endpoints)
	}
}

// oneChild is the parent's only child of resource, failing the test when there is not exactly one.
func oneChild(ctx context.Context, t *testing.T, c *cluster, ns string, parentUID types.UID, resource string) *unstructured.Unstructured {
	t.Helper()
	children := ofResource(childrenOf(ctx, t, c, ns, parentUID), resource)
	if len(children) != 1 {
		t.Fatalf("%d %s of Challenge %s, want 1", len(children), resource, parentUID)
	}
	return children[0]
}

// onePod is the instance's Pod, waiting for exactly one that is not being deleted.
func onePod(ctx context.Context, t *testing.T, c *cluster, ns string, parentUID types.UID) *unstructured.Unstructured {
	t.Helper()
	var pod *unstructured.Unstructured
	e2eutil.WaitFor(ctx, t, 30*time.Second, "exactly one live Pod", func() (bool, error) {
		pods := ofResource(childrenOf(ctx, t, c, ns, parentUID), "pods")
		if len(pods) != 1 || pods[0].GetDeletionTimestamp() != nil {
			return false, nil
		}
		pod = pods[0]
		return true, nil
	})
	return pod
}

// printFlag runs `challenge-hook flag`, the organizer's command, with the suite hook's key.
func printFlag(ctx context.Context, t *testing.T, definition, owner, prefix string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, shared.hook.bin, "flag", "--definition="+definition, "--owner="+owner,
		"--prefix="+prefix, "--flag-key-file="+suiteFlagKeyFile)
	cmd.Dir = shared.hook.root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("challenge-hook flag: %v: %s", err, stderr.String())
	}
	flag := strings.TrimSpace(string(out))
	if !strings.HasPrefix(flag, prefix+"{") || !strings.HasSuffix(flag, "}") {
		t.Fatalf("challenge-hook flag printed %q, want %s{...}", flag, prefix)
	}
	return flag
}

// flagHex is the secret part of a flag, between the braces.
func flagHex(flag string) string {
	_, rest, _ := strings.Cut(flag, "{")
	return strings.TrimSuffix(rest, "}")
}

// flipLastHexDigit changes the flag's last hex digit: same shape, wrong value.
func flipLastHexDigit(flag string) string {
	i := len(flag) - 2 // before the closing brace
	digit := byte('0')
	if flag[i] == '0' {
		digit = '1'
	}
	return flag[:i] + string(digit) + flag[i+1:]
}

// tokenHook is a challenge-hook with both credentials: Metacontroller's token (--token-file) on
// its main listener, and flag verification on a listener of its own (--verify-listen) with the
// platform's token (--verify-token-file), the only way it serves POST /flags/verify.
type tokenHook struct {
	*hookServer        // the main listener
	verifyURL   string // the flag-verification listener
	hookToken   string
	verifyToken string
}

// flagVerifier starts a second hook of the same binary, with the suite hook's flag key and both
// tokens, and checks that each token opens its own listener's routes only. The suite's hook has
// Metacontroller's token but no verification token, so it serves no flag verification; verification
// is stateless (an HMAC under the key), so any process with the key gives the answer the
// platform's hook would.
func flagVerifier(t *testing.T) *tokenHook {
	t.Helper()
	dir := t.TempDir()
	hookToken, verifyToken := "metacontroller-e2e-token", "platform-e2e-verify-token"
	hookTokenFile, verifyTokenFile := filepath.Join(dir, "token"), filepath.Join(dir, "verify-token")
	for file, token := range map[string]string{hookTokenFile: hookToken, verifyTokenFile: verifyToken} {
		if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	verifyAddr := freeLoopbackAddr(t)
	h := &tokenHook{
		hookServer: startHook(t, shared.root, "--flag-key-file="+suiteFlagKeyFile, "--token-file="+hookTokenFile,
			"--verify-token-file="+verifyTokenFile, "--verify-listen="+verifyAddr),
		verifyURL: "http://" + verifyAddr, hookToken: hookToken, verifyToken: verifyToken,
	}
	for _, tc := range []struct {
		what, baseURL, path, token string
		want                       int
	}{
		{"POST /flags/verify without a token", h.verifyURL, "/flags/verify", "", http.StatusUnauthorized},
		{"POST /flags/verify with Metacontroller's token", h.verifyURL, "/flags/verify", hookToken, http.StatusForbidden},
		{"POST /flags/verify on the main listener", h.baseURL, "/flags/verify", verifyToken, http.StatusNotFound},
		{"POST /sync with the verification token", h.baseURL, "/sync", verifyToken, http.StatusForbidden},
		{"POST /sync on the verification listener", h.verifyURL, "/sync", hookToken, http.StatusNotFound},
		{"POST /flags/verify on the suite's hook, which has no verification token", "http://" + shared.hook.addr, "/flags/verify", verifyToken, http.StatusNotFound},
	} {
		if _, status := h.request(e2eutil.TestContext(t), t, tc.baseURL, tc.path, tc.token, "ctf/any", "team-7", "CTF{00}"); status != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.what, status, tc.want)
		}
	}
	return h
}

// verify asks POST /flags/verify whether flag is owner's flag on definition.
func (h *tokenHook) verify(ctx context.Context, t *testing.T, definition, owner, flag string) bool {
	t.Helper()
	body, status := h.request(ctx, t, h.verifyURL, "/flags/verify", h.verifyToken, definition, owner, flag)
	if status != http.StatusOK {
		t.Fatalf("POST /flags/verify: HTTP %d: %s", status, body)
	}
	if hex := flagHex(flag); hex != "" && strings.Contains(string(body), hex) {
		t.Errorf("POST /flags/verify echoed the flag: %s", body)
	}
	var verdict struct {
		Correct *bool `json:"correct"`
	}
	if err := json.Unmarshal(body, &verdict); err != nil || verdict.Correct == nil {
		t.Fatalf("POST /flags/verify answered %s, want {\"correct\": bool} (err %v)", body, err)
	}
	return *verdict.Correct
}

// request POSTs a verification body to baseURL+path with the bearer token (none when empty).
func (h *tokenHook) request(ctx context.Context, t *testing.T, baseURL, path, token, definition, owner, flag string) ([]byte, int) {
	t.Helper()
	payload, err := json.Marshal(map[string]string{"definition": definition, "owner": owner, "flag": flag})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path, bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s answer: %v", path, err)
	}
	return body, resp.StatusCode
}
