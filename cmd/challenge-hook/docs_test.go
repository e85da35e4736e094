package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helpFlag is one flag as `challenge-hook -h` prints it.
type helpFlag struct {
	usage        string // every usage line, joined
	defaultValue string // what "(default ...)" says; "" when -h prints no default
}

var (
	// helpFlagLine starts a flag's entry in the flag package's usage format: "  -name" or "  -name type".
	helpFlagLine = regexp.MustCompile(`^  -([a-z0-9-]+)(?: \S+)?$`)
	helpDefault  = regexp.MustCompile(`\(default (.*)\)$`)
	// docFlagRow is a row of docs/configuration.md's flag table: | `--name` | default | meaning |
	docFlagRow = regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\| ([^|]*) \\|")
)

// serverHelp runs the program's entry point with -h, as a user would, and reads its flags.
func serverHelp(t *testing.T) map[string]helpFlag {
	t.Helper()
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"challenge-hook", "-h"}, noEnv, &stdout, &stderr))
	flags := map[string]helpFlag{}
	var name string
	for line := range strings.Lines(stdout.String() + stderr.String()) {
		line = strings.TrimRight(line, "\n")
		if m := helpFlagLine.FindStringSubmatch(line); m != nil {
			name = m[1]
			flags[name] = helpFlag{}
			continue
		}
		if name == "" || !strings.HasPrefix(line, "    ") {
			name = ""
			continue
		}
		f := flags[name]
		f.usage = strings.TrimSpace(f.usage + " " + strings.TrimSpace(line))
		if m := helpDefault.FindStringSubmatch(f.usage); m != nil {
			f.defaultValue = m[1]
		}
		flags[name] = f
	}
	require.NotEmpty(t, flags, "-h printed no flags:\n%s", stderr.String())
	return flags
}

// TestConfigurationDocMatchesHelp holds docs/configuration.md to the binary: every flag -h prints
// is documented, every documented flag exists, a default written in `code` is the one -h prints,
// one in words means -h prints none, and each flag has the environment variable the page promises.
func TestConfigurationDocMatchesHelp(t *testing.T) {
	help := serverHelp(t)
	page, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	documented := map[string]string{} // flag -> default cell
	for line := range strings.Lines(string(page)) {
		if m := docFlagRow.FindStringSubmatch(line); m != nil {
			_, twice := documented[m[1]]
			assert.False(t, twice, "docs/configuration.md documents --%s twice", m[1])
			documented[m[1]] = strings.TrimSpace(m[2])
		}
	}
	for name, f := range help {
		cell, ok := documented[name]
		if !assert.True(t, ok, "-h prints --%s, docs/configuration.md's table does not document it", name) {
			continue
		}
		if f.defaultValue != "" {
			assert.Equal(t, "`"+f.defaultValue+"`", cell, "--%s: the documented default is not the one -h prints", name)
		} else {
			assert.NotContains(t, cell, "`", "--%s: -h prints no default, so the page describes it in words, not as a value", name)
		}
		assert.Contains(t, f.usage, "CHALLENGE_HOOK_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_")),
			"--%s: the page promises an environment fallback", name)
	}
	for name := range documented {
		_, ok := help[name]
		assert.True(t, ok, "docs/configuration.md documents --%s, which -h does not print", name)
	}
}

// markdownLink is an inline link or image, [text](target) or ![alt](target), with its target.
var markdownLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// TestDocLinks: every relative link of the repository's Markdown pages names a file that exists
// and, with a #fragment, a heading of that page (GitHub's anchors: lower case, punctuation but
// hyphens and underscores dropped, spaces as hyphens, a repeated heading suffixed -1, -2, ...).
func TestDocLinks(t *testing.T) {
	const root = "../.."
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, page := range []string{"README.md", "CONTRIBUTING.md", "testdata/README.md"} {
		pages = append(pages, filepath.Join(root, page))
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		content, err := os.ReadFile(path)
		require.NoError(t, err)
		a := map[string]bool{}
		inCode := false
		for line := range strings.Lines(string(content)) {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
			}
			heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
			if inCode || !strings.HasPrefix(line, "#") || !ok {
				continue
			}
			slug := strings.Map(func(r rune) rune {
				switch {
				case r == ' ':
					return '-'
				case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
					return unicode.ToLower(r)
				}
				return -1
			}, strings.TrimSpace(heading))
			for n, s := 1, slug; ; n, s = n+1, fmt.Sprintf("%s-%d", slug, n) {
				if !a[s] {
					a[s] = true
					break
				}
			}
		}
		anchors[path] = a
		return a
	}
	for _, page := range pages {
		content, err := os.ReadFile(page)
		require.NoError(t, err)
		inCode := false
		for i, line := range strings.Split(string(content), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
			}
			if inCode {
				continue
			}
			for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, fragment, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				where := fmt.Sprintf("%s:%d: %s", strings.TrimPrefix(page, root+"/"), i+1, target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: no such file", where)
					continue
				}
				if fragment != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[fragment] {
					t.Errorf("%s: no such heading", where)
				}
			}
		}
	}
}
