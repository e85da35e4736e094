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

// The book's bounds: a reader finishes a doc (one question, named in its first line, answered in
// at most maxDocBytes) and the book; CONTRIBUTING.md says how to work on the code, no more.
const (
	maxDocBytes          = 25_000
	maxBookBytes         = 180_000
	maxContributingBytes = 12_000
)

var (
	// docQuestion is a doc's first line: a heading that is the reader's question.
	docQuestion = regexp.MustCompile(`^# (.+\?)$`)
	// A run's date and minute, or a commit, is history: the commit that changes a figure says what
	// moved it. Dates of examples live in code blocks, which this does not read.
	docTimestamp = regexp.MustCompile(`\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d(:\d\d)? ?UTC\b`)
	docCommit    = regexp.MustCompile(`\b[0-9a-f]{7,40}\b`)
	hexLetter    = regexp.MustCompile(`[a-f]`)
	hexDigit     = regexp.MustCompile(`[0-9]`)
)

// TestDocsBook holds the book to what a newcomer finishes: each doc under docs/ names the question
// it answers in its first line and answers it in at most maxDocBytes; the README's table of
// contents gives each doc's question; README, CONTRIBUTING and docs/ together stay within
// maxBookBytes; no doc dates a run or names a commit outside its code blocks.
func TestDocsBook(t *testing.T) {
	const root = "../.."
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	contributing, err := os.ReadFile(filepath.Join(root, "CONTRIBUTING.md"))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(contributing), maxContributingBytes, "CONTRIBUTING.md: how to build, test, add a golden case and a field; the rest belongs in docs/ or the code's comments")
	book := len(readme) + len(contributing)
	for _, page := range pages {
		content, err := os.ReadFile(page)
		require.NoError(t, err)
		name := "docs/" + filepath.Base(page)
		book += len(content)
		assert.LessOrEqual(t, len(content), maxDocBytes, "%s answers one question in at most %d bytes", name, maxDocBytes)
		first, _, _ := strings.Cut(string(content), "\n")
		m := docQuestion.FindStringSubmatch(first)
		if assert.NotNil(t, m, "%s: the first line is the reader's question, as a heading: # ...?", name) {
			assert.True(t, readmeListsQuestion(string(readme), "("+name+")", m[1]), "README.md's table of contents has no line linking (%s) with its question %q", name, m[1])
		}
		for i, line := range proseLines(string(content)) {
			if line == "" {
				continue
			}
			assert.False(t, docTimestamp.MatchString(line), "%s:%d dates a run (%q): give the current figure; the commit that changes it says what moved it", name, i+1, docTimestamp.FindString(line))
			for _, word := range docCommit.FindAllString(line, -1) {
				assert.False(t, hexLetter.MatchString(word) && hexDigit.MatchString(word), "%s:%d names a commit (%s)", name, i+1, word)
			}
		}
	}
	assert.LessOrEqual(t, book, maxBookBytes, "README.md, CONTRIBUTING.md and docs/ together")
}

// readmeListsQuestion: a line of the README links target and says question.
func readmeListsQuestion(readme, target, question string) bool {
	for line := range strings.Lines(readme) {
		if strings.Contains(line, target) && strings.Contains(line, question) {
			return true
		}
	}
	return false
}

// proseLines returns the page's lines with those of fenced code blocks (and the fences) blanked,
// so that line numbers stay the page's.
func proseLines(page string) []string {
	lines := strings.Split(page, "\n")
	inCode := false
	for i, line := range lines {
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		if fence {
			inCode = !inCode
		}
		if fence || inCode {
			lines[i] = ""
		}
	}
	return lines
}
