package sync

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

func validDefinition() v1alpha1.DefinitionSpec {
	return v1alpha1.DefinitionSpec{
		Containers: []v1alpha1.Container{{
			Name:  "web",
			Image: "registry.ctf.example/web:1",
			Ports: []v1alpha1.ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 5353, Protocol: "UDP"}},
		}},
		Expose:      []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}, {Port: 5353, Type: v1alpha1.ExposeNodePort}},
		Timeout:     "30m",
		MaxLifetime: "2h",
		Flag:        &v1alpha1.Flag{Dynamic: true, Env: "FLAG"},
	}
}

func TestValidateDefinition(t *testing.T) {
	require.Empty(t, ValidateDefinition(validDefinition(), field.NewPath("spec")))
	int64Ptr := func(v int64) *int64 { return &v }
	cases := []struct {
		name   string
		mutate func(*v1alpha1.DefinitionSpec)
		want   string
	}{
		{"no containers", func(d *v1alpha1.DefinitionSpec) { d.Containers = nil }, "spec.containers: Required value: need 1 to 8 containers"},
		{"bad container name", func(d *v1alpha1.DefinitionSpec) { d.Containers[0].Name = "Web_1" }, `spec.containers[0].name: Invalid value: "Web_1"`},
		{"duplicate container", func(d *v1alpha1.DefinitionSpec) {
			d.Containers = append(d.Containers, v1alpha1.Container{Name: "web", Image: "x"})
		}, `spec.containers[1].name: Duplicate value: "web"`},
		{"empty image", func(d *v1alpha1.DefinitionSpec) { d.Containers[0].Image = " " }, `spec.containers[0].image: Invalid value: " ": must be an image reference`},
		{"port out of range", func(d *v1alpha1.DefinitionSpec) { d.Containers[0].Ports[0].ContainerPort = 70000 }, "spec.containers[0].ports[0].containerPort: Invalid value: 70000: not between 1 and 65535"},
		{"bad protocol", func(d *v1alpha1.DefinitionSpec) { d.Containers[0].Ports[1].Protocol = "ICMP" }, `spec.containers[0].ports[1].protocol: Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"`},
		{"bad env name", func(d *v1alpha1.DefinitionSpec) { d.Containers[0].Env = []v1alpha1.EnvVar{{Name: "1=x"}} }, `spec.containers[0].env[0].name: Invalid value: "1=x"`},
		{"bad quantity", func(d *v1alpha1.DefinitionSpec) {
			d.Containers[0].Resources = &v1alpha1.ResourceRequirements{Limits: map[string]v1alpha1.Quantity{"memory": "lots"}}
		}, `spec.containers[0].resources.limits.memory: Invalid value: "lots": not a quantity`},
		{"unknown resource", func(d *v1alpha1.DefinitionSpec) {
			d.Containers[0].Resources = &v1alpha1.ResourceRequirements{Limits: map[string]v1alpha1.Quantity{"nvidia.com/gpu": "1"}}
		}, `spec.containers[0].resources.limits: Unsupported value: "nvidia.com/gpu": supported values: "cpu", "ephemeral-storage", "memory"`},
		{"request above limit", func(d *v1alpha1.DefinitionSpec) {
			d.Containers[0].Resources = &v1alpha1.ResourceRequirements{Requests: map[string]v1alpha1.Quantity{"cpu": "2"}, Limits: map[string]v1alpha1.Quantity{"cpu": "500m"}}
		}, `spec.containers[0].resources.requests.cpu: Invalid value: "2": above its limit 500m`},
		{"probe with two handlers", func(d *v1alpha1.DefinitionSpec) {
			d.Containers[0].ReadinessProbe = &v1alpha1.Probe{TCPSocket: &v1alpha1.TCPSocketAction{Port: 8080}, Exec: &v1alpha1.ExecAction{Command: []string{"true"}}}
		}, "spec.containers[0].readinessProbe: Invalid value: set exactly one of tcpSocket, httpGet and exec"},
		{"expose unknown port", func(d *v1alpha1.DefinitionSpec) { d.Expose[0].Port = 9090 }, "spec.expose[0].port: Invalid value: 9090: not a containerPort of any container"},
		{"expose unknown type", func(d *v1alpha1.DefinitionSpec) { d.Expose[0].Type = "Route" }, `spec.expose[0].type: Unsupported value: "Route": supported values: "NodePort", "LoadBalancer", "HTTP", "TLS", "ClusterIP"`},
		{"HTTP on UDP", func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 5353, Type: v1alpha1.ExposeHTTP}}
		}, "spec.expose[0].port: Invalid value: 5353: HTTP needs a TCP port, this one is UDP"},
		{"TLS on UDP", func(d *v1alpha1.DefinitionSpec) { d.Expose = []v1alpha1.Expose{{Port: 5353, Type: v1alpha1.ExposeTLS}} }, "spec.expose[0].port: Invalid value: 5353: TLS needs a TCP port, this one is UDP"},
		{"two TLS exposures", func(d *v1alpha1.DefinitionSpec) {
			d.Containers[0].Ports = append(d.Containers[0].Ports, v1alpha1.ContainerPort{ContainerPort: 1337})
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeTLS}, {Port: 1337, Type: v1alpha1.ExposeTLS}}
		}, `spec.expose[1].type: Invalid value: "TLS": at most one TLS exposure per instance`},
		{"mixed service types", func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeNodePort}, {Port: 5353, Type: v1alpha1.ExposeLoadBalancer}}
		}, `spec.expose[1].type: Invalid value: "LoadBalancer": NodePort and LoadBalancer cannot be mixed`},
		{"ClusterIP without peers", func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeClusterIP}}
		},
			"spec.expose[0].from: Invalid value: 0: a ClusterIP exposure admits only the Pods it names"},
		{"peers on NodePort", func(d *v1alpha1.DefinitionSpec) { d.Expose[1].From = []v1alpha1.ExposePeer{{Namespace: "bots"}} },
			"spec.expose[1].from: Forbidden: only ClusterIP exposures name their peers; NodePort traffic comes from outside the cluster"},
		{"peers on HTTP", func(d *v1alpha1.DefinitionSpec) { d.Expose[0].From = []v1alpha1.ExposePeer{{Namespace: "bots"}} },
			"spec.expose[0].from: Forbidden: only ClusterIP exposures name their peers; HTTP traffic comes from the ingress controller"},
		{"empty peer", func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeClusterIP, From: []v1alpha1.ExposePeer{{}}}}
		},
			"spec.expose[0].from[0]: Required value: set namespace, podLabels or both"},
		{"bad peer namespace", func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeClusterIP, From: []v1alpha1.ExposePeer{{Namespace: "Bots"}}}}
		}, `spec.expose[0].from[0].namespace: Invalid value: "Bots"`},
		{"bad peer label key", func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeClusterIP, From: []v1alpha1.ExposePeer{{PodLabels: map[string]v1alpha1.LabelValue{"app": "bot", "-x": "y"}}}}}
		}, `spec.expose[0].from[0].podLabels: Invalid value: "-x": not a valid label key`},
		{"bad peer label value", func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeClusterIP, From: []v1alpha1.ExposePeer{{PodLabels: map[string]v1alpha1.LabelValue{"app": "admin bot"}}}}}
		}, `spec.expose[0].from[0].podLabels[app]: Invalid value: "admin bot"`},
		{"bad timeout", func(d *v1alpha1.DefinitionSpec) { d.Timeout = "30 minutes" }, `spec.timeout: Invalid value: "30 minutes": not a positive duration`},
		{"timeout above maxLifetime", func(d *v1alpha1.DefinitionSpec) { d.Timeout = "3h" }, `spec.timeout: Invalid value: "3h": longer than maxLifetime 2h`},
		{"flag with value and dynamic", func(d *v1alpha1.DefinitionSpec) { d.Flag.Value = "CTF{x}" }, "spec.flag: Invalid value: set exactly one of value and dynamic: true"},
		{"flag delivered nowhere", func(d *v1alpha1.DefinitionSpec) { d.Flag.Env = "" }, "spec.flag: Required value: set env, path or both"},
		{"flag path relative", func(d *v1alpha1.DefinitionSpec) { d.Flag.Path = "flag.txt" }, `spec.flag.path: Invalid value: "flag.txt": must be a clean absolute file path`},
		{"flag env clash", func(d *v1alpha1.DefinitionSpec) { d.Containers[0].Env = []v1alpha1.EnvVar{{Name: "FLAG", Value: "x"}} }, `spec.flag.env: Invalid value: "FLAG": container "web" already sets it`},
		{"root uid without opt-out", func(d *v1alpha1.DefinitionSpec) { d.Security = &v1alpha1.Security{RunAsUser: int64Ptr(0)} }, "spec.security.runAsUser: Invalid value: 0: that is root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			def := validDefinition()
			def.Containers[0].Ports = append([]v1alpha1.ContainerPort(nil), def.Containers[0].Ports...)
			def.Flag = &v1alpha1.Flag{Dynamic: true, Env: "FLAG"}
			c.mutate(&def)
			errs := ValidateDefinition(def, field.NewPath("spec"))
			require.NotEmpty(t, errs)
			require.Contains(t, errs[0].Error(), c.want, "the first error is the mistake's own: %v", errs)
		})
	}
}

// A dynamic flag needs the hook's key; without one the instance is an Error and, if it already
// runs, its children are kept as they are.
func TestDynamicFlagWithoutKey(t *testing.T) {
	cfg := goldenConfig(t)
	cfg.FlagKey = nil
	for name, wantChildren := range map[string]int{"life-1-none-first-sync": 0, "life-3-running-http": 5} {
		c := goldenCaseNamed(t, name)
		req, err := DecodeRequest(c.request)
		require.NoError(t, err)
		resp := Sync(req, goldenNow, cfg)
		require.Equal(t, v1alpha1.PhaseError, resp.Status.Phase)
		require.Equal(t, v1alpha1.ReasonFlagKeyMissing, resp.Status.Reason)
		require.Contains(t, resp.Status.Message, "--flag-key-file")
		require.Len(t, resp.Children, wantChildren, name)
		observed := req.Children.Objects()
		for i, child := range resp.Children {
			out, err := EncodeResponse(child)
			require.NoError(t, err)
			require.JSONEq(t, observed[i].Metadata.Annotations.LastApplied, string(out), "kept children are what Metacontroller last applied")
		}
	}
}

func goldenCaseNamed(t *testing.T, name string) goldenCase {
	for _, c := range goldenCases(t) {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no golden case %s", name)
	return goldenCase{}
}

// A child without a last-applied annotation (created by hand, or by an older tool) is kept by
// identity alone, which Metacontroller's merge leaves untouched.
func TestKeepChildWithoutLastApplied(t *testing.T) {
	obj := ObservedObject{APIVersion: "v1", Kind: "Service", Metadata: ObservedMeta{ObjectMeta: ObjectMeta{Name: "svc", Namespace: "ctf"}}}
	identity := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc","namespace":"ctf"}}`
	out, err := EncodeResponse(keptChild{obj})
	require.NoError(t, err)
	require.JSONEq(t, identity, string(out))
	obj.Metadata.Annotations.LastApplied = `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc","namespace":"ctf"},"spec":{"type":"NodePort"}}`
	out, err = EncodeResponse(keptChild{obj})
	require.NoError(t, err)
	require.JSONEq(t, obj.Metadata.Annotations.LastApplied, string(out))
	obj.Metadata.Annotations.LastApplied = `{"apiVersion":"v1",`
	out, err = EncodeResponse(keptChild{obj})
	require.NoError(t, err)
	require.JSONEq(t, identity, string(out), "a last-applied configuration that is not JSON is not returned")
}

func TestDecodeRequestErrors(t *testing.T) {
	cases := map[string]string{
		`{`:                                     "request: unexpected EOF",
		`{"parent": null}`:                      "request has no parent",
		`{"parent": {"metadata": {}}}`:          "parent has no metadata.name",
		`{"parent": {"metadata": {"name": 7}}}`: "parent: json: cannot unmarshal number",
		`{"parent": {"metadata": {"name": "a"}}, "children": {"Job.batch/v1": {"x": {"metadata": {"name": "x"}}}}}`: `unknown child type "Job.batch/v1"`,
		`{"parent": {"metadata": {"name": "a"}}, "children": {"Service.v1": {"x": {"kind": "Service"}}}}`:           `children["Service.v1"]["x"] has no metadata.name`,
		`{"parent": {"metadata": {"name": "a"}}} {}`:                                                                "unexpected data after the JSON object",
	}
	for body, want := range cases {
		_, err := DecodeRequest([]byte(body))
		require.ErrorIs(t, err, ErrBadRequest, body)
		require.Contains(t, err.Error(), want, body)
	}
}

// Messages quote user input; however large the input, the status stays small.
func TestStatusMessagesAreBounded(t *testing.T) {
	c := goldenCaseNamed(t, "life-3-running-http")
	req, err := DecodeRequest(c.request)
	require.NoError(t, err)
	req.Parent.Spec.Owner = strings.Repeat("x", 7<<20)
	resp := Sync(req, goldenNow, goldenConfig(t))
	require.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	require.LessOrEqual(t, len(resp.Status.Message), maxMessageLength)
	for _, cond := range resp.Status.Conditions {
		require.LessOrEqual(t, len(cond.Message), maxMessageLength)
	}
	require.Equal(t, "ab...", truncate("abcdefgh", 5))
	require.Equal(t, "...", truncate("ééé", 4), "a cut never splits a character")
}

// Every mistake is reported at once, in field order, so that an author fixes them in one edit.
func TestValidateDefinitionReportsEveryMistake(t *testing.T) {
	def := validDefinition()
	def.Containers[0].Image = ""
	def.Timeout = "soon"
	var fields []string
	for _, err := range ValidateDefinition(def, field.NewPath("spec")) {
		fields = append(fields, err.Field)
	}
	require.Equal(t, []string{"spec.containers[0].image", "spec.timeout"}, fields)
}
