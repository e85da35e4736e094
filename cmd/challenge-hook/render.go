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
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// relatedDefinitionKey is the key of the related map for the type the customize hook asks for.
const relatedDefinitionKey = "ChallengeDefinition." + v1alpha1.APIVersion

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

	body, err := buildFirstSyncRequest(files, syncTime, hook.sync.Gateway != nil, stderr)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	req, err := hooksync.DecodeRequest(body)
	if err != nil {
		return fmt.Errorf("render: %w", err)
	}
	resp := hooksync.Sync(req, syncTime, hook.sync)
	// The first answer holds each Pod back until its NetworkPolicy exists (in an instance of
	// several pods, until the internal Services of the peers it resolves by name have ClusterIPs
	// too) and each route until its Service exists: print the answer once Metacontroller created
	// what the first declared, the instance's whole set, the Pods about to be created.
	if body, err = withChildrenCreated(body, resp); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	if req, err = hooksync.DecodeRequest(body); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	resp = hooksync.Sync(req, syncTime, hook.sync)
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
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// buildFirstSyncRequest builds the sync request Metacontroller would send for a new Challenge: the
// parent as the API server stores it, an empty entry per child type, the definitions as related.
// With a Gateway, the CompositeController is the one the Gateway API component patched: it
// declares the route types (without them the hook would answer GatewayAPINotEnabled).
func buildFirstSyncRequest(files []string, now time.Time, gateway bool, stderr io.Writer) ([]byte, error) {
	var parent map[string]any
	var parentMeta typeMeta
	type definition struct {
		meta typeMeta
		obj  map[string]any
	}
	var definitions []definition
	for _, file := range files {
		docs, err := readYAMLDocuments(file)
		if err != nil {
			return nil, err
		}
		for i, doc := range docs {
			var meta typeMeta
			var obj map[string]any
			if err := json.Unmarshal(doc, &meta); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
			}
			if err := json.Unmarshal(doc, &obj); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", file, i+1, err)
			}
			switch {
			case meta.APIVersion == v1alpha1.APIVersion && meta.Kind == "Challenge":
				if parent != nil {
					return nil, fmt.Errorf("%s document %d: a second Challenge (%s); render one at a time", file, i+1, meta.Metadata.Name)
				}
				parent, parentMeta = obj, meta
			case meta.APIVersion == v1alpha1.APIVersion && meta.Kind == "ChallengeDefinition":
				definitions = append(definitions, definition{meta, obj})
			default:
				fmt.Fprintf(stderr, "render: skipping %s document %d: %s %s is neither a Challenge nor a ChallengeDefinition of %s\n",
					file, i+1, meta.APIVersion, meta.Kind, v1alpha1.APIVersion)
			}
		}
	}
	if parent == nil {
		return nil, fmt.Errorf("no Challenge (apiVersion %s) in %s", v1alpha1.APIVersion, strings.Join(files, ", "))
	}

	// What the API server adds on create: the namespace kubectl defaults, generation, creation time.
	namespace := parentMeta.Metadata.Namespace
	if namespace == "" {
		namespace = "default"
	}
	metadata, _ := parent["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
		parent["metadata"] = metadata
	}
	metadata["namespace"] = namespace
	if _, ok := metadata["generation"]; !ok {
		metadata["generation"] = 1
	}
	if _, ok := metadata["creationTimestamp"]; !ok {
		metadata["creationTimestamp"] = now.UTC().Format(time.RFC3339)
	}

	// Every type the CompositeController declares has an entry, as Metacontroller sends them; with
	// a Gateway, the one patched by the Gateway API component.
	kinds := hooksync.ChildKinds("")
	if gateway {
		kinds = append(kinds, hooksync.ChildKinds(hooksync.GatewayAPIComponent)...)
	}
	children := map[string]map[string]any{}
	var declared []hooksync.ChildResource
	for _, k := range kinds {
		children[k.Key()] = map[string]any{}
		declared = append(declared, k.ChildResource())
	}
	controller := map[string]any{"spec": map[string]any{"childResources": declared}}
	relatedDefinitions := map[string]any{}
	for _, def := range definitions {
		defNamespace := def.meta.Metadata.Namespace
		if defNamespace == "" {
			defNamespace = namespace
			if meta, ok := def.obj["metadata"].(map[string]any); ok {
				meta["namespace"] = defNamespace
			}
		}
		relatedDefinitions[defNamespace+"/"+def.meta.Metadata.Name] = def.obj
	}
	request := map[string]any{
		"controller": controller,
		"parent":     parent,
		"children":   children,
		"related":    map[string]any{relatedDefinitionKey: relatedDefinitions},
		"finalizing": false,
	}
	return json.Marshal(request)
}

// withChildrenCreated is the request Metacontroller sends after it applied answer to request: the
// answer's status on the parent, and each child it declared observed but its Pods (printed as
// declared, about to be created).
func withChildrenCreated(request []byte, answer hooksync.Response) ([]byte, error) {
	var req map[string]json.RawMessage
	var parent map[string]any
	var children map[string]map[string]json.RawMessage
	if err := json.Unmarshal(request, &req); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(req["parent"], &parent); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(req["children"], &children); err != nil {
		return nil, err
	}
	parent["status"] = answer.Status
	for _, child := range answer.Children {
		raw, err := json.Marshal(child)
		if err != nil {
			return nil, err
		}
		var meta typeMeta
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
		if meta.Kind == "Pod" {
			continue // printed as declared, not yet created
		}
		group := meta.Kind + "." + meta.APIVersion
		if children[group] == nil {
			children[group] = map[string]json.RawMessage{}
		}
		key := meta.Metadata.Namespace + "/" + meta.Metadata.Name
		if meta.Kind == "Service" {
			// The API server gives a Service its ClusterIP at creation; the hook's hostAliases
			// name it. render makes one up, keeping the one an earlier round gave.
			if raw, err = withClusterIP(raw, children[group][key], len(children[group])); err != nil {
				return nil, err
			}
		}
		children[group][key] = raw
	}
	var err error
	if req["parent"], err = json.Marshal(parent); err != nil {
		return nil, err
	}
	if req["children"], err = json.Marshal(children); err != nil {
		return nil, err
	}
	return json.Marshal(req)
}

// exampleServiceIPs is where render's made-up ClusterIPs come from: TEST-NET-2, which no cluster
// allocates, so that a rendered hostAlias is plainly an example.
const exampleServiceIPs = "198.51.100."

// withClusterIP sets a Service's spec.clusterIP: the one it had when observed before, else the
// n-th example address.
func withClusterIP(service, observed json.RawMessage, n int) (json.RawMessage, error) {
	var svc, before map[string]any
	if err := json.Unmarshal(service, &svc); err != nil {
		return nil, err
	}
	ip := fmt.Sprintf("%s%d", exampleServiceIPs, 10+n)
	if observed != nil {
		if err := json.Unmarshal(observed, &before); err != nil {
			return nil, err
		}
		if spec, _ := before["spec"].(map[string]any); spec != nil && spec["clusterIP"] != nil {
			ip, _ = spec["clusterIP"].(string)
		}
	}
	spec, _ := svc["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
		svc["spec"] = spec
	}
	spec["clusterIP"] = ip
	return json.Marshal(svc)
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
