package sync

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// A ChallengeDefinition's dynamic flags are an HMAC of its key "<namespace>/<name>" and the owner
// (DynamicFlag), so whoever may run a definition under any owner holds every team's flag of it. The
// hook therefore lets a Challenge use only the definitions of its own namespace, and those of
// another namespace only where the organizer grants the pair (--definition-grants): a co-tenant who
// may create Challenges in a namespace of its own gets nothing of the event.

// DefinitionGrant lets the Challenges of the namespaces ChallengeNamespaces matches use the
// ChallengeDefinitions of DefinitionNamespace.
type DefinitionGrant struct {
	// ChallengeNamespaces is a namespace name, or a pattern in which * stands for any run of
	// characters (team-* for one namespace per team).
	ChallengeNamespaces string
	DefinitionNamespace string
}

// String is the grant as --definition-grants takes it.
func (g DefinitionGrant) String() string { return g.ChallengeNamespaces + "=" + g.DefinitionNamespace }

// allows says whether the grant lets a Challenge of challengeNamespace use the definitions of
// definitionNamespace.
func (g DefinitionGrant) allows(challengeNamespace, definitionNamespace string) bool {
	if g.DefinitionNamespace != definitionNamespace {
		return false
	}
	// The pattern holds only DNS-label characters and *, so * is path.Match's only special
	// character, and a namespace has no / for it to stop at.
	matched, err := path.Match(g.ChallengeNamespaces, challengeNamespace)
	return err == nil && matched
}

// ParseDefinitionGrants parses --definition-grants: comma-separated
// <challenge-namespace>=<definition-namespace> pairs, the first a namespace or a pattern with *;
// empty is none.
func ParseDefinitionGrants(v string) ([]DefinitionGrant, error) {
	var grants []DefinitionGrant
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		challenges, definitions, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%q: expected <challenge-namespace>=<definition-namespace> pairs such as team-*=ctf", item)
		}
		// A pattern is valid when it is a namespace name once each * stands for one letter.
		if errs := validation.IsDNS1123Label(strings.ReplaceAll(challenges, "*", "a")); len(errs) > 0 {
			return nil, fmt.Errorf("%q: %q is neither a namespace name nor a pattern of one with * (such as team-*): %s", item, challenges, strings.Join(errs, "; "))
		}
		if errs := validation.IsDNS1123Label(definitions); len(errs) > 0 {
			return nil, fmt.Errorf("%q: %q is not a namespace name (no pattern on the definition side): %s", item, definitions, strings.Join(errs, "; "))
		}
		grant := DefinitionGrant{ChallengeNamespaces: challenges, DefinitionNamespace: definitions}
		if !slices.Contains(grants, grant) {
			grants = append(grants, grant)
		}
	}
	return grants, nil
}

// joinGrants is grants as --definition-grants takes them.
func joinGrants(grants []DefinitionGrant) string {
	items := make([]string, 0, len(grants))
	for _, g := range grants {
		items = append(items, g.String())
	}
	return strings.Join(items, ",")
}

// CheckTrust refuses trust flags that contradict each other: a grant of a definition namespace
// that --definition-namespaces leaves out would never take effect.
func (c Config) CheckTrust() error {
	if len(c.DefinitionNamespaces) == 0 {
		return nil
	}
	for _, g := range c.DefinitionGrants {
		if !slices.Contains(c.DefinitionNamespaces, g.DefinitionNamespace) {
			return fmt.Errorf("--definition-grants %s grants namespace %q, which --definition-namespaces=%s leaves out: add it there, or drop the grant",
				g, g.DefinitionNamespace, strings.Join(c.DefinitionNamespaces, ","))
		}
	}
	return nil
}

// definitionRefRefusal says why a Challenge of challengeNamespace may not use the
// ChallengeDefinitions of definitionNamespace, naming the flag that would allow it; "" when it
// may: the definition's namespace is one --definition-namespaces allows (any, when it is empty),
// and it is the Challenge's own or a grant names the pair.
func definitionRefRefusal(cfg Config, challengeNamespace, definitionNamespace string) string {
	if len(cfg.DefinitionNamespaces) > 0 && !slices.Contains(cfg.DefinitionNamespaces, definitionNamespace) {
		return fmt.Sprintf("spec.definitionRef: namespace %q is not one this hook takes ChallengeDefinitions from (--definition-namespaces=%s): reference a definition in one of those",
			definitionNamespace, strings.Join(cfg.DefinitionNamespaces, ","))
	}
	if definitionNamespace == challengeNamespace ||
		slices.ContainsFunc(cfg.DefinitionGrants, func(g DefinitionGrant) bool { return g.allows(challengeNamespace, definitionNamespace) }) {
		return ""
	}
	return fmt.Sprintf("spec.definitionRef: the ChallengeDefinitions of namespace %q are for its own Challenges (their dynamic flags are its teams' flags), not for namespace %q: "+
		"reference a definition in %q, or have the organizer add %s=%s to the hook's --definition-grants",
		definitionNamespace, challengeNamespace, challengeNamespace, challengeNamespace, definitionNamespace)
}
