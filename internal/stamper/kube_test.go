package stamper

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func object(o map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: o}
}

// instanceService is the Service ns/name of a Challenge, with annotations and addresses.
func instanceService(ns, name string, annotations map[string]any, clusterIPs []any, ports ...int64) *unstructured.Unstructured {
	var portList []any
	for _, p := range ports {
		portList = append(portList, map[string]any{"port": p})
	}
	return object(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{
		"name": name, "namespace": ns, "uid": "uid-" + name, "resourceVersion": "41",
		"labels": map[string]any{LabelChallenge: name}, "annotations": annotations,
	}, "spec": map[string]any{"clusterIP": clusterIPs[0], "clusterIPs": clusterIPs, "ports": portList}})
}

// TestKube: the watches, of the namespaces given, map a Service address (each ClusterIP with each
// port, IPv6 too) to the instance's Service; a Service without the Challenge label, or in another
// namespace, is not watched; a Service is read with its stamp and idle timeout; a stamp is a merge
// patch of the annotation alone, conditional on the resourceVersion.
func TestKube(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{servicesGVR: "ServiceList"},
		instanceService("ctf", "web-team42", map[string]any{AnnotationLastActivity: "2026-11-27T13:41:00Z", AnnotationIdleTimeout: "10m0s", "other": "x"},
			[]any{"10.96.12.7", "fd00::7"}, 1337, 8080),
		instanceService("ctf-b", "pwn-team7", map[string]any{AnnotationIdleTimeout: "5m0s"}, []any{"10.96.40.1"}, 31337),
		instanceService("elsewhere", "pwn-team9", map[string]any{AnnotationIdleTimeout: "5m0s"}, []any{"10.96.50.1"}, 31337),
		object(map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "kubernetes", "namespace": "ctf"},
			"spec": map[string]any{"clusterIP": "10.96.0.1", "ports": []any{map[string]any{"port": int64(443)}}}}),
	)
	var patches []string
	client.PrependReactor("patch", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		p := action.(k8stesting.PatchAction)
		assert.Equal(t, types.MergePatchType, p.GetPatchType())
		patches = append(patches, string(p.GetPatch()))
		return false, nil, nil
	})
	var watched []string
	client.PrependWatchReactor("services", func(action k8stesting.Action) (bool, watch.Interface, error) {
		watched = append(watched, action.GetNamespace())
		return false, nil, nil
	})
	kube, err := NewKube(client, []string{"ctf", "ctf-b"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.True(t, kube.Start(ctx))

	pwn := types.NamespacedName{Namespace: "ctf-b", Name: "pwn-team7"}
	for address, want := range map[string]types.NamespacedName{"10.96.12.7:1337": web, "10.96.12.7:8080": web, "[fd00::7]:1337": web, "10.96.40.1:31337": pwn} {
		key, ok := kube.ServiceAt(netip.MustParseAddrPort(address))
		assert.True(t, ok, address)
		assert.Equal(t, want, key, address)
	}
	for _, address := range []string{"10.96.12.7:1338", "10.96.0.1:443", "10.96.50.1:31337"} {
		_, ok := kube.ServiceAt(netip.MustParseAddrPort(address))
		assert.False(t, ok, address)
	}
	assert.ElementsMatch(t, []string{"ctf", "ctf-b"}, watched, "one watch per namespace, none of every namespace")
	svc, ok := kube.Service(web)
	require.True(t, ok)
	assert.Equal(t, Service{Key: web, UID: "uid-web-team42", ResourceVersion: "41", Stamp: "2026-11-27T13:41:00Z", IdleTimeout: 10 * time.Minute}, svc)

	_, err = kube.Stamp(ctx, web, "41", "2026-11-27T13:45:00Z")
	require.NoError(t, err)
	require.Len(t, patches, 1)
	var patch map[string]any
	require.NoError(t, json.Unmarshal([]byte(patches[0]), &patch))
	assert.Equal(t, map[string]any{"metadata": map[string]any{
		"annotations":     map[string]any{AnnotationLastActivity: "2026-11-27T13:45:00Z"},
		"resourceVersion": "41",
	}}, patch)
	got, err := kube.Get(ctx, web)
	require.NoError(t, err)
	assert.Equal(t, "2026-11-27T13:45:00Z", got.Stamp)
}
