package sync

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// Condition types on the Challenge.
const (
	ConditionReady        = "Ready"
	ConditionExpiringSoon = "ExpiringSoon"
	ConditionExpired      = "Expired"
	ConditionIdleSoon     = "IdleSoon"
)

// status is what every answer before deletion says: the verdict, the instance id, the endpoints,
// its times (startedAt and readyAt never move once set; readyAt is the first Running answer) and
// its conditions.
func (in *instance) status(v verdict, endpoints []v1alpha1.Endpoint) v1alpha1.ChallengeStatus {
	readyAt := in.parent.Status.ReadyAt
	if v.phase == v1alpha1.PhaseRunning && readyAt == "" {
		readyAt = formatTime(in.now)
	}
	var lastActivityAt, idleAt string
	if in.idle.timeout > 0 && runsIdleClock(v) {
		lastActivityAt, idleAt = formatTime(in.idle.last), formatTime(in.idle.at)
	}
	return v1alpha1.ChallengeStatus{
		Phase:              v.phase,
		Reason:             v.reason,
		Message:            v.message,
		InstanceID:         in.id,
		Endpoints:          endpoints,
		StartedAt:          formatTime(in.started),
		ReadyAt:            readyAt,
		ExpiresAt:          formatTime(in.expires),
		LastActivityAt:     lastActivityAt,
		IdleAt:             idleAt,
		Conditions:         instanceConditions(in, v),
		ObservedGeneration: in.parent.Metadata.Generation,
	}
}

// settledStatus is the status of an instance being deleted: the verdict, and what the previous
// status knew: its times and its ExpiringSoon and Expired conditions.
func (in *instance) settledStatus(v verdict) v1alpha1.ChallengeStatus {
	previous := in.parent.Status
	current := []metav1.Condition{readyCondition(v)}
	for _, conditionType := range []string{ConditionExpiringSoon, ConditionExpired} {
		if prev := meta.FindStatusCondition(previous.Conditions, conditionType); prev != nil {
			current = append(current, *prev)
		}
	}
	return v1alpha1.ChallengeStatus{
		Phase:              v.phase,
		Reason:             v.reason,
		Message:            v.message,
		InstanceID:         in.id,
		StartedAt:          formatTime(in.started),
		ReadyAt:            previous.ReadyAt,
		ExpiresAt:          previous.ExpiresAt,
		Conditions:         conditions(previous.Conditions, in.parent.Metadata.Generation, in.now, current...),
		ObservedGeneration: in.parent.Metadata.Generation,
	}
}

// conditions completes the current conditions of an answer, in their order. A condition's
// lastTransitionTime moves (to now, the sync's clock) only when its status flips; otherwise
// meta.SetStatusCondition keeps it from the previous status, so a steady state gives the same
// status on every sync.
func conditions(previous []metav1.Condition, generation int64, now time.Time, current ...metav1.Condition) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(current))
	for _, c := range current {
		if p := meta.FindStatusCondition(previous, c.Type); p != nil && !p.LastTransitionTime.IsZero() {
			out = append(out, *p)
		}
		c.ObservedGeneration = generation
		c.LastTransitionTime = metav1.NewTime(now)
		meta.SetStatusCondition(&out, c)
	}
	return out
}

func readyCondition(v verdict) metav1.Condition {
	status := metav1.ConditionFalse
	if v.phase == v1alpha1.PhaseRunning {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: ConditionReady, Status: status, Reason: v.reason, Message: v.message}
}

// instanceConditions are the conditions of every answer before deletion: Ready from the verdict,
// ExpiringSoon and Expired from the deadline, and IdleSoon from the idle clock when the template
// has one.
func instanceConditions(in *instance, v verdict) []metav1.Condition {
	current := []metav1.Condition{readyCondition(v), expiringSoonCondition(in.expires, in.now, in.cfg.ExpiryWarning, in.expired), expiredCondition(in.expires, in.expired)}
	if in.idle.timeout > 0 {
		current = append(current, idleSoonCondition(in, v))
	}
	return conditions(in.parent.Status.Conditions, in.parent.Metadata.Generation, in.now, current...)
}

// expiringSoonCondition is True during the last warning before the deadline, so that a UI can
// warn the player; its message names the deadline, never the time left, which would change the
// status on every sync.
func expiringSoonCondition(expires, now time.Time, warning time.Duration, expired bool) metav1.Condition {
	c := metav1.Condition{Type: ConditionExpiringSoon, Status: metav1.ConditionFalse}
	switch {
	case expired:
		c.Reason, c.Message = v1alpha1.ReasonExpired, "expired at "+formatTime(expires)
	case warning > 0 && !now.Before(expires.Add(-warning)):
		c.Status, c.Reason = metav1.ConditionTrue, ConditionExpiringSoon
		c.Message = fmt.Sprintf("expires at %s, in less than %s: the workload is removed then unless spec.expiresAt is extended", formatTime(expires), warning)
	case warning > 0:
		c.Reason, c.Message = "NotExpiringSoon", fmt.Sprintf("expires at %s; expiring soon from %s", formatTime(expires), formatTime(expires.Add(-warning)))
	default:
		c.Reason, c.Message = "NotExpiringSoon", fmt.Sprintf("expires at %s; the hook gives no warning (--expiry-warning=0s)", formatTime(expires))
	}
	return c
}

func expiredCondition(expires time.Time, expired bool) metav1.Condition {
	if expired {
		return metav1.Condition{Type: ConditionExpired, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonExpired, Message: "expired at " + formatTime(expires)}
	}
	return metav1.Condition{Type: ConditionExpired, Status: metav1.ConditionFalse, Reason: "NotExpired", Message: "expires at " + formatTime(expires)}
}
