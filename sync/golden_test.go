package sync

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/golden"
	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

var update = flag.Bool("update", false, "rewrite testdata/*/request.json and hook.flags from case.yaml (or a derivation), then response.json from the hook's answers")

// goldenNow is the clock of every golden case: testdata/dev.flags' --clock, which `make run` serves with.
var goldenNow = time.Date(2026, 11, 1, 12, 5, 0, 0, time.UTC)

// devFlagsFile holds the flags `make run` serves with, relative to the repository root.
const devFlagsFile = "../testdata/dev.flags"

// goldenConfig is the configuration `make run` serves with: testdata/dev.flags parsed by the
// hook's own registration (Config.RegisterFlags), plus the binary's flags that are not the sync's
// configuration: the flag key's and the TCP gateway key's files, read here, the pinned clock,
// goldenNow, and Metacontroller's token, which shapes no answer.
func goldenConfig(t testing.TB) Config {
	content, err := os.ReadFile(devFlagsFile)
	require.NoError(t, err)
	cfg := DefaultConfig()
	fs := flag.NewFlagSet(devFlagsFile, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	keyFile := fs.String("flag-key-file", "", "")
	tcpGatewayKeyFile := fs.String("tcp-gateway-key-file", "", "")
	clock := fs.String("clock", "", "")
	fs.String("token-file", "", "")
	require.NoError(t, fs.Parse(strings.Fields(string(content))))
	require.Equal(t, goldenNow.Format(time.RFC3339), *clock, "%s pins the clock to goldenNow", devFlagsFile)
	// Relative to the repository root, as `make run` reads them.
	key, err := os.ReadFile(filepath.Join("..", *keyFile))
	require.NoError(t, err)
	cfg.FlagKey = bytes.TrimSpace(key)
	tcpGatewayKey, err := os.ReadFile(filepath.Join("..", *tcpGatewayKeyFile))
	require.NoError(t, err)
	cfg.TCPGateway.Key = bytes.TrimSpace(tcpGatewayKey)
	return cfg
}

// withFlags is cfg with a case's flags applied by the hook's own registration.
func withFlags(t testing.TB, cfg Config, args []string) Config {
	fs := flag.NewFlagSet(golden.FlagsFile, flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	require.NoError(t, fs.Parse(args))
	return cfg
}

type goldenCase struct {
	name    string
	dir     string
	request []byte
	// flags are the case's hook flags on top of the golden configuration (its hook.flags, written
	// from its case.yaml), e.g. a Gateway.
	flags []string
}

// goldenCases are the corpus' cases, testdata/<case>/.
func goldenCases(t testing.TB) []goldenCase {
	corpus, err := golden.Cases("../testdata")
	require.NoError(t, err)
	cases := make([]goldenCase, 0, len(corpus))
	for _, c := range corpus {
		cases = append(cases, goldenCase{name: c.Name, dir: c.Dir, request: c.Request, flags: c.Flags})
	}
	return cases
}

// with is the case with another request, e.g. the one Metacontroller sends after applying an answer.
func (c goldenCase) with(request []byte) goldenCase {
	c.request = request
	return c
}

// answer runs a golden case's request through the hook the way the server does, at the golden
// clock: decode, sync or customize, encode.
func answer(t testing.TB, c goldenCase, cfg Config) []byte {
	return answerAt(t, c, cfg, goldenNow)
}

func answerAt(t testing.TB, c goldenCase, cfg Config, now time.Time) []byte {
	cfg = withFlags(t, cfg, c.flags)
	var resp any
	if strings.HasPrefix(c.name, "customize-") {
		req, err := DecodeCustomizeRequest(c.request)
		require.NoError(t, err)
		resp = Customize(req, cfg)
	} else {
		req, err := DecodeRequest(c.request)
		require.NoError(t, err)
		resp = Sync(req, now, cfg)
	}
	out, err := EncodeResponse(resp)
	require.NoError(t, err)
	return out
}

// indent is the golden files' layout: the wire bytes, indented for reading and review.
func indent(t testing.TB, compact []byte) []byte {
	var buf bytes.Buffer
	require.NoError(t, json.Indent(&buf, compact, "", "  "))
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	cfg := goldenConfig(t)
	for _, c := range goldenCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got := answer(t, c, cfg)
			require.Equal(t, string(got), string(answer(t, c, cfg)), "identical requests must give byte-identical answers")
			path := filepath.Join(c.dir, "response.json")
			if *update {
				require.NoError(t, os.WriteFile(path, indent(t, got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run `make update` to create it, then read it line by line")
			require.Equal(t, string(want), string(indent(t, got)))
		})
	}
}

// goldenAnswer is the part of a sync answer the feedback tests read.
type goldenAnswer struct {
	Status struct {
		Phase     string `json:"phase"`
		ExpiresAt string `json:"expiresAt"`
	} `json:"status"`
	Children           []json.RawMessage `json:"children"`
	ResyncAfterSeconds float64           `json:"resyncAfterSeconds"`
}

func decodeAnswer(t testing.TB, body []byte) goldenAnswer {
	var a goldenAnswer
	require.NoError(t, json.Unmarshal(body, &a))
	return a
}

// TestGoldenFixedPoint feeds every sync answer back as Metacontroller would after applying it: the
// status becomes the parent's status and each child's last-applied annotation holds what the hook
// returned. The answer must not change: otherwise every sync would write the status or a child
// again, and each write triggers another sync.
func TestGoldenFixedPoint(t *testing.T) {
	cfg := goldenConfig(t)
	for _, c := range goldenCases(t) {
		if strings.HasPrefix(c.name, "customize-") {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			first := answer(t, c, cfg)
			second := answer(t, c.with(applyAnswer(t, c.request, first, mcsim.Applied{})), cfg)
			require.Equal(t, string(indent(t, first)), string(indent(t, second)))
		})
	}
}

// TestGoldenNoWorkloadPastDeadline is the property behind "expiry wins over every error", over
// every golden sync case, with the golden flag key and without one (a hook restarted without its
// key answers FlagKeyMissing for dynamic flags):
//   - feeding an answer back, again and again, never moves expiresAt later than the first
//     answer's, and never revives an Expired instance (Expired, no children, every time);
//   - an answer that keeps or builds children names a deadline and asks to be woken exactly then;
//   - at and after that deadline, the case's request and the fed-back one are answered with no
//     Pod and nothing around it, whatever else is wrong with them: only the NetworkPolicy of a Pod
//     still observed (Terminating), until it is gone; and phase Expired unless the Challenge is
//     being deleted.
func TestGoldenNoWorkloadPastDeadline(t *testing.T) {
	withKey := goldenConfig(t)
	withoutKey := withKey
	withoutKey.FlagKey = nil
	for _, cfg := range []struct {
		name string
		cfg  Config
	}{{"flag-key", withKey}, {"no-flag-key", withoutKey}} {
		for _, c := range goldenCases(t) {
			if strings.HasPrefix(c.name, "customize-") {
				continue
			}
			t.Run(cfg.name+"/"+c.name, func(t *testing.T) {
				checkDeadlineProperty(t, c, cfg.cfg)
			})
		}
	}
}

func checkDeadlineProperty(t *testing.T, c goldenCase, cfg Config) {
	var req struct {
		Finalizing bool `json:"finalizing"`
	}
	require.NoError(t, json.Unmarshal(c.request, &req))
	body := answer(t, c, cfg)
	first := decodeAnswer(t, body)
	require.NotEmpty(t, first.Status.ExpiresAt, "every answer names the instance's deadline")
	deadline, err := time.Parse(time.RFC3339, first.Status.ExpiresAt)
	require.NoError(t, err)
	// Expired and deleted instances keep at most the NetworkPolicy of a terminating Pod: its
	// deletion, not the clock, wakes the hook.
	if len(first.Children) > 0 && first.Status.Phase != v1alpha1.PhaseExpired && !req.Finalizing {
		require.True(t, goldenNow.Before(deadline), "children returned at or past the deadline %s", first.Status.ExpiresAt)
		// Earlier is allowed (a Pod's progress deadline may come first), later never.
		require.Positive(t, first.ResyncAfterSeconds, "an answer with children must ask to be woken")
		require.LessOrEqual(t, first.ResyncAfterSeconds, deadline.Sub(goldenNow).Seconds(),
			"an answer with children must wake the hook no later than its deadline")
	}
	if first.Status.Phase == v1alpha1.PhaseExpired {
		requireOnlyHeldIsolation(t, c.request, first, "the first answer")
	}

	request := c.request
	for round := 1; round <= 3; round++ {
		request = applyAnswer(t, request, body, mcsim.Applied{Delete: true})
		body = answer(t, c.with(request), cfg)
		next := decodeAnswer(t, body)
		later, err := time.Parse(time.RFC3339, next.Status.ExpiresAt)
		require.NoError(t, err, "round %d: expiresAt %q", round, next.Status.ExpiresAt)
		require.False(t, later.After(deadline), "round %d moved expiresAt from %s to %s", round, first.Status.ExpiresAt, next.Status.ExpiresAt)
		if first.Status.Phase == v1alpha1.PhaseExpired {
			require.Equal(t, v1alpha1.PhaseExpired, next.Status.Phase, "round %d revived an Expired instance", round)
			requireOnlyHeldIsolation(t, request, next, fmt.Sprintf("round %d", round))
		}
	}

	for _, now := range []time.Time{deadline, deadline.Add(time.Second), deadline.Add(48 * time.Hour)} {
		for name, r := range map[string][]byte{"request": c.request, "fed back": request} {
			got := decodeAnswer(t, answerAt(t, c.with(r), cfg, now))
			requireOnlyHeldIsolation(t, r, got, fmt.Sprintf("%s at %s, past the deadline %s", name, now.Format(time.RFC3339), first.Status.ExpiresAt))
			if !req.Finalizing {
				require.Equal(t, v1alpha1.PhaseExpired, got.Status.Phase, "%s at %s", name, now.Format(time.RFC3339))
			}
		}
	}
}

// requireOnlyHeldIsolation: an answer past the deadline keeps no workload and nothing around it;
// only while the request still observes a Pod (Terminating) does it keep NetworkPolicies.
func requireOnlyHeldIsolation(t testing.TB, request []byte, a goldenAnswer, when string) {
	var req struct {
		Children map[string]map[string]json.RawMessage `json:"children"`
	}
	require.NoError(t, json.Unmarshal(request, &req))
	if len(req.Children["Pod.v1"]) == 0 {
		require.Empty(t, a.Children, "%s: children kept with no Pod observed", when)
		return
	}
	for _, child := range a.Children {
		var typ struct {
			Kind string `json:"kind"`
		}
		require.NoError(t, json.Unmarshal(child, &typ))
		require.Equal(t, "NetworkPolicy", typ.Kind, "%s: only the NetworkPolicy of a terminating Pod may stay", when)
	}
}

// TestFlagNeverInStatus: a flag may reach players only through the instance's Secret; neither
// key reaches the status (the TCP gateway's token is an HMAC under its key, never the key), nor
// the platform's flag (spec.flag).
func TestFlagNeverInStatus(t *testing.T) {
	cfg := goldenConfig(t)
	for _, c := range goldenCases(t) {
		var resp struct {
			Status json.RawMessage `json:"status"`
		}
		require.NoError(t, json.Unmarshal(answer(t, c, cfg), &resp))
		markers := []string{"CTF{", "flag{", string(cfg.FlagKey), string(cfg.TCPGateway.Key)}
		var req struct {
			Parent struct {
				Spec struct {
					Flag string `json:"flag"`
				} `json:"spec"`
			} `json:"parent"`
		}
		require.NoError(t, json.Unmarshal(c.request, &req))
		if flag := req.Parent.Spec.Flag; flag != "" {
			markers = append(markers, flag)
		}
		for _, marker := range markers {
			require.NotContains(t, string(resp.Status), marker, c.name)
		}
	}
}

func goldenCaseNamed(t *testing.T, name string) goldenCase {
	for _, c := range goldenCases(t) {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no golden case %s", name)
	return goldenCase{}
}
