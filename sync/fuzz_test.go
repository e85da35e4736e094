package sync_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/golden"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Fuzz targets. Seeds are the golden requests; crashers found by `go test -fuzz` are kept under
// sync/testdata/fuzz/<FuzzName>/ by the go tool and run by every plain `go test` (hack/fuzz.sh).

var fuzzNow = time.Date(2026, 11, 1, 12, 5, 0, 0, time.UTC)

func fuzzConfig() hooksync.Config {
	cfg := hooksync.DefaultConfig()
	cfg.FlagKey = []byte("fuzz-flag-key")
	// A TCP gateway, so that TCP exposures are built rather than refused.
	cfg.TCPGateway.Host, cfg.TCPGateway.Port = "tcp.ctf.example.org", 1337
	cfg.TCPGateway.Key = []byte("fuzz-tcp-gateway-key-of-32-bytes")
	// The range the simulated API server gives ClusterIPs from: the gateway dials only inside it.
	cfg.ServiceCIDRs = []string{"10.96.0.0/12"}
	return cfg
}

// goldenRequests are the bodies of every testdata/<case>/request.json.
func goldenRequests(f *testing.F) [][]byte {
	cases, err := golden.Cases("../testdata")
	if err != nil {
		f.Fatal(err)
	}
	var bodies [][]byte
	for _, c := range cases {
		bodies = append(bodies, c.Request)
	}
	return bodies
}

func encode(t *testing.T, v any) []byte {
	t.Helper()
	out, err := hooksync.EncodeResponse(v)
	if err != nil {
		t.Fatalf("EncodeResponse: %v", err)
	}
	return out
}

// FuzzDecodeAndSync: any body either fails to decode with ErrBadRequest, or decodes and syncs
// without panicking, and the answer is the same byte for byte when decoded and synced again.
func FuzzDecodeAndSync(f *testing.F) {
	for _, body := range goldenRequests(f) {
		f.Add(body)
	}
	f.Add([]byte(`{"parent":{"metadata":{"name":"a"}},"children":null,"related":null}`))
	cfg := fuzzConfig()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := hooksync.DecodeRequest(body)
		if err != nil {
			if !errors.Is(err, hooksync.ErrBadRequest) {
				t.Fatalf("decode error does not wrap ErrBadRequest: %v", err)
			}
			return
		}
		// A few syncs, because a map-order dependency shows only on some of them.
		first := encode(t, hooksync.Sync(req, fuzzNow, cfg))
		for range 3 {
			if again := encode(t, hooksync.Sync(req, fuzzNow, cfg)); !bytes.Equal(first, again) {
				t.Fatalf("two syncs of one request differ:\n%s\n%s", first, again)
			}
		}
		again, err := hooksync.DecodeRequest(body)
		if err != nil {
			t.Fatalf("the second decode of the same body failed: %v", err)
		}
		if third := encode(t, hooksync.Sync(again, fuzzNow, cfg)); !bytes.Equal(first, third) {
			t.Fatalf("syncs of two decodes of one body differ:\n%s\n%s", first, third)
		}
		var wire map[string]json.RawMessage
		if err := json.Unmarshal(first, &wire); err != nil {
			t.Fatalf("the answer is not a JSON object: %v", err)
		}
		for _, key := range []string{"status", "children", "resyncAfterSeconds", "finalized"} {
			if _, ok := wire[key]; !ok {
				t.Fatalf("the answer lacks %q: %s", key, first)
			}
		}
		if string(wire["children"]) == "null" {
			t.Fatalf("children is null, which deletes every child: %s", first)
		}
	})
}

// FuzzCustomize: any body either fails to decode with ErrBadRequest or gives one answer.
func FuzzCustomize(f *testing.F) {
	for _, body := range goldenRequests(f) {
		f.Add(body)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := hooksync.DecodeCustomizeRequest(body)
		if err != nil {
			if !errors.Is(err, hooksync.ErrBadRequest) {
				t.Fatalf("decode error does not wrap ErrBadRequest: %v", err)
			}
			return
		}
		first := encode(t, hooksync.Customize(req, hooksync.DefaultConfig()))
		if second := encode(t, hooksync.Customize(req, hooksync.DefaultConfig())); !bytes.Equal(first, second) {
			t.Fatalf("two answers to one request differ:\n%s\n%s", first, second)
		}
	})
}

// definitionSeeds are the templates of the golden requests: inline ones and related definitions.
func definitionSeeds(f *testing.F) [][]byte {
	var seeds [][]byte
	for _, body := range goldenRequests(f) {
		var req struct {
			Parent struct {
				Spec struct {
					Template json.RawMessage `json:"template"`
				} `json:"spec"`
			} `json:"parent"`
			Related map[string]map[string]struct {
				Spec json.RawMessage `json:"spec"`
			} `json:"related"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			f.Fatal(err)
		}
		if len(req.Parent.Spec.Template) > 0 {
			seeds = append(seeds, req.Parent.Spec.Template)
		}
		for key, objects := range req.Related {
			if !strings.HasPrefix(key, "ChallengeDefinition.") {
				continue
			}
			for _, obj := range objects {
				if len(obj.Spec) > 0 {
					seeds = append(seeds, obj.Spec)
				}
			}
		}
	}
	return seeds
}

// FuzzValidateDefinition: validation never panics and is deterministic, and a template it accepts
// builds an instance: an inline Challenge with it (and the platform's flag, when the template takes
// its flag from the platform) syncs to children with a Pod, not to Error.
func FuzzValidateDefinition(f *testing.F) {
	for _, seed := range definitionSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte(`{"containers":[{"name":"a","image":"b"}]}`))
	// A hook with a Gateway, under a CompositeController with the Gateway API component: every
	// valid exposure, TLS included, can be built.
	cfg := fuzzConfig()
	cfg.Gateway = &hooksync.GatewayRef{Namespace: "gateway-system", Name: "ctf"}
	declared := []hooksync.ChildResource{
		{APIVersion: "gateway.networking.k8s.io/v1", Resource: "httproutes"},
		{APIVersion: "gateway.networking.k8s.io/v1", Resource: "tlsroutes"},
	}
	f.Fuzz(func(t *testing.T, specJSON []byte) {
		var spec v1alpha1.DefinitionSpec
		if json.Unmarshal(specJSON, &spec) != nil {
			return
		}
		// The error becomes the status message: it must not depend on map order, or the status
		// would change on every sync. Go randomizes map order per loop (unevenly: one order can come up
		// 9 times in 10), so 32 tries catch it.
		path := field.NewPath("spec", "template")
		errs := hooksync.ValidateDefinition(spec, path)
		for range 32 {
			if again := hooksync.ValidateDefinition(spec, path); !reflect.DeepEqual(errs, again) {
				t.Fatalf("validation is not deterministic: %v, then %v", errs, again)
			}
		}
		if len(errs) > 0 {
			return
		}
		req := hooksync.Request{DeclaredChildTypes: declared, Parent: hooksync.Challenge{
			APIVersion: v1alpha1.APIVersion,
			Kind:       "Challenge",
			Metadata:   hooksync.ChallengeMeta{Name: "fuzz", Namespace: "ctf", UID: "00000000-0000-4000-8000-000000000000", Generation: 1},
			Spec:       v1alpha1.ChallengeSpec{Owner: "team-1", Template: &spec},
		}}
		if spec.Flag != nil && spec.Flag.Platform {
			req.Parent.Spec.Flag = "rctf{fuzz}"
		}
		resp := hooksync.AnswerWithEveryPod(t, req, fuzzNow, cfg)
		if resp.Status.Phase == v1alpha1.PhaseError {
			t.Fatalf("ValidateDefinition accepts the template but sync answers Error %s: %s", resp.Status.Reason, resp.Status.Message)
		}
		out := encode(t, resp)
		var wire struct {
			Children []struct {
				Kind string `json:"kind"`
			} `json:"children"`
		}
		if err := json.Unmarshal(out, &wire); err != nil {
			t.Fatal(err)
		}
		pods := 0
		for _, c := range wire.Children {
			if c.Kind == "Pod" {
				pods++
			}
		}
		if want := max(1, len(spec.Pods)); pods != want {
			t.Fatalf("a valid template of %d pods built %d Pods: %s", want, pods, out)
		}
	})
}

// FuzzFlagVerification: any body either fails to decode with ErrBadRequest, or decodes into a
// subject whose own dynamic flag verifies, and a submission that verifies carries that flag's hex
// part: nothing else is accepted, whatever the body holds.
func FuzzFlagVerification(f *testing.F) {
	f.Add([]byte(`{"definition":"ctf/web-sqli","owner":"team-42","flag":"CTF{0123456789abcdef0123456789abcdef}"}`))
	f.Add([]byte(`{"definition":"inline/ctf/pwn-team7","owner":"team-7","flag":"flag{}"}`))
	f.Add([]byte(`{"definition":"ctf/web","owner":"t","flag":"x{y}","extra":1}`))
	key := fuzzConfig().FlagKey
	// A shared flag: team-2's, submitted by team-1.
	f.Add([]byte(`{"definition":"ctf/web-sqli","owner":"team-1","flag":"` + hooksync.DynamicFlag(key, "ctf/web-sqli", "team-2", "CTF") + `","candidates":["team-2","team-42"]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := hooksync.DecodeFlagVerification(body)
		if err != nil {
			if !errors.Is(err, hooksync.ErrBadRequest) {
				t.Fatalf("decode error does not wrap ErrBadRequest: %v", err)
			}
			return
		}
		own := hooksync.DynamicFlag(key, v.Definition, v.Owner, "flag")
		if !hooksync.VerifyDynamicFlag(key, v.Definition, v.Owner, own) {
			t.Fatalf("the subject's own flag %q does not verify", own)
		}
		if hooksync.VerifyDynamicFlag(key, v.Definition, v.Owner, v.Flag) && !strings.HasSuffix(v.Flag, own[len("flag"):]) {
			t.Fatalf("%q verifies but is not %q under another prefix", v.Flag, own)
		}
		verdict := hooksync.VerifyFlag(key, v)
		if verdict.OwnedBy != "" {
			if verdict.Correct || !slices.Contains(v.Candidates, verdict.OwnedBy) {
				t.Fatalf("%+v for %+v: an owner named where the flag is correct, or not among the candidates", verdict, v)
			}
			if theirs := hooksync.DynamicFlag(key, v.Definition, verdict.OwnedBy, "flag"); !strings.HasSuffix(v.Flag, theirs[len("flag"):]) {
				t.Fatalf("%q attributed to %s, whose flag is %q", v.Flag, verdict.OwnedBy, theirs)
			}
		}
	})
}

// FuzzStatusFromObserved: whatever text the kubelet, the scheduler, a Gateway or the player (a
// container's termination message) puts in the observed children, every status string the hook
// builds from it is inert: no angle bracket, no control character.
func FuzzStatusFromObserved(f *testing.F) {
	f.Add("CrashLoopBackOff", "<img src=x onerror=alert(1)>", "Error", "\x1b]8;;https://evil\x07click\x1b]8;;\x07")
	f.Add("ErrImagePull", "pull access denied <b>", "OOMKilled", "line\nbreak\r\x00")
	f.Add("CreateContainerConfigError", "container has runAsNonRoot and image will run as root", "Error", "")
	f.Add("", "", "", "<script>")
	cfg := fuzzConfig()
	f.Fuzz(func(t *testing.T, waitingReason, message, terminatedReason, playerText string) {
		parent := hooksync.Challenge{
			Metadata: hooksync.ChallengeMeta{Name: "fuzz", Namespace: "ctf", UID: "00000000-0000-4000-8000-000000000000", Generation: 1,
				CreationTimestamp: "2026-11-01T11:00:00Z"},
			Spec: v1alpha1.ChallengeSpec{Owner: "team-1", Template: &v1alpha1.DefinitionSpec{
				Containers: []v1alpha1.Container{{Name: "app", Image: "registry.ctf.example/app:1", Ports: []v1alpha1.ContainerPort{{ContainerPort: 8080}}}},
				Expose:     []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeNodePort}},
			}},
		}
		observed := func(kind, apiVersion string) hooksync.ObservedObject {
			return hooksync.ObservedObject{APIVersion: apiVersion, Kind: kind, Metadata: hooksync.ObservedMeta{
				ObjectMeta: hooksync.ObjectMeta{Name: "fuzz", Namespace: "ctf", CreationTimestamp: "2026-11-01T11:00:00Z"}}}
		}
		terminated := &corev1.ContainerStateTerminated{Reason: terminatedReason, Message: playerText, ExitCode: 1}
		pod := hooksync.ObservedPod{ObservedObject: observed("Pod", "v1"), Status: corev1.PodStatus{
			Phase: corev1.PodPending, Reason: terminatedReason, Message: message,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waitingReason, Message: message}, Terminated: terminated},
				LastTerminationState: corev1.ContainerState{Terminated: terminated}}},
		}}
		for _, phase := range []corev1.PodPhase{corev1.PodPending, corev1.PodFailed} {
			pod.Status.Phase = phase
			req := hooksync.Request{Parent: parent, Children: hooksync.ObservedChildren{
				Pods:            []hooksync.ObservedPod{pod},
				NetworkPolicies: []hooksync.ObservedObject{observed("NetworkPolicy", "networking.k8s.io/v1")},
			}}
			status := hooksync.Sync(req, fuzzNow, cfg).Status
			texts := []string{status.Phase, status.Reason, status.Message}
			for _, c := range status.Conditions {
				texts = append(texts, c.Reason, c.Message)
			}
			for _, text := range texts {
				if i := strings.IndexFunc(text, func(r rune) bool { return r == '<' || r == '>' || unicode.IsControl(r) }); i >= 0 {
					t.Fatalf("status text %q holds %q at %d", text, text[i:], i)
				}
			}
		}
	})
}
