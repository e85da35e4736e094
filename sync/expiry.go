package sync

import (
	"math"
	"time"
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
func expiresAt(parent Challenge, t DefinitionSpec, started time.Time, cfg Config) time.Time {
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

// resyncAfter wakes Metacontroller when the instance expires; whole seconds, rounded up, so that
// the wake-up is never early.
func resyncAfter(now, expires time.Time) float64 {
	left := expires.Sub(now)
	if left <= 0 {
		return 0
	}
	return math.Ceil(left.Seconds())
}
