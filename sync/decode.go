package sync

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrBadRequest marks a request the hook cannot understand: the server answers 400 and
// Metacontroller changes nothing.
var ErrBadRequest = errors.New("bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// wireRequest is the sync/finalize request as Metacontroller sends it.
type wireRequest struct {
	Parent     *json.RawMessage                      `json:"parent"`
	Children   map[string]map[string]json.RawMessage `json:"children"`
	Related    map[string]map[string]json.RawMessage `json:"related"`
	Finalizing bool                                  `json:"finalizing"`
}

// wireObject is the part of any Kubernetes object the hook reads.
type wireObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   *struct {
		ObjectMeta
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec   json.RawMessage `json:"spec"`
	Status json.RawMessage `json:"status"`
}

type wireCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

type wireLoadBalancerStatus struct {
	LoadBalancer struct {
		Ingress []struct {
			IP       string `json:"ip"`
			Hostname string `json:"hostname"`
		} `json:"ingress"`
	} `json:"loadBalancer"`
}

type wireContainerStatus struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
	State struct {
		Waiting    *ContainerStateWaiting `json:"waiting"`
		Terminated *wireTerminated        `json:"terminated"`
	} `json:"state"`
	LastState struct {
		Terminated *wireTerminated `json:"terminated"`
	} `json:"lastState"`
}

type wireTerminated struct {
	Reason   string `json:"reason"`
	Message  string `json:"message"`
	ExitCode int32  `json:"exitCode"`
}

func (t *wireTerminated) convert() *ContainerStateTerminated {
	if t == nil {
		return nil
	}
	return &ContainerStateTerminated{Reason: t.Reason, Message: t.Message, ExitCode: t.ExitCode}
}

// DecodeRequest decodes a sync or finalize request. Every error wraps ErrBadRequest and names the
// part of the request that is wrong.
//
// Requests take the fast path (decodeRequestFast, a one-pass scanner that decodes only what the hook
// reads); whatever it is not sure of, malformed requests included, is decided by decodeRequestStd,
// the encoding/json decoder, which is also the fast path's test oracle (decode_fuzz_test.go).
func DecodeRequest(body []byte) (Request, error) {
	if req, ok := decodeRequestFast(body); ok {
		return req, nil
	}
	return decodeRequestStd(body)
}

// decodeRequestStd decodes a request with encoding/json.
func decodeRequestStd(body []byte) (Request, error) {
	var wire wireRequest
	if err := decodeStrictJSON(body, &wire); err != nil {
		return Request{}, badRequest("request: %v", err)
	}
	if wire.Parent == nil || bytes.Equal(bytes.TrimSpace(*wire.Parent), []byte("null")) {
		return Request{}, badRequest("request has no parent")
	}
	var req Request
	if err := json.Unmarshal(*wire.Parent, &req.Parent); err != nil {
		return Request{}, badRequest("parent: %v", err)
	}
	if req.Parent.Metadata.Name == "" {
		return Request{}, badRequest("parent has no metadata.name")
	}
	req.Finalizing = wire.Finalizing
	if err := forEachObject("children", wire.Children, func(key string, obj *wireObject, raw json.RawMessage) error {
		return addChild(&req.Children, key, obj)
	}); err != nil {
		return Request{}, err
	}
	if err := forEachObject("related", wire.Related, func(key string, obj *wireObject, raw json.RawMessage) error {
		return addRelated(&req.Related, key, obj, raw)
	}); err != nil {
		return Request{}, err
	}
	sortObserved(&req)
	return req, nil
}

// DecodeCustomizeRequest decodes a customize request.
func DecodeCustomizeRequest(body []byte) (CustomizeRequest, error) {
	var wire struct {
		Parent *Challenge `json:"parent"`
	}
	if err := decodeStrictJSON(body, &wire); err != nil {
		return CustomizeRequest{}, badRequest("request: %v", err)
	}
	if wire.Parent == nil {
		return CustomizeRequest{}, badRequest("request has no parent")
	}
	if wire.Parent.Metadata.Name == "" {
		return CustomizeRequest{}, badRequest("parent has no metadata.name")
	}
	return CustomizeRequest{Parent: *wire.Parent}, nil
}

// decodeStrictJSON decodes one JSON value and refuses trailing data.
func decodeStrictJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// forEachObject visits every object of a children or related map, in sorted key order so that
// errors are deterministic.
func forEachObject(field string, groups map[string]map[string]json.RawMessage, visit func(key string, obj *wireObject, raw json.RawMessage) error) error {
	keys := make([]string, 0, len(groups))
	for key := range groups {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		names := make([]string, 0, len(groups[key]))
		for name := range groups[key] {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			var obj wireObject
			if err := json.Unmarshal(groups[key][name], &obj); err != nil {
				return badRequest("%s[%q][%q]: %v", field, key, name, err)
			}
			if obj.Metadata == nil || obj.Metadata.Name == "" {
				return badRequest("%s[%q][%q] has no metadata.name", field, key, name)
			}
			if err := visit(key, &obj, groups[key][name]); err != nil {
				return badRequest("%s[%q][%q]: %v", field, key, name, err)
			}
		}
	}
	return nil
}

// kindOf returns the kind of a Metacontroller map key: "Service.v1" or "Deployment.apps/v1".
func kindOf(key string) string {
	kind, _, _ := strings.Cut(key, ".")
	return kind
}

func observedObject(obj *wireObject) ObservedObject {
	return ObservedObject{
		APIVersion:  obj.APIVersion,
		Kind:        obj.Kind,
		Metadata:    obj.Metadata.ObjectMeta,
		LastApplied: obj.Metadata.Annotations[LastAppliedAnnotation],
	}
}

func unmarshalIfPresent(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}

func addChild(children *ObservedChildren, key string, obj *wireObject) error {
	base := observedObject(obj)
	switch kindOf(key) {
	case "Deployment":
		var status struct {
			ReadyReplicas int32           `json:"readyReplicas"`
			Conditions    []wireCondition `json:"conditions"`
		}
		if err := unmarshalIfPresent(obj.Status, &status); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		children.Deployments = append(children.Deployments, ObservedDeployment{
			ObservedObject: base, ReadyReplicas: status.ReadyReplicas, Conditions: convertConditions(status.Conditions),
		})
	case "Service":
		var spec struct {
			Type  string `json:"type"`
			Ports []struct {
				Port     int32  `json:"port"`
				NodePort int32  `json:"nodePort"`
				Protocol string `json:"protocol"`
			} `json:"ports"`
		}
		var status wireLoadBalancerStatus
		if err := unmarshalIfPresent(obj.Spec, &spec); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
		if err := unmarshalIfPresent(obj.Status, &status); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		svc := ObservedService{ObservedObject: base, Type: spec.Type, LoadBalancer: convertLoadBalancer(status)}
		for _, p := range spec.Ports {
			svc.Ports = append(svc.Ports, ObservedServicePort{Port: p.Port, NodePort: p.NodePort, Protocol: p.Protocol})
		}
		children.Services = append(children.Services, svc)
	case "Ingress":
		var status wireLoadBalancerStatus
		if err := unmarshalIfPresent(obj.Status, &status); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		children.Ingresses = append(children.Ingresses, ObservedIngress{ObservedObject: base, LoadBalancer: convertLoadBalancer(status)})
	case "NetworkPolicy":
		children.NetworkPolicies = append(children.NetworkPolicies, base)
	case "Secret":
		children.Secrets = append(children.Secrets, base)
	default:
		return fmt.Errorf("unknown child type %q: the CompositeController lists a child type this hook does not manage", key)
	}
	return nil
}

func addRelated(related *Related, key string, obj *wireObject, raw json.RawMessage) error {
	switch kindOf(key) {
	case "ChallengeDefinition":
		var def ChallengeDefinition
		if err := json.Unmarshal(raw, &def); err != nil {
			return err
		}
		related.Definitions = append(related.Definitions, def)
	case "Pod":
		var status struct {
			Phase                 string                `json:"phase"`
			Conditions            []wireCondition       `json:"conditions"`
			InitContainerStatuses []wireContainerStatus `json:"initContainerStatuses"`
			ContainerStatuses     []wireContainerStatus `json:"containerStatuses"`
		}
		if err := unmarshalIfPresent(obj.Status, &status); err != nil {
			return fmt.Errorf("status: %w", err)
		}
		related.Pods = append(related.Pods, ObservedPod{
			Metadata:          obj.Metadata.ObjectMeta,
			Phase:             status.Phase,
			Conditions:        convertConditions(status.Conditions),
			InitContainers:    convertContainerStatuses(status.InitContainerStatuses),
			ContainerStatuses: convertContainerStatuses(status.ContainerStatuses),
		})
	default:
		return fmt.Errorf("unknown related type %q: the customize hook never asks for it", key)
	}
	return nil
}

func convertConditions(in []wireCondition) []ObservedCondition {
	var out []ObservedCondition
	for _, c := range in {
		out = append(out, ObservedCondition(c))
	}
	return out
}

func convertLoadBalancer(status wireLoadBalancerStatus) []LoadBalancerIngress {
	var out []LoadBalancerIngress
	for _, ing := range status.LoadBalancer.Ingress {
		out = append(out, LoadBalancerIngress{IP: ing.IP, Hostname: ing.Hostname})
	}
	return out
}

func convertContainerStatuses(in []wireContainerStatus) []ContainerStatus {
	var out []ContainerStatus
	for _, s := range in {
		out = append(out, ContainerStatus{
			Name:           s.Name,
			Ready:          s.Ready,
			Waiting:        s.State.Waiting,
			Terminated:     s.State.Terminated.convert(),
			LastTerminated: s.LastState.Terminated.convert(),
		})
	}
	return out
}

func objectKey(m ObjectMeta) string { return m.Namespace + "/" + m.Name }

func sortObserved(req *Request) {
	c := &req.Children
	sort.Slice(c.Deployments, func(i, j int) bool {
		return objectKey(c.Deployments[i].Metadata) < objectKey(c.Deployments[j].Metadata)
	})
	sort.Slice(c.Services, func(i, j int) bool { return objectKey(c.Services[i].Metadata) < objectKey(c.Services[j].Metadata) })
	sort.Slice(c.NetworkPolicies, func(i, j int) bool {
		return objectKey(c.NetworkPolicies[i].Metadata) < objectKey(c.NetworkPolicies[j].Metadata)
	})
	sort.Slice(c.Ingresses, func(i, j int) bool { return objectKey(c.Ingresses[i].Metadata) < objectKey(c.Ingresses[j].Metadata) })
	sort.Slice(c.Secrets, func(i, j int) bool { return objectKey(c.Secrets[i].Metadata) < objectKey(c.Secrets[j].Metadata) })
	r := &req.Related
	sort.Slice(r.Definitions, func(i, j int) bool {
		return objectKey(r.Definitions[i].Metadata) < objectKey(r.Definitions[j].Metadata)
	})
	sort.Slice(r.Pods, func(i, j int) bool { return objectKey(r.Pods[i].Metadata) < objectKey(r.Pods[j].Metadata) })
}

// keptChild is an observed child the hook must not change, returned exactly as Metacontroller last
// applied it. Without a (valid) last-applied configuration it is returned by identity alone: with
// nothing desired and nothing last applied, Metacontroller's merge changes nothing, and the child
// is not deleted because it is listed.
type keptChild struct {
	obj ObservedObject
}

func (k keptChild) MarshalJSON() ([]byte, error) {
	if last := k.obj.LastApplied; last != "" && json.Valid([]byte(last)) {
		return []byte(last), nil
	}
	type identityMeta struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace,omitempty"`
	}
	return json.Marshal(struct {
		APIVersion string       `json:"apiVersion"`
		Kind       string       `json:"kind"`
		Metadata   identityMeta `json:"metadata"`
	}{k.obj.APIVersion, k.obj.Kind, identityMeta{k.obj.Metadata.Name, k.obj.Metadata.Namespace}})
}

// EncodeResponse encodes a hook answer (or any value the server writes as JSON). encoding/json
// writes struct fields in declaration order and map keys sorted, so identical responses encode to
// identical bytes.
func EncodeResponse(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode response: %w", err)
	}
	return buf.Bytes(), nil
}
