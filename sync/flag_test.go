package sync

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// deliveredFlag is the flag a sync answer delivers in its Secret child.
func deliveredFlag(t *testing.T, resp Response) string {
	t.Helper()
	for _, child := range resp.Children {
		out, err := EncodeResponse(child)
		require.NoError(t, err)
		var secret struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		require.NoError(t, json.Unmarshal(out, &secret))
		if secret.Kind == "Secret" {
			flag, err := base64.StdEncoding.DecodeString(secret.Data[flagSecretKey])
			require.NoError(t, err)
			return string(flag)
		}
	}
	t.Fatal("no Secret child in the answer")
	return ""
}

// The flag an instance receives is the one VerifyDynamicFlag accepts, for a referenced definition
// and for an inline template, and nothing near it is accepted.
func TestVerifyDynamicFlagAcceptsTheDeliveredFlag(t *testing.T) {
	cfg := goldenConfig(t)
	for _, tc := range []struct{ name, definition, owner string }{
		{"life-1-none-first-sync", "ctf/web-sqli", "team-42"},
		{"running-nodeport-inline-template-fixed-point", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeRequest(goldenCaseNamed(t, tc.name).request)
			require.NoError(t, err)
			definition, owner := tc.definition, tc.owner
			if definition == "" {
				require.NotNil(t, req.Parent.Spec.Template, "an inline template case")
				req.Parent.Spec.Template.Flag = &v1alpha1.Flag{Dynamic: true, Env: "FLAG"}
				definition = "inline/" + req.Parent.Metadata.Namespace + "/" + req.Parent.Metadata.Name
				owner = req.Parent.Spec.Owner
			}
			flag := deliveredFlag(t, Sync(req, goldenNow, cfg))
			require.NotEmpty(t, flag)
			require.NoError(t, CheckFlagSubject(definition, owner))

			assert.True(t, VerifyDynamicFlag(cfg.FlagKey, definition, owner, flag), "the delivered flag %s", flag)
			open := strings.IndexByte(flag, '{')
			hexPart := flag[open+1 : len(flag)-1]
			assert.True(t, VerifyDynamicFlag(cfg.FlagKey, definition, owner, "flag{"+hexPart+"}"), "the prefix is no secret")
			flipped := []byte(hexPart)
			flipped[0] ^= 1
			assert.False(t, VerifyDynamicFlag(cfg.FlagKey, definition, owner+"x", flag), "another owner")
			assert.False(t, VerifyDynamicFlag(cfg.FlagKey, definition+"x", owner, flag), "another definition")
			for _, wrong := range []string{
				flag[:open] + "{" + string(flipped) + "}",
				flag[:len(flag)-2] + "}",
				flag + "}",
				hexPart,
				"{" + hexPart + "}",
				"bad-prefix{" + hexPart + "}",
				strings.ToUpper(flag),
				flag[:len(flag)-1],
				"",
			} {
				assert.False(t, VerifyDynamicFlag(cfg.FlagKey, definition, owner, wrong), "submission %q", wrong)
			}
			assert.False(t, VerifyDynamicFlag([]byte("another key"), definition, owner, flag), "another key")
		})
	}
}

func TestCheckFlagSubject(t *testing.T) {
	for _, ok := range [][2]string{{"ctf/web-sqli", "team-42"}, {"ctf/web.sqli", "t"}, {"inline/ctf/pwn-team7", "team_7.x"}, {"inline/web", "team-42"}} {
		assert.NoError(t, CheckFlagSubject(ok[0], ok[1]), "%v", ok)
	}
	for _, bad := range []struct{ definition, owner, want string }{
		{"web-sqli", "team-42", "expected <namespace>/<name>"},
		{"a/b/c", "team-42", "expected <namespace>/<name>"},
		{"/web", "team-42", "namespace"},
		{"CTF/web", "team-42", "namespace"},
		{"ctf/", "team-42", "name"},
		{"ctf/Web", "team-42", "name"},
		{"ctf/web", "", "owner is required"},
		{"ctf/web", "team 42", "owner"},
		{"ctf/web", strings.Repeat("t", 64), "owner"},
	} {
		err := CheckFlagSubject(bad.definition, bad.owner)
		if assert.Error(t, err, "%q %q", bad.definition, bad.owner) {
			assert.Contains(t, err.Error(), bad.want)
		}
	}
}

// VerifyFlag names the candidate whose flag a submission is when it is not the claimed owner's,
// and nobody for a right, a wrong or a malformed flag, or another definition's.
func TestVerifyFlagAttributesASharedFlag(t *testing.T) {
	key := goldenConfig(t).FlagKey
	const definition = "ctf/web-sqli"
	flagOf := func(owner string) string { return DynamicFlag(key, definition, owner, "CTF") }
	candidates := []string{"team-1", "team-2", "team-3"}
	for _, tt := range []struct {
		name, owner, flag string
		candidates        []string
		want              FlagVerdict
	}{
		{"right, no candidates", "team-1", flagOf("team-1"), nil, FlagVerdict{Correct: true}},
		{"right", "team-1", flagOf("team-1"), candidates, FlagVerdict{Correct: true}},
		{"wrong", "team-1", "CTF{00000000000000000000000000000000}", candidates, FlagVerdict{}},
		{"shared, no candidates", "team-1", flagOf("team-2"), nil, FlagVerdict{}},
		{"shared", "team-1", flagOf("team-2"), candidates, FlagVerdict{OwnedBy: "team-2"}},
		{"shared by the last candidate", "team-1", flagOf("team-3"), candidates, FlagVerdict{OwnedBy: "team-3"}},
		{"shared by the first candidate", "team-9", flagOf("team-1"), candidates, FlagVerdict{OwnedBy: "team-1"}},
		{"shared by no candidate", "team-1", flagOf("team-4"), candidates, FlagVerdict{}},
		{"another definition's", "team-1", DynamicFlag(key, "ctf/other", "team-2", "CTF"), candidates, FlagVerdict{}},
		{"malformed", "team-1", "CTF{team-2}", candidates, FlagVerdict{}},
		{"shared, in capitals", "team-1", strings.ToUpper(flagOf("team-2")), candidates, FlagVerdict{}},
		{"shared, one digit short", "team-1", flagOf("team-2")[:len(flagOf("team-2"))-2] + "}", candidates, FlagVerdict{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := VerifyFlag(key, FlagVerification{Definition: definition, Owner: tt.owner, Flag: tt.flag, Candidates: tt.candidates})
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want.Correct, VerifyDynamicFlag(key, definition, tt.owner, tt.flag), "VerifyDynamicFlag agrees")
		})
	}
}
