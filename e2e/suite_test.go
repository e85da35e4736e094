//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// publicHost is what the suite's hook reports as the host of NodePort endpoints.
const publicHost = "127.0.0.1"

// workloadResource is the child that runs an instance's containers. Every check that depends on
// the workload's kind ("the workload is gone") goes through it, so that a change of the hook's
// workload (e.g. to a bare Pod) is this one line.
var workloadResource = podGVR

// suite is what TestMain sets up once for every test: the hook binary serving on the fixed address
// the CompositeController names, and that CompositeController as Metacontroller runs it.
type suite struct {
	root string
	hook *hookProcess
	// controller is compositecontroller.yaml as installed: webhook urls, short resync period.
	controller *unstructured.Unstructured
	// children are the CompositeController's child resources.
	children []schema.GroupVersionResource
	// resync is the CompositeController's resyncPeriodSeconds.
	resync time.Duration
	// metacontrollerLog is the running Metacontroller's log file (--zap-log-level=4, JSON lines).
	metacontrollerLog string
}

// shared is set by TestMain before any test runs and never reassigned. Tests only read it, except
// TestHookDown, which kills and restarts the hook and runs while no other test does.
var shared *suite

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	fmt.Println("e2e: Metacontroller's part is played by " + e2eutil.Controller())
	tokenDir, err := os.MkdirTemp("", "challenge-hook-e2e-token-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tokenDir)
	suiteTokenFile = filepath.Join(tokenDir, "token")
	s, err := setUpSuite()
	if s != nil && s.hook != nil {
		defer s.hook.stop(syscall.SIGTERM)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n", err)
		if s != nil && s.hook != nil {
			fmt.Fprintf(os.Stderr, "challenge-hook log:\n%s\n", s.hook.logs.String())
		}
		return 1
	}
	shared = s
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "challenge-hook log (last 4 KiB):\n%s\n", tail(s.hook.logs.String(), 4096))
	}
	return code
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// setUpSuite starts the hook on $E2E_HOOK_ADDR with a token of its own (suiteTokenFile), puts the
// same token in the Secret the CompositeControllers' authorization names (the README's install
// step), installs the CRDs and the CompositeController (compositecontroller.yaml with webhook urls
// to that address and resyncPeriodSeconds $E2E_RESYNC_SECONDS), and waits until Metacontroller
// syncs a probe Challenge: Metacontroller sends the hook the token from the Secret, as in a
// cluster, and the hook answers no caller without it.
func setUpSuite() (*suite, error) {
	addr := os.Getenv("E2E_HOOK_ADDR")
	mcLog := os.Getenv("E2E_METACONTROLLER_LOG")
	if addr == "" || mcLog == "" {
		return nil, errors.New("E2E_HOOK_ADDR and E2E_METACONTROLLER_LOG are not set: run the e2e tests with `make e2e`")
	}
	resyncSeconds, err := strconv.Atoi(os.Getenv("E2E_RESYNC_SECONDS"))
	if err != nil || resyncSeconds < 1 {
		return nil, fmt.Errorf("E2E_RESYNC_SECONDS=%q: want a whole number of seconds >= 1", os.Getenv("E2E_RESYNC_SECONDS"))
	}
	root, err := findRepoRoot()
	if err != nil {
		return nil, err
	}
	s := &suite{root: root, resync: time.Duration(resyncSeconds) * time.Second, metacontrollerLog: mcLog}
	token := make([]byte, 24)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	if err := os.WriteFile(suiteTokenFile, []byte(hex.EncodeToString(token)+"\n"), 0o600); err != nil {
		return nil, err
	}
	// The shipped Deployment's trust flags: which Challenges may use which definitions is what an
	// install does, not a test's choice (TestDefinitionOfAnotherNamespace).
	trust, err := shippedTrustFlags(root)
	if err != nil {
		return nil, err
	}
	s.hook = newHookProcess(root, addr, append([]string{"--flag-key-file=testdata/flag.key", "--public-host=" + publicHost}, trust...)...)
	if err := s.hook.start(); err != nil {
		s.hook = nil
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := connectCluster(ctx, root)
	if err != nil {
		return s, err
	}
	if err := c.installTokenSecret(ctx, hex.EncodeToString(token)); err != nil {
		return s, err
	}
	if s.controller, err = testCompositeController(root, "http://"+addr, resyncSeconds); err != nil {
		return s, err
	}
	if s.children, err = childResources(s.controller); err != nil {
		return s, err
	}
	ccs := c.dyn.Resource(schema.GroupVersionResource{Group: "metacontroller.k8s.io", Version: "v1alpha1", Resource: "compositecontrollers"})
	if err := e2eutil.CreateOrUpdate(ctx, ccs, s.controller); err != nil {
		return s, fmt.Errorf("install the CompositeController (are Metacontroller's CRDs applied?): %w", err)
	}
	return s, s.probe(ctx, c)
}

// installTokenSecret creates the hook's namespace and the Secret challenge-hook-token (key "token")
// that every shipped CompositeController's authorization names, as the README's install does.
func (c *cluster) installTokenSecret(ctx context.Context, token string) error {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "challenge-hook"},
	}}
	if _, err := c.dyn.Resource(nsGVR).Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace challenge-hook: %w", err)
	}
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"name": "challenge-hook-token", "namespace": "challenge-hook"},
		"stringData": map[string]any{"token": token},
	}}
	return e2eutil.CreateOrUpdate(ctx, c.dyn.Resource(secretGVR).Namespace("challenge-hook"), secret)
}

// testCompositeController is compositecontroller.yaml changed only where a test must: each hook's
// webhook `service` + `path` becomes `url: <hookBase><path>` (the hook runs outside the cluster),
// and resyncPeriodSeconds is short so that tests can watch several periods. The webhooks'
// authorization stays as shipped: Metacontroller reads the token from the Secret it names.
func testCompositeController(root, hookBase string, resyncSeconds int) (*unstructured.Unstructured, error) {
	return testCompositeControllerFrom(filepath.Join(root, "compositecontroller.yaml"), hookBase, resyncSeconds)
}

// testCompositeControllerFrom is testCompositeController for the CompositeController in path (a
// component's).
func testCompositeControllerFrom(path, hookBase string, resyncSeconds int) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CompositeController: %w", err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	cc := &unstructured.Unstructured{Object: obj}
	hooks, _, err := unstructured.NestedMap(cc.Object, "spec", "hooks")
	if err != nil || len(hooks) == 0 {
		return nil, fmt.Errorf("%s: no spec.hooks (err %v)", path, err)
	}
	for name, raw := range hooks {
		hook, _ := raw.(map[string]any)
		webhook, _ := hook["webhook"].(map[string]any)
		hookPath, _ := webhook["path"].(string)
		if webhook["service"] == nil || hookPath == "" {
			return nil, fmt.Errorf("%s: hook %s has no webhook service and path to replace", path, name)
		}
		delete(webhook, "service")
		delete(webhook, "path")
		webhook["url"] = hookBase + hookPath
	}
	if err := unstructured.SetNestedMap(cc.Object, hooks, "spec", "hooks"); err != nil {
		return nil, err
	}
	if err := unstructured.SetNestedField(cc.Object, int64(resyncSeconds), "spec", "resyncPeriodSeconds"); err != nil {
		return nil, err
	}
	return cc, nil
}

func childResources(cc *unstructured.Unstructured) ([]schema.GroupVersionResource, error) {
	list, _, err := unstructured.NestedSlice(cc.Object, "spec", "childResources")
	if err != nil || len(list) == 0 {
		return nil, fmt.Errorf("CompositeController has no spec.childResources (err %v)", err)
	}
	var out []schema.GroupVersionResource
	for _, raw := range list {
		child, _ := raw.(map[string]any)
		apiVersion, _ := child["apiVersion"].(string)
		resource, _ := child["resource"].(string)
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil || resource == "" {
			return nil, fmt.Errorf("child resource %v: %v", child, err)
		}
		out = append(out, gv.WithResource(resource))
	}
	return out, nil
}

// finalizer is the finalizer Metacontroller puts on parents of a CompositeController with a
// finalize hook.
func (s *suite) finalizer() string {
	return "metacontroller.io/compositecontroller-" + s.controller.GetName()
}

// probe creates a Challenge and waits until Metacontroller has called the hook and written its
// status: then every test can count on a controller that already runs (discovery, informers).
func (s *suite) probe(ctx context.Context, c *cluster) error {
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"generateName": "probe-"},
	}}
	created, err := c.dyn.Resource(nsGVR).Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create probe namespace: %w", err)
	}
	defer func() {
		_ = c.dyn.Resource(nsGVR).Delete(context.Background(), created.GetName(), metav1.DeleteOptions{})
	}()
	chal := validChallenge("probe")
	chal.SetNamespace(created.GetName())
	if _, err := c.dyn.Resource(chalGVR).Namespace(created.GetName()).Create(ctx, chal, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create probe Challenge: %w", err)
	}
	return e2eutil.WaitUntil(ctx, 90*time.Second, "Metacontroller to sync a probe Challenge (see .cache/e2e/logs/metacontroller.log)", func() (bool, error) {
		obj, err := c.dyn.Resource(chalGVR).Namespace(created.GetName()).Get(ctx, "probe", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, err
		}
		phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		return phase != "", err
	})
}
