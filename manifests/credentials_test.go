package manifests

import (
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// tokenSecret is Metacontroller's token as the shipped install wires it: the Secret the README's
// install creates, named by every CompositeController's authorization and mounted by the hook.
var tokenSecret = map[string]string{"name": "challenge-hook-token", "namespace": "challenge-hook", "key": "token"}

// shippedObjects are the Kubernetes objects of every YAML file under manifests/ (the base and each
// component) and the top-level compositecontroller.yaml, with the file each comes from.
func shippedObjects(t *testing.T) (objects []map[string]any, files []string) {
	t.Helper()
	var paths []string
	require.NoError(t, filepath.WalkDir(".", func(path string, entry fs.DirEntry, err error) error {
		if err == nil && !entry.IsDir() && strings.HasSuffix(path, ".yaml") {
			paths = append(paths, path)
		}
		return err
	}))
	paths = append(paths, filepath.Join(repoRoot, "compositecontroller.yaml"))
	for _, path := range paths {
		docs, err := readYAMLDocuments(path)
		require.NoError(t, err)
		for _, doc := range docs {
			if object, ok := doc.(map[string]any); ok && object["kind"] != nil {
				objects = append(objects, object)
				files = append(files, path)
			}
		}
	}
	return objects, files
}

// convert re-decodes a generic object into a typed one.
func convert(t *testing.T, object map[string]any, into any) {
	t.Helper()
	raw, err := yaml.Marshal(object)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, into))
}

// port is the port of a host:port flag value.
func port(t *testing.T, hostPort string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	require.NoError(t, err, "%q", hostPort)
	n, err := strconv.ParseInt(p, 10, 32)
	require.NoError(t, err)
	return int32(n)
}

// TestNothingIsServedWithoutACredential reads every shipped manifest and fails on any hook route a
// caller reaches without a credential: a CompositeController hook without Metacontroller's token,
// a hook Deployment without --token-file (or told to serve without one), a token that is not the
// Secret the CompositeControllers name, /metrics on the port of Metacontroller's hooks, or a
// NetworkPolicy admitting anything but Metacontroller to that port.
func TestNothingIsServedWithoutACredential(t *testing.T) {
	objects, files := shippedObjects(t)

	// Every hook of every CompositeController sends the token.
	controllers := 0
	for i, object := range objects {
		if object["kind"] != "CompositeController" {
			continue
		}
		controllers++
		var cc struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Hooks map[string]struct {
					Webhook struct {
						URL           string         `json:"url"`
						Service       map[string]any `json:"service"`
						Authorization *struct {
							Type      string            `json:"type"`
							SecretRef map[string]string `json:"secretRef"`
						} `json:"authorization"`
					} `json:"webhook"`
				} `json:"hooks"`
			} `json:"spec"`
		}
		convert(t, object, &cc)
		require.NotEmpty(t, cc.Spec.Hooks, "%s: %s has no hooks", files[i], cc.Metadata.Name)
		for name, hook := range cc.Spec.Hooks {
			where := files[i] + ": " + cc.Metadata.Name + " hook " + name
			assert.Empty(t, hook.Webhook.URL, "%s: a url instead of the hook's Service", where)
			assert.Equal(t, map[string]any{"name": "challenge-hook", "namespace": "challenge-hook", "port": float64(80)}, hook.Webhook.Service, where)
			if !assert.NotNil(t, hook.Webhook.Authorization, "%s sends no token", where) {
				continue
			}
			assert.Contains(t, []string{"", "Bearer"}, hook.Webhook.Authorization.Type, where)
			assert.Equal(t, tokenSecret, hook.Webhook.Authorization.SecretRef, where)
		}
	}
	assert.Equal(t, 4, controllers, "compositecontroller.yaml, its copy in manifests/, the pre-pull and the shard-1 CompositeControllers")

	// Nothing ships the way to serve without a token, in a flag, a variable or a patch.
	for _, path := range files {
		content, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, word := range []string{"insecure-serve-without-token", "INSECURE_SERVE_WITHOUT_TOKEN"} {
			assert.NotContains(t, string(content), word, "%s", path)
		}
	}

	// The hook's Deployment: the token is the Secret's key, required; three listeners, /metrics on
	// its own.
	deployment, container := hookContainer(t)
	tokenFile := flagValue(container.Args, "token-file")
	require.NotEmpty(t, tokenFile, "the hook's Deployment sets no --token-file")
	var tokenMounted bool
	for _, mount := range container.VolumeMounts {
		for _, volume := range deployment.Spec.Template.Spec.Volumes {
			if volume.Name != mount.Name || volume.Projected == nil {
				continue
			}
			for _, source := range volume.Projected.Sources {
				s := source.Secret
				if s == nil || s.Name != tokenSecret["name"] {
					continue
				}
				assert.True(t, s.Optional == nil || !*s.Optional, "the token's Secret is optional: the hook would start without it")
				for _, item := range s.Items {
					tokenMounted = tokenMounted || (item.Key == tokenSecret["key"] && mount.MountPath+"/"+item.Path == tokenFile)
				}
			}
		}
	}
	assert.True(t, tokenMounted, "--token-file %s is not key %q of the Secret %s", tokenFile, tokenSecret["key"], tokenSecret["name"])
	assert.Equal(t, tokenSecret["namespace"], deployment.Namespace, "the Secret the CompositeControllers name is in the hook's namespace")

	containerPorts := map[string]int32{}
	for _, p := range container.Ports {
		containerPorts[p.Name] = p.ContainerPort
	}
	mainPort, metricsPort := port(t, flagValue(container.Args, "listen")), port(t, flagValue(container.Args, "metrics-listen"))
	verifyPort := port(t, flagValue(container.Args, "verify-listen"))
	assert.Equal(t, map[string]int32{"http": mainPort, "verify": verifyPort, "metrics": metricsPort}, containerPorts,
		"every port the container declares is one of the hook's listeners")
	assert.NotEqual(t, mainPort, metricsPort, "/metrics on the port of Metacontroller's hooks")
	assert.NotEqual(t, verifyPort, metricsPort, "/metrics on the flag-verification port")

	// The ServiceMonitor scrapes the metrics port, through the hook's Service.
	var service corev1.Service
	decodeManifest(t, "hook-service.yaml", &service)
	servicePortTargets := map[string]string{}
	for _, p := range service.Spec.Ports {
		servicePortTargets[p.Name] = p.TargetPort.String()
	}
	hookPods := labels.Set(deployment.Spec.Template.Labels)
	var monitors, hookPolicies int
	for i, object := range objects {
		switch object["kind"] {
		case "ServiceMonitor":
			var monitor serviceMonitor
			convert(t, object, &monitor)
			selector, err := metav1.LabelSelectorAsSelector(&monitor.Spec.Selector)
			require.NoError(t, err)
			if !selector.Matches(labels.Set(service.Labels)) {
				continue
			}
			monitors++
			for _, endpoint := range monitor.Spec.Endpoints {
				assert.Nil(t, endpoint.TargetPort, "%s: %s scrapes a port by number", files[i], monitor.Metadata.Name)
				assert.Equal(t, "metrics", endpoint.Port, "%s: %s scrapes the hook's port %q", files[i], monitor.Metadata.Name, endpoint.Port)
				assert.Equal(t, "metrics", servicePortTargets[endpoint.Port], "%s: the Service's port %q", files[i], endpoint.Port)
			}
		case "NetworkPolicy":
			var policy networkingv1.NetworkPolicy
			convert(t, object, &policy)
			selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.PodSelector)
			require.NoError(t, err)
			if policy.Namespace != deployment.Namespace || !selector.Matches(hookPods) {
				continue
			}
			hookPolicies++
			for j, rule := range policy.Spec.Ingress {
				where := files[i] + ": " + policy.Name + " ingress rule " + strconv.Itoa(j)
				require.NotEmpty(t, rule.Ports, "%s admits every port", where)
				require.NotEmpty(t, rule.From, "%s admits every source", where)
				onlyMetacontroller := true
				for _, peer := range rule.From {
					onlyMetacontroller = onlyMetacontroller && peer.IPBlock == nil && peer.NamespaceSelector != nil &&
						peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "metacontroller"
				}
				for _, p := range rule.Ports {
					require.NotNil(t, p.Port, "%s admits every port", where)
					number := p.Port.IntVal
					if p.Port.StrVal != "" {
						number = containerPorts[p.Port.StrVal]
					}
					if number == mainPort {
						assert.True(t, onlyMetacontroller, "%s admits a caller other than Metacontroller to port %d, Metacontroller's hooks", where, mainPort)
					}
				}
			}
		}
	}
	assert.Equal(t, 1, monitors, "one ServiceMonitor for the hook")
	assert.Equal(t, 2, hookPolicies, "the hook's own NetworkPolicy and the monitoring component's")
}

// serviceMonitor is the part of a Prometheus Operator ServiceMonitor the tests read.
type serviceMonitor struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port       string `json:"port"`
			TargetPort any    `json:"targetPort"`
		} `json:"endpoints"`
	} `json:"spec"`
}
