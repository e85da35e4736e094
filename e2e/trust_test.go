//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// hookDeploymentFile is the shipped hook Deployment, whose trust flags the suite's hook runs with.
const hookDeploymentFile = "manifests/hook-deployment.yaml"

// trustFlags are the hook's flags that say which Challenges may use which definitions: the suite's
// hook takes them from the shipped Deployment, so that the tests prove what an install does.
var trustFlags = []string{"inline-templates", "definition-namespaces", "definition-grants"}

// shippedTrustFlags are the trust flags of the challenge-hook container in the shipped Deployment,
// from its args and its CHALLENGE_HOOK_* environment, as --name=value arguments.
func shippedTrustFlags(root string) ([]string, error) {
	objs, err := readYAMLObjects(filepath.Join(root, hookDeploymentFile))
	if err != nil {
		return nil, err
	}
	var flags []string
	found := false
	for _, obj := range objs {
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, raw := range containers {
			ctr, _ := raw.(map[string]any)
			if ctr["name"] != "challenge-hook" {
				continue
			}
			found = true
			args, _ := ctr["args"].([]any)
			for _, arg := range args {
				name, _, _ := strings.Cut(strings.TrimLeft(fmt.Sprint(arg), "-"), "=")
				if slices.Contains(trustFlags, name) {
					flags = append(flags, fmt.Sprint(arg))
				}
			}
			env, _ := ctr["env"].([]any)
			for _, raw := range env {
				v, _ := raw.(map[string]any)
				for _, name := range trustFlags {
					if v["name"] == "CHALLENGE_HOOK_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_")) {
						flags = append(flags, fmt.Sprintf("--%s=%v", name, v["value"]))
					}
				}
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%s: no container challenge-hook", hookDeploymentFile)
	}
	return flags, nil
}

// TestDefinitionOfAnotherNamespace: under the real Metacontroller, with the shipped trust flags
// (the suite's hook), a co-tenant's Challenge in another namespace that names the event's
// definition and an event owner gets Error/InvalidSpec and nothing else: no Secret in its
// namespace holds the owner's flag, no Pod runs the challenge. Then, with a grant of the team
// namespaces (--definition-grants=<prefix>-*=<event>), a Challenge in a team namespace runs the
// event's definition with the owner's flag. It restarts the hook every test shares with that grant,
// so it is not parallel: Go runs it before the parallel tests.
func TestDefinitionOfAnotherNamespace(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	shipped, err := shippedTrustFlags(c.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the suite's hook runs with %v: the trust flags of %s are %v", shared.hook.flags, hookDeploymentFile, shipped)
	event := c.createNamespace(ctx, t, "trust-event", podSecurityRestricted)
	createObject(ctx, t, c, event, validDefinition("web"))
	const owner = "team-7"
	ownerFlag := printFlag(ctx, t, event+"/web", owner, "flag")

	// The event's own instance holds the owner's flag: the value the co-tenant must not get.
	wEvent, inEvent := startChallenge(ctx, t, c, event, platformChallenge("web-team-7", "web", owner, ""))
	wEvent.phase(t, 60*time.Second, "Running")
	if got := flagSecretsOf(ctx, t, c, event, inEvent.GetUID()); !slices.Equal(got, []string{ownerFlag}) {
		t.Fatalf("the event's instance holds flags %d, want the owner's flag", len(got))
	}

	tenant := c.createNamespace(ctx, t, "trust-tenant", podSecurityRestricted)
	foreign := platformChallenge("web-team-7", "web", owner, "")
	spec(foreign)["definitionRef"] = map[string]any{"name": "web", "namespace": event}
	wTenant, inTenant := startChallenge(ctx, t, c, tenant, foreign)
	refused := wTenant.next(t, 30*time.Second, "Error InvalidSpec", func(e statusEvent) bool {
		return e.phase == "Error" && e.reason == "InvalidSpec"
	})
	for _, part := range []string{"--definition-grants", tenant + "=" + event} {
		if !strings.Contains(refused.message, part) {
			t.Errorf("message %q lacks %q", refused.message, part)
		}
	}
	// Over two resyncs, nothing: no child of the Challenge, and no Secret of the namespace that
	// holds the flag.
	time.Sleep(2*shared.resync + time.Second)
	if children := childrenOf(ctx, t, c, tenant, inTenant.GetUID()); len(children) > 0 {
		t.Errorf("children of the refused Challenge: %v", keys(children))
	}
	requireNoSecretHolds(ctx, t, c, tenant, ownerFlag)
	pods, err := c.dyn.Resource(podGVR).Namespace(tenant).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) > 0 {
		t.Errorf("%d Pod(s) in the co-tenant's namespace", len(pods.Items))
	}
	if phase, _, _ := unstructured.NestedString(mustGetChallenge(ctx, t, c, tenant, inTenant.GetName()).Object, "status", "phase"); phase != "Error" {
		t.Errorf("the co-tenant's Challenge is %q, want Error", phase)
	}

	// The organizer grants the team namespaces the event's definitions.
	teamPrefix := "trust-team"
	restartSuiteHook(t, "--definition-grants="+teamPrefix+"-*="+event)
	team := c.createNamespace(ctx, t, teamPrefix, podSecurityRestricted)
	granted := platformChallenge("web-team-7", "web", owner, "")
	spec(granted)["definitionRef"] = map[string]any{"name": "web", "namespace": event}
	wTeam, inTeam := startChallenge(ctx, t, c, team, granted)
	wTeam.phase(t, 60*time.Second, "Running")
	if got := flagSecretsOf(ctx, t, c, team, inTeam.GetUID()); !slices.Equal(got, []string{ownerFlag}) {
		t.Errorf("the granted instance holds %d flag(s), want the owner's flag of %s/web", len(got), event)
	}
	// The co-tenant's namespace is not granted: still nothing there.
	time.Sleep(shared.resync + time.Second)
	requireNoSecretHolds(ctx, t, c, tenant, ownerFlag)
	if children := childrenOf(ctx, t, c, tenant, inTenant.GetUID()); len(children) > 0 {
		t.Errorf("children of the refused Challenge after the grant of %s-*: %v", teamPrefix, keys(children))
	}
}

// flagSecretsOf are the flags in the Secrets among a Challenge's children.
func flagSecretsOf(ctx context.Context, t *testing.T, c *cluster, ns string, parentUID types.UID) []string {
	t.Helper()
	var flags []string
	for _, secret := range ofResource(childrenOf(ctx, t, c, ns, parentUID), "secrets") {
		if value, _, _ := unstructured.NestedString(secret.Object, "data", "flag"); value != "" {
			flags = append(flags, string(decodeBase64(t, value)))
		}
	}
	return flags
}

// requireNoSecretHolds fails if any Secret of the namespace holds the flag's secret part, in any
// key.
func requireNoSecretHolds(ctx context.Context, t *testing.T, c *cluster, ns, flag string) {
	t.Helper()
	secrets, err := c.dyn.Resource(secretGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range secrets.Items {
		data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
		for key, value := range data {
			if bytes.Contains(decodeBase64(t, value), []byte(flagHex(flag))) {
				t.Errorf("Secret %s/%s key %s holds the owner's flag", ns, secret.GetName(), key)
			}
		}
	}
	t.Logf("%d Secret(s) in %s, none holding the flag", len(secrets.Items), ns)
}

// restartSuiteHook restarts the hook every test shares with extra flags, and with its own flags
// again when the test ends. Metacontroller's calls meanwhile fail and are retried.
func restartSuiteHook(t *testing.T, extra ...string) {
	t.Helper()
	own := slices.Clone(shared.hook.flags)
	restart := func(flags []string) error {
		shared.hook.stop(syscall.SIGTERM)
		shared.hook.flags = flags
		return shared.hook.start()
	}
	t.Cleanup(func() {
		if err := restart(own); err != nil {
			t.Errorf("restart the hook with its own flags: %v", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := shared.probe(ctx, newCluster(t)); err != nil {
			t.Errorf("after restarting the hook with its own flags: %v", err)
		}
	})
	if err := restart(append(slices.Clone(own), extra...)); err != nil {
		t.Fatalf("restart the hook with %v: %v", extra, err)
	}
}

// decodeBase64 decodes a Secret's data value.
func decodeBase64(t *testing.T, value string) []byte {
	t.Helper()
	out, err := base64.StdEncoding.DecodeString(value)
	if err != nil {
		t.Fatalf("Secret data is not base64: %v", err)
	}
	return out
}
