package sync

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// An instance whose template sets idleTimeout is stopped once nobody used it for that long: phase
// Stopped, reason Idle, the Pod removed and everything around it kept, as with spec.stopped. Use is
// what the hook can read in the request: the last-activity stamps of the Challenge and its
// Services (written by whoever sees its traffic: the platform on the Challenge, the activity
// stamper on the Service the TCP gateway reaches), its start, its first Ready answer, a restart
// (spec.restartedAt) and an extension of its deadline; and it never counts as idle while it was
// waiting to run (Queued, or stopped by spec.stopped), so that the clock starts again when it
// runs. The status keeps the latest of them (status.lastActivityAt), so that a stamp going back
// changes nothing. A newer stamp starts an idle instance again. The hook stays pure: the idle deadline comes from the
// request, and Metacontroller is asked to wake it then, as at expiry.

// maxStampSkew is how far ahead of the hook's clock a stamp may be and still count: clocks of the
// stamper and the hook differ a little; a stamp further ahead is ignored (and said so), so that
// one bad write cannot keep an instance from idling for long.
const maxStampSkew = time.Minute

// idleness is what the idle clock says of an instance.
type idleness struct {
	timeout time.Duration // the template's idleTimeout; zero: off
	last    time.Time     // the last activity (status.lastActivityAt)
	at      time.Time     // when it stops for idleness: last + timeout
	idle    bool          // now is at or past it
	ignored string        // why a stamp was ignored, for the IdleSoon condition
}

// resolveIdleness reads the instance's last activity from the request. It runs after the deadline
// is known (an extension is activity).
func resolveIdleness(in *instance, template *v1alpha1.DefinitionSpec) idleness {
	if template == nil || template.IdleTimeout == "" {
		return idleness{}
	}
	timeout, err := parsePositiveDuration(template.IdleTimeout)
	if err != nil {
		return idleness{} // refused by validation: the instance is an Error, and never idles
	}
	parent, previous := in.parent, in.parent.Status
	latest := func(candidates ...time.Time) time.Time {
		var t time.Time
		for _, c := range candidates {
			if c.After(t) {
				t = c
			}
		}
		return t
	}
	d := idleness{timeout: timeout}
	stamp, ignored := latestStamp(in)
	d.ignored = strings.Join(ignored, "; ")
	restarted := parseTime(parent.Spec.RestartedAt)
	if restarted.After(in.now) {
		restarted = time.Time{}
	}
	var extended, resumed time.Time
	if last := parseTime(previous.ExpiresAt); !last.IsZero() && in.expires.Truncate(time.Second).After(last) {
		extended = in.now
	}
	if previous.Phase == v1alpha1.PhaseQueued || previous.Phase == v1alpha1.PhaseStopped && previous.Reason == v1alpha1.ReasonStopped {
		resumed = in.now // waiting to run is not idleness: the clock starts when it runs
	}
	d.last = latest(in.started, parseTime(previous.LastActivityAt), parseTime(previous.ReadyAt), stamp, restarted, extended, resumed)
	d.at = d.last.Add(timeout)
	d.idle = !in.now.Before(d.at)
	return d
}

// latestStamp is the latest AnnotationLastActivity of the Challenge and of its observed Services
// (the stamper's), and why any other was ignored: not an RFC 3339 time, or more than maxStampSkew
// ahead of the hook's clock.
func latestStamp(in *instance) (time.Time, []string) {
	var latest time.Time
	var ignored []string
	read := func(raw, on string) {
		stamp := parseTime(raw)
		switch {
		case raw == "":
		case stamp.IsZero():
			ignored = append(ignored, fmt.Sprintf("the %s annotation %q %s is not an RFC 3339 time, and is ignored", AnnotationLastActivity, raw, on))
		case stamp.After(in.now.Add(maxStampSkew)):
			ignored = append(ignored, fmt.Sprintf("the %s annotation %s %s is more than %s ahead of the hook's clock, and is ignored", AnnotationLastActivity, formatTime(stamp), on, maxStampSkew))
		case stamp.After(latest):
			latest = stamp
		}
	}
	read(in.parent.Metadata.Annotations.LastActivity, "of the Challenge")
	for _, svc := range in.observed.Services {
		read(svc.Metadata.Annotations.LastActivity, "of Service "+svc.Metadata.Name)
	}
	return latest, ignored
}

// withActivity is the idle clock once activity happened at t.
func (d idleness) withActivity(t time.Time) idleness {
	if d.timeout == 0 || !t.After(d.last) {
		return d
	}
	d.last, d.at = t, t.Add(d.timeout)
	d.idle = false
	return d
}

// runsIdleClock: the verdicts under which the idle clock runs, and status.lastActivityAt is shown.
// While Queued or stopped by spec.stopped it does not (the clock starts again when it runs), and
// the status carries no time that would change on every sync.
func runsIdleClock(v verdict) bool {
	switch {
	case v.phase == v1alpha1.PhaseQueued, v.phase == v1alpha1.PhaseStopped && v.reason == v1alpha1.ReasonStopped:
		return false
	}
	return true
}

// stopIdle answers for an instance nobody used for its idleTimeout: as stop does for spec.stopped,
// the Pod goes and everything around it stays, so that a new stamp brings it back on the same
// host, port, token and flag. It holds no place in its owner's queue (holdsPlace). Expiry still
// wins.
func (in *instance) stopIdle() Response {
	v := verdict{v1alpha1.PhaseStopped, v1alpha1.ReasonIdle, fmt.Sprintf(
		"stopped at %s: no activity since %s (idleTimeout %s); the Pod is removed, the instance id, host and flag are kept; "+
			"a newer %s stamp (the platform's start button, a player reaching it) starts it again before it expires at %s",
		formatTime(in.idle.at), formatTime(in.idle.last), in.idle.timeout, AnnotationLastActivity, formatTime(in.expires))}
	return Response{Status: in.status(v, nil), Children: in.surroundingChildren(), ResyncAfterSeconds: in.nextWake(time.Time{})}
}

// idleWarning is how long before an idle stop IdleSoon is True: the expiry warning, but at most
// half the idleTimeout, so that an instance just started is not already about to stop.
func (d idleness) idleWarning(expiryWarning time.Duration) time.Duration {
	return min(expiryWarning, d.timeout/2)
}

// idleSoonCondition is the idle clock's sibling of ExpiringSoon: True during the warning before an
// idle stop, so that a UI can say "stopping at 12:40 unless used"; like it, it names times, never
// the time left.
func idleSoonCondition(in *instance, v verdict) metav1.Condition {
	d := in.idle
	c := metav1.Condition{Type: ConditionIdleSoon, Status: metav1.ConditionFalse}
	warning := d.idleWarning(in.cfg.ExpiryWarning)
	switch {
	case v.phase == v1alpha1.PhaseStopped && v.reason == v1alpha1.ReasonIdle:
		c.Reason, c.Message = v1alpha1.ReasonIdle, fmt.Sprintf("stopped at %s, idle since %s", formatTime(d.at), formatTime(d.last))
	case !runsIdleClock(v) || in.expired:
		c.Reason, c.Message = "NotRunning", fmt.Sprintf("the idle clock (idleTimeout %s) runs while the instance runs", d.timeout)
	case warning > 0 && !in.now.Before(d.at.Add(-warning)):
		c.Status, c.Reason = metav1.ConditionTrue, ConditionIdleSoon
		c.Message = fmt.Sprintf("stops at %s unless used: no activity since %s (idleTimeout %s)", formatTime(d.at), formatTime(d.last), d.timeout)
	default:
		c.Reason, c.Message = "NotIdleSoon", fmt.Sprintf("stops at %s unless used (idleTimeout %s); idle soon from %s", formatTime(d.at), d.timeout, formatTime(d.at.Add(-warning)))
	}
	if d.ignored != "" {
		c.Message += "; " + d.ignored
	}
	return c
}

// nextIdleWake is when the idle clock changes the answer of a running instance next: the start of
// the idle warning while it is ahead, else the idle stop; zero when the clock is off.
func (in *instance) nextIdleWake() time.Time {
	d := in.idle
	if d.timeout == 0 || d.idle {
		return time.Time{}
	}
	if warnAt := d.at.Add(-d.idleWarning(in.cfg.ExpiryWarning)); in.now.Before(warnAt) {
		return warnAt
	}
	return d.at
}
