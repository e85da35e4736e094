package prepull

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/golden"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// The pre-pull controller's golden cases are testdata/prepull/<case>/: a case.yaml written by
// hand (prePullCaseFile), and the request.json and response.json `make update` writes from it,
// as for the Challenge hook's cases (testdata/README.md).
const prePullCasesDir = "../testdata/prepull"

var update = flag.Bool("update", false, "rewrite testdata/prepull/*/request.json, response.json and hook.flags from case.yaml")

// goldenConfig is the configuration `make run` serves with: testdata/dev.flags (relative to the
// repository root) parsed by the hook's own registration (sync.Config.RegisterFlags), then a
// case's flags. The binary's own flags there (the flag key's and the TCP gateway key's files, the
// pinned clock, Metacontroller's token) shape no pre-pull answer.
func goldenConfig(t testing.TB, caseFlags []string) hooksync.Config {
	devFlags, err := os.ReadFile("../testdata/dev.flags")
	require.NoError(t, err)
	cfg := hooksync.DefaultConfig()
	fs := flag.NewFlagSet("dev.flags", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	for _, binaryFlag := range []string{"flag-key-file", "tcp-gateway-key-file", "clock", "token-file"} {
		fs.String(binaryFlag, "", "")
	}
	require.NoError(t, fs.Parse(append(strings.Fields(string(devFlags)), caseFlags...)))
	return cfg
}

// indent is the golden files' layout: the wire bytes, indented for reading and review.
func indent(t testing.TB, compact []byte) []byte {
	var buf bytes.Buffer
	require.NoError(t, json.Indent(&buf, compact, "", "  "))
	return buf.Bytes()
}

func mapAt(obj map[string]any, key string) map[string]any {
	m, _ := obj[key].(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

// prePullCaseFile is a pre-pull case's input.
type prePullCaseFile struct {
	Description string `json:"description"`
	// Flags are the hook's flags on top of testdata/dev.flags, e.g. a smaller --prepull-max-images.
	Flags []string `json:"flags,omitempty"`
	// Parent is the ChallengeDefinition: metadata that matters and spec.
	Parent map[string]any `json:"parent"`
	// Related are the other definitions the customize hook related (those of the namespaces the
	// hook pre-pulls: metadata and spec); the parent is related too, as Metacontroller relates it.
	Related []map[string]any `json:"related,omitempty"`
	// Children are the observed children: kind and name, and the fields that make the scenario
	// (a DaemonSet's status); the rest is what the hook declared for them.
	Children []map[string]any `json:"children,omitempty"`
	// AppliedWith is what the children were declared for, when not the case's definition: a JSON
	// merge patch of its spec.
	AppliedWith *struct {
		Spec map[string]any `json:"spec"`
	} `json:"appliedWith,omitempty"`
}

// prePullController is the component's CompositeController as Metacontroller runs it.
func prePullController(t testing.TB) mcsim.Controller {
	controller, err := golden.ReadObject("../manifests/components/prepull/compositecontroller.yaml")
	require.NoError(t, err)
	return mcsim.Controller{Object: controller, Discovery: []mcsim.Kind{
		{APIVersion: v1alpha1.APIVersion, Kind: "ChallengeDefinition", Resource: "challengedefinitions"},
		{APIVersion: "apps/v1", Kind: "DaemonSet", Resource: "daemonsets"},
		{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Resource: "networkpolicies"},
	}}
}

// prePullRequestFromCase is the request Metacontroller sends for a case (mcsim): the definition
// as the API server stores it, each declared child type keyed "<namespace>/<name>" (empty ones
// too), each child the hook's answer for the definition it was applied for, with the case's
// fields over it.
func prePullRequestFromCase(t testing.TB, c prePullCaseFile, cfg hooksync.Config) []byte {
	controller := prePullController(t)
	parent, err := controller.Parent(c.Parent, definitionCreator)
	require.NoError(t, err)
	related := []map[string]any{parent}
	for _, def := range c.Related {
		def, err := controller.Parent(def, definitionCreator)
		require.NoError(t, err)
		related = append(related, def)
	}

	applied := mcsim.Copy(parent)
	if c.AppliedWith != nil {
		applied["spec"] = mcsim.Merge(applied["spec"].(map[string]any), c.AppliedWith.Spec)
	}
	declared := map[string]map[string]any{}
	for _, child := range prePullChildrenOf(t, prePullAnswerTo(t, prePullRequest(t, controller, applied, append([]map[string]any{applied}, related[1:]...), nil, nil), cfg)) {
		declared[fmt.Sprint(child["kind"], "/", mapAt(child, "metadata")["name"])] = child
	}
	for _, in := range c.Children {
		kind, name := in["kind"], mapAt(in, "metadata")["name"]
		require.Contains(t, declared, fmt.Sprint(kind, "/", name), "child %s/%s: the hook never declared it for the case's definition (appliedWith)", kind, name)
	}
	return prePullRequest(t, controller, parent, related, c.Children, declared)
}

// definitionCreator is who creates ChallengeDefinitions, for their managedFields: the organizers.
const definitionCreator = "ctf-admin"

// prePullRequest is a request for parent, with the related definitions and the children observed
// as declared.
func prePullRequest(t testing.TB, controller mcsim.Controller, parent map[string]any, related, children []map[string]any, declared map[string]map[string]any) []byte {
	groups, err := controller.Children(parent, children, declared)
	require.NoError(t, err)
	definitions, err := controller.Related(mapAt(parent, "metadata")["namespace"], related, mcsim.GroupKey("ChallengeDefinition", v1alpha1.APIVersion))
	require.NoError(t, err)
	request, err := controller.SyncRequest(parent, groups, definitions, false)
	require.NoError(t, err)
	return request
}

func prePullAnswerTo(t testing.TB, request []byte, cfg hooksync.Config) []byte {
	req, err := DecodeRequest(request)
	require.NoError(t, err)
	out, err := hooksync.EncodeResponse(Sync(req, cfg))
	require.NoError(t, err)
	return out
}

func prePullChildrenOf(t testing.TB, answer []byte) []map[string]any {
	var resp struct {
		Children []map[string]any `json:"children"`
	}
	require.NoError(t, json.Unmarshal(answer, &resp))
	return resp.Children
}

// TestGoldenPrePull writes (with -update) and checks each pre-pull case's request.json from its
// case.yaml and its response.json from the hook's answer, which must be byte-identical when asked
// twice, and a fixed point: fed back as Metacontroller applies it (the children it lists as
// observed, with their last-applied configuration), it answers the same.
func TestGoldenPrePull(t *testing.T) {
	require.NotEmpty(t, goldenConfig(t, nil).PrePullImage, "testdata/dev.flags sets --prepull-image")
	dirs, err := golden.Inputs(prePullCasesDir)
	require.NoError(t, err)
	for _, dir := range dirs {
		input := filepath.Join(dir, golden.InputFile)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			var c prePullCaseFile
			require.NoError(t, golden.ReadInput(dir, &c))
			require.NotEmpty(t, c.Description, "%s says what the case shows", input)
			cfg := goldenConfig(t, c.Flags)
			request := prePullRequestFromCase(t, c, cfg)
			answer := prePullAnswerTo(t, request, cfg)
			require.Equal(t, string(answer), string(prePullAnswerTo(t, request, cfg)), "identical requests must give byte-identical answers")
			files := map[string][]byte{"request.json": indent(t, request), "response.json": indent(t, answer)}
			if len(c.Flags) > 0 {
				files[golden.FlagsFile] = []byte(strings.Join(c.Flags, " ") + "\n")
			} else {
				_, err := os.Stat(filepath.Join(dir, golden.FlagsFile))
				require.True(t, os.IsNotExist(err), "%s has no flags: delete its %s", input, golden.FlagsFile)
			}
			for file, want := range files {
				path := filepath.Join(dir, file)
				if *update {
					require.NoError(t, os.WriteFile(path, want, 0o644))
				}
				got, err := os.ReadFile(path)
				require.NoError(t, err, "run `make update` to write it from %s, then read it line by line", input)
				require.Equal(t, string(want), string(got), "%s: run `make update`", path)
			}

			var observed []map[string]any
			for _, child := range prePullChildrenOf(t, answer) {
				observed = append(observed, map[string]any{"kind": child["kind"], "metadata": map[string]any{"name": mapAt(child, "metadata")["name"]}})
			}
			fixed := c
			fixed.Children, fixed.AppliedWith = observed, nil
			if state := prePullState(t, answer); state == v1alpha1.PrePullStateInvalidDefinition {
				fixed.AppliedWith = c.AppliedWith // kept children: declared for the earlier definition
			}
			require.Equal(t, string(indent(t, answer)), string(indent(t, prePullAnswerTo(t, prePullRequestFromCase(t, fixed, cfg), cfg))),
				"fed back as applied, the answer must not change")
		})
	}
}

func prePullState(t testing.TB, answer []byte) string {
	var resp Response
	require.NoError(t, json.Unmarshal(answer, &resp))
	require.NotNil(t, resp.Status.PrePull)
	return resp.Status.PrePull.State
}
