//go:build e2e

// Package e2e tests challenge-hook under the real Metacontroller, against a real kube-apiserver,
// kube-controller-manager, kube-scheduler and a kwok fake node, all started by hack/e2e.sh
// (`make e2e`). TestMain (suite_test.go) serves the hook binary on loopback and registers it with
// Metacontroller through the project's own compositecontroller.yaml.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// kwokNodeName is the fake node kwok runs the instances' Pods on.
const kwokNodeName = "kwok-node-0"

// Pod Security Admission levels of the namespaces the tests create.
const (
	podSecurityRestricted = "restricted"
	podSecurityBaseline   = "baseline"
)

var (
	crdGVR     = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	nsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	nodeGVR    = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	podGVR     = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	serviceGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	rcGVR      = schema.GroupVersionResource{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"}
	chalGVR    = schema.GroupVersionResource{Group: "ctf.challenge-hook.dev", Version: "v1alpha1", Resource: "challenges"}
	defGVR     = schema.GroupVersionResource{Group: "ctf.challenge-hook.dev", Version: "v1alpha1", Resource: "challengedefinitions"}
)

// cluster is a test's handle on the API server: a dynamic client and a REST mapper that knows the
// project's CRDs. Each top-level test builds its own (cheap), so tests share no mutable state.
type cluster struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	// root is the repository root: manifests/, examples/, testdata/ live there.
	root string
}

// newCluster connects to $KUBECONFIG, installs the CRDs (idempotent) and waits until they are
// Established, and makes sure the kwok node exists.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c, err := connectCluster(e2eutil.TestContext(t), repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// connectCluster is newCluster for callers without a *testing.T (TestMain).
func connectCluster(ctx context.Context, root string) (*cluster, error) {
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		return nil, errors.New("KUBECONFIG is not set: run the e2e tests with `make e2e` (hack/e2e.sh starts the cluster)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	// The tests create many objects quickly; client-side throttling would only slow them down.
	cfg.QPS, cfg.Burst = 200, 400
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	c := &cluster{dyn: dyn, root: root}
	if err := c.installCRDs(ctx); err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(disco)
	if err != nil {
		return nil, fmt.Errorf("discover API resources: %w", err)
	}
	c.mapper = restmapper.NewDiscoveryRESTMapper(groups)
	if err := c.ensureKwokNode(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// repoRoot is E2E_REPO_ROOT, or the parent of this package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := findRepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func findRepoRoot() (string, error) {
	if root := os.Getenv("E2E_REPO_ROOT"); root != "" {
		return root, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	return filepath.Dir(wd), nil
}

// readYAMLObjects decodes every document of a multi-document YAML (or JSON) file.
func readYAMLObjects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return decodeYAMLObjects(data, path)
}

func decodeYAMLObjects(data []byte, source string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode %s: %w", source, err)
		}
		if len(obj) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
}

func (c *cluster) installCRDs(ctx context.Context) error {
	paths, err := filepath.Glob(filepath.Join(c.root, "manifests", "crd-*.yaml"))
	if err != nil || len(paths) == 0 {
		return fmt.Errorf("no CRDs in %s/manifests/crd-*.yaml (err %v)", c.root, err)
	}
	var names []string
	for _, path := range paths {
		objs, err := readYAMLObjects(path)
		if err != nil {
			return err
		}
		for _, crd := range objs {
			names = append(names, crd.GetName())
			if err := e2eutil.CreateOrUpdate(ctx, c.dyn.Resource(crdGVR), crd); err != nil {
				return err
			}
		}
	}
	for _, name := range names {
		var nameConflict error
		err := e2eutil.WaitUntil(ctx, 30*time.Second, "CRD "+name+" Established", func() (bool, error) {
			crd, err := c.dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			established, err := crdEstablished(crd)
			nameConflict = err
			return established || err != nil, nil // a name conflict does not heal by waiting
		})
		if err == nil {
			err = nameConflict
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// crdEstablished reports Established=True, or an error on NamesAccepted=False.
func crdEstablished(crd *unstructured.Unstructured) (bool, error) {
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	established := false
	for _, raw := range conditions {
		cond, _ := raw.(map[string]any)
		switch {
		case cond["type"] == "NamesAccepted" && cond["status"] == "False":
			return false, fmt.Errorf("CRD %s: names not accepted: %v", crd.GetName(), cond["message"])
		case cond["type"] == "Established" && cond["status"] == "True":
			established = true
		}
	}
	return established, nil
}

// sortedNames lists the objects of client and returns their names, sorted.
func sortedNames(ctx context.Context, t *testing.T, client dynamic.ResourceInterface) []string {
	t.Helper()
	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, item := range list.Items {
		names = append(names, item.GetName())
	}
	slices.Sort(names)
	return names
}

// ensureKwokNode creates the fake node kwok manages (selected by annotation, no taints), with room
// for every Pod the tests start.
func (c *cluster) ensureKwokNode(ctx context.Context) error {
	node := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Node",
		"metadata": map[string]any{
			"name":        kwokNodeName,
			"annotations": map[string]any{"kwok.x-k8s.io/node": "fake"},
			"labels": map[string]any{
				"kubernetes.io/hostname": kwokNodeName,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
		},
		"status": map[string]any{
			"allocatable": map[string]any{"cpu": "1k", "memory": "4Ti", "pods": "5000", "ephemeral-storage": "100Ti"},
			"capacity":    map[string]any{"cpu": "1k", "memory": "4Ti", "pods": "5000", "ephemeral-storage": "100Ti"},
		},
	}}
	_, err := c.dyn.Resource(nodeGVR).Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create kwok node: %w", err)
	}
	return e2eutil.WaitUntil(ctx, 60*time.Second, "kwok node Ready", func() (bool, error) {
		node, err := c.dyn.Resource(nodeGVR).Get(ctx, kwokNodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return conditionTrue(node, "Ready"), nil
	})
}

// conditionTrue reports whether status.conditions has condType with status "True".
func conditionTrue(obj *unstructured.Unstructured, condType string) bool {
	conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, raw := range conditions {
		cond, _ := raw.(map[string]any)
		if cond["type"] == condType && cond["status"] == "True" {
			return true
		}
	}
	return false
}

var nonDNSLabel = regexp.MustCompile(`[^a-z0-9-]+`)

// createNamespace creates a fresh namespace enforcing a Pod Security level and deletes it when the
// test ends. The name is prefix plus a suffix, cut to a DNS label.
func (c *cluster) createNamespace(ctx context.Context, t *testing.T, prefix, podSecurity string) string {
	t.Helper()
	base := strings.Trim(nonDNSLabel.ReplaceAllString(strings.ToLower(prefix), "-"), "-")
	if len(base) > 50 {
		base = strings.Trim(base[:50], "-")
	}
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata": map[string]any{
			"generateName": base + "-",
			"labels": map[string]any{
				"pod-security.kubernetes.io/enforce": podSecurity,
				"pod-security.kubernetes.io/warn":    podSecurity,
				"e2e.challenge-hook.dev/test":        "true",
			},
		},
	}}
	created, err := c.dyn.Resource(nsGVR).Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", base, err)
	}
	name := created.GetName()
	t.Cleanup(func() {
		// Not waiting: the namespace controller finishes in the background.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.dyn.Resource(nsGVR).Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name
}

// resourceFor maps an object's apiVersion and kind to its resource and scope.
func (c *cluster) resourceFor(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace()), nil
	}
	return c.dyn.Resource(mapping.Resource), nil
}

// ensureRuntimeClass creates a RuntimeClass so that Pods naming it are admitted (kwok runs no
// containers, so its handler does not matter).
func (c *cluster) ensureRuntimeClass(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	rc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "node.k8s.io/v1",
		"kind":       "RuntimeClass",
		"metadata":   map[string]any{"name": name},
		"handler":    "runsc",
	}}
	if _, err := c.dyn.Resource(rcGVR).Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create RuntimeClass %s: %v", name, err)
	}
}
