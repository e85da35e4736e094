package sync

import (
	"fmt"
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
		{"idleTimeout not a duration", func(d *v1alpha1.DefinitionSpec) { d.IdleTimeout = "soon" }, `spec.idleTimeout: Invalid value: "soon"`},
		{"idleTimeout too short to see use", func(d *v1alpha1.DefinitionSpec) { d.IdleTimeout = "5s" }, `spec.idleTimeout: Invalid value: "5s": shorter than 10s`},
		{"flag with value and dynamic", func(d *v1alpha1.DefinitionSpec) { d.Flag.Value = "CTF{x}" }, "spec.flag: Invalid value: set exactly one of value, dynamic: true and platform: true"},
		{"flag dynamic and the platform's", func(d *v1alpha1.DefinitionSpec) { d.Flag.Platform = true }, "spec.flag: Invalid value: set exactly one of value, dynamic: true and platform: true"},
		{"flag with value and the platform's", func(d *v1alpha1.DefinitionSpec) {
			d.Flag = &v1alpha1.Flag{Value: "CTF{x}", Platform: true, Env: "FLAG"}
		}, "spec.flag: Invalid value: set exactly one of value, dynamic: true and platform: true"},
		{"flag of no kind", func(d *v1alpha1.DefinitionSpec) { d.Flag.Dynamic = false }, "spec.flag: Invalid value: set exactly one of value, dynamic: true and platform: true"},
		{"flag value too long", func(d *v1alpha1.DefinitionSpec) {
			d.Flag = &v1alpha1.Flag{Value: strings.Repeat("é", v1alpha1.MaxFlagValue+1), Env: "FLAG"}
		}, "spec.flag.value: Too long: may not be more than 1024 characters"},
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

// A flag is one of three kinds: a static value (at most MaxFlagValue characters, as the CRD counts
// them), a dynamic flag, or the platform's.
func TestValidateDefinitionFlagKinds(t *testing.T) {
	for name, flag := range map[string]v1alpha1.Flag{
		"static":                                 {Value: "CTF{x}", Env: "FLAG"},
		"static, the longest in characters":      {Value: strings.Repeat("é", v1alpha1.MaxFlagValue), Env: "FLAG"},
		"dynamic":                                {Dynamic: true, Prefix: "CTF", Env: "FLAG"},
		"the platform's":                         {Platform: true, Env: "FLAG"},
		"the platform's, in a file":              {Platform: true, Path: "/flag.txt"},
		"the platform's, in a variable and file": {Platform: true, Env: "FLAG", Path: "/flag.txt"},
	} {
		def := validDefinition()
		def.Flag = &flag
		require.Empty(t, ValidateDefinition(def, field.NewPath("spec")), name)
	}
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

// validPodsDefinition is an instance of three pods: a web app players reach by HTTP, which its bot
// also visits; its database, which only the web app reaches; the bot, which holds the flag.
func validPodsDefinition() v1alpha1.DefinitionSpec {
	return v1alpha1.DefinitionSpec{
		Pods: []v1alpha1.PodTemplate{
			{
				Name:       "web",
				Containers: []v1alpha1.Container{{Name: "app", Image: "registry.ctf.example/web:1", Ports: []v1alpha1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
				Expose:     []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}},
				Internal:   []v1alpha1.InternalPort{{Port: 8080, From: []string{"bot"}}},
			},
			{
				Name:       "db",
				Containers: []v1alpha1.Container{{Name: "postgres", Image: "postgres:17", Ports: []v1alpha1.ContainerPort{{ContainerPort: 5432}}}},
				Internal:   []v1alpha1.InternalPort{{Port: 5432, From: []string{"web"}}},
			},
			{
				Name:       "bot",
				Containers: []v1alpha1.Container{{Name: "bot", Image: "registry.ctf.example/bot:1", Flag: true}},
				Egress:     true,
			},
		},
		Timeout:     "30m",
		MaxLifetime: "2h",
		Flag:        &v1alpha1.Flag{Dynamic: true, Env: "FLAG"},
	}
}

// TestValidateDefinitionPods: each case breaks one thing in validPodsDefinition (or, for the
// flag rules, in the single-Pod validDefinition) and is refused with exactly that one error.
func TestValidateDefinitionPods(t *testing.T) {
	require.Empty(t, ValidateDefinition(validPodsDefinition(), field.NewPath("spec")))
	int64Ptr := func(v int64) *int64 { return &v }
	pods := func(mutate func(d *v1alpha1.DefinitionSpec)) func() v1alpha1.DefinitionSpec {
		return func() v1alpha1.DefinitionSpec { d := validPodsDefinition(); mutate(&d); return d }
	}
	single := func(mutate func(d *v1alpha1.DefinitionSpec)) func() v1alpha1.DefinitionSpec {
		return func() v1alpha1.DefinitionSpec { d := validDefinition(); mutate(&d); return d }
	}
	secondPort := func(d *v1alpha1.DefinitionSpec, pod int, port int32) {
		d.Pods[pod].Containers[0].Ports = append(d.Pods[pod].Containers[0].Ports, v1alpha1.ContainerPort{ContainerPort: port})
	}
	cases := []struct {
		name string
		def  func() v1alpha1.DefinitionSpec
		want string
	}{
		{"both containers and pods", pods(func(d *v1alpha1.DefinitionSpec) { d.Containers = validDefinition().Containers }),
			"spec.pods: Forbidden: set exactly one of containers (an instance of one Pod) and pods (an instance of several)"},
		{"neither containers nor pods", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods = nil; d.Flag = nil }),
			"spec.containers: Required value: need 1 to 8 containers"},
		{"empty pods", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods = []v1alpha1.PodTemplate{}; d.Flag = nil }),
			"spec.pods: Required value: need 1 to 8 pods"},
		{"nine pods", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Pods = nil
			for i := range 9 {
				d.Pods = append(d.Pods, v1alpha1.PodTemplate{Name: fmt.Sprintf("p%d", i), Containers: []v1alpha1.Container{{Name: "c", Image: "x", Flag: true}}})
			}
		}), "spec.pods: Too many: 9: must have at most 8 items"},
		{"pod name empty", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[2].Name = ""; d.Pods[0].Internal = nil }),
			"spec.pods[2].name: Required value"},
		{"pod name starts with a digit", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[2].Name = "2bot"; d.Pods[0].Internal = nil }),
			`spec.pods[2].name: Invalid value: "2bot": peers reach the pod by this name and its children are named after it: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`},
		{"pod name of 21 characters", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Name = strings.Repeat("d", 21); d.Pods[0].Internal = nil }),
			`spec.pods[1].name: Invalid value: "ddddddddddddddddddddd": peers reach the pod by this name and its children are named after it: must be no more than 20 characters`},
		{"pod names not unique", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[2].Name = "db"; d.Pods[0].Internal = nil }),
			`spec.pods[2].name: Duplicate value: "db"`},
		// The checks of the single form, through the same function, at the pod's path.
		{"pod without containers", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Containers = nil; d.Pods[1].Internal = nil }),
			"spec.pods[1].containers: Required value: need 1 to 8 containers"},
		{"duplicate container in a pod", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Pods[1].Containers = append(d.Pods[1].Containers, v1alpha1.Container{Name: "postgres", Image: "x"})
		}), `spec.pods[1].containers[1].name: Duplicate value: "postgres"`},
		{"container name in a pod", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Containers[0].Name = "Pg" }),
			`spec.pods[1].containers[0].name: Invalid value: "Pg": a lowercase RFC 1123 label must consist of`},
		{"duplicate containerPort in a pod", pods(func(d *v1alpha1.DefinitionSpec) { secondPort(d, 1, 5432) }),
			"spec.pods[1].containers[0].ports[1].containerPort: Duplicate value: 5432"},
		{"expose port of another pod", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[0].Expose[0].Port = 5432 }),
			"spec.pods[0].expose[0].port: Invalid value: 5432: not a containerPort of any container"},
		{"mixed service types in a pod", pods(func(d *v1alpha1.DefinitionSpec) {
			secondPort(d, 1, 5433)
			d.Pods[1].Expose = []v1alpha1.Expose{{Port: 5432, Type: v1alpha1.ExposeNodePort}, {Port: 5433, Type: v1alpha1.ExposeLoadBalancer}}
		}), `spec.pods[1].expose[1].type: Invalid value: "LoadBalancer": NodePort and LoadBalancer cannot be mixed`},
		{"two HTTP exposures in two pods", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Pods[1].Expose = []v1alpha1.Expose{{Port: 5432, Type: v1alpha1.ExposeHTTP}}
		}), `spec.pods[1].expose[0].type: Invalid value: "HTTP": at most one HTTP exposure per instance`},
		{"two TLS exposures in two pods", pods(func(d *v1alpha1.DefinitionSpec) {
			secondPort(d, 0, 8443)
			d.Pods[0].Expose = append(d.Pods[0].Expose, v1alpha1.Expose{Port: 8443, Type: v1alpha1.ExposeTLS})
			d.Pods[1].Expose = []v1alpha1.Expose{{Port: 5432, Type: v1alpha1.ExposeTLS}}
		}), `spec.pods[1].expose[0].type: Invalid value: "TLS": at most one TLS exposure per instance`},
		{"root uid in a pod", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[2].Security = &v1alpha1.Security{RunAsUser: int64Ptr(0)} }),
			"spec.pods[2].security.runAsUser: Invalid value: 0: that is root: set security.runAsRoot: true to run as root"},
		// Internal ports.
		{"internal port not a containerPort", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Internal[0].Port = 3306 }),
			"spec.pods[1].internal[0].port: Invalid value: 3306: not a containerPort of the pod's containers"},
		{"internal port of another pod", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Internal[0].Port = 8080 }),
			"spec.pods[1].internal[0].port: Invalid value: 8080: not a containerPort of the pod's containers"},
		{"internal port twice", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Pods[1].Internal = append(d.Pods[1].Internal, v1alpha1.InternalPort{Port: 5432, From: []string{"bot"}})
		}), "spec.pods[1].internal[1].port: Duplicate value: 5432"},
		{"seventeen internal ports", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Pods[1].Internal = nil
			for i := range int32(17) {
				secondPort(d, 1, 6000+i)
				d.Pods[1].Internal = append(d.Pods[1].Internal, v1alpha1.InternalPort{Port: 6000 + i, From: []string{"web"}})
			}
		}), "spec.pods[1].internal: Too many: 17: must have at most 16 items"},
		{"internal from empty", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Internal[0].From = nil }),
			"spec.pods[1].internal[0].from: Required value: name the 1 to 7 other pods that reach this port"},
		{"internal from eight pods", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Pods[1].Internal[0].From = []string{"web", "bot", "a", "b", "c", "d", "e", "f"}
		}), "spec.pods[1].internal[0].from: Too many: 8: must have at most 7 items"},
		{"internal from the pod itself", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Internal[0].From = []string{"web", "db"} }),
			`spec.pods[1].internal[0].from[1]: Invalid value: "db": the pod itself: name another pod of the template (a pod always reaches its own ports)`},
		{"internal from an unknown pod", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Internal[0].From = []string{"admin"} }),
			`spec.pods[1].internal[0].from[0]: Unsupported value: "admin": supported values: "web", "bot"`},
		{"internal from a pod twice", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[1].Internal[0].From = []string{"web", "web"} }),
			`spec.pods[1].internal[0].from[1]: Duplicate value: "web"`},
		// What stays on each pod with pods.
		{"expose on the template", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}}
		}),
			"spec.expose: Forbidden: with pods, set expose on each pod, not on the template"},
		{"egress on the template", pods(func(d *v1alpha1.DefinitionSpec) { d.Egress = true }),
			"spec.egress: Forbidden: with pods, set egress on each pod, not on the template"},
		{"dns on the template", pods(func(d *v1alpha1.DefinitionSpec) { d.DNS = true }),
			"spec.dns: Forbidden: with pods, set dns on each pod, not on the template"},
		{"security on the template", pods(func(d *v1alpha1.DefinitionSpec) { d.Security = &v1alpha1.Security{RunAsRoot: true} }),
			"spec.security: Forbidden: with pods, set security on each pod, not on the template"},
		// Who receives the flag.
		{"flag that no pod receives", pods(func(d *v1alpha1.DefinitionSpec) { d.Pods[2].Containers[0].Flag = false }),
			"spec.flag: Invalid value: no container receives it: with pods, set flag: true on each container that receives the flag"},
		{"flag: true in pods without a flag", pods(func(d *v1alpha1.DefinitionSpec) { d.Flag = nil }),
			"spec.pods[2].containers[0].flag: Forbidden: the template has no flag to deliver: set flag, or remove flag: true"},
		{"flag: true in one Pod without a flag", single(func(d *v1alpha1.DefinitionSpec) { d.Flag = nil; d.Containers[0].Flag = true }),
			"spec.containers[0].flag: Forbidden: the template has no flag to deliver: set flag, or remove flag: true"},
		{"flag env set by a container that does not receive it", pods(func(d *v1alpha1.DefinitionSpec) {
			d.Pods[1].Containers[0].Env = []v1alpha1.EnvVar{{Name: "FLAG", Value: "x"}}
		}), `spec.flag.env: Invalid value: "FLAG": container "postgres" of pod "db" already sets it`},
		{"flag env set in one Pod by a container that does not receive it", single(func(d *v1alpha1.DefinitionSpec) {
			d.Containers = append(d.Containers, v1alpha1.Container{Name: "side", Image: "x", Env: []v1alpha1.EnvVar{{Name: "FLAG"}}})
			d.Containers[0].Flag = true
		}), `spec.flag.env: Invalid value: "FLAG": container "side" already sets it`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			errs := ValidateDefinition(c.def(), field.NewPath("spec"))
			require.Len(t, errs, 1, "one mistake, one error: %v", errs)
			require.True(t, strings.HasPrefix(errs[0].Error(), c.want), "got  %s\nwant %s", errs[0].Error(), c.want)
		})
	}
}

// With pods, every mistake is reported at once too, in field order, pod by pod.
func TestValidateDefinitionPodsReportsEveryMistake(t *testing.T) {
	def := validPodsDefinition()
	def.Pods[0].Containers[0].Image = ""
	def.Pods[1].Internal[0].From = []string{"db"}
	def.Pods[2].Name = "Bot"
	def.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}}
	def.Timeout = "soon"
	def.Egress = true
	var fields []string
	for _, err := range ValidateDefinition(def, field.NewPath("spec", "template")) {
		fields = append(fields, err.Field)
	}
	require.Equal(t, []string{
		"spec.template.pods[0].containers[0].image",
		// web admits bot, which is now named Bot: an unknown pod.
		"spec.template.pods[0].internal[0].from[0]",
		"spec.template.pods[1].internal[0].from[0]",
		"spec.template.pods[2].name",
		"spec.template.expose",
		"spec.template.timeout",
		"spec.template.egress",
	}, fields)
}

func TestValidateComponentNames(t *testing.T) {
	def := validPodsDefinition()
	path := field.NewPath("spec", "template")
	require.Empty(t, ValidateComponentNames(strings.Repeat("c", 48), def, path), "c...c--web--internal is 63 characters")
	require.Empty(t, ValidateComponentNames(strings.Repeat("c", 63), validDefinition(), path), "one Pod: children are named after the Challenge alone")
	errs := ValidateComponentNames(strings.Repeat("c", 50), def, path)
	require.Len(t, errs, 2, "web and db, which have internal ports, not bot: %v", errs)
	require.Equal(t, fmt.Sprintf(`spec.template.pods[0].name: Invalid value: "web": the pod's children are named after the Challenge and the pod, the longest %s--web--internal, 65 characters: a name is at most 63, so shorten the Challenge's name (50 characters) or the pod's (3) by 2`, strings.Repeat("c", 50)), errs[0].Error())
	require.Equal(t, "spec.template.pods[1].name", errs[1].Field)
	require.Empty(t, ValidateComponentNames(strings.Repeat("c", 58), v1alpha1.DefinitionSpec{Pods: def.Pods[2:]}, path), "c...c--bot is 63 characters")
	require.Len(t, ValidateComponentNames(strings.Repeat("c", 59), v1alpha1.DefinitionSpec{Pods: def.Pods[2:]}, path), 1, "c...c--bot is 64 characters")
}
