package sync

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// podOf returns the Pod among a sync answer's children, nil when there is none.
func podOf(t *testing.T, resp Response) map[string]any {
	t.Helper()
	for _, child := range resp.Children {
		if obj := decodedChild(t, child); obj["kind"] == "Pod" {
			return obj
		}
	}
	return nil
}

// decodedChild is a child of a sync answer as it goes on the wire, decoded.
func decodedChild(t *testing.T, child any) map[string]any {
	t.Helper()
	out, err := EncodeResponse(child)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(out, &obj))
	return obj
}

// A Pod that will not run again by itself is left out of the answer, whatever ended it; any other
// phase keeps it.
func TestFinishedPodIsLeftOutOnce(t *testing.T) {
	c := goldenCaseNamed(t, "creating-pod-evicted-left-out")
	cfg := goldenConfig(t)
	for phase, wantPod := range map[string]bool{"Failed": false, "Succeeded": false, "Running": true, "Pending": true, "Unknown": true} {
		req, err := DecodeRequest(c.request)
		require.NoError(t, err)
		req.Children.Pods[0].Status.Phase = corev1.PodPhase(phase)
		resp := Sync(req, goldenNow, cfg)
		require.Equal(t, wantPod, podOf(t, resp) != nil, "phase %s", phase)
		others := len(req.Children.Objects()) - 1
		if wantPod {
			require.Len(t, resp.Children, others+1, "phase %s", phase)
		} else {
			require.Len(t, resp.Children, others, "phase %s: every other child stays", phase)
		}
	}
}

// A changed flag must change the Pod, or Metacontroller (updateStrategy Recreate) would keep the
// running Pod and its environment would keep the old flag; the Pod must not reveal the flag.
func TestChangedFlagChangesThePod(t *testing.T) {
	c := goldenCaseNamed(t, "life-4-running-resync-fixed-point")
	cfg := goldenConfig(t)
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	annotation := func(cfg Config) string {
		pod := podOf(t, Sync(req, goldenNow, cfg))
		require.NotNil(t, pod)
		return pod["metadata"].(map[string]any)["annotations"].(map[string]any)[AnnotationFlagHash].(string)
	}
	before := annotation(cfg)
	require.Len(t, before, dynamicFlagHexLength)
	in := resolve(req, goldenNow, cfg)
	require.Nil(t, in.problem)
	require.NotContains(t, before, flagValue(in))

	rotated := cfg
	rotated.FlagKey = []byte("another key")
	require.NotEqual(t, before, annotation(rotated), "a new flag key gives new dynamic flags, which must reach the Pod")
	require.Equal(t, before, annotation(cfg), "the same flag gives the same Pod")
}

// The kubelet's backstop never ends a Pod before its instance's deadline: activeDeadlineSeconds
// counts from the Pod's start, which is never before the instance's, and is the longest the
// instance may live, extensions included. The grace period is 5 s unless the template sets its own.
func TestPodBackstopAndGracePeriod(t *testing.T) {
	c := goldenCaseNamed(t, "running-extension-capped-by-maxlifetime-fixed-point")
	cfg := goldenConfig(t)
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	in := resolve(req, goldenNow, cfg)
	require.Nil(t, in.problem)
	started := in.started
	deadline := expiresAt(req.Parent, in.template, started, cfg)

	spec := podOf(t, Sync(req, goldenNow, cfg))["spec"].(map[string]any)
	backstop := started.Add(time.Duration(spec["activeDeadlineSeconds"].(float64)) * time.Second)
	require.False(t, backstop.Before(deadline), "the backstop (%s from the start) ends the Pod before its deadline %s", backstop, deadline)
	require.Equal(t, float64(defaultTerminationGracePeriod), spec["terminationGracePeriodSeconds"])

	for _, maxLifetime := range []string{"", "90m", "36h"} {
		template := in.template
		template.MaxLifetime = maxLifetime
		want := cfg.DefaultMaxLifetime
		if maxLifetime != "" {
			want, _ = time.ParseDuration(maxLifetime)
		}
		require.Equal(t, int64(want.Seconds()), activeDeadline(template, cfg), "maxLifetime %q", maxLifetime)
	}

	grace := int64(20)
	in.template.TerminationGracePeriodSeconds = &grace
	require.Equal(t, grace, *buildPodSpec(in, in.components[0]).TerminationGracePeriodSeconds)
	for _, refused := range []int64{0, v1alpha1.MaxTerminationGracePeriodSeconds + 1} {
		in.template.TerminationGracePeriodSeconds = &refused
		require.ErrorContains(t, ValidateDefinition(in.template, field.NewPath("spec")).ToAggregate(), "spec.terminationGracePeriodSeconds")
	}
}
