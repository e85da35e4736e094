package sync

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// TestInternalPortsOnlyOnAClusterIPServiceOfTheirOwn: a pod exposed as NodePort or LoadBalancer
// carries its internal ports on a ClusterIP Service of their own, never on its exposure Service,
// where they would get a node port or a place on the public load balancer; its peers' hostAliases
// point at that ClusterIP Service.
func TestInternalPortsOnlyOnAClusterIPServiceOfTheirOwn(t *testing.T) {
	ports := func(numbers ...int32) []v1alpha1.ContainerPort {
		var out []v1alpha1.ContainerPort
		for _, n := range numbers {
			out = append(out, v1alpha1.ContainerPort{ContainerPort: n})
		}
		return out
	}
	template := v1alpha1.DefinitionSpec{Pods: []v1alpha1.PodTemplate{
		{
			Name:       "entry",
			Containers: []v1alpha1.Container{{Name: "sshd", Image: "registry.ctf.example/entry:1", Ports: ports(2222, 8080)}},
			Expose:     []v1alpha1.Expose{{Port: 2222, Type: v1alpha1.ExposeNodePort}},
			Internal:   []v1alpha1.InternalPort{{Port: 8080, From: []string{"target"}}},
		},
		{
			Name:       "target",
			Containers: []v1alpha1.Container{{Name: "svc", Image: "registry.ctf.example/target:1", Ports: ports(9000, 9001)}},
			Expose:     []v1alpha1.Expose{{Port: 9001, Type: v1alpha1.ExposeLoadBalancer}},
			Internal:   []v1alpha1.InternalPort{{Port: 9000, From: []string{"entry"}}, {Port: 9001, From: []string{"entry"}}},
		},
	}}
	parent := Challenge{
		Metadata: ChallengeMeta{Name: "pivot-team3", Namespace: "ctf", UID: "uid-pivot-team3"},
		Spec:     v1alpha1.ChallengeSpec{Owner: "team-3", Template: &template},
	}
	req, resp := requestWithEveryPod(t, Request{Parent: parent}, goldenNow, goldenConfig(t))
	body, err := EncodeResponse(resp)
	require.NoError(t, err)
	var answer struct {
		Children []json.RawMessage `json:"children"`
	}
	require.NoError(t, json.Unmarshal(body, &answer))
	services := map[string]corev1.ServiceSpec{}
	pods := map[string]corev1.PodSpec{}
	for _, raw := range answer.Children {
		var child struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec json.RawMessage `json:"spec"`
		}
		require.NoError(t, json.Unmarshal(raw, &child))
		switch child.Kind {
		case "Service":
			var spec corev1.ServiceSpec
			require.NoError(t, json.Unmarshal(child.Spec, &spec))
			services[child.Metadata.Name] = spec
		case "Pod":
			var spec corev1.PodSpec
			require.NoError(t, json.Unmarshal(child.Spec, &spec))
			pods[child.Metadata.Name] = spec
		}
	}
	servicePorts := func(spec corev1.ServiceSpec) []int32 {
		var out []int32
		for _, p := range spec.Ports {
			out = append(out, p.Port)
		}
		return out
	}
	want := map[string]struct {
		serviceType corev1.ServiceType
		ports       []int32
	}{
		"pivot-team3--entry":            {corev1.ServiceTypeNodePort, []int32{2222}},
		"pivot-team3--entry--internal":  {corev1.ServiceTypeClusterIP, []int32{8080}},
		"pivot-team3--target":           {corev1.ServiceTypeLoadBalancer, []int32{9001}},
		"pivot-team3--target--internal": {corev1.ServiceTypeClusterIP, []int32{9000, 9001}},
	}
	require.Len(t, services, len(want), "%v", services)
	for name, w := range want {
		require.Contains(t, services, name)
		require.Equal(t, w.serviceType, services[name].Type, name)
		require.Equal(t, w.ports, servicePorts(services[name]), name)
	}

	// Each peer's hostAliases name the ClusterIP allocated to the peer's internal Service.
	ips := map[string]string{}
	for _, svc := range req.Children.Services {
		ips[svc.Metadata.Name] = svc.Spec.ClusterIP
	}
	for pod, peer := range map[string]string{"pivot-team3--entry": "target", "pivot-team3--target": "entry"} {
		require.Contains(t, pods, pod)
		aliases := pods[pod].HostAliases
		require.Len(t, aliases, 1, pod)
		require.Equal(t, []string{peer}, aliases[0].Hostnames, pod)
		require.NotEmpty(t, ips["pivot-team3--"+peer+"--internal"])
		require.Equal(t, ips["pivot-team3--"+peer+"--internal"], aliases[0].IP, "%s resolves %s to its internal Service", pod, peer)
	}
}
