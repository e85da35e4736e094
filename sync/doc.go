// Package sync is the heart of challenge-hook: a pure function from what Metacontroller observed to
// the children that should exist and the status the Challenge should show. It does no I/O; callers
// decode the request, pass a clock reading and configuration, and encode the response.
//
// Read it in the order a sync request flows through it:
//
//  1. sync.go: Sync and Customize, the entry points; syncChallenge picks the answer.
//  2. instance.go: resolve builds the instance once (its id, names, labels, deadline, components)
//     from the request, with template.go (the inline template or the related ChallengeDefinition),
//     validate.go and validatepod.go (the hook's own checks of
//     what it builds from: the Challenge and the template; each pod, container and exposure), component.go (one component per
//     pod of the template, its peers and ports), expiry.go (start, deadline, wake-ups), idle.go
//     (the last activity, and when an idleTimeout stops it), queue.go (the owner's place among
//     their instances) and trust.go (which definitions a namespace may use).
//  3. The answers, each a phase, a status and the children: run, expire, keepChildren and finalize
//     in sync.go, stop in stop.go, stopIdle in idle.go, waitInQueue in queue.go. The children a healthy instance declares
//     are in desired.go; those an answer keeps as Metacontroller last applied them, and the
//     NetworkPolicies held while a Pod runs, in isolation.go.
//  4. The verdict and the status: verdict.go decides the phase from the observed children (which Pod
//     holds the instance back, and why), exposure.go the endpoints players use, status.go writes the
//     status and its conditions, text.go makes every quoted text bounded and inert.
//  5. The builders, one per child: pod.go (with gate.go, the policy gate init container),
//     service.go (Services and the Ingress), networkpolicy.go, route.go (Gateway API routes) and
//     flag.go (the flag, its Secret and its verification).
//  6. The wire: wire.go holds the request and response types, children.go the table of child kinds,
//     json.go their decoding and encoding; config.go the hook's configuration and its flags.
package sync
