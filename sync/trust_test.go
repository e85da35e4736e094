package sync

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The trust switches (--inline-templates=false, --definition-namespaces, --definition-grants)
// refuse what the platform, or a co-tenant, may not ask for. A refusal is a problem like any other: InvalidSpec, a message that says what to
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

	// An explicit namespace is checked the same way (granted to ctf's Challenges, as another
	// namespace than their own needs).
	req.Parent.Spec.DefinitionRef.Namespace = "ctf-definitions"
	refused.DefinitionGrants = []DefinitionGrant{{ChallengeNamespaces: "ctf", DefinitionNamespace: "ctf-definitions"}}
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
	assert.Empty(t, Customize(req, cfg).RelatedResources, "another namespace than the Challenge's, granted to none")
	cfg.DefinitionGrants = []DefinitionGrant{{ChallengeNamespaces: "ctf", DefinitionNamespace: "ctf-definitions"}}
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

// eventFlag is owner's dynamic flag on the event's definition ctf/web-sqli (prefix CTF), as the
// hook gives it to an instance in ctf.
func eventFlag(t *testing.T, cfg Config, owner string) string {
	t.Helper()
	require.NotEmpty(t, cfg.FlagKey)
	return DynamicFlag(cfg.FlagKey, "ctf/web-sqli", owner, "CTF")
}

// flagSecrets are the flag values of the Secrets among an answer's children.
func flagSecrets(t *testing.T, resp Response) []string {
	t.Helper()
	var flags []string
	for _, child := range resp.Children {
		out, err := EncodeResponse(child)
		require.NoError(t, err)
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string][]byte `json:"data"`
		}
		require.NoError(t, json.Unmarshal(out, &obj))
		if obj.Kind == "Secret" {
			flags = append(flags, string(obj.Data[flagSecretKey]))
		}
	}
	return flags
}

// TestDefinitionOfAnotherNamespaceRefusedByDefault: a co-tenant's Challenge in tenant-b that names
// the event's definition ctf/web-sqli and the owner team-42 gets no child, so no Secret with
// team-42's flag, with the default trust and with --definition-namespaces=ctf, even when
// Metacontroller sent the definition (a customize answer cached from before); only a grant that
// names the pair lets it use the definition.
func TestDefinitionOfAnotherNamespaceRefusedByDefault(t *testing.T) {
	const name = "definition-other-namespace-refused-first-sync"
	defaults := goldenConfig(t)
	req, resp := syncCase(t, name, defaults, goldenNow)
	require.Equal(t, "tenant-b", req.Parent.Metadata.Namespace)
	require.Equal(t, "ctf", req.Parent.Spec.DefinitionRef.Namespace)
	require.NotEmpty(t, req.Related.Definitions, "the definition is related: the refusal does not depend on Metacontroller leaving it out")
	victimFlag := eventFlag(t, defaults, req.Parent.Spec.Owner)

	// The same Challenge in the definition's own namespace gets the flag: what is refused below is
	// the namespace, nothing else.
	own := req
	own.Parent.Metadata.Namespace = "ctf"
	require.Equal(t, []string{victimFlag}, flagSecrets(t, Sync(own, goldenNow, defaults)))

	refusedWith := func(t *testing.T, cfg Config) {
		t.Helper()
		resp := Sync(req, goldenNow, cfg)
		assert.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
		assert.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
		if missing := missingPart(resp.Status.Message, "spec.definitionRef", `"ctf"`, `"tenant-b"`, "tenant-b=ctf", "--definition-grants"); missing != "" {
			t.Errorf("message lacks %q: %s", missing, resp.Status.Message)
		}
		assert.Empty(t, resp.Children, "nothing is built of another namespace's definition")
		out, err := EncodeResponse(resp)
		require.NoError(t, err)
		assert.NotContains(t, string(out), base64.StdEncoding.EncodeToString([]byte(victimFlag)))
	}
	t.Run("default", func(t *testing.T) {
		assert.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
		refusedWith(t, defaults)
	})
	t.Run("definition namespaces name the event's", func(t *testing.T) {
		cfg := defaults
		cfg.DefinitionNamespaces = []string{"ctf"}
		refusedWith(t, cfg)
	})
	t.Run("grants of other pairs", func(t *testing.T) {
		cfg := defaults
		cfg.DefinitionGrants = []DefinitionGrant{
			{ChallengeNamespaces: "team-*", DefinitionNamespace: "ctf"},
			{ChallengeNamespaces: "tenant-b", DefinitionNamespace: "ctf-staging"},
			{ChallengeNamespaces: "tenant", DefinitionNamespace: "ctf"},
			{ChallengeNamespaces: "tenant-b-*", DefinitionNamespace: "ctf"},
		}
		refusedWith(t, cfg)
	})

	for _, grant := range []string{"tenant-b=ctf", "tenant-*=ctf", "*=ctf", "team-*=ctf,*-b=ctf"} {
		t.Run("granted "+grant, func(t *testing.T) {
			cfg := defaults
			var err error
			cfg.DefinitionGrants, err = ParseDefinitionGrants(grant)
			require.NoError(t, err)
			resp := Sync(req, goldenNow, cfg)
			assert.NotEqual(t, v1alpha1.PhaseError, resp.Status.Phase, resp.Status.Message)
			// A grant shares the definition, and so its flags: the same flag as in ctf, which the
			// platform verifies with the definition key ctf/web-sqli.
			assert.Equal(t, []string{victimFlag}, flagSecrets(t, resp))
			assert.True(t, VerifyDynamicFlag(cfg.FlagKey, "ctf/web-sqli", req.Parent.Spec.Owner, victimFlag), "verified with the definition's key")
		})
	}
	t.Run("granted, but not a definition namespace", func(t *testing.T) {
		cfg := defaults
		cfg.DefinitionNamespaces = []string{"ctf-staging"}
		cfg.DefinitionGrants = []DefinitionGrant{{ChallengeNamespaces: "tenant-b", DefinitionNamespace: "ctf"}}
		resp := Sync(req, goldenNow, cfg)
		assert.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
		assert.Contains(t, resp.Status.Message, "--definition-namespaces=ctf-staging")
		assert.Empty(t, resp.Children)
	})
}

// TestInlineTemplateElsewhereGetsNoEventFlag: an inline template's dynamic flag is keyed by the
// Challenge itself, its namespace included. A co-tenant in tenant-b that copies the event's
// definition inline, under the name and owner of an event instance, gets a flag of its own: not
// the owner's flag of ctf/web-sqli, nor that of the same inline Challenge in ctf.
func TestInlineTemplateElsewhereGetsNoEventFlag(t *testing.T) {
	cfg := goldenConfig(t)
	req, resp := syncCase(t, "inline-template-other-namespace-own-flag-first-sync", cfg, goldenNow)
	require.Equal(t, "tenant-b", req.Parent.Metadata.Namespace)
	require.NotNil(t, req.Parent.Spec.Template)
	require.True(t, req.Parent.Spec.Template.Flag.Dynamic)
	got := flagSecrets(t, resp)
	require.Len(t, got, 1)

	inEvent := req
	inEvent.Parent.Metadata.Namespace = "ctf"
	eventInline := flagSecrets(t, Sync(inEvent, goldenNow, cfg))
	require.Len(t, eventInline, 1)
	assert.NotEqual(t, eventInline[0], got[0], "the same inline Challenge in ctf has another flag")
	assert.NotEqual(t, eventFlag(t, cfg, req.Parent.Spec.Owner), got[0], "not the owner's flag of the event's definition")
	assert.Equal(t, DynamicFlag(cfg.FlagKey, "inline/tenant-b/web-sqli-team42", "team-42", "CTF"), got[0],
		"the flag the platform verifies with the definition key inline/tenant-b/web-sqli-team42")
	// Submitted to the event's verification, it is no event flag.
	for _, key := range []string{"ctf/web-sqli", "inline/ctf/web-sqli-team42"} {
		assert.False(t, VerifyDynamicFlag(cfg.FlagKey, key, "team-42", got[0]), key)
	}
}

func TestParseDefinitionGrants(t *testing.T) {
	grants, err := ParseDefinitionGrants(" team-*=ctf, ctf-staging=ctf ,team-*=ctf,,")
	require.NoError(t, err)
	assert.Equal(t, []DefinitionGrant{{"team-*", "ctf"}, {"ctf-staging", "ctf"}}, grants)
	assert.Equal(t, "team-*=ctf,ctf-staging=ctf", joinGrants(grants))
	grants, err = ParseDefinitionGrants("")
	require.NoError(t, err)
	assert.Empty(t, grants)

	for v, want := range map[string]string{
		"team-*":        "<challenge-namespace>=<definition-namespace>",
		"Team_7=ctf":    `"Team_7" is neither a namespace name nor a pattern`,
		"team-[ab]=ctf": `"team-[ab]"`,
		"team-*=ctf-*":  `"ctf-*" is not a namespace name (no pattern on the definition side)`,
		"=ctf":          `"" is neither`,
	} {
		_, err := ParseDefinitionGrants(v)
		if assert.Error(t, err, v) {
			assert.Contains(t, err.Error(), want, v)
		}
	}

	for _, tt := range []struct {
		grant, challenges, definitions string
		allows                         bool
	}{
		{"team-*=ctf", "team-7", "ctf", true},
		{"team-*=ctf", "team-", "ctf", true},
		{"team-*=ctf", "teams", "ctf", false},
		{"team-*=ctf", "team-7", "ctf2", false},
		{"*-b=ctf", "tenant-b", "ctf", true},
		{"ctf-staging=ctf", "ctf-staging", "ctf", true},
		{"ctf-staging=ctf", "ctf-staging-2", "ctf", false},
	} {
		grants, err := ParseDefinitionGrants(tt.grant)
		require.NoError(t, err)
		assert.Equal(t, tt.allows, grants[0].allows(tt.challenges, tt.definitions), "%s for %s -> %s", tt.grant, tt.challenges, tt.definitions)
	}
}

func TestCheckTrust(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DefinitionGrants = []DefinitionGrant{{"team-*", "ctf"}}
	require.NoError(t, cfg.CheckTrust(), "any definition namespace")
	cfg.DefinitionNamespaces = []string{"ctf"}
	require.NoError(t, cfg.CheckTrust())
	cfg.DefinitionNamespaces = []string{"ctf-definitions"}
	err := cfg.CheckTrust()
	require.Error(t, err)
	if missing := missingPart(err.Error(), "--definition-grants team-*=ctf", `"ctf"`, "--definition-namespaces=ctf-definitions"); missing != "" {
		t.Errorf("error lacks %q: %v", missing, err)
	}
}
