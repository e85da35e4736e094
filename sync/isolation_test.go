package sync

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	networkingapiv1 "k8s.io/api/networking/v1"
	apimetav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// checkIsolation is "no moment without isolation" for one request and its answer:
//   - every Pod the request observes (Terminating included) is selected by a NetworkPolicy the
//     answer declares, so that Metacontroller never deletes the last policy of a live Pod;
//   - every Pod the answer declares is selected by a NetworkPolicy the request already observes
//     (so it exists before the Pod is created) and by one the answer declares;
//   - every Pod the request observes or the answer declares is selected by no policy, observed or
//     declared, but its own (ownPolicy) and policies that admit nothing (deny-all):
//     policies add up, so a Pod that another Pod's policy selects gets that policy's rules too
//     (while a template changes shape, the old Pod's internet egress on the new Pods).
//
// It returns how many Pods it checked.
func checkIsolation(t testing.TB, request, answer []byte) int {
	var req struct {
		Parent struct {
			Metadata struct {
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		} `json:"parent"`
		Children map[string]map[string]json.RawMessage `json:"children"`
	}
	require.NoError(t, json.Unmarshal(request, &req))
	var resp struct {
		Children []json.RawMessage `json:"children"`
	}
	require.NoError(t, json.Unmarshal(answer, &resp))
	namespace := req.Parent.Metadata.Namespace

	observedPods, observedPolicies := podsAndPolicies(t, namespace, mapValues(req.Children["Pod.v1"]), mapValues(req.Children["NetworkPolicy.networking.k8s.io/v1"]))
	declaredPods, declaredPolicies := podsAndPolicies(t, namespace, resp.Children, resp.Children)
	for _, pod := range observedPods {
		require.True(t, selectsPod(declaredPolicies, pod), "the request observes Pod %s, but no NetworkPolicy the answer declares selects it:\n%s", pod.Name, answer)
	}
	for _, pod := range declaredPods {
		require.True(t, selectsPod(observedPolicies, pod), "the answer declares Pod %s before a NetworkPolicy that selects it is observed:\n%s", pod.Name, answer)
		require.True(t, selectsPod(declaredPolicies, pod), "the answer declares Pod %s, but no NetworkPolicy that selects it:\n%s", pod.Name, answer)
	}
	everyPolicy := slices.Concat(observedPolicies, declaredPolicies)
	for _, pod := range slices.Concat(observedPods, declaredPods) {
		for _, p := range everyPolicy {
			require.False(t, selects(p, pod) && !ownPolicy(p, pod) && admitsAnything(p),
				"Pod %s is selected by NetworkPolicy %s, another Pod's, whose rules it gets on top of its own:\nrequest:\n%s\nanswer:\n%s", pod.Name, p.Name, request, answer)
		}
	}
	return len(observedPods) + len(declaredPods)
}

// selects: the policy's podSelector matches the Pod, as the API server and every NetworkPolicy
// implementation read it.
func selects(p networkingapiv1.NetworkPolicy, pod apimetav1.ObjectMeta) bool {
	selector, err := apimetav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	return err == nil && p.Namespace == pod.Namespace && !selector.Empty() && selector.Matches(labels.Set(pod.Labels))
}

// ownPolicy: the policy is the Pod's own, the one of its name; for the Pod of a pod, also any
// policy of the same pod of the same instance (while a pod's children are renamed, its old Pod
// lingers under its new policy: the same pod's rules).
func ownPolicy(p networkingapiv1.NetworkPolicy, pod apimetav1.ObjectMeta) bool {
	if p.Name == pod.Name {
		return true
	}
	component, ok := pod.Labels[LabelComponent]
	return ok && p.Labels[LabelComponent] == component && p.Labels[LabelInstance] == pod.Labels[LabelInstance]
}

// admitsAnything: the policy has a rule, in or out (a policy without one only isolates).
func admitsAnything(p networkingapiv1.NetworkPolicy) bool {
	return len(p.Spec.Ingress) > 0 || len(p.Spec.Egress) > 0
}

func mapValues(m map[string]json.RawMessage) []json.RawMessage {
	var out []json.RawMessage
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// podsAndPolicies decodes the Pods among pods and the NetworkPolicies among policies (each list
// may hold other kinds, which are skipped). An object without a namespace is in namespace.
func podsAndPolicies(t testing.TB, namespace string, pods, policies []json.RawMessage) ([]apimetav1.ObjectMeta, []networkingapiv1.NetworkPolicy) {
	var podMetas []apimetav1.ObjectMeta
	var out []networkingapiv1.NetworkPolicy
	decode := func(raw json.RawMessage, kind string, into any) bool {
		var typ apimetav1.TypeMeta
		require.NoError(t, json.Unmarshal(raw, &typ))
		if typ.Kind != kind {
			return false
		}
		require.NoError(t, json.Unmarshal(raw, into))
		return true
	}
	for _, raw := range pods {
		var pod struct {
			Metadata apimetav1.ObjectMeta `json:"metadata"`
		}
		if decode(raw, "Pod", &pod) {
			if pod.Metadata.Namespace == "" {
				pod.Metadata.Namespace = namespace
			}
			podMetas = append(podMetas, pod.Metadata)
		}
	}
	for _, raw := range policies {
		var policy networkingapiv1.NetworkPolicy
		if decode(raw, "NetworkPolicy", &policy) {
			if policy.Namespace == "" {
				policy.Namespace = namespace
			}
			out = append(out, policy)
		}
	}
	return podMetas, out
}

// selectsPod: one of the policies applies to the Pod, as the API server and every NetworkPolicy
// implementation read a podSelector, and isolates it both ways.
func selectsPod(policies []networkingapiv1.NetworkPolicy, pod apimetav1.ObjectMeta) bool {
	for _, p := range policies {
		if !selects(p, pod) {
			continue
		}
		types := map[networkingapiv1.PolicyType]bool{}
		for _, pt := range p.Spec.PolicyTypes {
			types[pt] = true
		}
		if types[networkingapiv1.PolicyTypeIngress] && types[networkingapiv1.PolicyTypeEgress] {
			return true
		}
	}
	return false
}

// isolationVariants are the moments of an instance's life the property is checked at, from each
// golden request: as it is, at its deadline, being deleted, and stopped.
var isolationVariants = []struct {
	name   string
	modify func(parent map[string]any, req map[string]any)
	atEnd  bool
}{
	{name: "as-is"},
	{name: "at-deadline", atEnd: true},
	{name: "deleted", modify: func(parent, req map[string]any) {
		parent["metadata"].(map[string]any)["deletionTimestamp"] = formatTime(goldenNow)
		req["finalizing"] = true
	}},
	{name: "stopped", modify: func(parent, _ map[string]any) {
		spec, _ := parent["spec"].(map[string]any)
		if spec != nil {
			spec["stopped"] = true
		}
	}},
}

// TestNoMomentWithoutIsolation checks checkIsolation on every golden sync case and on the answers
// that follow it as Metacontroller applies each one, Pods lingering Terminating for a request
// after their deletion: as the case is, at its deadline, being deleted and stopped.
func TestNoMomentWithoutIsolation(t *testing.T) {
	cfg := goldenConfig(t)
	checked := 0
	for _, c := range goldenCases(t) {
		if strings.HasPrefix(c.name, "customize-") {
			continue
		}
		for _, variant := range isolationVariants {
			t.Run(c.name+"/"+variant.name, func(t *testing.T) {
				request := c.request
				if variant.modify != nil {
					var req map[string]any
					require.NoError(t, json.Unmarshal(request, &req))
					variant.modify(req["parent"].(map[string]any), req)
					var err error
					request, err = json.Marshal(req)
					require.NoError(t, err)
				}
				now := goldenNow
				if variant.atEnd {
					deadline, err := time.Parse(time.RFC3339, decodeAnswer(t, answer(t, c, cfg)).Status.ExpiresAt)
					require.NoError(t, err)
					now = deadline
				}
				for round := range 6 {
					body := answerAt(t, c.with(request), cfg, now)
					t.Logf("round %d", round)
					checked += checkIsolation(t, request, body)
					request = applyAnswer(t, request, body, mcsim.Applied{Create: true, Delete: true, PodsLinger: true})
				}
			})
		}
	}
	require.Positive(t, checked, "no Pod was ever observed or declared: the property checked nothing")
}

// secondAnswer is the answer to an instance's second request, once Metacontroller applied the
// first: the one that declares the Pod, its NetworkPolicy and flag Secret being observed.
func secondAnswer(t testing.TB, req Request, now time.Time, cfg Config) Response {
	first, err := EncodeResponse(Sync(req, now, cfg))
	require.NoError(t, err)
	request, err := json.Marshal(map[string]any{"parent": req.Parent, "children": map[string]any{}})
	require.NoError(t, err)
	next, err := DecodeRequest(applyAnswer(t, request, first, mcsim.Applied{Create: true, Delete: true}))
	require.NoError(t, err)
	next.Related, next.DeclaredChildTypes = req.Related, req.DeclaredChildTypes
	return Sync(next, now, cfg)
}

// answerWithEveryPod is the answer once every Pod of the instance is declared: answers applied in
// turn, the Services given ClusterIPs as the API server would (a Pod waits for its policy, and
// for the Services of the peers it resolves by name).
func answerWithEveryPod(t testing.TB, req Request, now time.Time, cfg Config) Response {
	_, resp := requestWithEveryPod(t, req, now, cfg)
	return resp
}

// requestWithEveryPod is answerWithEveryPod's last request, and its answer.
func requestWithEveryPod(t testing.TB, req Request, now time.Time, cfg Config) (Request, Response) {
	resp := Sync(req, now, cfg)
	request, err := json.Marshal(map[string]any{"parent": req.Parent, "children": map[string]any{}})
	require.NoError(t, err)
	var next Request
	for range 3 {
		answer, err := EncodeResponse(resp)
		require.NoError(t, err)
		request = applyAnswer(t, request, answer, mcsim.Applied{Create: true, Delete: true, ClusterIPs: true})
		next, err = DecodeRequest(request)
		require.NoError(t, err)
		next.Related, next.DeclaredChildTypes = req.Related, req.DeclaredChildTypes
		resp = Sync(next, now, cfg)
	}
	return next, resp
}

// TestShapeChangeNarrowsAnOlderSinglePodPolicy: an instance whose single Pod's NetworkPolicy was
// applied selecting every Pod of the instance (as hooks did before the selector left out the Pods
// of pods) goes to a template of pods: while the old Pod lingers, its policy is declared as last
// applied but selecting the old Pod only, so that it is narrowed before any new Pod exists (the
// new Pods wait for their own policies, in a later answer).
func TestShapeChangeNarrowsAnOlderSinglePodPolicy(t *testing.T) {
	c := goldenCaseNamed(t, "components-shape-change-old-pod-keeps-its-policy")
	var req map[string]any
	require.NoError(t, json.Unmarshal(c.request, &req))
	policies := req["children"].(map[string]any)["NetworkPolicy.networking.k8s.io/v1"].(map[string]any)
	old := policies["ctf/xss-team7"].(map[string]any)
	annotations := old["metadata"].(map[string]any)["annotations"].(map[string]any)
	var lastApplied map[string]any
	require.NoError(t, json.Unmarshal([]byte(annotations[LastAppliedAnnotation].(string)), &lastApplied))
	for _, policy := range []map[string]any{old, lastApplied} {
		selector := policy["spec"].(map[string]any)["podSelector"].(map[string]any)
		require.NotNil(t, selector["matchExpressions"], "the golden policy no longer leaves out the Pods of pods")
		delete(selector, "matchExpressions")
	}
	annotations[LastAppliedAnnotation] = string(marshal(t, lastApplied))
	request := marshal(t, req)

	body := answer(t, c.with(request), goldenConfig(t))
	var resp struct {
		Children []json.RawMessage `json:"children"`
	}
	require.NoError(t, json.Unmarshal(body, &resp))
	var declared *networkingapiv1.NetworkPolicy
	for _, raw := range resp.Children {
		var p networkingapiv1.NetworkPolicy
		require.NoError(t, json.Unmarshal(raw, &p))
		if p.Kind == "NetworkPolicy" && p.Name == "xss-team7" {
			declared = &p
		}
	}
	require.NotNil(t, declared, "the old Pod's policy is not declared while the Pod is observed")
	var was networkingapiv1.NetworkPolicy
	require.NoError(t, json.Unmarshal(marshal(t, lastApplied), &was))
	require.Equal(t, was.Spec.Ingress, declared.Spec.Ingress, "the kept policy's rules changed")
	require.Equal(t, was.Spec.Egress, declared.Spec.Egress, "the kept policy's rules changed")
	declared.Namespace = "ctf"
	instance := map[string]string{LabelInstance: "ivbcfpuoxdzvb3lz"}
	require.True(t, selects(*declared, apimetav1.ObjectMeta{Name: "xss-team7", Namespace: "ctf", Labels: instance}), "the old Pod is no longer selected")
	for _, pod := range []string{"web", "db", "bot"} {
		labels := map[string]string{LabelInstance: "ivbcfpuoxdzvb3lz", LabelComponent: pod}
		require.False(t, selects(*declared, apimetav1.ObjectMeta{Name: "xss-team7-" + pod, Namespace: "ctf", Labels: labels}),
			"the old Pod's policy selects the Pod of pod %s: %+v", pod, declared.Spec.PodSelector)
	}
}
