package platform

import (
	"fmt"
	"strings"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// describe is rCTF's view of the team's instance c (nil: none) at now: its status, the time left
// and, while it runs, its endpoints.
func describe(c *v1alpha1.Challenge, now time.Time) details {
	d := details{Kind: kindDetails, Status: statusStopped, TimeLeftMilliseconds: zeroMilliseconds(), Endpoints: []endpoint{}}
	if c == nil {
		return d
	}
	d.TimeLeftMilliseconds = nil // unknown until the hook's first status
	if left, ok := timeLeft(c, now); ok {
		d.TimeLeftMilliseconds = &left
	}
	status := c.Status
	switch {
	case c.DeletionTimestamp != nil || status.Phase == v1alpha1.PhaseTerminating || status.Phase == v1alpha1.PhaseDeleted:
		d.Status, d.TimeLeftMilliseconds = statusStopping, zeroMilliseconds()
	case status.Phase == v1alpha1.PhaseRunning:
		d.Status, d.Endpoints = statusRunning, endpointsOf(c)
	case status.Phase == v1alpha1.PhaseError:
		d.Status = statusErrored
		d.Endpoints = []endpoint{note(status.Reason, status.Message)}
	case status.Phase == v1alpha1.PhaseStopped || status.Phase == v1alpha1.PhaseExpired:
		d.TimeLeftMilliseconds = zeroMilliseconds()
	case status.Phase == v1alpha1.PhaseQueued:
		d.Status = statusStarting
		d.Endpoints = []endpoint{note("queued", fmt.Sprintf("Position %d: %s", status.QueuePosition, status.Message))}
	default: // None, Creating, or not synced yet
		d.Status = statusStarting
	}
	return d
}

// timeLeft is the time until the instance's expiry, in milliseconds, never negative; false while
// the hook has not computed it yet.
func timeLeft(c *v1alpha1.Challenge, now time.Time) (int64, bool) {
	expiresAt, err := time.Parse(time.RFC3339, c.Status.ExpiresAt)
	if err != nil {
		return 0, false
	}
	return max(expiresAt.Sub(now).Milliseconds(), 0), true
}

func zeroMilliseconds() *int64 {
	zero := int64(0)
	return &zero
}

// note is a line of text rCTF shows beside the expose list.
func note(title, text string) endpoint {
	return endpoint{Kind: endpointRaw, Title: title, Text: text, BypassExpose: true}
}

// endpointsOf maps the instance's endpoints to rCTF's, in their order (the order of the
// definition's expose list): the i-th endpoint a player can reach is the i-th entry of the rCTF
// challenge's expose list. A ClusterIP exposure (in-cluster DNS) is for peers, not players, and is
// left out. Each TCP gateway endpoint's token follows the list as a raw endpoint rCTF shows
// whatever its expose list says: rCTF shows nc host port for a tcp endpoint, and no text; so
// does its webSocketURL with websocat's and wsrx's commands, when it has one.
func endpointsOf(c *v1alpha1.Challenge) []endpoint {
	out := []endpoint{}
	var tokens []endpoint
	gateways := 0
	for _, ep := range c.Status.Endpoints {
		if ep.Token != "" {
			gateways++
		}
	}
	for _, ep := range c.Status.Endpoints {
		scheme, _, _ := strings.Cut(ep.URL, "://")
		switch {
		case ep.Token != "":
			out = append(out, endpoint{Kind: endpointTCP, Host: ep.Host, Port: ep.Port})
			title := "token"
			if gateways > 1 {
				title = "token for " + ep.Name
			}
			command := fmt.Sprintf("(echo %s; cat) | nc %s %d", ep.Token, ep.Host, ep.Port)
			tokens = append(tokens, note(title, ep.Token+"\n"+command))
			if _, ok := webSocketOrigin(ep.WebSocketURL); ok {
				tokens = append(tokens, note(strings.Replace(title, "token", "websocket", 1), webSocketText(ep.WebSocketURL)))
			}
		case strings.HasSuffix(ep.Host, "."+c.Namespace+".svc") || strings.Contains(ep.Host, "."+c.Namespace+".svc."):
			continue
		case scheme == "https":
			out = append(out, endpoint{Kind: endpointHTTPS, Host: ep.Host, Port: ep.Port})
		case scheme == "http":
			out = append(out, endpoint{Kind: endpointHTTP, Host: ep.Host, Port: ep.Port})
		case scheme == "tls":
			out = append(out, endpoint{Kind: endpointTCPSSL, Host: ep.Host, Port: ep.Port})
		case ep.Protocol == "TCP":
			out = append(out, endpoint{Kind: endpointTCP, Host: ep.Host, Port: ep.Port})
		default: // UDP, SCTP: rCTF has no kind for them; the command says how
			out = append(out, endpoint{Kind: endpointRaw, Host: ep.Host, Port: ep.Port, Text: ep.Command})
		}
	}
	return append(out, tokens...)
}
