package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// renderFlagPlaceholder is every dynamic flag render prints without --flag-key-file: plainly not a
// flag, and derived from no key, so that rendering never needs nor leaks the real key.
const renderFlagPlaceholder = "NOT-A-FLAG: placeholder, render ran without --flag-key-file"

// renderTokenPlaceholder is every TCP gateway token render prints without --tcp-gateway-key-file.
const renderTokenPlaceholder = "NOT-A-TOKEN: render ran without --tcp-gateway-key-file"

// runRender prints the children and status the hook would answer once a new Challenge's first
// children exist, like `helm template`: no cluster, no server. args exclude "render".
func runRender(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var files []string
	var now time.Time
	var hook hookConfig
	c := newConfigFlags("challenge-hook render")
	c.fs.Func("f", "YAML `file` holding the Challenge and any ChallengeDefinition (repeatable; multi-document files allowed)", func(v string) error {
		files = append(files, v)
		return nil
	})
	c.fs.Func("now", "`time` of the sync, RFC 3339 (default: the current time)", flagfunc.Time(&now))
	addHookFlags(c, &hook)
	err := c.parse(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		c.usage(stderr, "challenge-hook render -f challenge.yaml [-f definition.yaml] [--now RFC3339] [flags]")
		return nil
	}
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("render: unexpected argument %q: name files with -f", c.fs.Arg(0))
	}
	if len(files) == 0 {
		return errors.New("render: no input: name the Challenge's file with -f challenge.yaml")
	}
	if err := checkNetworkFlags(hook.sync); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if err := hook.sync.CheckTrust(); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if err := hook.loadFlagKey(); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if len(hook.sync.FlagKey) == 0 {
		hook.sync.DynamicFlagPlaceholder = renderFlagPlaceholder
	}
	if err := hook.loadTCPGatewayKey(); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if len(hook.sync.TCPGateway.Key) == 0 {
		hook.sync.TCPGateway.TokenPlaceholder = renderTokenPlaceholder
	}
	syncTime := now
	if syncTime.IsZero() {
		syncTime = time.Now().UTC().Truncate(time.Second)
	}

	request, err := firstSyncRequest(files, syncTime, hook.sync.Gateway != nil, stderr)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	resp, err := answerOnceCreated(request, syncTime, hook.sync)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	out, err := yamlDocuments(resp)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if _, err := stdout.Write(out); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	// The Secret holds the flag base64-encoded: look for the placeholder as it is printed.
	if bytes.Contains(out, []byte(base64.StdEncoding.EncodeToString([]byte(renderFlagPlaceholder)))) {
		fmt.Fprintf(stderr, "render: no --flag-key-file: the flag Secret holds the placeholder %q, not a real dynamic flag; pass --flag-key-file to render the flag the hook would derive\n", renderFlagPlaceholder)
	}
	if bytes.Contains(out, []byte(renderTokenPlaceholder)) {
		fmt.Fprintf(stderr, "render: no --tcp-gateway-key-file: the TCP endpoints' token is the placeholder %q; pass --tcp-gateway-key-file to render the token the hook would mint\n", renderTokenPlaceholder)
	}
	if resp.Status.Phase == v1alpha1.PhaseError {
		fmt.Fprintf(stderr, "render: the hook answers phase Error: %s: %s\n", resp.Status.Reason, resp.Status.Message)
	}
	return nil
}

// typeMeta is what render reads of every document to sort them.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// answerOnceCreated is the hook's answer once Metacontroller created what its first answer to
// request declared. The first answer holds each Pod back until its NetworkPolicy exists (in an
// instance of several pods, until the internal Services of the peers it resolves by name have
// ClusterIPs too) and each route until its Service exists: the second one declares the instance's
// whole set, its Pods about to be created.
func answerOnceCreated(request []byte, now time.Time, cfg hooksync.Config) (hooksync.Response, error) {
	var resp hooksync.Response
	answer := func(body []byte) ([]byte, error) {
		req, err := hooksync.DecodeRequest(body)
		if err != nil {
			return nil, err
		}
		resp = hooksync.Sync(req, now, cfg)
		return hooksync.EncodeResponse(resp)
	}
	how := mcsim.Applied{Create: true, Delete: true, ClusterIPs: true, Now: now}
	_, _, err := mcsim.Run(request, answer, 1, how, nil)
	return resp, err
}

// firstSyncRequest is the sync request Metacontroller sends for a new Challenge (mcsim): the
// Challenge of files as the API server stores it, an empty entry per child type, the definitions
// of files as related.
func firstSyncRequest(files []string, now time.Time, gateway bool, stderr io.Writer) ([]byte, error) {
	parent, definitions, err := readChallenge(files, stderr)
	if err != nil {
		return nil, err
	}
	controller := renderController(gateway)
	// kubectl's default namespace for the Challenge, and the Challenge's for its definitions.
	parent, err = controller.Parent(mcsim.Created(parent, "default", now), "kubectl")
	if err != nil {
		return nil, err
	}
	children, err := controller.Children(parent, nil, nil)
	if err != nil {
		return nil, err
	}
	related, err := controller.Related(parent["metadata"].(map[string]any)["namespace"], definitions, mcsim.GroupKey("ChallengeDefinition", v1alpha1.APIVersion))
	if err != nil {
		return nil, err
	}
	return controller.SyncRequest(parent, children, related, false)
}

// renderController is the CompositeController as far as the hook reads it: every child type it
// declares (with a Gateway, the one the Gateway API component patched, which declares the route
// types: without them the hook would answer GatewayAPINotEnabled).
func renderController(gateway bool) mcsim.Controller {
	kinds := hooksync.ChildKinds("")
	if gateway {
		kinds = append(kinds, hooksync.ChildKinds(hooksync.GatewayAPIComponent)...)
	}
	controller := mcsim.Controller{Discovery: []mcsim.Kind{
		{APIVersion: v1alpha1.APIVersion, Kind: "Challenge", Resource: "challenges"},
		{APIVersion: v1alpha1.APIVersion, Kind: "ChallengeDefinition", Resource: "challengedefinitions"},
	}}
	var declared []any
	for _, k := range kinds {
		declared = append(declared, map[string]any{"apiVersion": k.APIVersion, "resource": k.Resource})
		controller.Discovery = append(controller.Discovery, mcsim.Kind{APIVersion: k.APIVersion, Kind: k.Kind, Resource: k.Resource})
	}
	controller.Object = map[string]any{"spec": map[string]any{
		"parentResource": map[string]any{"apiVersion": v1alpha1.APIVersion, "resource": "challenges"},
		"childResources": declared,
	}}
	return controller
}

// readChallenge reads the one Challenge of files and every ChallengeDefinition, saying on stderr
// which other documents it skips.
func readChallenge(files []string, stderr io.Writer) (challenge map[string]any, definitions []map[string]any, err error) {
	for _, file := range files {
		docs, err := readYAMLDocuments(file)
		if err != nil {
			return nil, nil, err
		}
		for i, doc := range docs {
			var meta typeMeta
			var obj map[string]any
			if err := json.Unmarshal(doc, &meta); err != nil {
				return nil, nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
			}
			if err := json.Unmarshal(doc, &obj); err != nil {
				return nil, nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
			}
			switch {
			case meta.APIVersion == v1alpha1.APIVersion && meta.Kind == "Challenge":
				if challenge != nil {
					return nil, nil, fmt.Errorf("%s document %d: a second Challenge (%s); render one at a time", file, i+1, meta.Metadata.Name)
				}
				challenge = obj
			case meta.APIVersion == v1alpha1.APIVersion && meta.Kind == "ChallengeDefinition":
				definitions = append(definitions, obj)
			default:
				fmt.Fprintf(stderr, "render: skipping %s document %d: %s %s is neither a Challenge nor a ChallengeDefinition of %s\n",
					file, i+1, meta.APIVersion, meta.Kind, v1alpha1.APIVersion)
			}
		}
	}
	if challenge == nil {
		return nil, nil, fmt.Errorf("no Challenge (apiVersion %s) in %s", v1alpha1.APIVersion, strings.Join(files, ", "))
	}
	return challenge, definitions, nil
}

// readYAMLDocuments returns every non-empty document of a YAML file, as JSON.
func readYAMLDocuments(file string) ([][]byte, error) {
	content, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(content)))
	var docs [][]byte
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		asJSON, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", file, i, err)
		}
		if trimmed := bytes.TrimSpace(asJSON); len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
			continue // an empty document, e.g. a leading ---
		}
		docs = append(docs, asJSON)
	}
}

// yamlDocuments is each child as a YAML document, then the status, separated by ---.
func yamlDocuments(resp hooksync.Response) ([]byte, error) {
	documents := make([]any, 0, len(resp.Children)+1)
	documents = append(documents, resp.Children...)
	documents = append(documents, map[string]any{"status": resp.Status})
	var out bytes.Buffer
	for i, doc := range documents {
		asJSON, err := hooksync.EncodeResponse(doc)
		if err != nil {
			return nil, err
		}
		asYAML, err := yaml.JSONToYAML(asJSON)
		if err != nil {
			return nil, fmt.Errorf("converting to YAML: %w", err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(asYAML)
	}
	return out.Bytes(), nil
}
