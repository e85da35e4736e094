package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/platform"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// The event's namespace, and the hosts its instances are reached at (the hook's --ingress-domain
// with --ingress-scheme=https, and the TCP gateway's address).
const (
	namespace     = "ctf"
	ingressDomain = "challenges.example.org"
	gatewayHost   = "tcp.challenges.example.org"
	gatewayPort   = 1337
	// instanceLifetime is the definitions' timeout, and rCTF's timeoutMilliseconds on a start.
	instanceLifetime = 30 * time.Minute
)

// A team's instance is starting (phase Creating: rCTF polls every 2 s) or running (every 10 s).
const (
	stateStarting = "starting"
	stateRunning  = "running"
)

// challenge is one rCTF challenge and the ChallengeDefinition marked with its id.
type challenge struct {
	id         string // rCTF's challengeIntegrationId
	definition *v1alpha1.ChallengeDefinition
}

// team is one team polling its instance of one challenge.
type team struct {
	id        string
	challenge *challenge
	state     string // stateStarting or stateRunning
	get       []byte // the body rCTF POSTs to get the instance
}

// newToken is the rCTF token, as docs say to create one: head -c 32 /dev/urandom | base64.
func newToken() string {
	key := make([]byte, 32)
	rand.Read(key)
	return base64.StdEncoding.EncodeToString(key)
}

// uuidOf is a UUID-shaped id, stable for kind and i: rCTF names teams and challenges by UUIDs.
func uuidOf(kind string, i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", kind, i))
	h := hex.EncodeToString(sum[:16])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// newChallenges are n rCTF challenges, each marked on its own definition: a container with a
// TCP port through the TCP gateway and an HTTP port behind the Ingress, the flag from rCTF.
func newChallenges(n int, now time.Time) []*challenge {
	categories := []string{"web", "pwn", "rev", "crypto", "misc"}
	out := make([]*challenge, n)
	for i := range out {
		id := uuidOf("challenge", i)
		name := fmt.Sprintf("%s-%02d", categories[i%len(categories)], i)
		out[i] = &challenge{id: id, definition: &v1alpha1.ChallengeDefinition{
			TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: "ChallengeDefinition"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: namespace, UID: types.UID(uuidOf("definition-uid", i)), Generation: 1,
				CreationTimestamp: metav1.NewTime(now.Add(-24 * time.Hour)),
				Annotations:       map[string]string{v1alpha1.AnnotationRCTFChallenge: id},
			},
			Spec: v1alpha1.DefinitionSpec{
				Containers: []v1alpha1.Container{{
					Name:  "app",
					Image: "registry.example.org/ctf/" + name + ":1.0",
					Ports: []v1alpha1.ContainerPort{{Name: "pwn", ContainerPort: 31337, Protocol: "TCP"}, {Name: "http", ContainerPort: 8080, Protocol: "TCP"}},
				}},
				Expose:      []v1alpha1.Expose{{Port: 31337, Type: v1alpha1.ExposeTCP}, {Port: 8080, Type: v1alpha1.ExposeHTTP}},
				Timeout:     instanceLifetime.String(),
				MaxLifetime: "2h",
				Flag:        &v1alpha1.Flag{Platform: true, Env: "FLAG"},
			},
		}}
	}
	return out
}

// form is an rCTF request body; config is the challenge's instancer configuration, which the
// component only checks is an object.
func form(kind, token, teamID, challengeID string, extra map[string]any) []byte {
	body := map[string]any{"kind": kind, "rctfAuthToken": token, "teamId": teamID, "challengeIntegrationId": challengeID,
		"config": map[string]any{"namespace": namespace}}
	for k, v := range extra {
		body[k] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

// createForm is rCTF's start of a team's instance: the challenge's expose list, its timeout and
// the team's flag.
func createForm(token, teamID, challengeID string) []byte {
	return form("instancerCreateInstanceForm", token, teamID, challengeID, map[string]any{
		"expose": []map[string]any{
			{"kind": "tcp", "shouldDisplay": true, "title": "pwn"},
			{"kind": "https", "shouldDisplay": true, "title": "web"},
		},
		"timeoutMilliseconds": instanceLifetime.Milliseconds(),
		"extendable":          true,
		"flags":               []map[string]any{{"provider": "rctf", "flag": "flag{" + hex.EncodeToString([]byte(teamID))[:32] + "}"}},
	})
}

// recorder is a platform.Store that keeps the Challenge the component creates and nothing else:
// the fixture's Challenges are the component's own, named and labelled by it.
type recorder struct {
	challenges []*challenge
	created    *v1alpha1.Challenge
}

func (r *recorder) Definitions(id string) []*v1alpha1.ChallengeDefinition {
	for _, c := range r.challenges {
		if c.id == id {
			return []*v1alpha1.ChallengeDefinition{c.definition}
		}
	}
	return nil
}

func (r *recorder) Instances(string, string, string) []*v1alpha1.Challenge { return nil }

func (r *recorder) Get(context.Context, string, string) (*v1alpha1.Challenge, error) {
	return nil, errors.New("the recorder reads nothing")
}

func (r *recorder) Create(_ context.Context, c *v1alpha1.Challenge) (*v1alpha1.Challenge, error) {
	r.created = c
	return c, nil
}

func (r *recorder) Patch(context.Context, string, string, []byte) (*v1alpha1.Challenge, error) {
	return nil, errors.New("the recorder patches nothing")
}

func (r *recorder) Delete(context.Context, string, string) error {
	return errors.New("the recorder deletes nothing")
}

// fixture is the event: the definitions and every team's instance, as the fake API server holds
// them.
type fixture struct {
	challenges []*challenge
	teams      []*team
	objects    []runtime.Object
}

// newFixture builds n teams, the first starting of them starting, team i playing challenge
// i mod len(challenges). Each Challenge is what the component's own start creates (its handler
// served a PUT over a recorder), with the metadata the API server adds and the status the hook
// writes: Creating while starting; Running with a TCP gateway endpoint and its token and an
// HTTPS endpoint.
func newFixture(challenges []*challenge, n, starting int, token string, now time.Time, logger *slog.Logger) (*fixture, error) {
	rec := &recorder{challenges: challenges}
	create := platform.NewHandler(platform.NewInstancer(rec, func() time.Time { return now }, logger, platform.RateLimit{Burst: 1, Every: time.Hour}),
		[]byte(token), newMetrics(), logger)
	gatewayKey := bytes.Repeat([]byte{7}, 32)
	f := &fixture{challenges: challenges}
	for _, c := range challenges {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c.definition)
		if err != nil {
			return nil, err
		}
		f.objects = append(f.objects, &unstructured.Unstructured{Object: u})
	}
	for i := range n {
		t := &team{id: uuidOf("team", i), challenge: challenges[i%len(challenges)], state: stateRunning}
		if i < starting {
			t.state = stateStarting
		}
		t.get = form("instancerGetInstanceForm", token, t.id, t.challenge.id, nil)
		w := httptest.NewRecorder()
		create.ServeHTTP(w, httptest.NewRequest(http.MethodPut, "/v1/instances/", bytes.NewReader(createForm(token, t.id, t.challenge.id))))
		if w.Code != http.StatusOK || rec.created == nil {
			return nil, fmt.Errorf("team %s: the component's start answered %d: %s", t.id, w.Code, w.Body)
		}
		c := rec.created
		rec.created = nil
		// The ClusterIP of the instance's Service, whose address the gateway's token seals.
		service := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), 31337)
		gatewayToken, err := tcptoken.Mint(gatewayKey, tcptoken.Target{Service: service})
		if err != nil {
			return nil, err
		}
		started := now.Add(-time.Duration(i%25) * time.Minute)
		if t.state == stateStarting {
			started = now.Add(-time.Duration(i%20) * time.Second)
		}
		completeChallenge(c, t.state, uuidOf("challenge-uid", i), started, gatewayToken)
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c)
		if err != nil {
			return nil, err
		}
		f.objects = append(f.objects, &unstructured.Unstructured{Object: u})
		f.teams = append(f.teams, t)
	}
	return f, nil
}

// completeChallenge adds what the API server and the hook add to a Challenge the component
// created at started: metadata (uid, creation time, generation, the finalizer, managed fields)
// and the status of state.
func completeChallenge(c *v1alpha1.Challenge, state, uid string, started time.Time, gatewayToken string) {
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	c.UID, c.Generation, c.CreationTimestamp = types.UID(uid), 1, metav1.NewTime(started)
	c.Finalizers = []string{"metacontroller.io/compositecontroller-challenge-hook"}
	c.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "challenge-hook-platform", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1alpha1.APIVersion,
			Time: &c.CreationTimestamp, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(
				`{"f:metadata":{"f:annotations":{".":{},"f:ctf.challenge-hook.dev/rctf-attempt":{}},"f:labels":{".":{},"f:app.kubernetes.io/managed-by":{},"f:ctf.challenge-hook.dev/owner":{}}},"f:spec":{".":{},"f:definitionRef":{".":{},"f:name":{}},"f:flag":{},"f:owner":{},"f:timeout":{}}}`)},
		{Manager: "metacontroller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1alpha1.APIVersion,
			Time: &c.CreationTimestamp, FieldsType: "FieldsV1", Subresource: "status", FieldsV1: metav1.NewFieldsV1(
				`{"f:status":{".":{},"f:conditions":{},"f:endpoints":{},"f:expiresAt":{},"f:instanceId":{},"f:message":{},"f:observedGeneration":{},"f:phase":{},"f:reason":{},"f:readyAt":{},"f:startedAt":{}}}`)},
	}
	instanceID := "i" + strings.ReplaceAll(uid, "-", "")[:15]
	host := instanceID + "." + ingressDomain
	expires := started.Add(instanceLifetime)
	condition := func(kind, status, reason, message string, since time.Time) metav1.Condition {
		return metav1.Condition{Type: kind, Status: metav1.ConditionStatus(status), ObservedGeneration: 1,
			LastTransitionTime: metav1.NewTime(since), Reason: reason, Message: message}
	}
	soon := "expires at " + at(expires) + "; expiring soon from " + at(expires.Add(-5*time.Minute))
	c.Status = v1alpha1.ChallengeStatus{
		Phase: v1alpha1.PhaseCreating, Reason: v1alpha1.ReasonStarting, Message: "waiting for the pod to become ready",
		InstanceID: instanceID, StartedAt: at(started), ExpiresAt: at(expires), ObservedGeneration: 1,
		Conditions: []metav1.Condition{
			condition("Ready", "False", v1alpha1.ReasonStarting, "waiting for the pod to become ready", started),
			condition("ExpiringSoon", "False", "NotExpiringSoon", soon, started),
			condition("Expired", "False", "NotExpired", "expires at "+at(expires), started),
		},
	}
	if state == stateStarting {
		return
	}
	ready := started.Add(40 * time.Second)
	url := "https://" + host + "/"
	c.Status.Phase, c.Status.Reason, c.Status.Message, c.Status.ReadyAt = v1alpha1.PhaseRunning, v1alpha1.ReasonReady, "ready at "+url, at(ready)
	c.Status.Conditions[0] = condition("Ready", "True", v1alpha1.ReasonReady, "ready at "+url, ready)
	gateway := fmt.Sprintf("%s:%d", gatewayHost, gatewayPort)
	c.Status.Endpoints = []v1alpha1.Endpoint{
		{Name: "pwn", Protocol: "TCP", Host: gatewayHost, Port: gatewayPort, URL: "tcp://" + gateway,
			Command: fmt.Sprintf("nc %s %d", gatewayHost, gatewayPort), Token: gatewayToken},
		{Name: "http", Protocol: "TCP", Host: host, Port: 443, URL: url, Command: url},
	}
}

// readAll reads and closes a response's body.
func readAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
