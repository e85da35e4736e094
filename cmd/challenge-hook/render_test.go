package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// renderDocuments runs `challenge-hook render args...` and parses its output as YAML documents.
func renderDocuments(t *testing.T, args ...string) ([]map[string]any, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), append([]string{"challenge-hook", "render"}, args...), noEnv, &stdout, &stderr)
	require.NoError(t, err, "stderr: %s", stderr.String())
	return parseYAMLDocuments(t, &stdout), stderr.String()
}

// parseYAMLDocuments parses render's output.
func parseYAMLDocuments(t *testing.T, stdout io.Reader) []map[string]any {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(stdout))
	var docs []map[string]any
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		var parsed map[string]any
		require.NoError(t, yaml.Unmarshal(doc, &parsed), "document %d:\n%s", len(docs)+1, doc)
		docs = append(docs, parsed)
	}
	require.NotEmpty(t, docs)
	return docs
}

func kinds(docs []map[string]any) []string {
	var out []string
	for _, doc := range docs {
		if kind, ok := doc["kind"].(string); ok {
			out = append(out, kind)
		}
	}
	return out
}

func TestRenderExamples(t *testing.T) {
	challenge, definition := "../../examples/challenge.yaml", "../../examples/definition.yaml"
	docs, stderr := renderDocuments(t, "-f", challenge, "-f", definition,
		"--now=2026-11-01T12:00:00Z", "--flag-key-file=../../testdata/flag.key")
	assert.Empty(t, stderr)
	assert.Contains(t, kinds(docs), "Pod")
	assert.Contains(t, kinds(docs), "Secret", "the example's dynamic flag is delivered by a Secret")
	status, ok := docs[len(docs)-1]["status"].(map[string]any)
	require.True(t, ok, "the last document is the status: %v", docs[len(docs)-1])
	assert.Len(t, docs[len(docs)-1], 1)
	assert.NotEqual(t, "Error", status["phase"], "status: %v", status)
	assert.Equal(t, "2026-11-01T12:00:00Z", status["startedAt"], "--now is the sync's clock")
	for _, doc := range docs[:len(docs)-1] {
		metadata, _ := doc["metadata"].(map[string]any)
		assert.Equal(t, "ctf", metadata["namespace"], "%s", doc["kind"])
	}
	assert.NotEqual(t, renderFlagPlaceholder, flagSecretValue(t, docs), "with a key, the real flag")
}

// TestRenderPodsResolveTheirPeers: an instance of several pods is rendered with every Pod, each
// peer it resolves by name at a made-up ClusterIP of Kubernetes' default Service range
// (mcsim.ServiceCIDR), one address per peer, the same in every Pod.
func TestRenderPodsResolveTheirPeers(t *testing.T) {
	docs, _ := renderDocuments(t, "-f", "../../examples/xss-admin-bot.yaml", "--now=2026-11-01T12:00:00Z", "--flag-key-file=../../testdata/flag.key")
	pods, addresses := 0, map[string]string{}
	for _, doc := range docs {
		if doc["kind"] != "Pod" {
			continue
		}
		pods++
		spec, _ := doc["spec"].(map[string]any)
		aliases, _ := spec["hostAliases"].([]any)
		for _, a := range aliases {
			alias := a.(map[string]any)
			ip, _ := alias["ip"].(string)
			addr, err := netip.ParseAddr(ip)
			require.NoError(t, err)
			assert.True(t, netip.MustParsePrefix(mcsim.ServiceCIDR).Contains(addr), "%s", ip)
			for _, name := range alias["hostnames"].([]any) {
				name := name.(string)
				if before, seen := addresses[name]; seen {
					assert.Equal(t, before, ip, "%s resolves to two addresses", name)
				}
				addresses[name] = ip
			}
		}
	}
	assert.Equal(t, 3, pods, "web, db and bot")
	require.NotEmpty(t, addresses)
	distinct := map[string]string{}
	for name, ip := range addresses {
		assert.NotContains(t, distinct, ip, "%s and %s resolve to one address", name, distinct[ip])
		distinct[ip] = name
	}
}

// With --gateway, render shows what the hook answers under the CompositeController patched by the
// Gateway API component: an HTTPRoute instead of the Ingress.
func TestRenderWithGateway(t *testing.T) {
	docs, stderr := renderDocuments(t, "-f", "../../examples/challenge.yaml", "-f", "../../examples/definition.yaml",
		"--now=2026-11-01T12:00:00Z", "--flag-key-file=../../testdata/flag.key", "--gateway=gateway-system/ctf")
	assert.Empty(t, stderr)
	assert.Contains(t, kinds(docs), "HTTPRoute")
	assert.NotContains(t, kinds(docs), "Ingress")
	assert.Equal(t, "Creating", docs[len(docs)-1]["status"].(map[string]any)["phase"], "the answer once the first children exist")
	assert.Contains(t, kinds(docs), "Pod")
}

// flagSecretValue is the flag in the rendered flag Secret.
func flagSecretValue(t *testing.T, docs []map[string]any) string {
	t.Helper()
	for _, doc := range docs {
		if doc["kind"] != "Secret" {
			continue
		}
		data, _ := doc["data"].(map[string]any)
		encoded, ok := data["flag"].(string)
		require.True(t, ok, "the Secret has data.flag: %v", doc)
		flag, err := base64.StdEncoding.DecodeString(encoded)
		require.NoError(t, err)
		return string(flag)
	}
	require.Fail(t, "no Secret rendered", "kinds: %v", kinds(docs))
	return ""
}

// TestRenderPlatformFlag: a Challenge whose definition takes its flag from the platform renders
// with its spec.flag in the flag Secret, and nowhere else; it needs no flag key, so render warns of
// no placeholder.
func TestRenderPlatformFlag(t *testing.T) {
	const flag = "rctf{m1n73d_by_7h3_pl4tf0rm}"
	file := filepath.Join(t.TempDir(), "challenge.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: web-notes-team42, namespace: ctf}
spec:
  owner: team-42
  definitionRef: {name: web-notes}
  flag: `+flag+`
---
apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: ChallengeDefinition
metadata: {name: web-notes, namespace: ctf}
spec:
  containers:
  - {name: web, image: registry.example/web-notes:1, ports: [{containerPort: 8080}]}
  expose: [{port: 8080, type: HTTP}]
  flag: {platform: true, env: FLAG}
`), 0o600))
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "render", "-f", file, "--now=2026-11-01T12:00:00Z"}, noEnv, &stdout, &stderr), stderr.String())
	assert.Empty(t, stderr.String())
	out := stdout.String()
	docs := parseYAMLDocuments(t, strings.NewReader(out))
	assert.Equal(t, flag, flagSecretValue(t, docs))
	assert.Equal(t, "Creating", docs[len(docs)-1]["status"].(map[string]any)["phase"])
	assert.NotContains(t, out, flag, "only the Secret holds it, base64-encoded")
}

// TestRenderREADMECommand runs the README's render command exactly as written, from the repository
// root: without a flag key it shows every child, the dynamic flag as the placeholder, and says so.
func TestRenderREADMECommand(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	const program = "go run ./cmd/challenge-hook render "
	var command string
	for line := range strings.Lines(string(readme)) {
		if strings.HasPrefix(line, program) {
			command = strings.TrimSpace(line)
		}
	}
	require.NotEmpty(t, command, "the README shows no %q command", program)
	args := strings.Fields(strings.TrimPrefix(command, "go run ./cmd/challenge-hook "))
	t.Chdir("../..")

	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), append([]string{"challenge-hook"}, args...), noEnv, &stdout, &stderr))
	docs := parseYAMLDocuments(t, &stdout)
	assert.ElementsMatch(t, []string{"Pod", "Service", "NetworkPolicy", "Ingress", "Secret"}, kinds(docs))
	status := docs[len(docs)-1]["status"].(map[string]any)
	assert.NotEqual(t, "Error", status["phase"], "status: %v", status)
	assert.Equal(t, renderFlagPlaceholder, flagSecretValue(t, docs))
	assert.Contains(t, stderr.String(), "placeholder")
	assert.Contains(t, stderr.String(), "--flag-key-file")
}

func TestRenderMultiDocumentFileAndMissingDefinition(t *testing.T) {
	challenge, err := os.ReadFile("../../examples/challenge.yaml")
	require.NoError(t, err)
	definition, err := os.ReadFile("../../examples/definition.yaml")
	require.NoError(t, err)
	both := filepath.Join(t.TempDir(), "both.yaml")
	require.NoError(t, os.WriteFile(both, []byte("---\n"+string(definition)+"\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ctf\n---\n"+string(challenge)), 0o644))
	docs, stderr := renderDocuments(t, "-f", both, "--now=2026-11-01T12:00:00Z", "--flag-key-file=../../testdata/flag.key")
	assert.Contains(t, kinds(docs), "Pod")
	assert.Contains(t, stderr, "skipping", "the Namespace is neither a Challenge nor a definition")

	// The Challenge alone: its definition is missing, as the hook would say.
	docs, _ = renderDocuments(t, "-f", "../../examples/challenge.yaml", "--now=2026-11-01T12:00:00Z")
	status := docs[len(docs)-1]["status"].(map[string]any)
	assert.Equal(t, "DefinitionNotFound", status["reason"])
}

func TestRenderErrors(t *testing.T) {
	dir := t.TempDir()
	onlyDefinition := filepath.Join(dir, "definition.yaml")
	require.NoError(t, os.WriteFile(onlyDefinition, []byte("apiVersion: ctf.challenge-hook.dev/v1alpha1\nkind: ChallengeDefinition\nmetadata:\n  name: d\n"), 0o644))
	broken := filepath.Join(dir, "broken.yaml")
	require.NoError(t, os.WriteFile(broken, []byte("kind: [Challenge\n"), 0o644))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no file", nil, "-f challenge.yaml"},
		{"missing file", []string{"-f", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"no Challenge", []string{"-f", onlyDefinition}, "no Challenge"},
		{"broken YAML", []string{"-f", broken}, "broken.yaml"},
		{"bad --now", []string{"-f", onlyDefinition, "--now=tomorrow"}, "RFC 3339"},
		{"positional argument", []string{"challenge.yaml"}, "-f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"challenge-hook", "render"}, tt.args...), noEnv, io.Discard, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestRenderMatchesGolden: render of the README's sample prints the children and status of the
// golden case derived from the same files (testdata/readme-example-pod-created).
func TestRenderMatchesGolden(t *testing.T) {
	docs, _ := renderDocuments(t, "-f", "../../examples/challenge.yaml", "-f", "../../examples/definition.yaml",
		"--now=2026-11-01T12:05:00Z", "--flag-key-file=../../testdata/flag.key")
	golden, err := os.ReadFile("../../testdata/readme-example-pod-created/response.json")
	require.NoError(t, err)
	var want struct {
		Status   map[string]any   `json:"status"`
		Children []map[string]any `json:"children"`
	}
	require.NoError(t, json.Unmarshal(golden, &want))
	require.NotEmpty(t, want.Children)
	require.Equal(t, want.Children, docs[:len(docs)-1])
	require.Equal(t, map[string]any{"status": want.Status}, docs[len(docs)-1])
}

// TestRenderPrintsTheTCPToken: render simulates the Service's ClusterIP, so it prints a TCP
// exposure's endpoint with the token the hook would mint, which opens to that ClusterIP and the
// Service port render printed; without the gateway key, a placeholder it warns about.
func TestRenderPrintsTheTCPToken(t *testing.T) {
	challenge := filepath.Join(t.TempDir(), "challenge.yaml")
	require.NoError(t, os.WriteFile(challenge, []byte(`apiVersion: ctf.challenge-hook.dev/v1alpha1
kind: Challenge
metadata: {name: pwn-team7, namespace: ctf}
spec:
  owner: team-7
  template:
    containers:
    - {name: pwn, image: registry.example/pwn:1, ports: [{containerPort: 1337}]}
    expose: [{port: 1337, type: TCP, proofOfWorkBits: 20}]
`), 0o600))
	keyFile := filepath.Join("..", "..", "testdata", "tcp-gateway.key")
	docs, stderr := renderDocuments(t, "-f", challenge, "--tcp-gateway-address=tcp.ctf.example.org:1337", "--tcp-gateway-key-file="+keyFile, "--service-cidrs=10.96.0.0/12")
	assert.NotContains(t, stderr, "NOT-A-TOKEN")
	var service struct {
		Spec struct {
			Ports []struct {
				Port int `json:"port"`
			} `json:"ports"`
		} `json:"spec"`
	}
	var status struct {
		Status struct {
			Endpoints []struct{ Host, Command, Token string } `json:"endpoints"`
		} `json:"status"`
	}
	for _, doc := range docs {
		raw, err := json.Marshal(doc)
		require.NoError(t, err)
		switch {
		case doc["kind"] == "Service":
			require.NoError(t, json.Unmarshal(raw, &service))
		case doc["status"] != nil:
			require.NoError(t, json.Unmarshal(raw, &status))
		}
	}
	require.Len(t, status.Status.Endpoints, 1)
	ep := status.Status.Endpoints[0]
	assert.Equal(t, "nc tcp.ctf.example.org 1337", ep.Command)
	key, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	target, err := tcptoken.Open(bytes.TrimSpace(key), ep.Token)
	require.NoError(t, err)
	require.Len(t, service.Spec.Ports, 1)
	assert.Equal(t, service.Spec.Ports[0].Port, int(target.Service.Port()))
	assert.True(t, netip.MustParsePrefix(mcsim.ServiceCIDR).Contains(target.Service.Addr()), "the token names %s, not a ClusterIP render allocated", target.Service)
	assert.Equal(t, uint8(20), target.ProofOfWorkBits)

	docs, stderr = renderDocuments(t, "-f", challenge, "--tcp-gateway-address=tcp.ctf.example.org:1337")
	assert.Contains(t, stderr, "no --tcp-gateway-key-file")
	last := docs[len(docs)-1]["status"].(map[string]any)
	assert.Equal(t, renderTokenPlaceholder, last["endpoints"].([]any)[0].(map[string]any)["token"])
}
