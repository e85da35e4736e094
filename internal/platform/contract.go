// Package platform is the platform component: it serves rCTF v2's instancer contract (the
// requests of rCTF's provider instancers/docker) over Challenges, from an informer cache, with
// the platform's rights only.
//
// rCTF sends every request to {apiUrl}/v1/instances/ with a JSON body naming its kind, its
// credential (rctfAuthToken: there is no Authorization header), the team and the challenge; it
// reads only the answer's kind, never its HTTP status, so every failure is an instancerError body.
package platform

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// The kinds of rCTF's request bodies, one per verb.
const (
	kindCreate = "instancerCreateInstanceForm"
	kindGet    = "instancerGetInstanceForm"
	kindRenew  = "instancerRenewInstanceForm"
	kindDelete = "instancerDeleteInstanceForm"
)

// kindOfMethod is the request kind each HTTP method carries.
var kindOfMethod = map[string]string{
	http.MethodPut:    kindCreate,
	http.MethodPost:   kindGet,
	http.MethodPatch:  kindRenew,
	http.MethodDelete: kindDelete,
}

// The kinds of rCTF's answers.
const (
	kindDetails = "instancerInstanceDetails"
	kindError   = "instancerError"
)

// The statuses rCTF shows a player.
const (
	statusStopped  = "stopped"
	statusStarting = "starting"
	statusRunning  = "running"
	statusStopping = "stopping"
	statusErrored  = "errored"
)

// The kinds of an endpoint, as rCTF's ExposeKind names them.
const (
	endpointTCP    = "tcp"
	endpointTCPSSL = "tcp-ssl"
	endpointHTTP   = "http"
	endpointHTTPS  = "https"
	endpointRaw    = "raw"
)

// form is a request body: every kind carries the first five fields; a create carries the
// challenge's instancer configuration and the team's flags, a renewal its new timeout. Fields
// rCTF may add are ignored.
type form struct {
	Kind                   string          `json:"kind"`
	RCTFAuthToken          string          `json:"rctfAuthToken"`
	TeamID                 string          `json:"teamId"`
	ChallengeIntegrationID string          `json:"challengeIntegrationId"`
	Config                 json.RawMessage `json:"config"`

	Expose              []exposeEntry `json:"expose"`
	TimeoutMilliseconds *int64        `json:"timeoutMilliseconds"`
	Extendable          *bool         `json:"extendable"`
	Flags               []teamFlag    `json:"flags"`
}

// exposeEntry is one entry of the challenge's expose list in rCTF: what rCTF shows of the
// endpoint at the same index of the answer.
type exposeEntry struct {
	Kind          string `json:"kind"`
	ShouldDisplay bool   `json:"shouldDisplay"`
	Title         string `json:"title"`
}

// teamFlag is the flag rCTF minted for the team.
type teamFlag struct {
	Provider string `json:"provider"`
	Flag     string `json:"flag"`
}

// details is the answer about the team's instance.
type details struct {
	Kind                 string     `json:"kind"`
	Status               string     `json:"status"`
	TimeLeftMilliseconds *int64     `json:"timeLeftMilliseconds"`
	Endpoints            []endpoint `json:"endpoints"`
}

// endpoint is one way in, in the order of the challenge's expose list; the ones beyond it carry
// BypassExpose, which rCTF shows without an expose entry.
type endpoint struct {
	Kind         string `json:"kind"`
	Host         string `json:"host"`
	Port         int32  `json:"port"`
	Title        string `json:"title,omitempty"`
	Text         string `json:"text,omitempty"`
	BypassExpose bool   `json:"bypassExpose,omitempty"`
}

// instancerError is every failure's answer: status is for the logs and any client but rCTF,
// which reads the kind only.
type instancerError struct {
	status  int
	message string
}

func (e *instancerError) Error() string { return e.message }

// refuse is an instancerError with status and a message that says what to do.
func refuse(status int, format string, args ...any) *instancerError {
	return &instancerError{status: status, message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of an instancerError.
type errorBody struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// maxTimeoutMilliseconds bounds a lifetime rCTF asks for, far beyond any event, well within a
// time.Duration (the definition's maxLifetime caps it anyway).
const maxTimeoutMilliseconds = 365 * 24 * 60 * 60 * 1000

// checkForm checks what every kind needs, and what its own kind adds, once the credential is
// known to be right: a missing field is named, never guessed.
func checkForm(f *form, method string) *instancerError {
	want := kindOfMethod[method]
	if f.Kind != want {
		return refuse(http.StatusBadRequest, "kind %q on %s: rCTF sends %q with %s", f.Kind, method, want, method)
	}
	switch {
	case f.TeamID == "":
		return refuse(http.StatusBadRequest, "teamId is missing")
	case f.ChallengeIntegrationID == "":
		return refuse(http.StatusBadRequest, "challengeIntegrationId is missing")
	case len(f.Config) == 0 || f.Config[0] != '{':
		return refuse(http.StatusBadRequest, "config is missing or not an object")
	}
	if f.Kind == kindCreate || f.Kind == kindRenew {
		if f.TimeoutMilliseconds == nil {
			return refuse(http.StatusBadRequest, "timeoutMilliseconds is missing")
		}
		if ms := *f.TimeoutMilliseconds; ms <= 0 || ms > maxTimeoutMilliseconds {
			return refuse(http.StatusBadRequest, "timeoutMilliseconds must be positive and at most %d (a year), not %d", int64(maxTimeoutMilliseconds), ms)
		}
	}
	return nil
}
