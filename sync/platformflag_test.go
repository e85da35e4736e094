package sync

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// platformFlagCase is a running instance whose definition takes its flag from the platform
// (flag.platform: true), with the platform's flag in spec.flag.
const platformFlagCase = "running-platform-flag-fixed-point"

// flagSecretData is the flag the answer's flag Secret holds, decoded; "" without a flag Secret.
func flagSecretData(t *testing.T, resp Response) string {
	t.Helper()
	for _, child := range resp.Children {
		obj := decodedChild(t, child)
		if obj["kind"] != "Secret" {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(obj["data"].(map[string]any)[flagSecretKey].(string))
		require.NoError(t, err)
		return string(data)
	}
	return ""
}

// requireNoFlagInStatus fails when the status, as it goes on the wire, holds flag.
func requireNoFlagInStatus(t *testing.T, resp Response, flag string) {
	t.Helper()
	status, err := json.Marshal(resp.Status)
	require.NoError(t, err)
	require.NotContains(t, string(status), flag)
}

// The platform's flag (spec.flag) is what the flag Secret holds, and nowhere in the status; a new
// value changes the Secret and the Pod (its flag-hash annotation, which is not the flag), so that
// Metacontroller recreates the Pod with it.
func TestPlatformFlagIsDelivered(t *testing.T) {
	c := goldenCaseNamed(t, platformFlagCase)
	cfg := goldenConfig(t)
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	given := req.Parent.Spec.Flag
	require.NotEmpty(t, given)

	resp := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.PhaseRunning, resp.Status.Phase)
	require.Equal(t, given, flagSecretData(t, resp))
	requireNoFlagInStatus(t, resp, given)
	hash := func(resp Response) string {
		pod := podOf(t, resp)
		require.NotNil(t, pod)
		return pod["metadata"].(map[string]any)["annotations"].(map[string]any)[AnnotationFlagHash].(string)
	}
	before := hash(resp)
	require.NotContains(t, before, given)

	req.Parent.Spec.Flag = "rctf{a_new_one}"
	resp = Sync(req, goldenNow, cfg)
	require.Equal(t, "rctf{a_new_one}", flagSecretData(t, resp))
	require.NotEqual(t, before, hash(resp), "a new spec.flag must reach the Pod")
	requireNoFlagInStatus(t, resp, "rctf{a_new_one}")
}

// A template that takes its flag from the platform, on a Challenge without spec.flag: Error,
// InvalidSpec, saying what to set, and the running children are kept as they are.
func TestPlatformFlagMissing(t *testing.T) {
	c := goldenCaseNamed(t, platformFlagCase)
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	req.Parent.Spec.Flag = ""
	resp := Sync(req, goldenNow, goldenConfig(t))
	require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
	require.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	require.Equal(t, "the template takes its flag from the platform (flag.platform: true): set spec.flag on the Challenge", resp.Status.Message)
	requireKeptChildren(t, req, resp)
}

// spec.flag on a Challenge whose template's flag is not the platform's is refused rather than
// ignored: the platform would verify a flag the instance does not hold. The message says why and
// what to change, never the flag; the running children are kept.
func TestPlatformFlagWithoutAPlatformTemplate(t *testing.T) {
	const given = "rctf{not_for_this_template}"
	for _, tc := range []struct {
		name, golden string
		noFlag       bool
		want         string
	}{
		{"a dynamic definition", "life-4-running-resync-fixed-point", false, "and the flag of ChallengeDefinition ctf/web-sqli does not: remove spec.flag"},
		{"a static inline template", "running-nodeport-inline-template-fixed-point", false, "and spec.template.flag does not: remove spec.flag"},
		{"an inline template without a flag", "running-nodeport-inline-template-fixed-point", true, "and spec.template has no flag: remove spec.flag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeRequest(goldenCaseNamed(t, tc.golden).request)
			require.NoError(t, err)
			req.Parent.Spec.Flag = given
			if tc.noFlag {
				req.Parent.Spec.Template.Flag = nil
			}
			resp := Sync(req, goldenNow, goldenConfig(t))
			require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
			require.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
			require.True(t, strings.HasPrefix(resp.Status.Message, "spec.flag is used only when the template's flag sets platform: true, "), resp.Status.Message)
			require.Contains(t, resp.Status.Message, tc.want)
			requireNoFlagInStatus(t, resp, given)
			requireKeptChildren(t, req, resp)
		})
	}
}

// spec.flag is at most MaxFlagValue characters, as the CRD counts them; a longer one is
// InvalidSpec, and the message does not repeat it.
func TestPlatformFlagLength(t *testing.T) {
	c := goldenCaseNamed(t, platformFlagCase)
	cfg := goldenConfig(t)
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)

	req.Parent.Spec.Flag = strings.Repeat("é", v1alpha1.MaxFlagValue)
	resp := Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.PhaseRunning, resp.Status.Phase, resp.Status.Message)
	require.Equal(t, req.Parent.Spec.Flag, flagSecretData(t, resp))

	req.Parent.Spec.Flag = strings.Repeat("é", v1alpha1.MaxFlagValue+1)
	resp = Sync(req, goldenNow, cfg)
	require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
	require.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	require.Equal(t, "spec.flag: Too long: may not be more than 1024 characters", resp.Status.Message)
	requireKeptChildren(t, req, resp)
}

// requireKeptChildren: the answer holds the observed children exactly as Metacontroller last
// applied them.
func requireKeptChildren(t *testing.T, req Request, resp Response) {
	t.Helper()
	observed := req.Children.Objects()
	require.Len(t, resp.Children, len(observed))
	for i, child := range resp.Children {
		out, err := EncodeResponse(child)
		require.NoError(t, err)
		require.JSONEq(t, observed[i].Metadata.Annotations.LastApplied, string(out), "kept children are what Metacontroller last applied")
	}
}
