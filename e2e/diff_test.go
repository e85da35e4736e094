//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// jsonDiff lists, one line per difference, where two decoded JSON values differ: "path: a -> b".
// It exists to make a churn failure say which field would be rewritten.
func jsonDiff(a, b any) []string {
	var out []string
	diffInto(&out, "", a, b)
	return out
}

func diffInto(out *[]string, path string, a, b any) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aIsMap := a.(map[string]any)
	bm, bIsMap := b.(map[string]any)
	if aIsMap && bIsMap {
		keys := make(map[string]bool, len(am)+len(bm))
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			av, aok := am[k]
			bv, bok := bm[k]
			switch {
			case !aok:
				*out = append(*out, fmt.Sprintf("%s.%s: (absent) -> %s", path, k, compactJSON(bv)))
			case !bok:
				*out = append(*out, fmt.Sprintf("%s.%s: %s -> (absent)", path, k, compactJSON(av)))
			default:
				diffInto(out, path+"."+k, av, bv)
			}
		}
		return
	}
	al, aIsList := a.([]any)
	bl, bIsList := b.([]any)
	if aIsList && bIsList && len(al) == len(bl) {
		for i := range al {
			diffInto(out, fmt.Sprintf("%s[%d]", path, i), al[i], bl[i])
		}
		return
	}
	*out = append(*out, fmt.Sprintf("%s: %s (%T) -> %s (%T)", path, compactJSON(a), a, compactJSON(b), b))
}

func compactJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	s := string(data)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// indentLines indents each line for a readable multi-line failure message.
func indentLines(lines []string) string {
	return "  " + strings.Join(lines, "\n  ")
}
