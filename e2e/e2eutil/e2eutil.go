//go:build e2e || e2enode

// Package e2eutil holds what the cluster tests (build tag e2e) and the node tests (build tag
// e2enode) both need: polling with a deadline, a context that ends with the test, a process
// started in the background that can be stopped gracefully, and an object created or replaced.
package e2eutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// pollInterval is how often WaitUntil asks again.
const pollInterval = 100 * time.Millisecond

// WaitUntil polls cond every 100 ms until it holds (nil), or timeout passes or ctx ends (an error
// naming what was awaited and cond's last error).
func WaitUntil(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for {
		ok, err := cond()
		if err != nil {
			lastErr = err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (last error: %v)", timeout, what, lastErr)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// WaitFor is WaitUntil that fails the test when cond does not hold in time.
func WaitFor(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := WaitUntil(ctx, timeout, what, cond); err != nil {
		t.Fatal(err)
	}
}

// TestContext is cancelled when the test ends.
func TestContext(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// CreateOrUpdate creates obj, or replaces the content of the object of its name.
func CreateOrUpdate(ctx context.Context, client dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
	_, err := client.Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, getErr := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if getErr != nil {
			return fmt.Errorf("get %s %s: %w", obj.GetKind(), obj.GetName(), getErr)
		}
		obj = obj.DeepCopy()
		obj.SetResourceVersion(existing.GetResourceVersion())
		_, err = client.Update(ctx, obj, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// Process is a started command whose exit is awaited once, in the background.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // cmd.Wait's result; read only after exited is closed
}

// Start starts cmd and awaits its exit in the background.
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited; Err then says how.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit error (nil: status 0); only meaningful once Exited is closed.
func (p *Process) Err() error { return p.err }

// Stop sends sig (SIGTERM: a graceful stop; SIGKILL: a crash) and waits until the process has
// exited, killing it when it is still there after grace.
func (p *Process) Stop(sig os.Signal, grace time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// ImpersonatingKubeconfig writes a kubeconfig of $KUBECONFIG's API server whose user acts as
// username (kubectl's --as), for a process the test runs under another identity.
func ImpersonatingKubeconfig(t *testing.T, username string) string {
	t.Helper()
	config, err := clientcmd.LoadFromFile(os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	if err := clientcmd.ResolveLocalPaths(config); err != nil {
		t.Fatal(err)
	}
	current, ok := config.Contexts[config.CurrentContext]
	if !ok || config.AuthInfos[current.AuthInfo] == nil {
		t.Fatalf("the kubeconfig %s has no user in its current context", os.Getenv("KUBECONFIG"))
	}
	config.AuthInfos[current.AuthInfo].Impersonate = username
	file := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// Controller names what plays Metacontroller's part in this run, as hack/lib.sh chose it
// (E2E_CONTROLLER): a real Metacontroller, or the project's simulator.
func Controller() string {
	switch c := os.Getenv("E2E_CONTROLLER"); c {
	case "metacontroller":
		return "a real Metacontroller (" + os.Getenv("E2E_CONTROLLER_BIN") + ")"
	case "metacontroller-sim":
		return "the project's simulator of Metacontroller v4.17.2 (internal/mcsim/cluster, a test double; METACONTROLLER_BIN runs the real one)"
	default:
		return fmt.Sprintf("unknown (E2E_CONTROLLER=%q): run the suite with make", c)
	}
}

// UnderSimulator says whether the simulator plays Metacontroller's part.
func UnderSimulator() bool { return os.Getenv("E2E_CONTROLLER") == "metacontroller-sim" }
