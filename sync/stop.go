package sync

import (
	"fmt"
	"slices"
	"time"
)

// stop answers for a Challenge the platform stopped (spec.stopped) before its deadline: the Pod
// goes, as at expiry, and everything around it stays: the Service keeps its node port or load
// balancer address and the Ingress its host, so that starting again (spec.stopped false) only
// creates a Pod and the player reconnects where they were. The lifetime keeps running while
// stopped, and expiry still wins: at the deadline the rest goes too, and the phase is Expired.
// When the hook cannot build the instance (a missing or invalid definition, an invalid spec, no
// flag key) the children around the Pod are kept exactly as they are, and the message names the
// problem.
func stop(req Request, in instance, prob *problem, cfg Config, started, expires, now time.Time) Response {
	parent := req.Parent
	message := fmt.Sprintf(
		"stopped by the platform (spec.stopped): the Pod is removed, the instance id, host and flag are kept; set spec.stopped to false to start it again before it expires at %s",
		formatTime(expires))
	var children []any
	if prob != nil {
		message += fmt.Sprintf(" (also %s: %s)", prob.reason, prob.message)
		children = keptWithIsolation(req, slices.DeleteFunc(req.Children.Objects(), isWorkload))
	} else {
		children = surroundingChildren(in, cfg)
	}
	v := verdict{PhaseStopped, ReasonStopped, message}
	status := instanceStatus(parent, v, started, expires)
	status.Conditions = instanceConditions(parent, v, expires, now, cfg, false)
	return Response{Status: status, Children: children, ResyncAfterSeconds: nextWake(now, expires, cfg.ExpiryWarning, time.Time{})}
}

// isWorkload: the instance's Pod, or the Deployment it was before Pods.
func isWorkload(obj ObservedObject) bool {
	return obj.Kind == "Pod" || obj.Kind == "Deployment"
}
