// Package flagfunc holds the parsers of challenge-hook's flag values, for flag.Func: each one
// checks its value and says what is expected, so that the error, prefixed by the flag package
// with the flag's name (or by the caller with its environment variable), says what to fix.
package flagfunc

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Var registers a flag.Func flag whose help names its default: flag.Func shows none, and -h
// should say what an unset flag means.
func Var(fs *flag.FlagSet, name, def, usage string, set func(string) error) {
	if def != "" {
		usage += fmt.Sprintf(" (default %s)", def)
	}
	fs.Func(name, usage, set)
}

// PositiveDuration parses a duration above zero into p.
func PositiveDuration(p *time.Duration) func(string) error {
	return duration(p, func(d time.Duration) bool { return d > 0 }, "expected a positive duration such as 30s, 30m or 1h")
}

// NonNegativeDuration parses a duration of zero or more into p.
func NonNegativeDuration(p *time.Duration) func(string) error {
	return duration(p, func(d time.Duration) bool { return d >= 0 }, "expected a duration such as 0s, 5s or 1m")
}

// duration parses a duration that valid accepts into p; expected is the error otherwise.
func duration(p *time.Duration, valid func(time.Duration) bool, expected string) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || !valid(d) {
			return errors.New(expected)
		}
		*p = d
		return nil
	}
}

// PositiveInt parses a whole number of at least 1 into p.
func PositiveInt(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return errors.New("expected a positive whole number such as 8")
		}
		*p = n
		return nil
	}
}

// NonNegativeInt parses a whole number of at least 0 into p.
func NonNegativeInt(p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errors.New("expected a whole number such as 3 (0: off)")
		}
		*p = n
		return nil
	}
}

// Port parses a TCP or UDP port into p.
func Port(p *int32) func(string) error {
	return func(v string) error {
		port, err := strconv.ParseInt(v, 10, 32)
		if err != nil || port < 1 || port > 65535 {
			return errors.New("expected a port between 1 and 65535")
		}
		*p = int32(port)
		return nil
	}
}

// ByteSize parses a positive size in bytes, or with a suffix such as 8Mi, into p.
func ByteSize(p *int64) func(string) error {
	return func(v string) error {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Sign() <= 0 {
			return errors.New("expected a positive size such as 8388608 or 8Mi")
		}
		*p = q.Value()
		return nil
	}
}

// OneOf accepts one of choices into p.
func OneOf(p *string, choices ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(choices, v) {
			return fmt.Errorf("expected one of %s", strings.Join(choices, ", "))
		}
		*p = v
		return nil
	}
}

// HostPort parses a listen address into p.
func HostPort(p *string) func(string) error {
	return func(v string) error {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("expected host:port such as :8080 or 127.0.0.1:8080: %w", err)
		}
		*p = v
		return nil
	}
}

// Time parses an RFC 3339 time into p, in UTC; empty is the zero time.
func Time(p *time.Time) func(string) error {
	return func(v string) error {
		if v == "" {
			*p = time.Time{}
			return nil
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return errors.New("expected an RFC 3339 time such as 2026-11-01T12:05:00Z, or empty for the real clock")
		}
		*p = t.UTC()
		return nil
	}
}

// IPv4 parses one IPv4 address into p; empty is none.
func IPv4(p *string) func(string) error {
	return func(v string) error {
		if v == "" {
			*p = ""
			return nil
		}
		addr, err := netip.ParseAddr(v)
		if err != nil || !addr.Is4() {
			return errors.New("expected an IPv4 address such as 169.254.20.10, or empty for none")
		}
		*p = addr.String()
		return nil
	}
}

// IPv4AddrPort parses an IPv4 address and port (198.51.100.7:8080) into p; empty is none.
func IPv4AddrPort(p *string) func(string) error {
	return func(v string) error {
		if v == "" {
			*p = ""
			return nil
		}
		ap, err := netip.ParseAddrPort(v)
		if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
			return errors.New("expected an IPv4 address and port such as 10.96.0.20:8080, or empty for the default")
		}
		*p = ap.String()
		return nil
	}
}

// Namespace parses a namespace name into p.
func Namespace(p *string) func(string) error {
	return func(v string) error {
		if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
			return fmt.Errorf("expected a namespace name: %s", strings.Join(errs, "; "))
		}
		*p = v
		return nil
	}
}

// Namespaces parses comma-separated namespace names into p, each once; empty is none.
func Namespaces(p *[]string) func(string) error {
	return func(v string) error {
		var out []string
		for _, item := range commaSeparated(v) {
			if errs := validation.IsDNS1123Label(item); len(errs) > 0 {
				return fmt.Errorf("%q: expected namespace names such as ctf,ctf-definitions: %s", item, strings.Join(errs, "; "))
			}
			if !slices.Contains(out, item) {
				out = append(out, item)
			}
		}
		*p = out
		return nil
	}
}

// Labels parses comma-separated label=value pairs into p; empty is no labels.
func Labels(p *map[string]string) func(string) error {
	return func(v string) error {
		out := map[string]string{}
		for _, pair := range commaSeparated(v) {
			key, value, ok := strings.Cut(pair, "=")
			if !ok {
				return fmt.Errorf("%q: expected label=value pairs such as app.kubernetes.io/name=ingress-nginx", pair)
			}
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				return fmt.Errorf("label %q: %s", key, strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
				return fmt.Errorf("label value %q: %s", value, strings.Join(errs, "; "))
			}
			out[key] = value
		}
		*p = out
		return nil
	}
}

// CIDRs parses comma-separated IPv4 CIDRs into p, each its network address (10.244.0.0/16, not
// 10.244.1.0/16): instances get no IPv6 ingress or egress, so IPv6 ranges would have no effect.
// Each CIDR becomes an except entry under 0.0.0.0/0 in every instance's NetworkPolicy, which the
// API server accepts only as a strict subset: 0.0.0.0/0 itself is refused, saying instead what
// to pass.
func CIDRs(p *[]string, instead string) func(string) error {
	return func(v string) error {
		var out []string
		for _, item := range commaSeparated(v) {
			prefix, err := netip.ParsePrefix(item)
			if err != nil || !prefix.Addr().Is4() {
				return fmt.Errorf("%q: expected IPv4 CIDRs such as 10.244.0.0/16,10.245.0.0/16", item)
			}
			if prefix.Masked() != prefix {
				return fmt.Errorf("%q has host bits set: did you mean %s?", item, prefix.Masked())
			}
			if prefix.Bits() == 0 {
				return fmt.Errorf("%q is every IPv4 address: each CIDR is an except entry under 0.0.0.0/0 in the instances' NetworkPolicies, "+
					"which must be a strict subset of it (the API server would refuse every policy); pass %s", item, instead)
			}
			out = append(out, prefix.String())
		}
		*p = out
		return nil
	}
}

// commaSeparated is v's items, trimmed, without empty ones.
func commaSeparated(v string) []string {
	var items []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			items = append(items, item)
		}
	}
	return items
}

// JoinLabels is labels as Labels parses them, sorted: how -h shows a default.
func JoinLabels(labels map[string]string) string {
	pairs := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		pairs = append(pairs, k+"="+labels[k])
	}
	return strings.Join(pairs, ",")
}
