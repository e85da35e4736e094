package sync

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/*/response.json from the hook's answers")

// goldenNow is the clock of every golden case, the same as `make run`'s (testdata/dev.flags).
var goldenNow = time.Date(2026, 11, 1, 12, 5, 0, 0, time.UTC)

// goldenConfig is the default configuration with the demo flag key, as `make run` serves.
func goldenConfig(t testing.TB) Config {
	key, err := os.ReadFile("../testdata/flag.key")
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.FlagKey = bytes.TrimSpace(key)
	return cfg
}

type goldenCase struct {
	name    string
	dir     string
	request []byte
}

func goldenCases(t testing.TB) []goldenCase {
	requests, err := filepath.Glob("../testdata/*/request.json")
	require.NoError(t, err)
	require.NotEmpty(t, requests)
	var cases []goldenCase
	for _, path := range requests {
		body, err := os.ReadFile(path)
		require.NoError(t, err)
		dir := filepath.Dir(path)
		cases = append(cases, goldenCase{name: filepath.Base(dir), dir: dir, request: body})
	}
	return cases
}

// answer runs a golden case's request through the hook the way the server does: decode, sync or
// customize, encode.
func answer(t testing.TB, c goldenCase, cfg Config) []byte {
	var resp any
	if strings.HasPrefix(c.name, "customize-") {
		req, err := DecodeCustomizeRequest(c.request)
		require.NoError(t, err)
		resp = Customize(req)
	} else {
		req, err := DecodeRequest(c.request)
		require.NoError(t, err)
		resp = Sync(req, goldenNow, cfg)
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
			var resp struct {
				Status   json.RawMessage   `json:"status"`
				Children []json.RawMessage `json:"children"`
			}
			require.NoError(t, json.Unmarshal(first, &resp))
			var req map[string]any
			require.NoError(t, json.Unmarshal(c.request, &req))
			req["parent"].(map[string]any)["status"] = json.RawMessage(resp.Status)
			applied := map[string]string{}
			for _, child := range resp.Children {
				var id struct {
					Kind     string                `json:"kind"`
					Metadata struct{ Name string } `json:"metadata"`
				}
				require.NoError(t, json.Unmarshal(child, &id))
				applied[id.Kind+"/"+id.Metadata.Name] = string(child)
			}
			for _, group := range req["children"].(map[string]any) {
				for _, obj := range group.(map[string]any) {
					obj := obj.(map[string]any)
					meta := obj["metadata"].(map[string]any)
					if desired, ok := applied[obj["kind"].(string)+"/"+meta["name"].(string)]; ok {
						meta["annotations"].(map[string]any)[LastAppliedAnnotation] = desired
					}
				}
			}
			next, err := json.Marshal(req)
			require.NoError(t, err)
			second := answer(t, goldenCase{name: c.name, request: next}, cfg)
			require.Equal(t, string(indent(t, first)), string(indent(t, second)))
		})
	}
}

// TestFlagNeverInStatus: a flag may reach players only through the instance's Secret.
func TestFlagNeverInStatus(t *testing.T) {
	cfg := goldenConfig(t)
	for _, c := range goldenCases(t) {
		var resp struct {
			Status json.RawMessage `json:"status"`
		}
		require.NoError(t, json.Unmarshal(answer(t, c, cfg), &resp))
		for _, marker := range []string{"CTF{", "flag{", string(cfg.FlagKey)} {
			require.NotContains(t, string(resp.Status), marker, c.name)
		}
	}
}
