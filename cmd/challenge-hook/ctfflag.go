package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

const (
	flagVerifyPath = "/flags/verify"
	// flagVerifyMaxBytes bounds a verification request: three short strings and up to
	// MaxFlagCandidates owners, each a label value in quotes with a comma and a space. No flag sets it.
	flagVerifyMaxBytes = int64(16<<10 + hooksync.MaxFlagCandidates*(validation.LabelValueMaxLength+len(`"", `)))
)

// The two verdicts of a verification without candidates, encoded once and of the same length (JSON
// allows the space), so that neither the response's size nor the request log's bytes tell a
// correct flag from a wrong one.
var (
	verdictCorrect = []byte(`{"correct": true}` + "\n")
	verdictWrong   = []byte(`{"correct":false}` + "\n")
)

// attributedVerdictLength is the length of every answer to a verification with candidates: the
// longest, a wrong flag owned by a candidate whose name is as long as an owner may be. Shorter
// answers are padded with spaces before the closing brace (JSON allows them), so that a correct
// flag, a wrong one and another owner's are of one size, whatever the owner's name.
var attributedVerdictLength = len(`{"correct":false,"ownedBy":""}`+"\n") + validation.LabelValueMaxLength

// attributedVerdict encodes the answer to a verification with candidates, attributedVerdictLength
// bytes long. An owner is a label value (DecodeFlagVerification checked it), nothing to escape.
func attributedVerdict(v hooksync.FlagVerdict) []byte {
	out := make([]byte, 0, attributedVerdictLength)
	switch {
	case v.Correct:
		out = append(out, `{"correct": true`...)
	case v.OwnedBy != "":
		out = append(out, `{"correct":false,"ownedBy":"`+v.OwnedBy+`"`...)
	default:
		out = append(out, `{"correct":false`...)
	}
	for len(out) < attributedVerdictLength-len("}\n") {
		out = append(out, ' ')
	}
	return append(out, "}\n"...)
}

// handleFlagVerify serves POST /flags/verify: is a submitted flag the owner's dynamic flag on a
// definition, and if not, whose of the candidates it names is it? It needs no instance (the flag
// is an HMAC of the definition and the owner), so a team that solves in its last minute can still
// score once the instance expired. The flag is never logged nor echoed: the answer is
// {"correct": true|false}, both of one length; with candidates, {"correct":false,"ownedBy":"..."}
// for another owner's flag, every answer padded to one length; errors name fields, not values.
// A verification with candidates is decoded and checked within budget, or answered 429.
func handleFlagVerify(flagKey []byte, budget *attributionBudget) http.HandlerFunc {
	// limit says in a 413 what sets flagVerifyMaxBytes.
	limit := fmt.Sprintf("the fixed limit of a flag verification: three short strings and at most %d candidate owners", hooksync.MaxFlagCandidates)
	return func(w http.ResponseWriter, r *http.Request) {
		if len(flagKey) == 0 {
			respondError(w, r, http.StatusServiceUnavailable, "flag_key_missing",
				"the hook has no flag key (--flag-key-file), so no dynamic flag exists to verify; give it the key and restart it")
			return
		}
		body, ok := readBody(w, r, limit)
		if !ok {
			return
		}
		if candidates := candidatesAtMost(body, budget.bucket.Burst()); candidates > 0 {
			if !budget.admit(w, r, candidates) {
				return
			}
			defer budget.release()
		}
		v, err := hooksync.DecodeFlagVerification(body)
		if err != nil {
			respondDecodeError(w, r, err)
			return
		}
		verdict := hooksync.VerifyFlag(flagKey, v)
		switch {
		case len(v.Candidates) > 0:
			respondBytes(w, http.StatusOK, attributedVerdict(verdict))
		case verdict.Correct:
			respondBytes(w, http.StatusOK, verdictCorrect)
		default:
			respondBytes(w, http.StatusOK, verdictWrong)
		}
	}
}

// runFlag prints one owner's dynamic flag, for organizers (a support request, a manual check);
// with --whose, the owners of --owners-file whose flag a given one is (a flag posted in public).
// args exclude "flag".
func runFlag(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var definition, owner, prefix, keyFile, whose, ownersFile string
	c := newConfigFlags("challenge-hook flag")
	c.fs.StringVar(&definition, "definition", "", "definition key: `<namespace>/<name>` of a ChallengeDefinition (its own namespace, wherever the Challenge runs), or inline/<namespace>/<challenge name> for an inline template")
	c.fs.StringVar(&owner, "owner", "", "the Challenge's spec.`owner`")
	c.fs.StringVar(&prefix, "prefix", "flag", "the definition's flag.`prefix`")
	c.fs.StringVar(&whose, "whose", "", "a submitted `flag`: print, instead of a flag, the owners of --owners-file whose dynamic flag on --definition it is")
	c.fs.StringVar(&ownersFile, "owners-file", "", "`file` of the owners --whose looks among, one a line")
	c.env(func(fs *flag.FlagSet) {
		fs.StringVar(&keyFile, "flag-key-file", "", "`file` holding the HMAC key of dynamic flags, the hook's")
	})
	err := c.parse(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		c.usage(stderr, "challenge-hook flag --definition <namespace>/<name> --owner <owner> --flag-key-file <file> [--prefix flag]\n"+
			"       challenge-hook flag --definition <namespace>/<name> --whose <flag> --owners-file <file> --flag-key-file <file>")
		return nil
	}
	if err != nil {
		return fmt.Errorf("flag: %w", err)
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("flag: unexpected argument %q", c.fs.Arg(0))
	}
	owners, err := flagSubjects(definition, owner, whose, ownersFile)
	if err != nil {
		return fmt.Errorf("flag: %w", err)
	}
	if !hooksync.ValidFlagPrefix(prefix) {
		return fmt.Errorf("flag: --prefix %q: letters, digits and underscores, at most 32", prefix)
	}
	if keyFile == "" {
		return errors.New("flag: --flag-key-file is required: the flag is derived from the hook's key")
	}
	key, err := readFlagKey(keyFile)
	if err != nil {
		return fmt.Errorf("flag: %w", err)
	}
	if whose == "" {
		_, err = fmt.Fprintln(stdout, hooksync.DynamicFlag(key, definition, owner, prefix))
		return err
	}
	return printWhose(stdout, key, definition, whose, owners, ownersFile)
}

// flagSubjects checks who the flag subcommand is asked about: one owner (--owner), or the owners of
// ownersFile for --whose, which it returns.
func flagSubjects(definition, owner, whose, ownersFile string) ([]string, error) {
	switch {
	case whose != "" && owner != "":
		return nil, errors.New("--whose and --owner: give one, --owner to print its flag, --whose to find whose a flag is")
	case whose != "" && ownersFile == "":
		return nil, errors.New("--whose needs --owners-file, the owners to look among, one a line")
	case whose == "" && ownersFile != "":
		return nil, errors.New("--owners-file is for --whose; to print one owner's flag, give --owner")
	case whose != "":
		return readOwners(ownersFile, definition)
	}
	if err := hooksync.CheckFlagSubject(definition, owner); err != nil {
		return nil, fmt.Errorf("--definition and --owner: %w", err)
	}
	return nil, nil
}

// printWhose prints each of owners whose dynamic flag on definition is whose; none is an error.
func printWhose(stdout io.Writer, key []byte, definition, whose string, owners []string, ownersFile string) error {
	found := false
	for _, candidate := range owners {
		if hooksync.VerifyDynamicFlag(key, definition, candidate, whose) {
			found = true
			if _, err := fmt.Fprintln(stdout, candidate); err != nil {
				return err
			}
		}
	}
	if !found {
		return fmt.Errorf("flag: --whose: the flag is not the dynamic flag of any of the %d owners of %s on %s (a wrong flag, another definition's, or a static one)",
			len(owners), ownersFile, definition)
	}
	return nil
}

// readOwners reads --owners-file: one owner a line, blank lines skipped; each must make a flag
// subject with the definition.
func readOwners(path, definition string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--owners-file: %w", err)
	}
	var owners []string
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if err := hooksync.CheckFlagSubject(definition, line); err != nil {
			return nil, fmt.Errorf("--owners-file %s line %d: %w", path, i+1, err)
		}
		owners = append(owners, line)
	}
	if len(owners) == 0 {
		return nil, fmt.Errorf("--owners-file %s: no owner in it", path)
	}
	return owners, nil
}
