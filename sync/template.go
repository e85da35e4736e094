package sync

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// problem is why the hook cannot build an instance: a reason from the fixed vocabulary and a
// message that says what to fix. The hook then keeps the children exactly as they are, until the
// instance's deadline.
type problem struct {
	reason  string
	message string
	// template is the template found before the problem, if any: its timeout and maxLifetime still
	// give the instance's deadline (see deadline).
	template *v1alpha1.DefinitionSpec
}

// resolveTemplate finds the instance's template (inline, or the related ChallengeDefinition) and
// checks everything the children are built from. The API server's schema and CEL rules refuse most
// mistakes at admission; these checks are the hook's own, because it must not trust its input.
func resolveTemplate(in *instance, related Related) *problem {
	parent, cfg := in.parent, in.cfg
	if errs := validateChallengeSpec(parent); len(errs) > 0 {
		return &problem{v1alpha1.ReasonInvalidSpec, errs.ToAggregate().Error(), nil}
	}
	var refused *problem
	if parent.Spec.Template != nil {
		refused = in.resolveInlineTemplate()
	} else {
		refused = in.resolveDefinitionRef(related)
	}
	if refused != nil {
		return refused
	}
	if refused := in.platformFlagProblem(); refused != nil {
		return refused
	}
	if flag := in.template.Flag; flag != nil && flag.Dynamic && len(cfg.FlagKey) == 0 && cfg.DynamicFlagPlaceholder == "" {
		return &problem{v1alpha1.ReasonFlagKeyMissing,
			"the template asks for a dynamic flag but the hook has no flag key: give it one (--flag-key-file; in-cluster, the Secret challenge-hook-flag-key) and restart the hook", &in.template}
	}
	if hasExposure(in.template, v1alpha1.ExposeTCP) && !cfg.TCPGateway.Configured() {
		return &problem{v1alpha1.ReasonTCPGatewayNotConfigured, tcpGatewayMissing(cfg.TCPGateway), &in.template}
	}
	return nil
}

// resolveInlineTemplate takes the Challenge's own spec.template, if the hook accepts inline
// templates and it is valid.
func (in *instance) resolveInlineTemplate() *problem {
	parent, cfg := in.parent, in.cfg
	if cfg.RefuseInlineTemplates {
		// No template for the deadline either: a refused template does not choose how long
		// the children it may already have keep running.
		return &problem{v1alpha1.ReasonInvalidSpec,
			"spec.template: this hook refuses inline templates (--inline-templates=false): reference a ChallengeDefinition with spec.definitionRef instead", nil}
	}
	in.template = *parent.Spec.Template
	templatePath := field.NewPath("spec", "template")
	if errs := append(ValidateDefinition(in.template, templatePath), ValidateComponentNames(in.name, in.template, templatePath)...); len(errs) > 0 {
		return &problem{v1alpha1.ReasonInvalidSpec, errs.ToAggregate().Error(), &in.template}
	}
	return nil
}

// resolveDefinitionRef takes the template of the ChallengeDefinition that spec.definitionRef names,
// if the Challenge may use it, Metacontroller related it and it is valid.
func (in *instance) resolveDefinitionRef(related Related) *problem {
	parent, cfg := in.parent, in.cfg
	ref := *parent.Spec.DefinitionRef
	if ref.Namespace == "" {
		ref.Namespace = parent.Metadata.Namespace
	}
	// Checked again here, not only in Customize: Metacontroller caches a customize answer
	// per parent, so a definition related before the flags changed may still come.
	if refusal := definitionRefRefusal(cfg, parent.Metadata.Namespace, ref.Namespace); refusal != "" {
		return &problem{v1alpha1.ReasonInvalidSpec, refusal, nil}
	}
	def, found := findDefinition(related.Definitions, ref)
	if !found {
		return &problem{v1alpha1.ReasonDefinitionNotFound, fmt.Sprintf(
			"ChallengeDefinition %s/%s not found: create it, or fix spec.definitionRef", ref.Namespace, ref.Name), nil}
	}
	in.definition, in.definitionNamespace = ref.Name, ref.Namespace
	in.template = def.Spec
	if errs := ValidateDefinition(in.template, field.NewPath("spec")); len(errs) > 0 {
		return &problem{v1alpha1.ReasonInvalidDefinition, fmt.Sprintf("ChallengeDefinition %s/%s: %v", ref.Namespace, ref.Name, errs.ToAggregate()), &in.template}
	}
	// The definition is valid; the Challenge's name is what makes its children's names too long.
	if errs := ValidateComponentNames(in.name, in.template, field.NewPath("spec")); len(errs) > 0 {
		return &problem{v1alpha1.ReasonInvalidSpec, fmt.Sprintf("metadata.name: too long for the pods of ChallengeDefinition %s/%s: %v", ref.Namespace, ref.Name, errs.ToAggregate()), &in.template}
	}
	return nil
}

// platformFlagProblem checks the Challenge's spec.flag against its template's flag: required when
// the flag is the platform's (flag.platform: true), refused otherwise, as the platform would verify
// a flag the instance does not hold. No message holds the flag.
func (in *instance) platformFlagProblem() *problem {
	flag, given := in.template.Flag, in.parent.Spec.Flag != ""
	platform := flag != nil && flag.Platform
	switch {
	case platform && !given:
		return &problem{v1alpha1.ReasonInvalidSpec,
			"the template takes its flag from the platform (flag.platform: true): set spec.flag on the Challenge", &in.template}
	case !platform && given:
		template, flagOf := "spec.template", "spec.template.flag"
		if in.parent.Spec.DefinitionRef != nil {
			template = fmt.Sprintf("ChallengeDefinition %s/%s", in.definitionNamespace, in.definition)
			flagOf = "the flag of " + template
		}
		why := flagOf + " does not"
		if flag == nil {
			why = template + " has no flag"
		}
		return &problem{v1alpha1.ReasonInvalidSpec, fmt.Sprintf(
			"spec.flag is used only when the template's flag sets platform: true, and %s: remove spec.flag, or make the template's flag the platform's (flag.platform: true); otherwise the platform would verify a flag the instance does not hold",
			why), &in.template}
	}
	return nil
}

// tcpGatewayMissing says what a hook without a TCP gateway lacks, and how to give it.
func tcpGatewayMissing(g TCPGateway) string {
	var missing []string
	if g.Host == "" {
		missing = append(missing, "no --tcp-gateway-address (the host:port players connect to)")
	}
	if len(g.Key) < tcptoken.MinKeyBytes && g.TokenPlaceholder == "" {
		missing = append(missing, "no gateway key (--tcp-gateway-key-file; in-cluster, the Secret challenge-hook-tcp-gateway-key)")
	}
	return "the template exposes a port as TCP, through the TCP gateway, but the hook has " + strings.Join(missing, " and ") +
		": set what is missing (the kustomize component manifests/components/tcp-gateway does, see docs/tcp-gateway.md) and restart the hook"
}

func findDefinition(defs []ChallengeDefinition, ref v1alpha1.DefinitionRef) (ChallengeDefinition, bool) {
	for _, def := range defs {
		if def.Metadata.Name == ref.Name && (def.Metadata.Namespace == ref.Namespace || def.Metadata.Namespace == "") {
			return def, true
		}
	}
	return ChallengeDefinition{}, false
}
