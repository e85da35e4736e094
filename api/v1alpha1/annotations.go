package v1alpha1

// The annotations through which the idle clock hears of activity. Whoever sees an instance used
// writes AnnotationLastActivity, an RFC 3339 time, on the Challenge (the platform, say, when a
// player presses start) or on one of the instance's Services (the activity stamper, for the TCP
// gateway's sessions; an ingress log shipper, for HTTP); the hook reads the latest of them. The
// hook puts AnnotationIdleTimeout on the Services of an instance whose template sets idleTimeout,
// so that a writer that reads only Services knows how often a stamp matters.
const (
	// AnnotationLastActivity is the last time someone used the instance (RFC 3339).
	AnnotationLastActivity = Group + "/last-activity"
	// AnnotationIdleTimeout is the instance's idleTimeout, as Go formats a duration (15m0s), on
	// its Services.
	AnnotationIdleTimeout = Group + "/idle-timeout"
)

// AnnotationRCTFChallenge marks the ChallengeDefinition that rCTF's challenge of that id
// (challengeIntegrationId) starts through the platform component: the organizer sets it, and the
// component starts nothing else.
const AnnotationRCTFChallenge = Group + "/rctf-challenge"

// AnnotationPlayerPage, "true" on a ChallengeDefinition, lets the platform component's player page
// start it for the owner a signed link names: the organizer sets it, and the page starts nothing
// else.
const AnnotationPlayerPage = Group + "/player-page"
