package sync

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The trust switches (--inline-templates=false, --definition-namespaces) refuse what the platform
// may not ask for. A refusal is a problem like any other: InvalidSpec, a message that says what to
// do instead, and the children kept exactly as Metacontroller last applied them.

// syncCase answers a golden case's request under cfg at now.
func syncCase(t *testing.T, name string, cfg Config, now time.Time) (Request, Response) {
	t.Helper()
	req, err := DecodeRequest(goldenCaseNamed(t, name).request)
	require.NoError(t, err)
	return req, Sync(req, now, cfg)
}

// requireKeptAsLastApplied: the answer is every observed child, each exactly as last applied.
func requireKeptAsLastApplied(t *testing.T, req Request, resp Response) {
	t.Helper()
	observed := req.Children.Objects()
	require.Len(t, resp.Children, len(observed))
	for i, child := range resp.Children {
		_, kept := child.(keptChild)
		require.True(t, kept, "child %d is %T, not kept as observed", i, child)
		out, err := EncodeResponse(child)
		require.NoError(t, err)
		require.JSONEq(t, observed[i].Metadata.Annotations.LastApplied, string(out))
	}
}

func TestInlineTemplatesRefused(t *testing.T) {
	cfg := goldenConfig(t)
	cfg.RefuseInlineTemplates = true

	// A running instance from an inline template: an Error that keeps what runs until its deadline.
	req, resp := syncCase(t, "running-nodeport-inline-template-fixed-point", cfg, goldenNow)
	require.NotNil(t, req.Parent.Spec.Template)
	assert.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
	assert.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	if missing := missingPart(resp.Status.Message, "spec.template", "--inline-templates=false", "spec.definitionRef"); missing != "" {
		t.Errorf("message lacks %q: %s", missing, resp.Status.Message)
	}
	requireKeptAsLastApplied(t, req, resp)
	assert.Equal(t, req.Parent.Status.ExpiresAt, resp.Status.ExpiresAt, "the deadline stays the one already shown")
	assert.Positive(t, resp.ResyncAfterSeconds, "woken at the deadline")

	// A first sync: nothing is created.
	_, resp = syncCase(t, "first-sync-setuid-allow-privilege-escalation", cfg, goldenNow)
	assert.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	assert.Empty(t, resp.Children)

	// Past the deadline the refused template does not keep anything alive: expiry wins as always,
	// and the refused template's own timeout and maxLifetime are not what set the deadline.
	expiresAt, err := time.Parse(time.RFC3339, req.Parent.Status.ExpiresAt)
	require.NoError(t, err)
	_, resp = syncCase(t, "running-nodeport-inline-template-fixed-point", cfg, expiresAt.Add(time.Second))
	assert.Equal(t, v1alpha1.PhaseExpired, resp.Status.Phase)
	assert.Contains(t, resp.Status.Message, v1alpha1.ReasonInvalidSpec)
	// Only the NetworkPolicy stays, while the Pod is observed (heldIsolation).
	require.Len(t, resp.Children, 1)
	assert.Equal(t, "NetworkPolicy", resp.Children[0].(keptChild).obj.Kind)

	// An instance from a ChallengeDefinition is not affected.
	defaults := goldenConfig(t)
	for _, name := range []string{"life-3-running-http", "life-1-none-first-sync"} {
		c := goldenCaseNamed(t, name)
		assert.Equal(t, string(answer(t, c, defaults)), string(answer(t, c, cfg)), name)
	}
}

func TestDefinitionNamespacesLimitDefinitionRefs(t *testing.T) {
	// life-3-running-http's Challenge, in namespace ctf, references ctf/web-sqli (namespace left
	// out), and Metacontroller sent the definition as related.
	const name = "life-3-running-http"
	defaults := goldenConfig(t)
	req, _ := syncCase(t, name, defaults, goldenNow)
	require.Equal(t, "ctf", req.Parent.Metadata.Namespace)
	require.NotEmpty(t, req.Related.Definitions)

	allowed := defaults
	allowed.DefinitionNamespaces = []string{"ctf-definitions", "ctf"}
	assert.Equal(t, string(answer(t, goldenCaseNamed(t, name), defaults)), string(answer(t, goldenCaseNamed(t, name), allowed)),
		"a definition in an allowed namespace answers as without the switch")

	// Refused even though the definition is related (a customize answer Metacontroller cached
	// before the flag was set): the hook does not use it.
	refused := defaults
	refused.DefinitionNamespaces = []string{"ctf-definitions"}
	req, resp := syncCase(t, name, refused, goldenNow)
	assert.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
	assert.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	if missing := missingPart(resp.Status.Message, "spec.definitionRef", `namespace "ctf"`, "--definition-namespaces=ctf-definitions"); missing != "" {
		t.Errorf("message lacks %q: %s", missing, resp.Status.Message)
	}
	requireKeptAsLastApplied(t, req, resp)

	// An explicit namespace is checked the same way.
	req.Parent.Spec.DefinitionRef.Namespace = "ctf-definitions"
	resp = Sync(req, goldenNow, refused)
	assert.NotEqual(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason, "ctf-definitions is allowed: %s", resp.Status.Message)
	assert.Equal(t, v1alpha1.ReasonDefinitionNotFound, resp.Status.Reason, "allowed, but not among the related definitions")

	// Inline templates do not reference a namespace: the switch does not concern them.
	_, resp = syncCase(t, "running-nodeport-inline-template-fixed-point", refused, goldenNow)
	assert.Equal(t, v1alpha1.PhaseRunning, resp.Status.Phase)
}

// Customize does not even ask Metacontroller for a definition in a namespace the hook refuses.
func TestCustomizeRelatesOnlyAllowedNamespaces(t *testing.T) {
	req, err := DecodeCustomizeRequest(goldenCaseNamed(t, "customize-definition-ref").request)
	require.NoError(t, err)
	cfg := DefaultConfig()
	require.Len(t, Customize(req, cfg).RelatedResources, 1, "any namespace by default")

	cfg.DefinitionNamespaces = []string{"ctf"}
	rules := Customize(req, cfg).RelatedResources
	require.Len(t, rules, 1)
	assert.Equal(t, "ctf", rules[0].Namespace)

	cfg.DefinitionNamespaces = []string{"ctf-definitions"}
	assert.Empty(t, Customize(req, cfg).RelatedResources)
	out, err := EncodeResponse(Customize(req, cfg))
	require.NoError(t, err)
	assert.JSONEq(t, `{"relatedResources":[]}`, string(out), "an empty list, not null")

	req.Parent.Spec.DefinitionRef.Namespace = "ctf-definitions"
	rules = Customize(req, cfg).RelatedResources
	require.Len(t, rules, 1)
	assert.Equal(t, "ctf-definitions", rules[0].Namespace)
}

// missingPart returns the first of parts that s does not contain, or "".
func missingPart(s string, parts ...string) string {
	for _, part := range parts {
		if !strings.Contains(s, part) {
			return part
		}
	}
	return ""
}
