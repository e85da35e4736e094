package sync

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"unicode/utf8"
)

// The fast encode path: a Response written field by field, without reflection, to the very bytes
// EncodeResponse's encoding/json Encoder (SetEscapeHTML(false)) writes. Anything it does not know
// (a child of another type, an invalid json.RawMessage, a NaN) makes it give up, and encoding/json
// encodes the response instead, errors included. encode_fast_test.go checks every type against
// encoding/json with every field set, so that a field added to a child type cannot be forgotten here.

// encodeResponseFast encodes resp followed by a newline, as json.Encoder does; ok is false when it
// gave up.
func encodeResponseFast(resp *Response) (out []byte, ok bool) {
	// About a kilobyte per child (the Deployment more, the others less) and one for the status.
	b := make([]byte, 0, 1024+1024*len(resp.Children))
	b = append(b, `{"status":`...)
	b = appendChallengeStatus(b, &resp.Status)
	b = append(b, `,"children":`...)
	if resp.Children == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, child := range resp.Children {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendChild(b, child); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"resyncAfterSeconds":`...)
	if b, ok = appendFloat64(b, resp.ResyncAfterSeconds); !ok {
		return nil, false
	}
	b = append(b, `,"finalized":`...)
	b = strconv.AppendBool(b, resp.Finalized)
	return append(b, '}', '\n'), true
}

func appendChild(b []byte, child any) ([]byte, bool) {
	switch c := child.(type) {
	case nil:
		return append(b, "null"...), true
	case deployment:
		return appendDeployment(b, &c), true
	case *deployment:
		if c == nil {
			return append(b, "null"...), true
		}
		return appendDeployment(b, c), true
	case service:
		return appendService(b, &c), true
	case *service:
		if c == nil {
			return append(b, "null"...), true
		}
		return appendService(b, c), true
	case networkPolicy:
		return appendNetworkPolicy(b, &c), true
	case *networkPolicy:
		if c == nil {
			return append(b, "null"...), true
		}
		return appendNetworkPolicy(b, c), true
	case ingress:
		return appendIngress(b, &c), true
	case *ingress:
		if c == nil {
			return append(b, "null"...), true
		}
		return appendIngress(b, c), true
	case secret:
		return appendSecret(b, &c), true
	case *secret:
		if c == nil {
			return append(b, "null"...), true
		}
		return appendSecret(b, c), true
	case childIdentity:
		return appendChildIdentity(b, &c), true
	case json.RawMessage:
		return appendRawMessage(b, c)
	default:
		return b, false
	}
}

// appendRawMessage writes raw compacted, as encoding/json writes a Marshaler's output with HTML
// escaping off; invalid JSON gives up (encoding/json reports it).
func appendRawMessage(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, false
	}
	return buf.Bytes(), true
}

// appendFloat64 writes f as encoding/json does (ES6 number formatting); NaN and infinities give up.
func appendFloat64(b []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}

const hexDigits = "0123456789abcdef"

// appendString writes s quoted as encoding/json does with HTML escaping off: short escapes for
// \b \f \n \r \t, \u00XX for other control characters, U+FFFD for invalid UTF-8, and U+2028 and
// U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	// Most strings need no escape: copy, then check the copy eight bytes at a time, and take the
	// careful path only from the first byte that needs a look.
	copied := len(b)
	b = append(b, s...)
	i := 0
	for i+8 <= len(s) && !needsLook(binary.LittleEndian.Uint64(b[copied+i:])) {
		i += 8
	}
	for i < len(s) && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) {
		return append(b, '"')
	}
	b = b[:copied+i]
	start := i
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// needsLook reports whether any of the eight bytes in w is a quote, a backslash, a control
// character or not ASCII.
func needsLook(w uint64) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	quote := w ^ (ones * '"')
	backslash := w ^ (ones * '\\')
	return ((quote-ones)&^quote|(backslash-ones)&^backslash|(w-ones*0x20)&^w|w)&highs != 0
}

// member writes the separator before a member and its quoted name with the colon.
func member(b []byte, first *bool, nameColon string) []byte {
	if !*first {
		b = append(b, ',')
	}
	*first = false
	return append(b, nameColon...)
}

func appendStringMember(b []byte, first *bool, nameColon, value string) []byte {
	return appendString(member(b, first, nameColon), value)
}

func appendInt(b []byte, first *bool, nameColon string, value int64) []byte {
	return strconv.AppendInt(member(b, first, nameColon), value, 10)
}

func appendBool(b []byte, first *bool, nameColon string, value bool) []byte {
	return strconv.AppendBool(member(b, first, nameColon), value)
}

// appendStringMap writes a map[string]string with its keys sorted, as encoding/json does.
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	type entry struct{ key, value string }
	var onStack [16]entry
	entries := onStack[:0]
	for k, v := range m {
		entries = append(entries, entry{k, v})
	}
	// Insertion sort: label and selector maps hold a handful of keys.
	for i := 1; i < len(entries); i++ {
		for j := i; j > 0 && entries[j].key < entries[j-1].key; j-- {
			entries[j], entries[j-1] = entries[j-1], entries[j]
		}
	}
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, e.key)
		b = append(b, ':')
		b = appendString(b, e.value)
	}
	return append(b, '}')
}

func appendStringList(b []byte, list []string) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendList writes a slice with appendItem, null when nil.
func appendList[T any](b []byte, list []T, appendItem func([]byte, *T) []byte) []byte {
	if list == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendItem(b, &list[i])
	}
	return append(b, ']')
}

func appendChallengeStatus(b []byte, s *ChallengeStatus) []byte {
	first := true
	b = append(b, '{')
	if s.Phase != "" {
		b = appendStringMember(b, &first, `"phase":`, s.Phase)
	}
	if s.Reason != "" {
		b = appendStringMember(b, &first, `"reason":`, s.Reason)
	}
	if s.Message != "" {
		b = appendStringMember(b, &first, `"message":`, s.Message)
	}
	if s.InstanceID != "" {
		b = appendStringMember(b, &first, `"instanceId":`, s.InstanceID)
	}
	if len(s.Endpoints) > 0 {
		b = appendList(member(b, &first, `"endpoints":`), s.Endpoints, appendEndpoint)
	}
	if s.StartedAt != "" {
		b = appendStringMember(b, &first, `"startedAt":`, s.StartedAt)
	}
	if s.ReadyAt != "" {
		b = appendStringMember(b, &first, `"readyAt":`, s.ReadyAt)
	}
	if s.ExpiresAt != "" {
		b = appendStringMember(b, &first, `"expiresAt":`, s.ExpiresAt)
	}
	if len(s.Conditions) > 0 {
		b = appendList(member(b, &first, `"conditions":`), s.Conditions, appendCondition)
	}
	if s.ObservedGeneration != 0 {
		b = appendInt(b, &first, `"observedGeneration":`, s.ObservedGeneration)
	}
	return append(b, '}')
}

func appendEndpoint(b []byte, e *Endpoint) []byte {
	first := true
	b = append(b, '{')
	b = appendStringMember(b, &first, `"name":`, e.Name)
	b = appendStringMember(b, &first, `"protocol":`, e.Protocol)
	b = appendStringMember(b, &first, `"host":`, e.Host)
	b = appendInt(b, &first, `"port":`, int64(e.Port))
	b = appendStringMember(b, &first, `"url":`, e.URL)
	return append(b, '}')
}

func appendCondition(b []byte, c *Condition) []byte {
	first := true
	b = append(b, '{')
	b = appendStringMember(b, &first, `"type":`, c.Type)
	b = appendStringMember(b, &first, `"status":`, c.Status)
	if c.ObservedGeneration != 0 {
		b = appendInt(b, &first, `"observedGeneration":`, c.ObservedGeneration)
	}
	b = appendStringMember(b, &first, `"lastTransitionTime":`, c.LastTransitionTime)
	b = appendStringMember(b, &first, `"reason":`, c.Reason)
	b = appendStringMember(b, &first, `"message":`, c.Message)
	return append(b, '}')
}

// appendTypeHeader writes {"apiVersion":...,"kind":...,"metadata":..., shared by every child.
func appendTypeHeader(b []byte, apiVersion, kind string, meta *childMeta) []byte {
	b = append(b, `{"apiVersion":`...)
	b = appendString(b, apiVersion)
	b = append(b, `,"kind":`...)
	b = appendString(b, kind)
	b = append(b, `,"metadata":`...)
	return appendChildMeta(b, meta)
}

func appendChildMeta(b []byte, m *childMeta) []byte {
	first := true
	b = append(b, '{')
	b = appendStringMember(b, &first, `"name":`, m.Name)
	b = appendStringMember(b, &first, `"namespace":`, m.Namespace)
	if len(m.Labels) > 0 {
		b = appendStringMap(member(b, &first, `"labels":`), m.Labels)
	}
	if len(m.Annotations) > 0 {
		b = appendStringMap(member(b, &first, `"annotations":`), m.Annotations)
	}
	return append(b, '}')
}

func appendLabelSelector(b []byte, s *labelSelector) []byte {
	b = append(b, `{"matchLabels":`...)
	b = appendStringMap(b, s.MatchLabels)
	return append(b, '}')
}

func appendDeployment(b []byte, d *deployment) []byte {
	b = appendTypeHeader(b, d.APIVersion, d.Kind, &d.Metadata)
	s := &d.Spec
	first := true
	b = append(b, `,"spec":{`...)
	b = appendInt(b, &first, `"replicas":`, int64(s.Replicas))
	b = appendInt(b, &first, `"revisionHistoryLimit":`, int64(s.RevisionHistoryLimit))
	b = appendInt(b, &first, `"progressDeadlineSeconds":`, int64(s.ProgressDeadlineSeconds))
	b = appendLabelSelector(member(b, &first, `"selector":`), &s.Selector)
	b = appendString(append(member(b, &first, `"strategy":`), `{"type":`...), s.Strategy.Type)
	b = append(b, '}')
	b = append(member(b, &first, `"template":`), `{"metadata":{`...)
	if len(s.Template.Metadata.Labels) > 0 {
		b = appendStringMap(append(b, `"labels":`...), s.Template.Metadata.Labels)
	}
	b = append(b, `},"spec":`...)
	b = appendPodSpec(b, &s.Template.Spec)
	return append(b, "}}}"...)
}

func appendPodSpec(b []byte, p *podSpec) []byte {
	first := true
	b = append(b, '{')
	b = appendBool(b, &first, `"automountServiceAccountToken":`, p.AutomountServiceAccountToken)
	b = appendBool(b, &first, `"enableServiceLinks":`, p.EnableServiceLinks)
	if p.RuntimeClassName != "" {
		b = appendStringMember(b, &first, `"runtimeClassName":`, p.RuntimeClassName)
	}
	b = member(b, &first, `"securityContext":`)
	sc := &p.SecurityContext
	scFirst := true
	b = append(b, '{')
	if sc.RunAsNonRoot != nil {
		b = appendBool(b, &scFirst, `"runAsNonRoot":`, *sc.RunAsNonRoot)
	}
	if sc.RunAsUser != nil {
		b = appendInt(b, &scFirst, `"runAsUser":`, *sc.RunAsUser)
	}
	b = appendString(append(member(b, &scFirst, `"seccompProfile":`), `{"type":`...), sc.SeccompProfile.Type)
	b = append(b, "}}"...)
	b = appendList(member(b, &first, `"containers":`), p.Containers, appendContainer)
	if len(p.Volumes) > 0 {
		b = appendList(member(b, &first, `"volumes":`), p.Volumes, appendVolume)
	}
	return append(b, '}')
}

func appendContainer(b []byte, c *container) []byte {
	first := true
	b = append(b, '{')
	b = appendStringMember(b, &first, `"name":`, c.Name)
	b = appendStringMember(b, &first, `"image":`, c.Image)
	if len(c.Command) > 0 {
		b = appendStringList(member(b, &first, `"command":`), c.Command)
	}
	if len(c.Args) > 0 {
		b = appendStringList(member(b, &first, `"args":`), c.Args)
	}
	if len(c.Ports) > 0 {
		b = appendList(member(b, &first, `"ports":`), c.Ports, appendContainerPort)
	}
	if len(c.Env) > 0 {
		b = appendList(member(b, &first, `"env":`), c.Env, appendEnvVar)
	}
	b = member(b, &first, `"resources":`)
	resFirst := true
	b = append(b, '{')
	if len(c.Resources.Limits) > 0 {
		b = appendStringMap(member(b, &resFirst, `"limits":`), c.Resources.Limits)
	}
	if len(c.Resources.Requests) > 0 {
		b = appendStringMap(member(b, &resFirst, `"requests":`), c.Resources.Requests)
	}
	b = append(b, '}')
	if len(c.VolumeMounts) > 0 {
		b = appendList(member(b, &first, `"volumeMounts":`), c.VolumeMounts, appendVolumeMount)
	}
	if c.ReadinessProbe != nil {
		b = appendProbe(member(b, &first, `"readinessProbe":`), c.ReadinessProbe)
	}
	sc := &c.SecurityContext
	b = strconv.AppendBool(append(member(b, &first, `"securityContext":`), `{"allowPrivilegeEscalation":`...), sc.AllowPrivilegeEscalation)
	b = appendStringList(append(b, `,"capabilities":{"drop":`...), sc.Capabilities.Drop)
	b = append(b, '}')
	b = strconv.AppendBool(append(b, `,"readOnlyRootFilesystem":`...), sc.ReadOnlyRootFilesystem)
	if sc.RunAsNonRoot != nil {
		b = strconv.AppendBool(append(b, `,"runAsNonRoot":`...), *sc.RunAsNonRoot)
	}
	return append(b, "}}"...)
}

func appendContainerPort(b []byte, p *containerPort) []byte {
	first := true
	b = append(b, '{')
	if p.Name != "" {
		b = appendStringMember(b, &first, `"name":`, p.Name)
	}
	b = appendInt(b, &first, `"containerPort":`, int64(p.ContainerPort))
	b = appendStringMember(b, &first, `"protocol":`, p.Protocol)
	return append(b, '}')
}

func appendEnvVar(b []byte, e *envVar) []byte {
	first := true
	b = append(b, '{')
	b = appendStringMember(b, &first, `"name":`, e.Name)
	if e.Value != "" {
		b = appendStringMember(b, &first, `"value":`, e.Value)
	}
	if e.ValueFrom != nil {
		ref := &e.ValueFrom.SecretKeyRef
		b = append(member(b, &first, `"valueFrom":`), `{"secretKeyRef":{"name":`...)
		b = appendString(b, ref.Name)
		b = appendString(append(b, `,"key":`...), ref.Key)
		b = append(b, "}}"...)
	}
	return append(b, '}')
}

func appendVolumeMount(b []byte, m *volumeMount) []byte {
	first := true
	b = append(b, '{')
	b = appendStringMember(b, &first, `"name":`, m.Name)
	b = appendStringMember(b, &first, `"mountPath":`, m.MountPath)
	if m.SubPath != "" {
		b = appendStringMember(b, &first, `"subPath":`, m.SubPath)
	}
	if m.ReadOnly {
		b = appendBool(b, &first, `"readOnly":`, m.ReadOnly)
	}
	return append(b, '}')
}

func appendProbe(b []byte, p *probe) []byte {
	first := true
	b = append(b, '{')
	if p.TCPSocket != nil {
		b = strconv.AppendInt(append(member(b, &first, `"tcpSocket":`), `{"port":`...), int64(p.TCPSocket.Port), 10)
		b = append(b, '}')
	}
	if p.HTTPGet != nil {
		b = appendString(append(member(b, &first, `"httpGet":`), `{"path":`...), p.HTTPGet.Path)
		b = strconv.AppendInt(append(b, `,"port":`...), int64(p.HTTPGet.Port), 10)
		b = appendString(append(b, `,"scheme":`...), p.HTTPGet.Scheme)
		b = append(b, '}')
	}
	if p.Exec != nil {
		b = appendStringList(append(member(b, &first, `"exec":`), `{"command":`...), p.Exec.Command)
		b = append(b, '}')
	}
	if p.InitialDelaySeconds != 0 {
		b = appendInt(b, &first, `"initialDelaySeconds":`, int64(p.InitialDelaySeconds))
	}
	b = appendInt(b, &first, `"periodSeconds":`, int64(p.PeriodSeconds))
	b = appendInt(b, &first, `"timeoutSeconds":`, int64(p.TimeoutSeconds))
	b = appendInt(b, &first, `"successThreshold":`, int64(p.SuccessThreshold))
	b = appendInt(b, &first, `"failureThreshold":`, int64(p.FailureThreshold))
	return append(b, '}')
}

func appendVolume(b []byte, v *volume) []byte {
	first := true
	b = append(b, '{')
	b = appendStringMember(b, &first, `"name":`, v.Name)
	if v.EmptyDir != nil {
		b = appendString(append(member(b, &first, `"emptyDir":`), `{"sizeLimit":`...), v.EmptyDir.SizeLimit)
		b = append(b, '}')
	}
	if v.Secret != nil {
		b = appendString(append(member(b, &first, `"secret":`), `{"secretName":`...), v.Secret.SecretName)
		b = appendList(append(b, `,"items":`...), v.Secret.Items, appendKeyToPath)
		b = strconv.AppendInt(append(b, `,"defaultMode":`...), int64(v.Secret.DefaultMode), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendKeyToPath(b []byte, k *keyToPath) []byte {
	b = appendString(append(b, `{"key":`...), k.Key)
	b = appendString(append(b, `,"path":`...), k.Path)
	return append(b, '}')
}

func appendService(b []byte, s *service) []byte {
	b = appendTypeHeader(b, s.APIVersion, s.Kind, &s.Metadata)
	b = appendString(append(b, `,"spec":{"type":`...), s.Spec.Type)
	b = appendStringMap(append(b, `,"selector":`...), s.Spec.Selector)
	b = appendList(append(b, `,"ports":`...), s.Spec.Ports, appendServicePort)
	return append(b, "}}"...)
}

func appendServicePort(b []byte, p *servicePort) []byte {
	b = appendString(append(b, `{"name":`...), p.Name)
	b = strconv.AppendInt(append(b, `,"port":`...), int64(p.Port), 10)
	b = strconv.AppendInt(append(b, `,"targetPort":`...), int64(p.TargetPort), 10)
	b = appendString(append(b, `,"protocol":`...), p.Protocol)
	return append(b, '}')
}

func appendNetworkPolicy(b []byte, n *networkPolicy) []byte {
	b = appendTypeHeader(b, n.APIVersion, n.Kind, &n.Metadata)
	b = appendLabelSelector(append(b, `,"spec":{"podSelector":`...), &n.Spec.PodSelector)
	b = appendStringList(append(b, `,"policyTypes":`...), n.Spec.PolicyTypes)
	if len(n.Spec.Ingress) > 0 {
		b = appendList(append(b, `,"ingress":`...), n.Spec.Ingress, appendNetworkPolicyRule)
	}
	if len(n.Spec.Egress) > 0 {
		b = appendList(append(b, `,"egress":`...), n.Spec.Egress, appendNetworkPolicyRule)
	}
	return append(b, "}}"...)
}

func appendNetworkPolicyRule(b []byte, r *networkPolicyRule) []byte {
	first := true
	b = append(b, '{')
	if len(r.From) > 0 {
		b = appendList(member(b, &first, `"from":`), r.From, appendNetworkPolicyPeer)
	}
	if len(r.To) > 0 {
		b = appendList(member(b, &first, `"to":`), r.To, appendNetworkPolicyPeer)
	}
	if len(r.Ports) > 0 {
		b = appendList(member(b, &first, `"ports":`), r.Ports, appendNetworkPolicyPort)
	}
	return append(b, '}')
}

func appendNetworkPolicyPeer(b []byte, p *networkPolicyPeer) []byte {
	if p.IPBlock == nil {
		return append(b, "{}"...)
	}
	b = appendString(append(b, `{"ipBlock":{"cidr":`...), p.IPBlock.CIDR)
	if len(p.IPBlock.Except) > 0 {
		b = appendStringList(append(b, `,"except":`...), p.IPBlock.Except)
	}
	return append(b, "}}"...)
}

func appendNetworkPolicyPort(b []byte, p *networkPolicyPort) []byte {
	b = appendString(append(b, `{"protocol":`...), p.Protocol)
	b = strconv.AppendInt(append(b, `,"port":`...), int64(p.Port), 10)
	return append(b, '}')
}

func appendIngress(b []byte, ing *ingress) []byte {
	b = appendTypeHeader(b, ing.APIVersion, ing.Kind, &ing.Metadata)
	first := true
	b = append(b, `,"spec":{`...)
	if ing.Spec.IngressClassName != "" {
		b = appendStringMember(b, &first, `"ingressClassName":`, ing.Spec.IngressClassName)
	}
	b = appendList(member(b, &first, `"rules":`), ing.Spec.Rules, appendIngressRule)
	return append(b, "}}"...)
}

func appendIngressRule(b []byte, r *ingressRule) []byte {
	b = appendString(append(b, `{"host":`...), r.Host)
	b = appendList(append(b, `,"http":{"paths":`...), r.HTTP.Paths, appendIngressPath)
	return append(b, "}}"...)
}

func appendIngressPath(b []byte, p *httpIngressPath) []byte {
	b = appendString(append(b, `{"path":`...), p.Path)
	b = appendString(append(b, `,"pathType":`...), p.PathType)
	svc := &p.Backend.Service
	b = appendString(append(b, `,"backend":{"service":{"name":`...), svc.Name)
	b = strconv.AppendInt(append(b, `,"port":{"number":`...), int64(svc.Port.Number), 10)
	return append(b, "}}}}"...)
}

func appendSecret(b []byte, s *secret) []byte {
	b = appendTypeHeader(b, s.APIVersion, s.Kind, &s.Metadata)
	b = appendString(append(b, `,"type":`...), s.Type)
	b = appendStringMap(append(b, `,"data":`...), s.Data)
	return append(b, '}')
}

func appendChildIdentity(b []byte, c *childIdentity) []byte {
	b = appendString(append(b, `{"apiVersion":`...), c.APIVersion)
	b = appendString(append(b, `,"kind":`...), c.Kind)
	b = appendString(append(b, `,"metadata":{"name":`...), c.Metadata.Name)
	if c.Metadata.Namespace != "" {
		b = appendString(append(b, `,"namespace":`...), c.Metadata.Namespace)
	}
	return append(b, "}}"...)
}
