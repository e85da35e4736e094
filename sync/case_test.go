package sync

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/golden"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// caseFile is a golden case's one input, testdata/<case>/case.yaml (testdata/README.md says how to
// write one). It holds what a reviewer needs to read the case; what Metacontroller and the API
// server add mechanically is filled in by requestFromCase.
type caseFile struct {
	// Description says what the case shows.
	Description string `json:"description"`
	// Flags are the hook's flags on top of testdata/dev.flags, e.g. a Gateway.
	Flags []string `json:"flags,omitempty"`
	// Component is a kustomize component of manifests/components applied to the CompositeController.
	Component string `json:"component,omitempty"`
	// ChildResources replace the CompositeController's, for an older one (the upgrade case).
	ChildResources []any `json:"childResources,omitempty"`
	Finalizing     bool  `json:"finalizing,omitempty"`
	// Parent is the Challenge: metadata that matters, spec and previous status.
	Parent map[string]any `json:"parent"`
	// Related are the objects the customize hook related: ChallengeDefinitions unless a kind says otherwise.
	Related []map[string]any `json:"related,omitempty"`
	// Children are the observed children, with only the fields the hook reads or that make the
	// scenario real; the rest is what the hook declared for them (see declaredChildren).
	Children []map[string]any `json:"children,omitempty"`
	// AppliedWith is what the hook declared the children for, where it is not the case's parent,
	// related objects and flags: JSON merge patches (RFC 7386) of the parent's spec and of the
	// related objects (by kind and name; a missing one is added), and the flags then.
	AppliedWith *struct {
		Spec    map[string]any   `json:"spec,omitempty"`
		Related []map[string]any `json:"related,omitempty"`
		Flags   *[]string        `json:"flags,omitempty"`
	} `json:"appliedWith,omitempty"`
}

// parentCreator is who creates Challenges, for their managedFields: the CTF platform.
const parentCreator = "ctf-platform"

func readCaseFile(t testing.TB, dir string) caseFile {
	var c caseFile
	require.NoError(t, golden.ReadInput(dir, &c))
	require.NotEmpty(t, c.Description, "%s/%s says what the case shows", dir, golden.InputFile)
	return c
}

// goldenController is the CompositeController of a case as Metacontroller runs it, with API
// discovery of every kind the hook knows (Legacy ones included, for an older controller's cases).
func goldenController(t testing.TB, c caseFile) mcsim.Controller {
	controller, err := golden.Controller("..", c.Component)
	require.NoError(t, err)
	if c.ChildResources != nil {
		controller["spec"].(map[string]any)["childResources"] = c.ChildResources
	}
	discovery := []mcsim.Kind{
		{APIVersion: v1alpha1.APIVersion, Kind: "Challenge", Resource: "challenges"},
		{APIVersion: v1alpha1.APIVersion, Kind: "ChallengeDefinition", Resource: "challengedefinitions"},
	}
	for _, k := range childKinds {
		discovery = append(discovery, mcsim.Kind{APIVersion: k.APIVersion, Kind: k.Kind, Resource: k.Resource})
	}
	return mcsim.Controller{Object: controller, Discovery: discovery}
}

// requestFromCase is the request Metacontroller sends for a case (mcsim): the CompositeController,
// the parent as the API server stores it, every declared child type (empty ones too) keyed
// "<namespace>/<name>" as a v2 hook receives them, each child what the hook declared for it with
// the case's fields over it (declaredChildren), and the related objects. A customize case gets a
// customize request.
func requestFromCase(t testing.TB, name string, c caseFile, cfg Config) []byte {
	controller := goldenController(t, c)
	parent, err := controller.Parent(c.Parent, parentCreator)
	require.NoError(t, err)
	var request []byte
	if strings.HasPrefix(name, "customize-") {
		request, err = controller.CustomizeRequest(parent)
	} else {
		children, err := controller.Children(parent, c.Children, declaredChildren(t, c, controller, parent, cfg))
		require.NoError(t, err)
		related := withOwnersChallenges(t, controller, relatedObjects(t, controller, parent, c.Related), parent, withFlags(t, cfg, c.Flags))
		request, err = controller.SyncRequest(parent, children, related, c.Finalizing)
		require.NoError(t, err)
	}
	require.NoError(t, err)
	return request
}

func marshal(t testing.TB, v any) []byte {
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return out
}

// relatedObjects is the related map for a case's related objects (ChallengeDefinitions unless
// they name a kind), with the groups the hook's customize answer asks for (customizeGroups). A
// Challenge being deleted relates nothing (Customize): its case's related objects are only what
// its children were declared for.
func relatedObjects(t testing.TB, controller mcsim.Controller, parent map[string]any, related []map[string]any) map[string]any {
	if _, deleting := mapAt(parent, "metadata")["deletionTimestamp"]; deleting {
		return map[string]any{}
	}
	objs := make([]map[string]any, 0, len(related))
	for _, obj := range related {
		if _, ok := obj["kind"]; !ok {
			obj = mcsim.Merge(obj, map[string]any{"kind": "ChallengeDefinition"})
		}
		objs = append(objs, obj)
	}
	var groups []string
	for _, asks := range customizeGroups {
		groups = append(groups, asks(parent)...)
	}
	out, err := controller.Related(mapAt(parent, "metadata")["namespace"], objs, groups...)
	require.NoError(t, err)
	return out
}

// withOwnersChallenges is related with what the customize answer's owner rule
// (--max-instances-per-owner, see ownerRelation) makes Metacontroller send: every Challenge of the
// namespace with the parent's owner label, the parent itself included, each as the API server
// stores it (the case's related Challenges are written like its parent). Without the limit it is
// related unchanged.
func withOwnersChallenges(t testing.TB, controller mcsim.Controller, related, parent map[string]any, cfg Config) map[string]any {
	if _, deleting := mapAt(parent, "metadata")["deletionTimestamp"]; cfg.MaxInstancesPerOwner == 0 || deleting {
		return related
	}
	key := mcsim.GroupKey("Challenge", v1alpha1.APIVersion)
	challenges, _ := related[key].(map[string]any)
	group := map[string]any{}
	for name, obj := range challenges {
		stored, err := controller.Parent(obj.(map[string]any), parentCreator)
		require.NoError(t, err)
		group[name] = stored
	}
	meta := mapAt(parent, "metadata")
	if labels, _ := meta["labels"].(map[string]any); labels[LabelOwner] == mapAt(parent, "spec")["owner"] {
		group[fmt.Sprint(meta["namespace"], "/", meta["name"])] = parent
	}
	related[key] = group
	return related
}

// customizeGroups are the related types the hook's customize answer asks for, for a parent: one
// function per type, the groups Metacontroller then sends (empty when nothing matched).
var customizeGroups = []func(parent map[string]any) []string{
	// A Challenge with a definitionRef relates its ChallengeDefinition.
	func(parent map[string]any) []string {
		if _, ref := mapAt(parent, "spec")["definitionRef"]; ref {
			return []string{mcsim.GroupKey("ChallengeDefinition", v1alpha1.APIVersion)}
		}
		return nil
	},
}

// declaredChildren are the objects the hook declared for the case's children when Metacontroller
// created them, by kind and name: its answers once the first answers' children exist (the Pod
// waits for its NetworkPolicy, and in an instance of several pods for the Services of the peers
// it resolves by name), at the parent's creation, for the parent and related objects as they
// were then (the case's, or its appliedWith). The case's Services say what the API server
// allocated them (ClusterIP, node ports).
func declaredChildren(t testing.TB, c caseFile, controller mcsim.Controller, stored map[string]any, cfg Config) map[string]map[string]any {
	// Declared at its creation, so neither deleted nor stopped (a stopped instance has no Pod).
	parent := deepCopy(stored)
	delete(parent, "status")
	delete(parent["metadata"].(map[string]any), "deletionTimestamp")
	delete(parent["spec"].(map[string]any), "stopped")
	related, flags := c.Related, c.Flags
	if w := c.AppliedWith; w != nil {
		parent["spec"] = mcsim.Merge(parent["spec"].(map[string]any), w.Spec)
		related = patchedObjects(related, w.Related)
		if w.Flags != nil {
			flags = *w.Flags
		}
	}
	created, err := time.Parse(time.RFC3339, parent["metadata"].(map[string]any)["creationTimestamp"].(string))
	require.NoError(t, err)
	children, err := controller.Children(parent, nil, nil)
	require.NoError(t, err)
	first, err := controller.SyncRequest(parent, children, relatedObjects(t, controller, parent, related), false)
	require.NoError(t, err)
	applying := goldenCase{name: "applied", flags: flags}
	declared, err := mcsim.Declared(first, func(request []byte) ([]byte, error) {
		return answerAt(t, applying.with(request), cfg, created), nil
	}, 3, c.Children, goldenNow)
	require.NoError(t, err)
	return declared
}

// applyAnswer is the request Metacontroller sends after it applied answer to request, at the
// golden clock (mcsim.Apply).
func applyAnswer(t testing.TB, request, answer []byte, how mcsim.Applied) []byte {
	if how.Now.IsZero() {
		how.Now = goldenNow
	}
	next, err := mcsim.Apply(request, answer, how)
	require.NoError(t, err)
	return next
}

// patchedObjects are objs with each patch merged into the object of the same kind and name, or
// added.
func patchedObjects(objs, patches []map[string]any) []map[string]any {
	identity := func(obj map[string]any) string { return fmt.Sprint(obj["kind"], "/", mapAt(obj, "metadata")["name"]) }
	out := slices.Clone(objs)
	for _, patch := range patches {
		i := slices.IndexFunc(out, func(obj map[string]any) bool { return identity(obj) == identity(patch) })
		if i < 0 {
			out = append(out, patch)
			continue
		}
		out[i] = mcsim.Merge(out[i], patch)
	}
	return out
}

func mapAt(obj map[string]any, key string) map[string]any {
	m, _ := obj[key].(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

func deepCopy(obj map[string]any) map[string]any { return mcsim.Copy(obj) }

// TestGoldenRequests: each case's request.json and hook.flags are what its case.yaml makes;
// `make update` writes them before the other golden tests read them.
func TestGoldenRequests(t *testing.T) {
	dirs, err := golden.Inputs("../testdata")
	require.NoError(t, err)
	cfg := goldenConfig(t)
	for _, dir := range dirs {
		input := filepath.Join(dir, golden.InputFile)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			c := readCaseFile(t, dir)
			files := map[string][]byte{"request.json": indent(t, requestFromCase(t, name, c, cfg))}
			if len(c.Flags) > 0 {
				files[golden.FlagsFile] = []byte(strings.Join(c.Flags, " ") + "\n")
			}
			for file, want := range files {
				path := filepath.Join(dir, file)
				if *update {
					require.NoError(t, os.WriteFile(path, want, 0o644))
				}
				got, err := os.ReadFile(path)
				require.NoError(t, err, "run `make update` to write it from %s", input)
				require.Equal(t, string(want), string(got), "%s is written from %s: run `make update`", path, input)
			}
			if len(c.Flags) == 0 {
				_, err := os.Stat(filepath.Join(dir, golden.FlagsFile))
				require.True(t, os.IsNotExist(err), "%s has no flags: delete its %s", input, golden.FlagsFile)
			}
		})
	}
}
