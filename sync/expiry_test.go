package sync

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

func conditionOf(t *testing.T, status v1alpha1.ChallengeStatus, conditionType string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(status.Conditions, conditionType)
	require.NotNil(t, c, "no %s condition in %+v", conditionType, status.Conditions)
	return *c
}

// ExpiringSoon turns True exactly when the warning begins, which is when the hook asked to be woken;
// a zero warning never warns and wakes the hook at expiry only.
func TestExpiringSoonBeginsAtTheWakeUp(t *testing.T) {
	cfg := goldenConfig(t)
	req, err := DecodeRequest(goldenCaseNamed(t, "running-to-expiring-soon-warning").request)
	require.NoError(t, err)
	expires := time.Date(2026, 11, 1, 12, 10, 0, 0, time.UTC)
	warnAt := expires.Add(-cfg.ExpiryWarning)

	before := Sync(req, warnAt.Add(-90*time.Second), cfg)
	assert.Equal(t, metav1.ConditionFalse, conditionOf(t, before.Status, ConditionExpiringSoon).Status)
	assert.Equal(t, 90.0, before.ResyncAfterSeconds, "woken when the warning begins")
	at := Sync(req, warnAt, cfg)
	assert.Equal(t, metav1.ConditionTrue, conditionOf(t, at.Status, ConditionExpiringSoon).Status)
	assert.Equal(t, warnAt, conditionOf(t, at.Status, ConditionExpiringSoon).LastTransitionTime.Time)
	assert.Equal(t, 300.0, at.ResyncAfterSeconds, "then woken at expiry")
	assert.Equal(t, v1alpha1.PhaseRunning, at.Status.Phase)
	assert.Equal(t, before.Children, at.Children, "the warning changes no child")

	quiet := cfg
	quiet.ExpiryWarning = 0
	never := Sync(req, expires.Add(-time.Second), quiet)
	assert.Equal(t, metav1.ConditionFalse, conditionOf(t, never.Status, ConditionExpiringSoon).Status)
	assert.Contains(t, conditionOf(t, never.Status, ConditionExpiringSoon).Message, "no warning")
	assert.Equal(t, 1.0, never.ResyncAfterSeconds)
	assert.Equal(t, 390.0, Sync(req, warnAt.Add(-90*time.Second), quiet).ResyncAfterSeconds, "without a warning, woken at expiry")
}
