package sync

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// validateChallengeSpec checks what the hook reads of the Challenge itself.
func validateChallengeSpec(parent Challenge) field.ErrorList {
	errs := validateChallengeName(parent.Metadata.Name)
	spec, specPath := parent.Spec, field.NewPath("spec")
	errs = append(errs, validateOwner(spec.Owner, specPath.Child("owner"))...)
	const exactlyOne = "set exactly one of spec.definitionRef and spec.template"
	switch {
	case spec.Template == nil && spec.DefinitionRef == nil:
		errs = append(errs, field.Required(specPath, exactlyOne))
	case spec.Template != nil && spec.DefinitionRef != nil:
		errs = append(errs, field.Forbidden(specPath.Child("template"), exactlyOne))
	}
	if ref := spec.DefinitionRef; ref != nil {
		// The name is also the value of the definition label, so it must fit in 63 characters.
		msgs := validation.IsDNS1123Subdomain(ref.Name)
		msgs = append(msgs, validation.IsValidLabelValue(ref.Name)...)
		if len(msgs) > 0 {
			errs = append(errs, field.Invalid(specPath.Child("definitionRef", "name"), ref.Name, strings.Join(msgs, "; ")))
		}
	}
	if spec.Timeout != "" {
		if _, err := parsePositiveDuration(spec.Timeout); err != nil {
			errs = append(errs, field.Invalid(specPath.Child("timeout"), spec.Timeout, err.Error()))
		}
	}
	if utf8.RuneCountInString(spec.Flag) > v1alpha1.MaxFlagValue {
		// The value is the flag: never in a message.
		errs = append(errs, field.TooLongCharacters(specPath.Child("flag"), spec.Flag, v1alpha1.MaxFlagValue))
	}
	for _, f := range []struct{ name, value string }{{"expiresAt", spec.ExpiresAt}, {"restartedAt", spec.RestartedAt}} {
		if _, err := time.Parse(time.RFC3339, f.value); f.value != "" && err != nil {
			errs = append(errs, field.Invalid(specPath.Child(f.name), f.value, "not an RFC 3339 time such as 2026-11-01T12:00:00Z"))
		}
	}
	return errs
}

// validateChallengeName checks the Challenge's name, which its children's names are made of.
func validateChallengeName(name string) field.ErrorList {
	if msgs := validation.IsDNS1035Label(name); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name,
			"children are named after the Challenge, so it must be a DNS-1035 label: "+strings.Join(msgs, "; "))}
	}
	if strings.Contains(name, ComponentSeparator) {
		// The CRD refuses it; a Challenge admitted before keeps what runs until its deadline.
		return field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), name, fmt.Sprintf(
			"must not contain %q: the children of an instance of several pods are named <challenge>%s<pod>, which another Challenge's children could be named; create the Challenge again with a name without %q",
			ComponentSeparator, ComponentSeparator, ComponentSeparator))}
	}
	return nil
}

// validateOwner checks spec.owner (at fldPath), which is copied to a label.
func validateOwner(owner string, fldPath *field.Path) field.ErrorList {
	switch {
	case owner == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case len(owner) > validation.LabelValueMaxLength:
		// Not quoted: it may be megabytes long.
		return field.ErrorList{field.TooLong(fldPath, owner, validation.LabelValueMaxLength)}
	}
	if msgs := validation.IsValidLabelValue(owner); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(fldPath, owner, "it is copied to a label, so it must be a valid label value: "+strings.Join(msgs, "; "))}
	}
	return nil
}

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("not a positive duration such as 30m or 1h30m")
	}
	return d, nil
}

var flagPrefixPattern = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// ValidateDefinition checks a template, at path (spec of a ChallengeDefinition, spec.template of a
// Challenge). Each error names its field and says what is expected; their order is the same on
// every call, as the status message shows them.
//
// A template is one Pod (containers) or several (pods). Either form is "set" when its list is not
// nil, as for the CRD's has(): an empty list is set, and refused for having no entry.
func ValidateDefinition(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	withPods := spec.Pods != nil
	errs := validateWorkloads(spec, fldPath)
	errs = append(errs, validateLifetime(spec, fldPath)...)
	if withPods && spec.Egress {
		errs = append(errs, field.Forbidden(fldPath.Child("egress"), "with pods, set egress on each pod, not on the template"))
	}
	if withPods && spec.DNS {
		errs = append(errs, field.Forbidden(fldPath.Child("dns"), "with pods, set dns on each pod, not on the template"))
	}
	errs = append(errs, validateFlag(spec, fldPath.Child("flag"))...)
	if spec.RuntimeClassName != "" {
		if msgs := validation.IsDNS1123Subdomain(spec.RuntimeClassName); len(msgs) > 0 {
			errs = append(errs, field.Invalid(fldPath.Child("runtimeClassName"), spec.RuntimeClassName, strings.Join(msgs, "; ")))
		}
	}
	if g := spec.TerminationGracePeriodSeconds; g != nil && (*g < 1 || *g > v1alpha1.MaxTerminationGracePeriodSeconds) {
		errs = append(errs, field.Invalid(fldPath.Child("terminationGracePeriodSeconds"), *g, fmt.Sprintf("not between 1 and %d", v1alpha1.MaxTerminationGracePeriodSeconds)))
	}
	switch {
	case withPods && spec.Security != nil:
		errs = append(errs, field.Forbidden(fldPath.Child("security"), "with pods, set security on each pod, not on the template"))
	case !withPods:
		errs = append(errs, validateSecurity(spec.Security, fldPath.Child("security"))...)
	}
	return errs
}

// ValidateComponentNames checks that the children of a template of several pods are DNS-1035
// labels: at most 63 characters. Each pod's Pod, Service and NetworkPolicy are named
// <challengeName>--<pod>, and the Service of its internal ports, if it has any,
// <challengeName>--<pod>--internal. A template of one Pod names its children after the Challenge
// alone. fldPath is the template's (spec, spec.template).
func ValidateComponentNames(challengeName string, spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, p := range spec.Pods {
		longest := componentChildName(challengeName, p.Name)
		if len(p.Internal) > 0 {
			longest += internalServiceSuffix
		}
		if len(longest) > validation.DNS1035LabelMaxLength {
			errs = append(errs, field.Invalid(fldPath.Child("pods").Index(i).Child("name"), p.Name, fmt.Sprintf(
				"the pod's children are named after the Challenge and the pod, the longest %s, %d characters: a name is at most %d, so shorten the Challenge's name (%d characters) or the pod's (%d) by %d",
				longest, len(longest), validation.DNS1035LabelMaxLength, len(challengeName), len(p.Name), len(longest)-validation.DNS1035LabelMaxLength)))
		}
	}
	return errs
}

// validDuration parses an optional duration, adding an error when it is set but not a positive
// duration; zero when absent or invalid.
func validDuration(value string, fldPath *field.Path, errs *field.ErrorList) time.Duration {
	if value == "" {
		return 0
	}
	d, err := parsePositiveDuration(value)
	if err != nil {
		*errs = append(*errs, field.Invalid(fldPath, value, err.Error()))
	}
	return d
}

// validateFlag checks the template's flag, and which containers receive it: with pods, those that
// set flag: true, at least one; in a template of one Pod, those, or every container when none does.
// validateWorkloads checks the template's containers (an instance of one Pod) or pods (an instance
// of several) and their exposures.
func validateWorkloads(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	// At most one exposure of each routed type in the whole instance: it has one host.
	routedCount := map[string]int{}
	if spec.Pods == nil {
		return validatePod(spec.Containers, spec.Expose, fldPath.Child("containers"), fldPath.Child("expose"), spec.Flag != nil, routedCount)
	}
	var errs field.ErrorList
	if spec.Containers != nil {
		errs = append(errs, field.Forbidden(fldPath.Child("pods"), "set exactly one of containers (an instance of one Pod) and pods (an instance of several)"))
	}
	errs = append(errs, validatePods(spec.Pods, fldPath.Child("pods"), spec.Flag != nil, routedCount)...)
	if spec.Expose != nil {
		errs = append(errs, field.Forbidden(fldPath.Child("expose"), "with pods, set expose on each pod, not on the template"))
	}
	return errs
}

// minIdleTimeout is the shortest idleTimeout (the CRD says so too).
const minIdleTimeout = 10 * time.Second

// validateLifetime checks the template's timeout, maxLifetime and idleTimeout: durations, the
// timeout no longer than the cap, the idle timeout not too short to see use.
func validateLifetime(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	timeout := validDuration(spec.Timeout, fldPath.Child("timeout"), &errs)
	maxLifetime := validDuration(spec.MaxLifetime, fldPath.Child("maxLifetime"), &errs)
	if timeout > 0 && maxLifetime > 0 && timeout > maxLifetime {
		errs = append(errs, field.Invalid(fldPath.Child("timeout"), spec.Timeout, "longer than maxLifetime "+spec.MaxLifetime))
	}
	if idle := validDuration(spec.IdleTimeout, fldPath.Child("idleTimeout"), &errs); idle > 0 && idle < minIdleTimeout {
		errs = append(errs, field.Invalid(fldPath.Child("idleTimeout"), spec.IdleTimeout, "shorter than "+minIdleTimeout.String()+": a stamper writes at most once in a while, and a shorter idle stop would stop instances in use"))
	}
	return errs
}

func validateFlag(spec v1alpha1.DefinitionSpec, fldPath *field.Path) field.ErrorList {
	flag := spec.Flag
	if flag == nil {
		return nil
	}
	var errs field.ErrorList
	modes := 0
	for _, set := range []bool{flag.Value != "", flag.Dynamic, flag.Platform} {
		if set {
			modes++
		}
	}
	if modes != 1 {
		errs = append(errs, field.Invalid(fldPath, field.OmitValueType{}, "set exactly one of value, dynamic: true and platform: true"))
	}
	if utf8.RuneCountInString(flag.Value) > v1alpha1.MaxFlagValue {
		errs = append(errs, field.TooLongCharacters(fldPath.Child("value"), flag.Value, v1alpha1.MaxFlagValue))
	}
	if flag.Env == "" && flag.Path == "" {
		errs = append(errs, field.Required(fldPath, "set env, path or both, to say how the flag reaches the containers"))
	}
	if spec.Pods != nil && !slices.ContainsFunc(spec.Pods, func(p v1alpha1.PodTemplate) bool {
		return slices.ContainsFunc(p.Containers, func(c v1alpha1.Container) bool { return c.Flag })
	}) {
		errs = append(errs, field.Invalid(fldPath, field.OmitValueType{}, "no container receives it: with pods, set flag: true on each container that receives the flag"))
	}
	if flag.Env != "" {
		errs = append(errs, validateFlagEnv(spec, fldPath.Child("env"))...)
	}
	if flag.Path != "" && !validFlagPath(flag.Path) {
		errs = append(errs, field.Invalid(fldPath.Child("path"), flag.Path, "must be a clean absolute file path such as /flag.txt"))
	}
	if flag.Prefix != "" && !ValidFlagPrefix(flag.Prefix) {
		errs = append(errs, field.Invalid(fldPath.Child("prefix"), flag.Prefix, fmt.Sprintf("at most %d letters, digits or underscores", v1alpha1.MaxFlagPrefix)))
	}
	return errs
}

// validateFlagEnv checks the flag's variable (at env): a valid name that no container sets itself.
func validateFlagEnv(spec v1alpha1.DefinitionSpec, env *field.Path) field.ErrorList {
	name := spec.Flag.Env
	var errs field.ErrorList
	if msgs := validation.IsEnvVarName(name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(env, name, strings.Join(msgs, "; ")))
	}
	setsEnv := func(c v1alpha1.Container) bool {
		return slices.ContainsFunc(c.Env, func(e v1alpha1.EnvVar) bool { return e.Name == name })
	}
	// Any container, receiving the flag or not: which ones do may change with the template,
	// and a variable that means the flag in one container and not in its neighbour misleads.
	for _, c := range spec.Containers {
		if setsEnv(c) {
			errs = append(errs, field.Invalid(env, name, fmt.Sprintf("container %q already sets it", c.Name)))
		}
	}
	for _, p := range spec.Pods {
		for _, c := range p.Containers {
			if setsEnv(c) {
				errs = append(errs, field.Invalid(env, name, fmt.Sprintf("container %q of pod %q already sets it", c.Name, p.Name)))
			}
		}
	}
	return errs
}

// validFlagPath: the flag's file is a clean absolute path, not the root or /tmp (its own mount).
func validFlagPath(p string) bool {
	return path.IsAbs(p) && path.Clean(p) == p && p != "/" && p != "/tmp"
}

// validateCount checks that a list has 1 to limit entries of what.
func validateCount(n, limit int, fldPath *field.Path, what string) field.ErrorList {
	switch {
	case n == 0:
		return field.ErrorList{field.Required(fldPath, fmt.Sprintf("need 1 to %d %s", limit, what))}
	case n > limit:
		return field.ErrorList{field.TooMany(fldPath, n, limit)}
	}
	return nil
}
