package sync

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func validDefinition() DefinitionSpec {
	return DefinitionSpec{
		Containers: []Container{{
			Name:  "web",
			Image: "registry.ctf.example/web:1",
			Ports: []ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 5353, Protocol: "UDP"}},
		}},
		Expose:      []Expose{{Port: 8080, Type: ExposeHTTP}, {Port: 5353, Type: ExposeNodePort}},
		Timeout:     "30m",
		MaxLifetime: "2h",
		Flag:        &Flag{Dynamic: true, Env: "FLAG"},
	}
}

func TestValidateDefinition(t *testing.T) {
	require.NoError(t, ValidateDefinition(validDefinition()))
	int64Ptr := func(v int64) *int64 { return &v }
	cases := []struct {
		name   string
		mutate func(*DefinitionSpec)
		want   string
	}{
		{"no containers", func(d *DefinitionSpec) { d.Containers = nil }, "containers: need 1 to 8 containers, got 0"},
		{"bad container name", func(d *DefinitionSpec) { d.Containers[0].Name = "Web_1" }, `containers[0].name "Web_1"`},
		{"duplicate container", func(d *DefinitionSpec) {
			d.Containers = append(d.Containers, Container{Name: "web", Image: "x"})
		}, `containers[1].name: "web" is used twice`},
		{"empty image", func(d *DefinitionSpec) { d.Containers[0].Image = " " }, "containers[0].image"},
		{"port out of range", func(d *DefinitionSpec) { d.Containers[0].Ports[0].ContainerPort = 70000 }, "containers[0].ports[0].containerPort: 70000 is not between 1 and 65535"},
		{"bad protocol", func(d *DefinitionSpec) { d.Containers[0].Ports[1].Protocol = "ICMP" }, `containers[0].ports[1].protocol: "ICMP" is not TCP, UDP or SCTP`},
		{"bad env name", func(d *DefinitionSpec) { d.Containers[0].Env = []EnvVar{{Name: "1=x"}} }, `containers[0].env[0].name "1=x"`},
		{"bad quantity", func(d *DefinitionSpec) {
			d.Containers[0].Resources = &ResourceRequirements{Limits: map[string]string{"memory": "lots"}}
		}, `containers[0].resources.limits.memory: "lots" is not a quantity`},
		{"unknown resource", func(d *DefinitionSpec) {
			d.Containers[0].Resources = &ResourceRequirements{Limits: map[string]string{"nvidia.com/gpu": "1"}}
		}, `"nvidia.com/gpu" is not cpu, memory or ephemeral-storage`},
		{"request above limit", func(d *DefinitionSpec) {
			d.Containers[0].Resources = &ResourceRequirements{Requests: map[string]string{"cpu": "2"}, Limits: map[string]string{"cpu": "500m"}}
		}, "the cpu request 2 is above its limit 500m"},
		{"probe with two handlers", func(d *DefinitionSpec) {
			d.Containers[0].ReadinessProbe = &Probe{TCPSocket: &TCPSocketAction{Port: 8080}, Exec: &ExecAction{Command: []string{"true"}}}
		}, "set exactly one of tcpSocket, httpGet and exec"},
		{"expose unknown port", func(d *DefinitionSpec) { d.Expose[0].Port = 9090 }, "expose[0].port: 9090 is not a containerPort of any container"},
		{"expose unknown type", func(d *DefinitionSpec) { d.Expose[0].Type = "Route" }, `expose[0].type: "Route" is not NodePort, LoadBalancer, HTTP, TLS or ClusterIP`},
		{"HTTP on UDP", func(d *DefinitionSpec) { d.Expose = []Expose{{Port: 5353, Type: ExposeHTTP}} }, "HTTP needs a TCP port"},
		{"TLS on UDP", func(d *DefinitionSpec) { d.Expose = []Expose{{Port: 5353, Type: ExposeTLS}} }, "TLS needs a TCP port"},
		{"two TLS exposures", func(d *DefinitionSpec) {
			d.Containers[0].Ports = append(d.Containers[0].Ports, ContainerPort{ContainerPort: 1337})
			d.Expose = []Expose{{Port: 8080, Type: ExposeTLS}, {Port: 1337, Type: ExposeTLS}}
		}, "expose[1]: at most one TLS exposure per instance"},
		{"mixed service types", func(d *DefinitionSpec) {
			d.Expose = []Expose{{Port: 8080, Type: ExposeNodePort}, {Port: 5353, Type: ExposeLoadBalancer}}
		}, "NodePort and LoadBalancer cannot be mixed"},
		{"ClusterIP without peers", func(d *DefinitionSpec) { d.Expose = []Expose{{Port: 8080, Type: ExposeClusterIP}} },
			"expose[0].from: a ClusterIP exposure admits only the Pods it names"},
		{"peers on NodePort", func(d *DefinitionSpec) { d.Expose[1].From = []ExposePeer{{Namespace: "bots"}} },
			"expose[1].from: only ClusterIP exposures name their peers; NodePort traffic comes from outside the cluster"},
		{"peers on HTTP", func(d *DefinitionSpec) { d.Expose[0].From = []ExposePeer{{Namespace: "bots"}} },
			"HTTP traffic comes from the ingress controller"},
		{"empty peer", func(d *DefinitionSpec) {
			d.Expose = []Expose{{Port: 8080, Type: ExposeClusterIP, From: []ExposePeer{{}}}}
		},
			"expose[0].from[0]: set namespace, podLabels or both"},
		{"bad peer namespace", func(d *DefinitionSpec) {
			d.Expose = []Expose{{Port: 8080, Type: ExposeClusterIP, From: []ExposePeer{{Namespace: "Bots"}}}}
		}, `expose[0].from[0].namespace "Bots"`},
		{"bad peer label key", func(d *DefinitionSpec) {
			d.Expose = []Expose{{Port: 8080, Type: ExposeClusterIP, From: []ExposePeer{{PodLabels: map[string]string{"app": "bot", "-x": "y"}}}}}
		}, `expose[0].from[0].podLabels: key "-x"`},
		{"bad peer label value", func(d *DefinitionSpec) {
			d.Expose = []Expose{{Port: 8080, Type: ExposeClusterIP, From: []ExposePeer{{PodLabels: map[string]string{"app": "admin bot"}}}}}
		}, `expose[0].from[0].podLabels["app"]: value "admin bot"`},
		{"bad timeout", func(d *DefinitionSpec) { d.Timeout = "30 minutes" }, `timeout: "30 minutes" is not a positive duration`},
		{"timeout above maxLifetime", func(d *DefinitionSpec) { d.Timeout = "3h" }, "timeout 3h is longer than maxLifetime 2h"},
		{"flag with value and dynamic", func(d *DefinitionSpec) { d.Flag.Value = "CTF{x}" }, "flag: set exactly one of value and dynamic: true"},
		{"flag delivered nowhere", func(d *DefinitionSpec) { d.Flag.Env = "" }, "flag: set env, path or both"},
		{"flag path relative", func(d *DefinitionSpec) { d.Flag.Path = "flag.txt" }, `flag.path "flag.txt" must be a clean absolute file path`},
		{"flag env clash", func(d *DefinitionSpec) { d.Containers[0].Env = []EnvVar{{Name: "FLAG", Value: "x"}} }, `flag.env "FLAG": container "web" already sets it`},
		{"root uid without opt-out", func(d *DefinitionSpec) { d.Security = &Security{RunAsUser: int64Ptr(0)} }, "security.runAsUser: 0 is root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			def := validDefinition()
			def.Containers[0].Ports = append([]ContainerPort(nil), def.Containers[0].Ports...)
			def.Flag = &Flag{Dynamic: true, Env: "FLAG"}
			c.mutate(&def)
			err := ValidateDefinition(def)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.want)
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
		require.Equal(t, PhaseError, resp.Status.Phase)
		require.Equal(t, ReasonFlagKeyMissing, resp.Status.Reason)
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
	require.Equal(t, ReasonInvalidSpec, resp.Status.Reason)
	require.LessOrEqual(t, len(resp.Status.Message), maxMessageLength)
	for _, cond := range resp.Status.Conditions {
		require.LessOrEqual(t, len(cond.Message), maxMessageLength)
	}
	require.Equal(t, "ab...", truncate("abcdefgh", 5))
	require.Equal(t, "...", truncate("ééé", 4), "a cut never splits a character")
}
