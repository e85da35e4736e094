package sync

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The package comment's reading order names every product file of the package, and only those:
// a file added or renamed without its place in the order fails here.
func TestDocNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	named := regexp.MustCompile(`\b[a-z_]+\.go\b`).FindAllString(string(doc), -1)
	slices.Sort(named)
	named = slices.Compact(named)

	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") || f == "doc.go" })
	require.Equal(t, files, named)
}
