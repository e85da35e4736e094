//go:build e2e

package e2e

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestStopOnSolve runs the recipe of docs/platform.md ("Stop on solve") once, as the platform with
// nothing but its RBAC: a submission is verified with POST /flags/verify, and only a correct one
// stops the instance (spec.stopped: true) or deletes the Challenge. The Pod goes in both cases, and
// the flag still verifies afterwards: scoring needs no instance.
func TestStopOnSolve(t *testing.T) {
	t.Parallel()
	admin := newCluster(t)
	ctx := testContext(t)
	ns := admin.createNamespace(ctx, t, "solve", podSecurityRestricted)
	platform := platformCluster(ctx, t, admin, ns)
	def := validDefinition("web-sqli")
	template(def)["flag"] = map[string]any{"dynamic": true, "env": "FLAG", "prefix": "CTF"}
	createObject(ctx, t, admin, ns, def)
	definition := ns + "/" + def.GetName()
	verifier := flagVerifier(t)
	challenges := platform.dyn.Resource(chalGVR).Namespace(ns)

	// The recipe: verify, and on a correct answer stop (or delete) the solver's instance.
	stop := func(name string) error {
		_, err := challenges.Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"stopped":true}}`), metav1.PatchOptions{})
		return err
	}
	remove := func(name string) error { return challenges.Delete(ctx, name, metav1.DeleteOptions{}) }
	submit := func(name, owner, flag string, onSolve func(string) error) bool {
		t.Helper()
		correct := verifier.verify(ctx, t, definition, owner, flag)
		if correct {
			if err := onSolve(name); err != nil {
				t.Fatalf("the platform's call after a correct flag for %s: %v", name, err)
			}
		}
		return correct
	}

	for _, tc := range []struct {
		name, owner string
		onSolve     func(string) error
		solved      string // what the call made of the instance
		after       string // the phase after the call, or "" for gone
	}{
		{"web-sqli-team7", "team-7", stop, "stopped", "Stopped"},
		{"web-sqli-team8", "team-8", remove, "deleted", ""},
	} {
		w, chal := startChallenge(ctx, t, platform, ns, platformChallenge(tc.name, def.GetName(), tc.owner, ""))
		w.phase(t, 60*time.Second, "Running")
		onePod(ctx, t, admin, ns, chal.GetUID())
		flag := printFlag(ctx, t, definition, tc.owner, "CTF")

		// A wrong flag changes nothing.
		if submit(tc.name, tc.owner, flipLastHexDigit(flag), tc.onSolve) {
			t.Fatalf("%s: a wrong flag verified", tc.name)
		}
		if stopped, _, _ := unstructured.NestedBool(mustGetChallenge(ctx, t, admin, ns, tc.name).Object, "spec", "stopped"); stopped {
			t.Errorf("%s: stopped after a wrong flag", tc.name)
		}
		// The right one solves it: the platform stops or deletes it, the Pod goes.
		if !submit(tc.name, tc.owner, flag, tc.onSolve) {
			t.Fatalf("%s: the owner's flag did not verify", tc.name)
		}
		solvedAt := time.Now()
		if tc.after == "" {
			w.gone(t, 60*time.Second)
		} else {
			w.phase(t, 30*time.Second, tc.after)
		}
		waitFor(ctx, t, 60*time.Second, tc.name+"'s Pod to be gone", func() (bool, error) {
			return len(ofResource(childrenOf(ctx, t, admin, ns, chal.GetUID()), "pods")) == 0, nil
		})
		t.Logf("%s: solved, Pod gone %s later; phases %v", tc.name, time.Since(solvedAt).Round(time.Millisecond), w.phases())
		// Scoring does not depend on the instance: the same flag verifies again.
		if !verifier.verify(ctx, t, definition, tc.owner, flag) {
			t.Errorf("%s: the owner's flag no longer verifies once the instance is %s", tc.name, tc.solved)
		}
	}
}
