package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// answer is the part of the component's answer that the check reads.
type answer struct {
	Status    string `json:"status"`
	Endpoints []struct {
		Kind string `json:"kind"`
	} `json:"endpoints"`
}

// checkAnswers gets every team's instance from the component once and checks it stands as the
// fixture put it (running: the TCP gateway's endpoint, the HTTPS one, the token's note); it
// returns a running team's answer.
func checkAnswers(p *poster, teams []*team) ([]byte, error) {
	var running []byte
	for _, t := range teams {
		body, err := p.post(component, t.get)
		if err != nil {
			return nil, fmt.Errorf("team %s: %w", t.id, err)
		}
		var a answer
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, fmt.Errorf("team %s: %w", t.id, err)
		}
		var kinds []string
		for _, e := range a.Endpoints {
			kinds = append(kinds, e.Kind)
		}
		want := ""
		if t.state == stateRunning {
			want, running = "tcp,https,raw", body
		}
		if a.Status != t.state || strings.Join(kinds, ",") != want {
			return nil, fmt.Errorf("team %s: answered %s with endpoints %v, not %s with %q: %s", t.id, a.Status, kinds, t.state, want, body)
		}
	}
	if running == nil {
		return nil, errors.New("no team runs: the floor answers a running team's answer (-starting below 1)")
	}
	return running, nil
}

// timeCreates starts n new teams' instances through the component (PUT), each timed, and then
// times how long until a get answers the new instance from the cache (starting, not stopped).
func timeCreates(p *poster, client dynamic.Interface, fx *fixture, token string, n int) error {
	var took, visible []time.Duration
	for i := range n {
		teamID, c := uuidOf("new-team", i), fx.challenges[i%len(fx.challenges)]
		start := time.Now()
		if _, err := p.send(http.MethodPut, component, createForm(token, teamID, c.id)); err != nil {
			return fmt.Errorf("create for team %s: %w", teamID, err)
		}
		answered := time.Now()
		took = append(took, answered.Sub(start))
		get := form("instancerGetInstanceForm", token, teamID, c.id, nil)
		for {
			body, err := p.post(component, get)
			if err != nil {
				return fmt.Errorf("get after create for team %s: %w", teamID, err)
			}
			var a answer
			if err := json.Unmarshal(body, &a); err != nil {
				return err
			}
			if a.Status == stateStarting {
				break
			}
			if time.Since(answered) > 10*time.Second {
				return fmt.Errorf("team %s: 10 s after its create, a get still answers %s", teamID, a.Status)
			}
		}
		visible = append(visible, time.Since(answered))
	}
	direct, err := timeFakeCreates(client, fx, n)
	if err != nil {
		return err
	}
	t, v, d := statsOf(took), statsOf(visible), statsOf(direct)
	fmt.Printf("\ncreate: %d PUTs of a new team's instance through the component, one at a time, the fake client in place of the API server:\n", n)
	fmt.Printf("  first %s, p50 %s, max %s\n", ms(took[0]), ms(t.p50), ms(t.max))
	fmt.Printf("  the fake client answers in-process: this is the floor of \"within one API round trip\"; a real API server adds its\n" +
		"  network round trip, admission and the etcd write\n")
	fmt.Printf("  the fake client's Create alone, of the same Challenges, no HTTP and no component: p50 %s, max %s\n", ms(d.p50), ms(d.max))
	fmt.Printf("  from the create's answer to a get answering the new instance (starting, not stopped) from the cache: p50 %s, max %s\n", ms(v.p50), ms(v.max))
	return nil
}

// timeFakeCreates creates n copies of the fixture's first Challenge, renamed, of another owner and
// without status, with the fake client directly, each timed.
func timeFakeCreates(client dynamic.Interface, fx *fixture, n int) ([]time.Duration, error) {
	var took []time.Duration
	for i := range n {
		u := fx.objects[len(fx.challenges)].(*unstructured.Unstructured).DeepCopy()
		u.SetName(fmt.Sprintf("%s-direct-%d", u.GetName(), i))
		u.SetUID("")
		unstructured.RemoveNestedField(u.Object, "status")
		owner := uuidOf("direct-team", i) // no team's instance
		u.SetLabels(map[string]string{v1alpha1.LabelOwner: owner})
		if err := unstructured.SetNestedField(u.Object, owner, "spec", "owner"); err != nil {
			return nil, err
		}
		start := time.Now()
		_, err := client.Resource(u.GroupVersionKind().GroupVersion().WithResource("challenges")).Namespace(namespace).Create(
			context.Background(), u, metav1.CreateOptions{FieldManager: "platform-load"})
		if err != nil {
			return nil, err
		}
		took = append(took, time.Since(start))
	}
	return took, nil
}
