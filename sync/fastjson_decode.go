package sync

import (
	"bytes"
	"slices"
	"strings"
)

// The fast decode path: the same Request the encoding/json decoder (decodeRequestStd) builds, read
// in one pass with jsonScanner. Each reader mirrors one wire type of decode.go; a field the wire
// type does not declare is skipped, a duplicate field gives up (encoding/json merges or overwrites
// those), and null reads as the zero value, as it does when encoding/json decodes into a fresh value.

// decodeRequestFast decodes a sync or finalize request; ok is false when the fast path gave up and
// decodeRequestStd must decide, which it does for every malformed request.
func decodeRequestFast(body []byte) (req Request, ok bool) {
	s := newJSONScanner(body)
	var seen fieldSet
	present, more := s.object()
	if !present {
		return Request{}, false
	}
	haveParent := false
	for more {
		switch k := s.key(); string(k) {
		case "parent":
			s.first(&seen, 0)
			if s.peek() != '{' {
				s.fail()
			}
			s.challenge(&req.Parent)
			haveParent = true
		case "children":
			s.first(&seen, 1)
			s.groups(&req, false)
		case "related":
			s.first(&seen, 2)
			s.groups(&req, true)
		case "finalizing":
			s.first(&seen, 3)
			req.Finalizing = s.boolean()
		default:
			s.unknownField(k, "parent", "children", "related", "finalizing")
		}
		more = s.more('}')
	}
	if !s.atEnd() || !haveParent || req.Parent.Metadata.Name == "" {
		return Request{}, false
	}
	if !sortObservedDistinct(&req) {
		return Request{}, false
	}
	return req, true
}

// maxFastGroupKeys bounds the keys of one children or related map, and of one group, that the fast
// path checks for duplicates; a request with more goes to encoding/json.
const maxFastGroupKeys = 32

// groups reads the children or related map: {"<Kind>.<apiVersion>": {"<name>": object}}.
func (s *jsonScanner) groups(req *Request, related bool) {
	var groupKeys [maxFastGroupKeys][]byte
	nGroups := 0
	_, more := s.object()
	for more {
		group := s.key()
		if nGroups == len(groupKeys) || containsKey(groupKeys[:nGroups], group) {
			s.fail()
			return
		}
		groupKeys[nGroups] = group
		nGroups++
		kind, _, _ := bytes.Cut(group, []byte{'.'})
		var names [maxFastGroupKeys][]byte
		nNames := 0
		_, moreObjects := s.object()
		for moreObjects {
			name := s.key()
			if nNames == len(names) || containsKey(names[:nNames], name) {
				s.fail()
				return
			}
			names[nNames] = name
			nNames++
			if related {
				s.relatedObject(&req.Related, kind)
			} else {
				s.childObject(&req.Children, kind)
			}
			moreObjects = s.more('}')
		}
		more = s.more('}')
	}
}

func containsKey(keys [][]byte, key []byte) bool {
	for _, k := range keys {
		if bytes.Equal(k, key) {
			return true
		}
	}
	return false
}

// childObject reads one observed child, as addChild does.
func (s *jsonScanner) childObject(children *ObservedChildren, kind []byte) {
	switch string(kind) {
	case "Deployment":
		var d ObservedDeployment
		s.observed(&d.ObservedObject, bodyReaders{deployment: &d})
		children.Deployments = append(children.Deployments, d)
	case "Service":
		var svc ObservedService
		s.observed(&svc.ObservedObject, bodyReaders{service: &svc})
		children.Services = append(children.Services, svc)
	case "Ingress":
		var ing ObservedIngress
		s.observed(&ing.ObservedObject, bodyReaders{ingress: &ing})
		children.Ingresses = append(children.Ingresses, ing)
	case "NetworkPolicy":
		var np ObservedObject
		s.observed(&np, bodyReaders{})
		children.NetworkPolicies = append(children.NetworkPolicies, np)
	case "Secret":
		var secret ObservedObject
		s.observed(&secret, bodyReaders{})
		children.Secrets = append(children.Secrets, secret)
	default:
		s.fail()
	}
}

// relatedObject reads one related object, as addRelated does.
func (s *jsonScanner) relatedObject(related *Related, kind []byte) {
	switch string(kind) {
	case "ChallengeDefinition":
		var def ChallengeDefinition
		var base ObservedObject
		s.observed(&base, bodyReaders{definition: &def.Spec})
		def.APIVersion, def.Kind, def.Metadata = base.APIVersion, base.Kind, base.Metadata
		related.Definitions = append(related.Definitions, def)
	case "Pod":
		var pod ObservedPod
		var base ObservedObject
		s.observed(&base, bodyReaders{pod: &pod})
		pod.Metadata = base.Metadata
		related.Pods = append(related.Pods, pod)
	default:
		s.fail()
	}
}

// bodyReaders says where an object's spec and status go; the one set names the object's kind, and
// none set means both are skipped. (Plain pointers rather than closures: they stay on the stack.)
type bodyReaders struct {
	deployment *ObservedDeployment
	service    *ObservedService
	ingress    *ObservedIngress
	pod        *ObservedPod
	definition *DefinitionSpec
}

func (r bodyReaders) spec(s *jsonScanner) {
	switch {
	case r.service != nil:
		s.serviceSpec(r.service)
	case r.definition != nil:
		s.definitionSpec(r.definition)
	default:
		s.skip()
	}
}

func (r bodyReaders) status(s *jsonScanner) {
	switch {
	case r.deployment != nil:
		s.deploymentStatus(r.deployment)
	case r.service != nil:
		r.service.LoadBalancer = s.loadBalancerStatus()
	case r.ingress != nil:
		r.ingress.LoadBalancer = s.loadBalancerStatus()
	case r.pod != nil:
		s.podStatus(r.pod)
	default:
		s.skip()
	}
}

// observed reads the part of an object every observed object has (wireObject): apiVersion, kind,
// metadata with the last-applied annotation; spec and status go to body. Like forEachObject it
// requires metadata with a name.
func (s *jsonScanner) observed(obj *ObservedObject, body bodyReaders) {
	var seen fieldSet
	present, more := s.object()
	if !present {
		s.fail()
		return
	}
	for more {
		switch k := s.key(); string(k) {
		case "apiVersion":
			s.first(&seen, 0)
			obj.APIVersion = s.str()
		case "kind":
			s.first(&seen, 1)
			obj.Kind = s.str()
		case "metadata":
			s.first(&seen, 2)
			if present, _ := s.peekObject(); !present {
				s.fail()
			}
			s.observedMeta(obj)
		case "spec":
			s.first(&seen, 3)
			body.spec(s)
		case "status":
			s.first(&seen, 4)
			body.status(s)
		default:
			s.unknownField(k, "apiVersion", "kind", "metadata", "spec", "status")
		}
		more = s.more('}')
	}
	if obj.Metadata.Name == "" {
		s.fail()
	}
}

// peekObject reports whether an object (not null) is next.
func (s *jsonScanner) peekObject() (present, ok bool) {
	return s.peek() == '{', !s.failed
}

// observedMeta reads an observed object's metadata: ObjectMeta and the last-applied annotation.
func (s *jsonScanner) observedMeta(obj *ObservedObject) {
	var seen fieldSet
	_, more := s.object()
	for more {
		k := s.key()
		if !s.metaField(&obj.Metadata, k, &seen) {
			if string(k) == "annotations" {
				s.first(&seen, 7)
				obj.LastApplied = s.annotations()
			} else {
				s.unknownField(k, "name", "namespace", "uid", "generation", "labels", "creationTimestamp", "deletionTimestamp", "annotations")
			}
		}
		more = s.more('}')
	}
}

// annotations checks an annotation map (map[string]string) and returns the last-applied one.
func (s *jsonScanner) annotations() string {
	lastApplied := ""
	_, more := s.object()
	for more {
		if string(s.key()) == LastAppliedAnnotation {
			lastApplied = s.str()
		} else {
			s.skipString()
		}
		more = s.more('}')
	}
	return lastApplied
}

// skipString passes over a string or null.
func (s *jsonScanner) skipString() {
	switch s.peek() {
	case '"':
		end, _ := s.stringEnd(s.pos + 1)
		if !s.failed {
			s.pos = end + 1
		}
	case 'n':
		s.literal("null")
	default:
		s.fail()
	}
}

// metaField reads field k of ObjectMeta, reporting whether k is one.
func (s *jsonScanner) metaField(m *ObjectMeta, k []byte, seen *fieldSet) bool {
	switch string(k) {
	case "name":
		s.first(seen, 0)
		m.Name = s.str()
	case "namespace":
		s.first(seen, 1)
		m.Namespace = s.str()
	case "uid":
		s.first(seen, 2)
		m.UID = s.str()
	case "generation":
		s.first(seen, 3)
		m.Generation = s.integer(64)
	case "labels":
		s.first(seen, 4)
		m.Labels = s.stringMap()
	case "creationTimestamp":
		s.first(seen, 5)
		m.CreationTimestamp = s.str()
	case "deletionTimestamp":
		s.first(seen, 6)
		m.DeletionTimestamp = s.str()
	default:
		return false
	}
	return true
}

func (s *jsonScanner) objectMeta(m *ObjectMeta) {
	var seen fieldSet
	_, more := s.object()
	for more {
		if k := s.key(); !s.metaField(m, k, &seen) {
			s.unknownField(k, "name", "namespace", "uid", "generation", "labels", "creationTimestamp", "deletionTimestamp")
		}
		more = s.more('}')
	}
}

// stringMap reads a map[string]string: nil for null, empty for {}; a duplicate key keeps the last
// value and a null value reads as "", as with encoding/json.
func (s *jsonScanner) stringMap() map[string]string {
	present, more := s.object()
	if !present {
		return nil
	}
	m := make(map[string]string)
	for more {
		k := s.keep(s.key())
		m[k] = s.str()
		more = s.more('}')
	}
	return m
}

// stringList reads a []string: nil for null, empty for [].
func (s *jsonScanner) stringList() []string {
	present, more := s.array()
	if !present {
		return nil
	}
	out := make([]string, 0, 4)
	for more {
		out = append(out, s.str())
		more = s.more(']')
	}
	return out
}

func (s *jsonScanner) int32Value() int32 { return int32(s.integer(32)) }

func (s *jsonScanner) deploymentStatus(d *ObservedDeployment) {
	var seen fieldSet
	_, more := s.object()
	for more {
		switch k := s.key(); string(k) {
		case "readyReplicas":
			s.first(&seen, 0)
			d.ReadyReplicas = s.int32Value()
		case "conditions":
			s.first(&seen, 1)
			d.Conditions = s.observedConditions()
		default:
			s.unknownField(k, "readyReplicas", "conditions")
		}
		more = s.more('}')
	}
}

// observedConditions reads wireCondition items; like convertConditions it gives nil for none.
func (s *jsonScanner) observedConditions() []ObservedCondition {
	var out []ObservedCondition
	_, more := s.array()
	for more {
		var c ObservedCondition
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "type":
				s.first(&seen, 0)
				c.Type = s.str()
			case "status":
				s.first(&seen, 1)
				c.Status = s.str()
			case "reason":
				s.first(&seen, 2)
				c.Reason = s.str()
			case "message":
				s.first(&seen, 3)
				c.Message = s.str()
			default:
				s.unknownField(k, "type", "status", "reason", "message")
			}
			moreFields = s.more('}')
		}
		if out == nil {
			out = make([]ObservedCondition, 0, 6)
		}
		out = append(out, c)
		more = s.more(']')
	}
	return out
}

func (s *jsonScanner) serviceSpec(svc *ObservedService) {
	var seen fieldSet
	_, more := s.object()
	for more {
		switch k := s.key(); string(k) {
		case "type":
			s.first(&seen, 0)
			svc.Type = s.str()
		case "ports":
			s.first(&seen, 1)
			_, morePorts := s.array()
			for morePorts {
				var p ObservedServicePort
				var seenPort fieldSet
				_, moreFields := s.object()
				for moreFields {
					switch k := s.key(); string(k) {
					case "port":
						s.first(&seenPort, 0)
						p.Port = s.int32Value()
					case "nodePort":
						s.first(&seenPort, 1)
						p.NodePort = s.int32Value()
					case "protocol":
						s.first(&seenPort, 2)
						p.Protocol = s.str()
					default:
						s.unknownField(k, "port", "nodePort", "protocol")
					}
					moreFields = s.more('}')
				}
				svc.Ports = append(svc.Ports, p)
				morePorts = s.more(']')
			}
		default:
			s.unknownField(k, "type", "ports")
		}
		more = s.more('}')
	}
}

// loadBalancerStatus reads wireLoadBalancerStatus; like convertLoadBalancer it gives nil for none.
func (s *jsonScanner) loadBalancerStatus() []LoadBalancerIngress {
	var out []LoadBalancerIngress
	var seen fieldSet
	_, more := s.object()
	for more {
		if k := s.key(); string(k) != "loadBalancer" {
			s.unknownField(k, "loadBalancer")
			more = s.more('}')
			continue
		}
		s.first(&seen, 0)
		var seenLB fieldSet
		_, moreLB := s.object()
		for moreLB {
			if k := s.key(); string(k) != "ingress" {
				s.unknownField(k, "ingress")
				moreLB = s.more('}')
				continue
			}
			s.first(&seenLB, 0)
			_, moreIngress := s.array()
			for moreIngress {
				var ing LoadBalancerIngress
				var seenIng fieldSet
				_, moreFields := s.object()
				for moreFields {
					switch k := s.key(); string(k) {
					case "ip":
						s.first(&seenIng, 0)
						ing.IP = s.str()
					case "hostname":
						s.first(&seenIng, 1)
						ing.Hostname = s.str()
					default:
						s.unknownField(k, "ip", "hostname")
					}
					moreFields = s.more('}')
				}
				out = append(out, ing)
				moreIngress = s.more(']')
			}
			moreLB = s.more('}')
		}
		more = s.more('}')
	}
	return out
}

func (s *jsonScanner) podStatus(pod *ObservedPod) {
	var seen fieldSet
	_, more := s.object()
	for more {
		switch k := s.key(); string(k) {
		case "phase":
			s.first(&seen, 0)
			pod.Phase = s.str()
		case "conditions":
			s.first(&seen, 1)
			pod.Conditions = s.observedConditions()
		case "initContainerStatuses":
			s.first(&seen, 2)
			pod.InitContainers = s.containerStatuses()
		case "containerStatuses":
			s.first(&seen, 3)
			pod.ContainerStatuses = s.containerStatuses()
		default:
			s.unknownField(k, "phase", "conditions", "initContainerStatuses", "containerStatuses")
		}
		more = s.more('}')
	}
}

// containerStatuses reads wireContainerStatus items; like convertContainerStatuses it gives nil
// for none.
func (s *jsonScanner) containerStatuses() []ContainerStatus {
	var out []ContainerStatus
	_, more := s.array()
	for more {
		var cs ContainerStatus
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "name":
				s.first(&seen, 0)
				cs.Name = s.str()
			case "ready":
				s.first(&seen, 1)
				cs.Ready = s.boolean()
			case "state":
				s.first(&seen, 2)
				var seenState fieldSet
				_, moreState := s.object()
				for moreState {
					switch k := s.key(); string(k) {
					case "waiting":
						s.first(&seenState, 0)
						cs.Waiting = s.waiting()
					case "terminated":
						s.first(&seenState, 1)
						cs.Terminated = s.terminated()
					default:
						s.unknownField(k, "waiting", "terminated")
					}
					moreState = s.more('}')
				}
			case "lastState":
				s.first(&seen, 3)
				var seenLast fieldSet
				_, moreLast := s.object()
				for moreLast {
					if k := s.key(); string(k) == "terminated" {
						s.first(&seenLast, 0)
						cs.LastTerminated = s.terminated()
					} else {
						s.unknownField(k, "terminated")
					}
					moreLast = s.more('}')
				}
			default:
				s.unknownField(k, "name", "ready", "state", "lastState")
			}
			moreFields = s.more('}')
		}
		if out == nil {
			out = make([]ContainerStatus, 0, 2)
		}
		out = append(out, cs)
		more = s.more(']')
	}
	return out
}

// waiting reads a ContainerStateWaiting, whose fields have no json tags: encoding/json matches
// "reason" and "message" to them without regard to case, and so does this.
func (s *jsonScanner) waiting() *ContainerStateWaiting {
	present, more := s.object()
	if !present {
		return nil
	}
	w := &ContainerStateWaiting{}
	var seen fieldSet
	for more {
		k := s.key()
		switch {
		case asciiEqualFoldLen(k, "reason"):
			s.first(&seen, 0)
			w.Reason = s.str()
		case asciiEqualFoldLen(k, "message"):
			s.first(&seen, 1)
			w.Message = s.str()
		default:
			s.unknownField(k)
		}
		more = s.more('}')
	}
	return w
}

func asciiEqualFoldLen(a []byte, b string) bool { return len(a) == len(b) && asciiEqualFold(b, a) }

func (s *jsonScanner) terminated() *ContainerStateTerminated {
	present, more := s.object()
	if !present {
		return nil
	}
	t := &ContainerStateTerminated{}
	var seen fieldSet
	for more {
		switch k := s.key(); string(k) {
		case "reason":
			s.first(&seen, 0)
			t.Reason = s.str()
		case "message":
			s.first(&seen, 1)
			t.Message = s.str()
		case "exitCode":
			s.first(&seen, 2)
			t.ExitCode = s.int32Value()
		default:
			s.unknownField(k, "reason", "message", "exitCode")
		}
		more = s.more('}')
	}
	return t
}

// challenge reads the parent, a Challenge, field for field as encoding/json would.
func (s *jsonScanner) challenge(c *Challenge) {
	var seen fieldSet
	_, more := s.object()
	for more {
		switch k := s.key(); string(k) {
		case "apiVersion":
			s.first(&seen, 0)
			c.APIVersion = s.str()
		case "kind":
			s.first(&seen, 1)
			c.Kind = s.str()
		case "metadata":
			s.first(&seen, 2)
			s.objectMeta(&c.Metadata)
		case "spec":
			s.first(&seen, 3)
			s.challengeSpec(&c.Spec)
		case "status":
			s.first(&seen, 4)
			s.challengeStatus(&c.Status)
		default:
			s.unknownField(k, "apiVersion", "kind", "metadata", "spec", "status")
		}
		more = s.more('}')
	}
}

func (s *jsonScanner) challengeSpec(spec *ChallengeSpec) {
	var seen fieldSet
	_, more := s.object()
	for more {
		switch k := s.key(); string(k) {
		case "definitionRef":
			s.first(&seen, 0)
			spec.DefinitionRef = s.definitionRef()
		case "template":
			s.first(&seen, 1)
			if s.peek() == 'n' {
				s.literal("null")
			} else {
				spec.Template = &DefinitionSpec{}
				s.definitionSpec(spec.Template)
			}
		case "owner":
			s.first(&seen, 2)
			spec.Owner = s.str()
		case "timeout":
			s.first(&seen, 3)
			spec.Timeout = s.str()
		case "expiresAt":
			s.first(&seen, 4)
			spec.ExpiresAt = s.str()
		default:
			s.unknownField(k, "definitionRef", "template", "owner", "timeout", "expiresAt")
		}
		more = s.more('}')
	}
}

func (s *jsonScanner) definitionRef() *DefinitionRef {
	present, more := s.object()
	if !present {
		return nil
	}
	ref := &DefinitionRef{}
	var seen fieldSet
	for more {
		switch k := s.key(); string(k) {
		case "name":
			s.first(&seen, 0)
			ref.Name = s.str()
		case "namespace":
			s.first(&seen, 1)
			ref.Namespace = s.str()
		default:
			s.unknownField(k, "name", "namespace")
		}
		more = s.more('}')
	}
	return ref
}

func (s *jsonScanner) challengeStatus(st *ChallengeStatus) {
	var seen fieldSet
	_, more := s.object()
	for more {
		switch k := s.key(); string(k) {
		case "phase":
			s.first(&seen, 0)
			st.Phase = s.str()
		case "reason":
			s.first(&seen, 1)
			st.Reason = s.str()
		case "message":
			s.first(&seen, 2)
			st.Message = s.str()
		case "instanceId":
			s.first(&seen, 3)
			st.InstanceID = s.str()
		case "endpoints":
			s.first(&seen, 4)
			st.Endpoints = s.endpoints()
		case "startedAt":
			s.first(&seen, 5)
			st.StartedAt = s.str()
		case "readyAt":
			s.first(&seen, 6)
			st.ReadyAt = s.str()
		case "expiresAt":
			s.first(&seen, 7)
			st.ExpiresAt = s.str()
		case "conditions":
			s.first(&seen, 8)
			st.Conditions = s.conditions()
		case "observedGeneration":
			s.first(&seen, 9)
			st.ObservedGeneration = s.integer(64)
		default:
			s.unknownField(k, "phase", "reason", "message", "instanceId", "endpoints", "startedAt", "readyAt", "expiresAt", "conditions", "observedGeneration")
		}
		more = s.more('}')
	}
}

func (s *jsonScanner) endpoints() []Endpoint {
	present, more := s.array()
	if !present {
		return nil
	}
	out := make([]Endpoint, 0, 2)
	for more {
		var e Endpoint
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "name":
				s.first(&seen, 0)
				e.Name = s.str()
			case "protocol":
				s.first(&seen, 1)
				e.Protocol = s.str()
			case "host":
				s.first(&seen, 2)
				e.Host = s.str()
			case "port":
				s.first(&seen, 3)
				e.Port = s.int32Value()
			case "url":
				s.first(&seen, 4)
				e.URL = s.str()
			default:
				s.unknownField(k, "name", "protocol", "host", "port", "url")
			}
			moreFields = s.more('}')
		}
		out = append(out, e)
		more = s.more(']')
	}
	return out
}

func (s *jsonScanner) conditions() []Condition {
	present, more := s.array()
	if !present {
		return nil
	}
	out := make([]Condition, 0, 2)
	for more {
		var c Condition
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "type":
				s.first(&seen, 0)
				c.Type = s.str()
			case "status":
				s.first(&seen, 1)
				c.Status = s.str()
			case "observedGeneration":
				s.first(&seen, 2)
				c.ObservedGeneration = s.integer(64)
			case "lastTransitionTime":
				s.first(&seen, 3)
				c.LastTransitionTime = s.str()
			case "reason":
				s.first(&seen, 4)
				c.Reason = s.str()
			case "message":
				s.first(&seen, 5)
				c.Message = s.str()
			default:
				s.unknownField(k, "type", "status", "observedGeneration", "lastTransitionTime", "reason", "message")
			}
			moreFields = s.more('}')
		}
		out = append(out, c)
		more = s.more(']')
	}
	return out
}

// definitionSpec reads a DefinitionSpec: a ChallengeDefinition's spec or an inline template.
func (s *jsonScanner) definitionSpec(spec *DefinitionSpec) {
	var seen fieldSet
	_, more := s.object()
	for more {
		switch k := s.key(); string(k) {
		case "containers":
			s.first(&seen, 0)
			spec.Containers = s.containers()
		case "expose":
			s.first(&seen, 1)
			spec.Expose = s.expose()
		case "timeout":
			s.first(&seen, 2)
			spec.Timeout = s.str()
		case "maxLifetime":
			s.first(&seen, 3)
			spec.MaxLifetime = s.str()
		case "egress":
			s.first(&seen, 4)
			spec.Egress = s.boolean()
		case "flag":
			s.first(&seen, 5)
			spec.Flag = s.flag()
		case "runtimeClassName":
			s.first(&seen, 6)
			spec.RuntimeClassName = s.str()
		case "security":
			s.first(&seen, 7)
			spec.Security = s.security()
		default:
			s.unknownField(k, "containers", "expose", "timeout", "maxLifetime", "egress", "flag", "runtimeClassName", "security")
		}
		more = s.more('}')
	}
}

func (s *jsonScanner) containers() []Container {
	present, more := s.array()
	if !present {
		return nil
	}
	out := make([]Container, 0, 2)
	for more {
		var c Container
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "name":
				s.first(&seen, 0)
				c.Name = s.str()
			case "image":
				s.first(&seen, 1)
				c.Image = s.str()
			case "command":
				s.first(&seen, 2)
				c.Command = s.stringList()
			case "args":
				s.first(&seen, 3)
				c.Args = s.stringList()
			case "env":
				s.first(&seen, 4)
				c.Env = s.env()
			case "ports":
				s.first(&seen, 5)
				c.Ports = s.containerPorts()
			case "resources":
				s.first(&seen, 6)
				c.Resources = s.resources()
			case "readinessProbe":
				s.first(&seen, 7)
				c.ReadinessProbe = s.probe()
			default:
				s.unknownField(k, "name", "image", "command", "args", "env", "ports", "resources", "readinessProbe")
			}
			moreFields = s.more('}')
		}
		out = append(out, c)
		more = s.more(']')
	}
	return out
}

func (s *jsonScanner) env() []EnvVar {
	present, more := s.array()
	if !present {
		return nil
	}
	out := make([]EnvVar, 0, 4)
	for more {
		var e EnvVar
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "name":
				s.first(&seen, 0)
				e.Name = s.str()
			case "value":
				s.first(&seen, 1)
				e.Value = s.str()
			default:
				s.unknownField(k, "name", "value")
			}
			moreFields = s.more('}')
		}
		out = append(out, e)
		more = s.more(']')
	}
	return out
}

func (s *jsonScanner) containerPorts() []ContainerPort {
	present, more := s.array()
	if !present {
		return nil
	}
	out := make([]ContainerPort, 0, 2)
	for more {
		var p ContainerPort
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "name":
				s.first(&seen, 0)
				p.Name = s.str()
			case "containerPort":
				s.first(&seen, 1)
				p.ContainerPort = s.int32Value()
			case "protocol":
				s.first(&seen, 2)
				p.Protocol = s.str()
			default:
				s.unknownField(k, "name", "containerPort", "protocol")
			}
			moreFields = s.more('}')
		}
		out = append(out, p)
		more = s.more(']')
	}
	return out
}

func (s *jsonScanner) resources() *ResourceRequirements {
	present, more := s.object()
	if !present {
		return nil
	}
	r := &ResourceRequirements{}
	var seen fieldSet
	for more {
		switch k := s.key(); string(k) {
		case "requests":
			s.first(&seen, 0)
			r.Requests = s.stringMap()
		case "limits":
			s.first(&seen, 1)
			r.Limits = s.stringMap()
		default:
			s.unknownField(k, "requests", "limits")
		}
		more = s.more('}')
	}
	return r
}

func (s *jsonScanner) probe() *Probe {
	present, more := s.object()
	if !present {
		return nil
	}
	p := &Probe{}
	var seen fieldSet
	for more {
		switch k := s.key(); string(k) {
		case "tcpSocket":
			s.first(&seen, 0)
			if present, _ := s.peekObject(); present {
				p.TCPSocket = &TCPSocketAction{}
			}
			_, moreFields := s.object()
			var seenTCP fieldSet
			for moreFields {
				if k := s.key(); string(k) == "port" {
					s.first(&seenTCP, 0)
					p.TCPSocket.Port = s.int32Value()
				} else {
					s.unknownField(k, "port")
				}
				moreFields = s.more('}')
			}
		case "httpGet":
			s.first(&seen, 1)
			if present, _ := s.peekObject(); present {
				p.HTTPGet = &HTTPGetAction{}
			}
			_, moreFields := s.object()
			var seenHTTP fieldSet
			for moreFields {
				switch k := s.key(); string(k) {
				case "path":
					s.first(&seenHTTP, 0)
					p.HTTPGet.Path = s.str()
				case "port":
					s.first(&seenHTTP, 1)
					p.HTTPGet.Port = s.int32Value()
				default:
					s.unknownField(k, "path", "port")
				}
				moreFields = s.more('}')
			}
		case "exec":
			s.first(&seen, 2)
			if present, _ := s.peekObject(); present {
				p.Exec = &ExecAction{}
			}
			_, moreFields := s.object()
			var seenExec fieldSet
			for moreFields {
				if k := s.key(); string(k) == "command" {
					s.first(&seenExec, 0)
					p.Exec.Command = s.stringList()
				} else {
					s.unknownField(k, "command")
				}
				moreFields = s.more('}')
			}
		case "initialDelaySeconds":
			s.first(&seen, 3)
			p.InitialDelaySeconds = s.int32Value()
		case "periodSeconds":
			s.first(&seen, 4)
			p.PeriodSeconds = s.int32Value()
		case "timeoutSeconds":
			s.first(&seen, 5)
			p.TimeoutSeconds = s.int32Value()
		case "failureThreshold":
			s.first(&seen, 6)
			p.FailureThreshold = s.int32Value()
		default:
			s.unknownField(k, "tcpSocket", "httpGet", "exec", "initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold")
		}
		more = s.more('}')
	}
	return p
}

func (s *jsonScanner) expose() []Expose {
	present, more := s.array()
	if !present {
		return nil
	}
	out := make([]Expose, 0, 2)
	for more {
		var e Expose
		var seen fieldSet
		_, moreFields := s.object()
		for moreFields {
			switch k := s.key(); string(k) {
			case "port":
				s.first(&seen, 0)
				e.Port = s.int32Value()
			case "type":
				s.first(&seen, 1)
				e.Type = s.str()
			default:
				s.unknownField(k, "port", "type")
			}
			moreFields = s.more('}')
		}
		out = append(out, e)
		more = s.more(']')
	}
	return out
}

func (s *jsonScanner) flag() *Flag {
	present, more := s.object()
	if !present {
		return nil
	}
	f := &Flag{}
	var seen fieldSet
	for more {
		switch k := s.key(); string(k) {
		case "value":
			s.first(&seen, 0)
			f.Value = s.str()
		case "dynamic":
			s.first(&seen, 1)
			f.Dynamic = s.boolean()
		case "prefix":
			s.first(&seen, 2)
			f.Prefix = s.str()
		case "env":
			s.first(&seen, 3)
			f.Env = s.str()
		case "path":
			s.first(&seen, 4)
			f.Path = s.str()
		default:
			s.unknownField(k, "value", "dynamic", "prefix", "env", "path")
		}
		more = s.more('}')
	}
	return f
}

func (s *jsonScanner) security() *Security {
	present, more := s.object()
	if !present {
		return nil
	}
	sec := &Security{}
	var seen fieldSet
	for more {
		switch k := s.key(); string(k) {
		case "runAsRoot":
			s.first(&seen, 0)
			sec.RunAsRoot = s.boolean()
		case "runAsUser":
			s.first(&seen, 1)
			if !s.null() {
				uid := s.integer(64)
				sec.RunAsUser = &uid
			}
		case "readOnlyRootFilesystem":
			s.first(&seen, 2)
			if !s.null() {
				ro := s.boolean()
				sec.ReadOnlyRootFilesystem = &ro
			}
		default:
			s.unknownField(k, "runAsRoot", "runAsUser", "readOnlyRootFilesystem")
		}
		more = s.more('}')
	}
	return sec
}

// sortObservedDistinct sorts the observed lists as sortObserved does and reports whether every
// list's keys are distinct. Only then is the order independent of the order the objects were read
// in (sortObserved's sort is not stable), so only then is it certainly encoding/json's order.
func sortObservedDistinct(req *Request) bool {
	c, r := &req.Children, &req.Related
	return sortDistinct(c.Deployments, func(v ObservedDeployment) (string, string) { return v.Metadata.Namespace, v.Metadata.Name }) &&
		sortDistinct(c.Services, func(v ObservedService) (string, string) { return v.Metadata.Namespace, v.Metadata.Name }) &&
		sortDistinct(c.NetworkPolicies, func(v ObservedObject) (string, string) { return v.Metadata.Namespace, v.Metadata.Name }) &&
		sortDistinct(c.Ingresses, func(v ObservedIngress) (string, string) { return v.Metadata.Namespace, v.Metadata.Name }) &&
		sortDistinct(c.Secrets, func(v ObservedObject) (string, string) { return v.Metadata.Namespace, v.Metadata.Name }) &&
		sortDistinct(r.Definitions, func(v ChallengeDefinition) (string, string) { return v.Metadata.Namespace, v.Metadata.Name }) &&
		sortDistinct(r.Pods, func(v ObservedPod) (string, string) { return v.Metadata.Namespace, v.Metadata.Name })
}

func sortDistinct[T any](items []T, key func(T) (namespace, name string)) bool {
	if len(items) < 2 {
		return true
	}
	cmp := func(a, b T) int {
		aNamespace, aName := key(a)
		bNamespace, bName := key(b)
		return compareObjectKeys(aNamespace, aName, bNamespace, bName)
	}
	slices.SortFunc(items, cmp)
	for i := 1; i < len(items); i++ {
		if cmp(items[i-1], items[i]) == 0 {
			return false
		}
	}
	return true
}

// compareObjectKeys compares two objectKeys, namespace + "/" + name, without building them.
func compareObjectKeys(aNamespace, aName, bNamespace, bName string) int {
	ka := [3]string{aNamespace, "/", aName}
	kb := [3]string{bNamespace, "/", bName}
	i, j := 0, 0 // part indexes
	for {
		for i < 3 && ka[i] == "" {
			i++
		}
		for j < 3 && kb[j] == "" {
			j++
		}
		switch {
		case i == 3 && j == 3:
			return 0
		case i == 3:
			return -1
		case j == 3:
			return 1
		}
		n := min(len(ka[i]), len(kb[j]))
		if c := strings.Compare(ka[i][:n], kb[j][:n]); c != 0 {
			return c
		}
		ka[i], kb[j] = ka[i][n:], kb[j][n:]
	}
}
