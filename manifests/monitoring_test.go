package manifests

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const monitoringComponent = "components/monitoring"

// monitoringObjects are the objects of the monitoring component's resources (its kustomization's
// list: the rule tests beside them are no objects).
func monitoringObjects(t *testing.T) []map[string]any {
	t.Helper()
	var component struct {
		APIVersion         string   `json:"apiVersion"`
		Kind               string   `json:"kind"`
		Resources          []string `json:"resources"`
		ConfigMapGenerator []any    `json:"configMapGenerator"`
	}
	decodeSingleYAML(t, filepath.Join(monitoringComponent, "kustomization.yaml"), &component)
	require.Equal(t, "Component", component.Kind)
	var objects []map[string]any
	for _, resource := range component.Resources {
		docs, err := readYAMLDocuments(filepath.Join(monitoringComponent, resource))
		require.NoError(t, err)
		for _, doc := range docs {
			objects = append(objects, doc.(map[string]any))
		}
	}
	require.NotEmpty(t, objects)
	return objects
}

// TestMonitoringComponentReadsNoChallenge: the monitoring component holds no credential: no
// ServiceAccount, no RBAC, no workload, nothing that runs and reads the Challenges (whose status
// holds the players' TCP tokens and unguessable hosts). It ships what Prometheus and Grafana read
// (ServiceMonitors, a PrometheusRule, the dashboard's ConfigMap), a Service that names
// Metacontroller's metrics port, and the hook's metrics policy.
func TestMonitoringComponentReadsNoChallenge(t *testing.T) {
	allowed := []string{"ServiceMonitor", "PrometheusRule", "Service", "NetworkPolicy"}
	for _, object := range monitoringObjects(t) {
		kind, _ := object["kind"].(string)
		metadata, _ := object["metadata"].(map[string]any)
		assert.Contains(t, allowed, kind, "the monitoring component ships %s %v: it runs nothing and holds no credential", kind, metadata["name"])
	}
}

// TestMonitoringScrapesThePlatformComponent: the Challenge series are the platform component's
// (manifests/components/platform, from the watches it holds to serve rCTF): one ServiceMonitor of
// the monitoring component selects the component's metrics Service, in its namespace, by the
// Service's metrics port name, with honorLabels (a Challenge series' namespace label is the
// Challenge's, not the target's), and no ServiceMonitor selects the Service of rCTF's port.
func TestMonitoringScrapesThePlatformComponent(t *testing.T) {
	docs, err := readYAMLDocuments(filepath.Join("components/platform", "platform.yaml"))
	require.NoError(t, err)
	services := map[string]corev1.Service{}
	for _, doc := range docs {
		if object := doc.(map[string]any); object["kind"] == "Service" {
			var service corev1.Service
			convert(t, object, &service)
			services[service.Name] = service
		}
	}
	metrics, ok := services["challenge-hook-platform-metrics"]
	require.True(t, ok, "the platform component has no Service challenge-hook-platform-metrics (it has %v)", slices.Sorted(maps.Keys(services)))
	require.Len(t, metrics.Spec.Ports, 1)
	require.Contains(t, services, "challenge-hook-platform", "the platform component's Service of rCTF's port")

	type endpoint struct {
		Port        string `json:"port"`
		Path        string `json:"path"`
		HonorLabels bool   `json:"honorLabels"`
		TargetPort  any    `json:"targetPort"`
	}
	var monitors int
	for _, object := range monitoringObjects(t) {
		if object["kind"] != "ServiceMonitor" {
			continue
		}
		var monitor struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Selector  metav1.LabelSelector `json:"selector"`
				Endpoints []endpoint           `json:"endpoints"`
			} `json:"spec"`
		}
		convert(t, object, &monitor)
		selector, err := metav1.LabelSelectorAsSelector(&monitor.Spec.Selector)
		require.NoError(t, err)
		require.False(t, selector.Empty(), "ServiceMonitor %s selects every Service", monitor.Metadata.Name)
		rctf := services["challenge-hook-platform"]
		assert.False(t, selector.Matches(labels.Set(rctf.Labels)), "ServiceMonitor %s selects the Service of rCTF's port", monitor.Metadata.Name)
		if !selector.Matches(labels.Set(metrics.Labels)) {
			continue
		}
		monitors++
		assert.Equal(t, metrics.Namespace, monitor.Metadata.Namespace, "ServiceMonitor %s looks in another namespace", monitor.Metadata.Name)
		assert.Equal(t, []endpoint{{Port: metrics.Spec.Ports[0].Name, Path: "/metrics", HonorLabels: true}}, monitor.Spec.Endpoints,
			"ServiceMonitor %s: one endpoint, the Service's metrics port by name, honoring the series' labels", monitor.Metadata.Name)
	}
	assert.Equal(t, 1, monitors, "one ServiceMonitor selects the platform component's metrics Service")
}
