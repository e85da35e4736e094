package platform

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// pageStatus is what the player page shows of the owner's instance: the page's HTML and its
// script's /status are both this, so that they show the same. Every string from the Challenge's
// status reaches the page through html/template (escaped) or the script's textContent.
type pageStatus struct {
	// Phase is the Challenge's phase (None before the hook's first status), or none without an
	// instance.
	Phase         string `json:"phase"`
	PhaseText     string `json:"phaseText"`
	QueuePosition int32  `json:"queuePosition,omitempty"`
	ExpiresAt     string `json:"expiresAt,omitempty"`
	IdleAt        string `json:"idleAt,omitempty"`
	// Warnings are the conditions ExpiringSoon and IdleSoon that hold, in words.
	Warnings []string `json:"warnings"`
	// Message is the status's reason and message, on Error.
	Message   string         `json:"message,omitempty"`
	Endpoints []pageEndpoint `json:"endpoints"`
	// Actions are the actions the page offers now: start, extend, restart, stop, delete.
	Actions []string `json:"actions"`

	// The countdowns at the time of the answer, for a page without its script.
	ExpiresIn string `json:"-"`
	IdleIn    string `json:"-"`
}

// pageEndpoint is one way into the instance, with the commands a player pastes.
type pageEndpoint struct {
	Name  string `json:"name"`
	Host  string `json:"host"`
	Port  int32  `json:"port"`
	URL   string `json:"url,omitempty"`
	Token string `json:"token,omitempty"`
	// WebSocketURL is the same way in over a WebSocket (the TCP gateway's), when it has one.
	WebSocketURL string        `json:"webSocketURL,omitempty"`
	Commands     []pageCommand `json:"commands"`
	// Terminal is the path of the page's terminal to WebSocketURL, when the page offers one.
	Terminal string `json:"terminal,omitempty"`
}

// pageCommand is a line a player copies: a command, or (Token) what to type at the TCP
// gateway's prompt.
type pageCommand struct {
	Label string `json:"label"`
	Text  string `json:"text"`
	Token bool   `json:"token,omitempty"`
}

// phaseNone is the page's phase without an instance.
const phaseNone = "none"

// The conditions the page warns of (the hook's sync/status.go and sync/idle.go name them).
const (
	conditionExpiringSoon = "ExpiringSoon"
	conditionIdleSoon     = "IdleSoon"
)

// phaseTexts are the phases in words.
var phaseTexts = map[string]string{
	phaseNone: "Not started", v1alpha1.PhaseNone: "Starting", v1alpha1.PhaseCreating: "Starting", v1alpha1.PhaseQueued: "Queued",
	v1alpha1.PhaseRunning: "Running", v1alpha1.PhaseStopped: "Stopped", v1alpha1.PhaseExpired: "Expired", v1alpha1.PhaseError: "Error",
	v1alpha1.PhaseTerminating: "Stopping", v1alpha1.PhaseDeleted: "Stopping",
}

// viewOf is the page's view of the owner's instance c (nil: none) of def at now.
func viewOf(c *v1alpha1.Challenge, def *v1alpha1.ChallengeDefinition, now time.Time) pageStatus {
	v := pageStatus{Phase: phaseOf(c), Warnings: []string{}, Endpoints: []pageEndpoint{}}
	v.PhaseText = phaseTexts[v.Phase]
	if v.PhaseText == "" {
		v.PhaseText = v.Phase // a phase of a newer hook
	}
	v.Actions = actionsOf(c, v.Phase, def, now)
	if c == nil {
		return v
	}
	status := c.Status
	if v.Phase == v1alpha1.PhaseStopped && status.Reason == v1alpha1.ReasonIdle {
		v.PhaseText = "Stopped (idle)"
	}
	if v.Phase == v1alpha1.PhaseQueued {
		v.QueuePosition = status.QueuePosition
	}
	if expiresAt, err := time.Parse(time.RFC3339, status.ExpiresAt); err == nil && !over(c) {
		v.ExpiresAt, v.ExpiresIn = expiresAt.UTC().Format(time.RFC3339), countdown(expiresAt.Sub(now))
	}
	if idleAt, err := time.Parse(time.RFC3339, status.IdleAt); err == nil && idleClockRuns(v.Phase) {
		v.IdleAt, v.IdleIn = idleAt.UTC().Format(time.RFC3339), countdown(idleAt.Sub(now))
	}
	if !over(c) {
		v.Warnings = warningsOf(status.Conditions)
	}
	if v.Phase == v1alpha1.PhaseError {
		v.Message = strings.TrimSuffix(status.Reason+": "+status.Message, ": ")
	}
	if v.Phase == v1alpha1.PhaseRunning {
		v.Endpoints = pageEndpoints(c)
	}
	return v
}

// phaseOf is the phase the page shows: none without an instance, Terminating once it is being
// deleted, None before the hook's first status.
func phaseOf(c *v1alpha1.Challenge) string {
	switch {
	case c == nil:
		return phaseNone
	case c.DeletionTimestamp != nil && c.Status.Phase != v1alpha1.PhaseDeleted:
		return v1alpha1.PhaseTerminating
	case c.Status.Phase == "":
		return v1alpha1.PhaseNone
	}
	return c.Status.Phase
}

// idleClockRuns says whether the idle countdown means anything in phase.
func idleClockRuns(phase string) bool {
	return phase == v1alpha1.PhaseRunning || phase == v1alpha1.PhaseCreating || phase == v1alpha1.PhaseNone
}

func warningsOf(conditions []metav1.Condition) []string {
	out := []string{}
	for _, c := range conditions {
		if c.Status != metav1.ConditionTrue {
			continue
		}
		switch c.Type {
		case conditionExpiringSoon:
			out = append(out, "The instance expires soon: extend it if you need more time.")
		case conditionIdleSoon:
			out = append(out, "The instance stops soon unless you use it.")
		}
	}
	return out
}

// actionsOf are the actions the page offers in phase, in the order of its buttons.
func actionsOf(c *v1alpha1.Challenge, phase string, def *v1alpha1.ChallengeDefinition, now time.Time) []string {
	out := []string{}
	in := func(phases ...string) bool {
		for _, p := range phases {
			if phase == p {
				return true
			}
		}
		return false
	}
	starting := []string{v1alpha1.PhaseNone, v1alpha1.PhaseCreating}
	if in(phaseNone, v1alpha1.PhaseStopped, v1alpha1.PhaseExpired) && startRefusal(def) == nil {
		out = append(out, actionStart)
	}
	if in(append(starting, v1alpha1.PhaseRunning, v1alpha1.PhaseQueued, v1alpha1.PhaseStopped)...) && extendable(c, def, now) {
		out = append(out, actionExtend)
	}
	if in(v1alpha1.PhaseRunning, v1alpha1.PhaseError) {
		out = append(out, actionRestart)
	}
	if in(append(starting, v1alpha1.PhaseRunning, v1alpha1.PhaseQueued, v1alpha1.PhaseError)...) {
		out = append(out, actionStop)
	}
	if c != nil && c.DeletionTimestamp == nil && !in(v1alpha1.PhaseTerminating, v1alpha1.PhaseDeleted) {
		out = append(out, actionDelete)
	}
	return out
}

// extendable says whether an extension of c would give it more time: the definition has a
// timeout to extend by, rCTF did not create the instance unextendable, and its maxLifetime
// leaves room beyond the current expiry.
func extendable(c *v1alpha1.Challenge, def *v1alpha1.ChallengeDefinition, now time.Time) bool {
	if _, refused := extension(def); refused != nil || c == nil || c.Annotations[annotationExtendable] == "false" {
		return false
	}
	latest, capped := latestExpiry(c, def)
	if !capped {
		return true
	}
	expiresAt, err := time.Parse(time.RFC3339, c.Status.ExpiresAt)
	if err != nil {
		expiresAt = now // not synced yet: room if the cap is ahead
	}
	return latest.After(expiresAt) && latest.After(now)
}

// countdown is a time left as the page writes it (its script too): 1h 02m 03s, 29m 41s, 41s.
func countdown(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	h, m := s/3600, s/60%60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh %02dm %02ds", h, m, s%60)
	case m > 0:
		return fmt.Sprintf("%dm %02ds", m, s%60)
	}
	return fmt.Sprintf("%ds", s)
}

// pageEndpoints are the instance's endpoints a player reaches (not the in-cluster ones, which
// are for its peers), in their order, each with the commands to paste.
func pageEndpoints(c *v1alpha1.Challenge) []pageEndpoint {
	out := []pageEndpoint{}
	for _, ep := range c.Status.Endpoints {
		if ep.Host == "" || strings.HasSuffix(ep.Host, "."+c.Namespace+".svc") || strings.Contains(ep.Host, "."+c.Namespace+".svc.") {
			continue
		}
		out = append(out, pageEndpoint{Name: ep.Name, Host: ep.Host, Port: ep.Port, Token: ep.Token, Commands: commandsOf(ep)})
		if _, ok := webSocketOrigin(ep.WebSocketURL); ok && ep.Token != "" {
			out[len(out)-1].WebSocketURL = ep.WebSocketURL
		}
		if scheme, _, _ := strings.Cut(ep.URL, "://"); scheme == "http" || scheme == "https" {
			out[len(out)-1].URL = ep.URL
		}
	}
	return out
}

// commandsOf are the lines a player pastes to reach ep.
func commandsOf(ep v1alpha1.Endpoint) []pageCommand {
	port := strconv.Itoa(int(ep.Port))
	nc := "nc " + ep.Host + " " + port
	scheme, _, _ := strings.Cut(ep.URL, "://")
	switch {
	case ep.Token != "":
		out := []pageCommand{
			{Label: "Connect, then type the token", Text: nc},
			{Label: "Token", Text: ep.Token, Token: true},
			{Label: "In one line", Text: "(echo " + ep.Token + "; cat) | " + nc},
			{Label: "pwntools", Text: fmt.Sprintf("r = remote(%q, %s); r.sendline(b%q)", ep.Host, port, ep.Token)},
		}
		if _, ok := webSocketOrigin(ep.WebSocketURL); ok {
			out = append(out, webSocketCommands(ep.WebSocketURL)...)
		}
		return out
	case scheme == "http" || scheme == "https":
		return []pageCommand{{Label: "URL", Text: ep.URL}}
	case scheme == "tls":
		return []pageCommand{{Label: "Connect over TLS", Text: "ncat --ssl " + ep.Host + " " + port}}
	case ep.Protocol == "UDP":
		return []pageCommand{{Label: "Connect (UDP)", Text: "nc -u " + ep.Host + " " + port}}
	}
	return []pageCommand{{Label: "Connect", Text: nc}}
}
