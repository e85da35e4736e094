// What Metacontroller does with an answer: the next request once it applied the children (created,
// deleted, Terminating), and the exchange of several rounds.

package mcsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/wire"
)

// Applied says how much of an answer Metacontroller has applied when it sends the next request.
type Applied struct {
	// Create: the children the answer adds are observed (else the next request observes what the
	// previous one did: the moment before the creates land).
	Create bool
	// Delete: the observed children the answer leaves out are gone (else the moment before).
	Delete bool
	// PodsLinger: a Pod being deleted stays observed for one more request, Terminating (with a
	// deletionTimestamp), as a Pod whose process ignores SIGTERM does for its grace period.
	PodsLinger bool
	// ClusterIPs: every observed Service has what the API server allocated at its creation: its
	// spec in Allocated (by name: a ClusterIP, node ports), else a ClusterIP of ServiceCIDR's.
	ClusterIPs bool
	Allocated  []Object
	// Now is when the creates and deletes land.
	Now time.Time
}

// Apply is the request Metacontroller sends after it applied answer to request: the answer's
// status becomes the parent's; each child the answer declares that is observed has the answer's
// object as its last-applied configuration; creates and deletes land as how says.
func Apply(request, answer []byte, how Applied) ([]byte, error) {
	var resp struct {
		Status   json.RawMessage   `json:"status"`
		Children []json.RawMessage `json:"children"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	var req Object
	if err := json.Unmarshal(request, &req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	parent, ok := req["parent"].(Object)
	if !ok {
		return nil, errors.New("request: no parent")
	}
	parent["status"] = resp.Status
	groups, _ := req["children"].(Object)
	if groups == nil {
		groups = Object{}
		req["children"] = groups
	}
	namespace, _ := mapAt(parent, "metadata")["namespace"].(string)
	declared, err := applyDeclared(groups, resp.Children, namespace, how)
	if err != nil {
		return nil, err
	}
	if how.Delete {
		deleteUndeclared(groups, declared, how)
	}
	if how.ClusterIPs {
		services, _ := groups[GroupKey("Service", "v1")].(Object)
		allocateClusterIPs(services, how.Allocated)
	}
	return json.Marshal(req)
}

// applyDeclared records each declared child on the observed one as its last-applied
// configuration, creating it first (how.Create) when none is observed. It returns the declared
// children by "<group key> <namespace>/<name>".
func applyDeclared(groups Object, children []json.RawMessage, namespace string, how Applied) (map[string]bool, error) {
	declared := map[string]bool{}
	for _, raw := range children {
		var child Object
		if err := json.Unmarshal(raw, &child); err != nil {
			return nil, fmt.Errorf("answer's child: %w", err)
		}
		meta := mapAt(child, "metadata")
		child["metadata"] = meta
		if _, ok := meta["namespace"]; !ok {
			meta["namespace"] = namespace
		}
		groupKey := GroupKey(fmt.Sprint(child["kind"]), fmt.Sprint(child["apiVersion"]))
		key := fmt.Sprint(meta["namespace"], "/", meta["name"])
		declared[groupKey+" "+key] = true
		group, _ := groups[groupKey].(Object)
		observed, exists := group[key].(Object)
		if !exists && !how.Create {
			continue
		}
		if group == nil {
			group = Object{}
			groups[groupKey] = group
		}
		if !exists {
			observed = child
			meta["uid"] = "uid-" + key
			meta["creationTimestamp"] = timestamp(how.Now)
			group[key] = observed
		}
		observedMeta := mapAt(observed, "metadata")
		observed["metadata"] = observedMeta
		annotations := mapAt(observedMeta, "annotations")
		observedMeta["annotations"] = annotations
		annotations[wire.LastAppliedAnnotation] = string(raw)
	}
	return declared, nil
}

// deleteUndeclared deletes every observed child the answer left out; with how.PodsLinger a Pod
// is Terminating first, for one request.
func deleteUndeclared(groups Object, declared map[string]bool, how Applied) {
	for groupKey, group := range groups {
		group, _ := group.(Object)
		for key, obj := range group {
			if declared[groupKey+" "+key] {
				continue
			}
			obj, _ := obj.(Object)
			meta := mapAt(obj, "metadata")
			if _, terminating := meta["deletionTimestamp"]; how.PodsLinger && strings.HasPrefix(groupKey, "Pod.") && !terminating {
				meta["deletionTimestamp"] = timestamp(how.Now)
				continue
			}
			delete(group, key)
		}
	}
}

// Run is the exchange of Metacontroller and hook from request on: the hook answers, Metacontroller
// applies the answer as how says and sends the next request, rounds times. visit, if not nil, sees
// each request and its answer, the first included. Run returns the last request and its answer.
func Run(request []byte, hook Hook, rounds int, how Applied, visit func(request, answer []byte) error) ([]byte, []byte, error) {
	answer, err := hook(request)
	for round := 0; ; round++ {
		if err != nil {
			return nil, nil, fmt.Errorf("round %d: %w", round, err)
		}
		if visit != nil {
			if err := visit(request, answer); err != nil {
				return nil, nil, fmt.Errorf("round %d: %w", round, err)
			}
		}
		if round == rounds {
			return request, answer, nil
		}
		if request, err = Apply(request, answer, how); err == nil {
			answer, err = hook(request)
		}
	}
}

// Declared is every child the hook declares for a new parent, by "<Kind>/<name>": what it
// answers once Metacontroller applied its answers to first rounds times (creates and deletes
// landed, Services given ClusterIPs with allocated), the latest answer's object for each. A
// hook holds children back until others are observed (a Pod until its NetworkPolicy), so one
// round does not declare them all.
func Declared(first []byte, hook Hook, rounds int, allocated []Object, now time.Time) (map[string]Object, error) {
	out := map[string]Object{}
	how := Applied{Create: true, Delete: true, ClusterIPs: true, Allocated: allocated, Now: now}
	answers := 0
	_, _, err := Run(first, hook, rounds, how, func(_, answer []byte) error {
		if answers++; answers == 1 {
			return nil // the first answer, before anything exists
		}
		var resp struct {
			Children []Object `json:"children"`
		}
		if err := json.Unmarshal(answer, &resp); err != nil {
			return fmt.Errorf("answer: %w", err)
		}
		for _, child := range resp.Children {
			out[fmt.Sprint(child["kind"], "/", mapAt(child, "metadata")["name"])] = child
		}
		return nil
	})
	return out, err
}
