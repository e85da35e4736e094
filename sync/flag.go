package sync

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

const (
	defaultFlagPrefix = "flag"
	// dynamicFlagHexLength is 128 bits of the HMAC: far beyond guessing, short enough to type.
	dynamicFlagHexLength = 32
)

// flagValue is the instance's flag: the template's static value, its dynamic flag (see
// DynamicFlag), or the platform's (the Challenge's spec.flag).
func flagValue(in *instance) string {
	f := in.template.Flag
	switch {
	case f.Platform:
		return in.parent.Spec.Flag
	case !f.Dynamic:
		return f.Value
	}
	if len(in.cfg.FlagKey) == 0 {
		return in.cfg.DynamicFlagPlaceholder
	}
	prefix := f.Prefix
	if prefix == "" {
		prefix = defaultFlagPrefix
	}
	return DynamicFlag(in.cfg.FlagKey, in.definitionKey(), in.owner, prefix)
}

// DynamicFlag is the dynamic flag of owner on a definition: <prefix>{<hex>}, the hex an HMAC under
// key of the definition key (see instance.definitionKey) and the owner. It is stable for one team
// on one challenge (so re-creating an instance keeps its flag), different for every team (so a
// shared flag names who leaked it), and computable at any time without the instance, which is how
// the hook verifies submissions (VerifyDynamicFlag) and prints flags for organizers.
func DynamicFlag(key []byte, definitionKey, owner, prefix string) string {
	return prefix + "{" + dynamicFlagHex(key, definitionKey, owner) + "}"
}

func dynamicFlagHex(key []byte, definitionKey, owner string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(definitionKey))
	mac.Write([]byte{0})
	mac.Write([]byte(owner))
	return hex.EncodeToString(mac.Sum(nil))[:dynamicFlagHexLength]
}

// VerifyDynamicFlag says whether submitted is owner's dynamic flag on the definition, comparing in
// constant time. The hook does not know the definition's prefix, and the prefix is no secret: a
// submission <any valid prefix>{<hex>} is checked by its hex part, the HMAC; anything of another
// shape is simply not the flag.
func VerifyDynamicFlag(key []byte, definitionKey, owner, submitted string) bool {
	return VerifyFlag(key, FlagVerification{Definition: definitionKey, Owner: owner, Flag: submitted}).Correct
}

// MaxFlagCandidates bounds the candidate owners of one verification: an HMAC each, with its
// decoding about half a microsecond, so that one request costs a few milliseconds at most. An event with more owners
// asks in several requests.
const MaxFlagCandidates = 5000

// FlagVerdict answers a FlagVerification.
type FlagVerdict struct {
	// Correct: the flag is the claimed owner's.
	Correct bool
	// OwnedBy is the candidate whose flag it is, when it is not the claimed owner's; "" otherwise.
	OwnedBy string
}

// VerifyFlag answers v: is v.Flag the dynamic flag of v.Owner on v.Definition (as
// VerifyDynamicFlag), and if not, is it the flag of one of v.Candidates on the same definition
// (a flag shared between teams)? Every candidate's HMAC is computed and compared in constant time
// whatever the answer, so that the time taken depends on the number of candidates only, not on
// whether or where one matches.
func VerifyFlag(key []byte, v FlagVerification) FlagVerdict {
	submitted, ok := submittedFlagMAC(v.Flag)
	if !ok {
		return FlagVerdict{}
	}
	mac := hmac.New(sha256.New, key)
	// What dynamicFlagHex hashes, in one buffer reused for every owner: the definition key, a zero
	// byte, the owner.
	message := append([]byte(v.Definition), 0)
	subject := len(message)
	sum := make([]byte, 0, sha256.Size)
	matches := func(owner string) int {
		message = append(message[:subject], owner...)
		mac.Reset()
		mac.Write(message)
		return subtle.ConstantTimeCompare(mac.Sum(sum[:0])[:len(submitted)], submitted[:])
	}
	correct := matches(v.Owner) == 1
	found := -1
	for i, candidate := range v.Candidates {
		found = subtle.ConstantTimeSelect(matches(candidate), i, found)
	}
	if correct || found < 0 {
		return FlagVerdict{Correct: correct}
	}
	return FlagVerdict{OwnedBy: v.Candidates[found]}
}

// submittedFlagMAC is the HMAC a submission <prefix>{<hex>} carries: its hex part, exactly
// dynamicFlagHexLength lowercase hex digits as DynamicFlag writes them, decoded. The shape is the
// submitter's, no secret, so it is checked before any comparison.
func submittedFlagMAC(submitted string) (mac [dynamicFlagHexLength / 2]byte, ok bool) {
	open := strings.IndexByte(submitted, '{')
	if open < 0 || !strings.HasSuffix(submitted, "}") || !ValidFlagPrefix(submitted[:open]) {
		return mac, false
	}
	hexPart := submitted[open+1 : len(submitted)-1]
	if len(hexPart) != dynamicFlagHexLength || strings.Trim(hexPart, "0123456789abcdef") != "" {
		return mac, false
	}
	if _, err := hex.Decode(mac[:], []byte(hexPart)); err != nil {
		return mac, false
	}
	return mac, true
}

// ValidFlagPrefix: letters, digits and underscores, 1 to 32 of them, as the CRD allows.
func ValidFlagPrefix(prefix string) bool {
	return len(prefix) <= v1alpha1.MaxFlagPrefix && flagPrefixPattern.MatchString(prefix)
}

// CheckFlagSubject checks what a flag is derived from, as a platform names it: a definition key
// "<namespace>/<name>" of a ChallengeDefinition, or "inline/<namespace>/<challenge name>" for a
// Challenge with an inline template, and an owner as spec.owner allows it.
func CheckFlagSubject(definitionKey, owner string) error {
	parts := strings.Split(definitionKey, "/")
	var namespace, name string
	switch {
	case len(parts) == 2:
		namespace, name = parts[0], parts[1]
	case len(parts) == 3 && parts[0] == inlineDefinitionPrefix:
		namespace, name = parts[1], parts[2]
	default:
		return fmt.Errorf("definition %q: expected <namespace>/<name> of a ChallengeDefinition, or %s/<namespace>/<challenge name> for an inline template",
			definitionKey, inlineDefinitionPrefix)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("definition %q: namespace: %s", definitionKey, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("definition %q: name: %s", definitionKey, strings.Join(errs, "; "))
	}
	return checkOwner(owner)
}

// checkOwner: an owner as spec.owner allows it, a label value (the owner label carries it).
func checkOwner(owner string) error {
	if owner == "" {
		return errors.New("owner is required")
	}
	if errs := validation.IsValidLabelValue(owner); len(errs) > 0 {
		return fmt.Errorf("owner %q: %s", owner, strings.Join(errs, "; "))
	}
	return nil
}

// flagHash identifies the instance's flag without revealing it: the Pod carries it in an
// annotation, so that a changed flag changes the Pod and Metacontroller recreates it (a running
// container never sees a Secret's new value in its environment). The instance id salts it, so a
// weak static flag cannot be looked up in a table of precomputed hashes.
func flagHash(in *instance) string {
	sum := sha256.Sum256([]byte(in.id + "\x00" + flagValue(in)))
	return hex.EncodeToString(sum[:])[:dynamicFlagHexLength]
}

// flagSecretName is the name of the instance's flag Secret, flagSecretKey the key of the flag in it.
func (in *instance) flagSecretName() string { return in.name + "-flag" }

const flagSecretKey = "flag"

// buildFlagSecret holds the flag the Pod receives as an environment variable or file; nil
// when the template has no flag. It uses data, not stringData: the API server stores only data, so
// stringData would differ from the live object on every sync.
func buildFlagSecret(in *instance) *corev1ac.SecretApplyConfiguration {
	if in.template.Flag == nil {
		return nil
	}
	return corev1ac.Secret(in.flagSecretName(), in.namespace).
		WithLabels(in.labels).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{flagSecretKey: []byte(flagValue(in))})
}
