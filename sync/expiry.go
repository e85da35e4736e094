package sync

import (
	"math"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// timeLayout is how Kubernetes writes times (metav1.Time): UTC, whole seconds.
const timeLayout = "2006-01-02T15:04:05Z"

func formatTime(t time.Time) string { return t.UTC().Truncate(time.Second).Format(timeLayout) }

// parseTime reads a time the hook or the API server wrote; zero when absent or unreadable.
func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// startedAt is when the instance began: kept from the previous status so that it never moves, else
// the Challenge's creation, else now (the first sync of an object the API server has not stamped,
// as in `render`).
func startedAt(parent Challenge, now time.Time) time.Time {
	for _, s := range []string{parent.Status.StartedAt, parent.Metadata.CreationTimestamp} {
		if t := parseTime(s); !t.IsZero() {
			return t
		}
	}
	return now.UTC().Truncate(time.Second)
}

// expiresAt is when the instance's workload goes away: started + timeout (the Challenge's override,
// else the definition's, else the hook's default), or the Challenge's spec.expiresAt when the
// platform extended it; never later than started + maxLifetime. Durations were validated before.
func expiresAt(parent Challenge, t v1alpha1.DefinitionSpec, started time.Time, cfg Config) time.Time {
	timeout := cfg.DefaultTimeout
	for _, s := range []string{parent.Spec.Timeout, t.Timeout} {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			timeout = d
			break
		}
	}
	maxLifetime := cfg.DefaultMaxLifetime
	if d, err := time.ParseDuration(t.MaxLifetime); err == nil && d > 0 {
		maxLifetime = d
	}
	expires := started.Add(timeout)
	if extended := parseTime(parent.Spec.ExpiresAt); !extended.IsZero() {
		expires = extended
	}
	if limit := started.Add(maxLifetime); maxLifetime > 0 && expires.After(limit) {
		expires = limit
	}
	return expires
}

// deadline is when the instance's workload goes, whether or not the hook can build the instance.
// With a template whose durations it can read (a healthy instance; an invalid definition or inline
// template; a missing flag key) it is expiresAt as usual. Without one (the definition is gone, the
// spec is invalid, or the durations do not parse) there is no timeout to compute from and no
// maxLifetime to cap an extension with: the deadline is the last one the hook computed,
// status.expiresAt, which a readable spec.expiresAt may bring forward but never push back. An
// instance that never had one gets the default timeout from its start, so that no path keeps a
// workload without a deadline.
func deadline(parent Challenge, template *v1alpha1.DefinitionSpec, started time.Time, cfg Config) time.Time {
	if template != nil && durationsReadable(*template) {
		return expiresAt(parent, *template, started, cfg)
	}
	last := parseTime(parent.Status.ExpiresAt)
	if last.IsZero() {
		last = started.Add(cfg.DefaultTimeout)
	}
	if earlier := parseTime(parent.Spec.ExpiresAt); !earlier.IsZero() && earlier.Before(last) {
		last = earlier
	}
	return last
}

// durationsReadable: the template's timeout and maxLifetime are absent or valid, so expiresAt
// would not silently replace a broken cap by the default one.
func durationsReadable(t v1alpha1.DefinitionSpec) bool {
	for _, s := range []string{t.Timeout, t.MaxLifetime} {
		if s == "" {
			continue
		}
		if _, err := parsePositiveDuration(s); err != nil {
			return false
		}
	}
	return true
}

// expiry says whether the workload must go now, and the deadline to show: the deadline of the
// template that times the instance (see deadline). Expired is final: once the hook answered
// Expired, the workload was deleted, and a later extension, edited definition or a hook replica
// whose clock is behind must not bring it back; the deadline shown is then never later than the
// one that expired it.
func expiry(parent Challenge, template *v1alpha1.DefinitionSpec, started, now time.Time, cfg Config) (time.Time, bool) {
	expires := deadline(parent, template, started, cfg)
	if parent.Status.Phase == v1alpha1.PhaseExpired {
		if last := parseTime(parent.Status.ExpiresAt); !last.IsZero() && last.Before(expires) {
			return last, true
		}
		return expires, true
	}
	return expires, !now.Before(expires)
}

// nextWake is when the clock alone changes the answer next, in seconds: the start of the expiry
// warning while it is ahead, else the deadline, or progress when that comes first (a Pod's
// progress deadline, the idle clock; zero when there is none).
func (in *instance) nextWake(progress time.Time) float64 {
	at := in.expires
	if warnAt := in.expires.Add(-in.cfg.ExpiryWarning); in.now.Before(warnAt) {
		at = warnAt
	}
	if !progress.IsZero() && progress.Before(at) {
		at = progress
	}
	return resyncAfter(in.now, at)
}

// earliest of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// resyncAfter wakes Metacontroller at a time; whole seconds, rounded up, so that the wake-up is
// never early.
func resyncAfter(now, expires time.Time) float64 {
	left := expires.Sub(now)
	if left <= 0 {
		return 0
	}
	return math.Ceil(left.Seconds())
}
