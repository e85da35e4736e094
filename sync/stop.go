package sync

import (
	"fmt"
	"slices"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// stop answers for a Challenge the platform stopped (spec.stopped) before its deadline: the Pod
// goes, as at expiry, and everything around it stays: the Service keeps its node port or load
// balancer address and the Ingress its host, so that starting again (spec.stopped false) only
// creates a Pod and the player reconnects where they were. The lifetime keeps running while
// stopped, and expiry still wins: at the deadline the rest goes too, and the phase is Expired.
// When the hook cannot build the instance (a missing or invalid definition, an invalid spec, no
// flag key) the children around the Pod are kept exactly as they are, and the message names the
// problem.
func (in *instance) stop() Response {
	message := fmt.Sprintf(
		"stopped by the platform (spec.stopped): the Pod is removed, the instance id, host and flag are kept; set spec.stopped to false to start it again before it expires at %s",
		formatTime(in.expires))
	var children []any
	if in.problem != nil {
		message += fmt.Sprintf(" (also %s: %s)", in.problem.reason, in.problem.message)
		children = in.keptWithIsolation(slices.DeleteFunc(in.observed.Objects(), isWorkload))
	} else {
		children = in.surroundingChildren()
	}
	v := verdict{v1alpha1.PhaseStopped, v1alpha1.ReasonStopped, message}
	return Response{Status: in.status(v, nil), Children: children, ResyncAfterSeconds: in.nextWake(time.Time{})}
}

// isWorkload: the instance's Pod, or the Deployment it was before Pods.
func isWorkload(obj ObservedObject) bool {
	return obj.Kind == "Pod" || obj.Kind == "Deployment"
}
