//go:build e2enode

package node

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// inline is a Challenge with an inline template of one container.
func inline(name, container string) string {
	return inlineChallenge(name, name, `
    containers:
      - `+strings.ReplaceAll(strings.TrimSpace(container), "\n", "\n        ")+`
    timeout: 30m
`)
}

// TestFailureReasons: what the kubelet really reports for a broken instance reaches status as the
// hook's reason, with a message that names the cause.
func TestFailureReasons(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	cases := []struct {
		name, container string
		reasons         []string
		message         []string
	}{
		{
			// A registry on loopback where nothing listens: the pull fails without leaving the machine.
			name:      "fail-image-pull",
			container: "name: web\nimage: 127.0.0.1:25001/ctf/missing:v1",
			reasons:   []string{"ErrImagePull", "ImagePullBackOff"},
			message:   []string{`cannot pull image "127.0.0.1:25001/ctf/missing:v1"`},
		},
		{
			name:      "fail-crash",
			container: "name: web\nimage: local/ctfbox:v1\ncommand: [/ctfbox]\nargs: [crash, \"3\"]",
			reasons:   []string{"CrashLoopBackOff"},
			message:   []string{"crash looping", "code 3"},
		},
		{
			name:      "fail-oom",
			container: "name: web\nimage: local/ctfbox:v1\ncommand: [/ctfbox]\nargs: [oom]\nresources: {limits: {memory: 32Mi}}",
			reasons:   []string{"OOMKilled"},
			message:   []string{"memory limit 32Mi"},
		},
		{
			// An image whose user is root, under the hook's default runAsNonRoot.
			name:      "fail-root-image",
			container: "name: web\nimage: local/rootbox:v1",
			reasons:   []string{"CreateContainerConfigError"},
			message:   []string{"non-root", "runAsRoot"},
		},
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		apply(ctx, t, inline(c.name, c.container))
		t.Cleanup(func() { deleteChallenge(context.Background(), t, c.name, 2*time.Minute) })
	}
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			var reason, message string
			err := e2eutil.WaitUntil(ctx, 3*time.Minute, c.name+" Error "+strings.Join(c.reasons, " or "), func() (bool, error) {
				got, err := getChallenge(ctx, c.name)
				if err != nil {
					return false, err
				}
				reason, message = status(got, "reason"), status(got, "message")
				for _, r := range c.reasons {
					if status(got, "phase") == "Error" && reason == r {
						return true, nil
					}
				}
				return false, nil
			})
			if err != nil {
				t.Errorf("%s: %v; last reason %s, message %q", c.name, err, reason, message)
				return
			}
			for _, m := range c.message {
				if !strings.Contains(message, m) {
					t.Errorf("%s: message %q does not contain %q", c.name, message, m)
				}
			}
			t.Logf("%s: Error %s after %.1fs: %s", c.name, reason, time.Since(start).Seconds(), message)
		}()
	}
	wg.Wait()
}

// TestSecurityContext: the hook's promises, checked from inside the running container: non-root,
// no capabilities, no privilege escalation, seccomp, read-only root filesystem, no ServiceAccount
// token, /tmp writable and bounded (past its 64Mi the kubelet evicts the Pod), the flag as a file.
func TestSecurityContext(t *testing.T) {
	ctx := e2eutil.TestContext(t)
	const name = "secctx"
	apply(ctx, t, inlineChallenge(name, name, `
    containers:
      - name: web
        image: local/ctfbox:v1
        ports: [{name: http, containerPort: 8080}, {name: flag, containerPort: 1337}]
    expose: [{port: 8080, type: NodePort}, {port: 1337, type: NodePort}]
    flag: {value: "flag{delivered-as-a-file}", path: /flag.txt}
    timeout: 30m
`))
	t.Cleanup(func() { deleteChallenge(context.Background(), t, name, 2*time.Minute) })
	running := waitPhase(ctx, t, name, "Running", "Ready", 2*time.Minute)
	host, httpPort := endpoint(t, running, "http")
	_, flagPort := endpoint(t, running, "flag")
	s := readSelf(t, hostPort(host, httpPort))
	t.Logf("inside the container: %+v", s)
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: got %+v", what, s)
		}
	}
	check("non-root uid (the image's 65532)", s.UID == 65532 && s.GID == 65532)
	const none = "0000000000000000"
	check("no capabilities: effective, permitted, bounding, ambient", s.CapEff == none && s.CapPrm == none && s.CapBnd == none && s.CapAmb == none)
	check("no privilege escalation (no_new_privs)", s.NoNewPrivs == "1")
	check("seccomp filter (RuntimeDefault)", s.Seccomp == "2")
	check("read-only root filesystem", strings.Contains(s.RootWrite, "read-only file system"))
	check("/tmp writable", s.TmpWrite == "")
	check("no ServiceAccount token", !s.ServiceAccountToken)
	check("the flag from the file", s.FlagSource == "file /flag.txt")
	if got, err := tcpFlag(hostPort(host, flagPort)); err != nil || got != "flag{delivered-as-a-file}" {
		t.Errorf("flag endpoint: %q, %v", got, err)
	}

	// /tmp is bounded at 64Mi: a memory-backed /tmp (tmpfs of that size) refuses 80 MiB; a
	// disk-backed one takes them, and the kubelet evicts the Pod for its emptyDir.
	pod, err := kube.CoreV1().Pods(nsCTF).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir != nil {
			t.Logf("volume %s: emptyDir medium %q sizeLimit %v; statfs(/tmp) inside: %d bytes", v.Name, v.EmptyDir.Medium, v.EmptyDir.SizeLimit, s.TmpBytes)
		}
	}
	body, err := httpGet("http://" + hostPort(host, httpPort) + "/fill?mib=80")
	if err != nil {
		if !strings.Contains(body, "no space left on device") {
			t.Fatalf("/fill?mib=80: %v: %s", err, body)
		}
		t.Logf("80 MiB into /tmp refused: %s", strings.TrimSpace(body))
		if s.TmpBytes > 64<<20 {
			t.Errorf("/tmp is %d bytes, more than 64Mi", s.TmpBytes)
		}
		return
	}
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "the kubelet to evict the Pod for its /tmp", func() (bool, error) {
		events, err := kube.CoreV1().Events(nsCTF).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "Evicted" {
				t.Logf("event %s: %s", e.Reason, e.Message)
				return true, nil
			}
		}
		return false, nil
	})
}
