package mcsim

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/wire"
)

var now = time.Date(2026, 11, 1, 12, 5, 0, 0, time.UTC)

func testController(finalize bool) Controller {
	hooks := Object{"sync": Object{}}
	if finalize {
		hooks["finalize"] = Object{}
	}
	return Controller{
		Object: Object{"metadata": Object{"name": "web"}, "spec": Object{
			"parentResource": Object{"apiVersion": "example.dev/v1", "resource": "widgets"},
			"childResources": []any{Object{"apiVersion": "v1", "resource": "pods"}, Object{"apiVersion": "v1", "resource": "services"}},
			"hooks":          hooks,
		}},
		Discovery: []Kind{
			{APIVersion: "example.dev/v1", Kind: "Widget", Resource: "widgets"},
			{APIVersion: "v1", Kind: "Pod", Resource: "pods"},
			{APIVersion: "v1", Kind: "Service", Resource: "services"},
		},
	}
}

func decode(t *testing.T, body []byte) Object {
	var obj Object
	require.NoError(t, json.Unmarshal(body, &obj))
	return obj
}

// TestParentFinalizer: Metacontroller puts "metacontroller.io/compositecontroller-<name>" on every
// parent of a controller with a finalize hook, and nothing on one without.
func TestParentFinalizer(t *testing.T) {
	in := Object{"metadata": Object{"name": "w", "namespace": "ns", "creationTimestamp": "2026-11-01T12:00:00Z"}}
	parent, err := testController(true).Parent(in, "creator")
	require.NoError(t, err)
	assert.Equal(t, []any{"metacontroller.io/compositecontroller-web"}, mapAt(parent, "metadata")["finalizers"])
	assert.Equal(t, "Widget", parent["kind"])
	assert.Equal(t, 1, mapAt(parent, "metadata")["generation"])

	parent, err = testController(false).Parent(in, "creator")
	require.NoError(t, err)
	assert.NotContains(t, mapAt(parent, "metadata"), "finalizers")
	assert.NotContains(t, mapAt(in, "metadata"), "generation", "the input is not changed")
}

// TestApply: an answer applied to a request as Metacontroller applies it, step by step.
func TestApply(t *testing.T) {
	c := testController(false)
	parent, err := c.Parent(Object{"metadata": Object{"name": "w", "namespace": "ns", "uid": "u1"}}, "creator")
	require.NoError(t, err)
	children, err := c.Children(parent, []Object{{"kind": "Pod", "metadata": Object{"name": "old"}}}, nil)
	require.NoError(t, err)
	request, err := c.SyncRequest(parent, children, Object{}, false)
	require.NoError(t, err)
	answer := []byte(`{"status":{"phase":"Creating"},"children":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"}}]}`)

	// Neither create nor delete: the status is stored, nothing else moves.
	req := decode(t, apply(t, request, answer, Applied{Now: now}))
	assert.Equal(t, Object{"phase": "Creating"}, mapAt(req, "parent")["status"])
	groups := mapAt(req, "children")
	assert.Contains(t, mapAt(groups, "Pod.v1"), "ns/old")
	assert.Empty(t, mapAt(groups, "Service.v1"))

	// Creates land with a uid, a creation time and the answer as last applied; the Pod left out
	// lingers Terminating once, then is gone.
	step := Applied{Create: true, Delete: true, PodsLinger: true, Now: now}
	request = apply(t, request, answer, step)
	req = decode(t, request)
	groups = mapAt(req, "children")
	svc := mapAt(mapAt(groups, "Service.v1"), "ns/svc")
	meta := mapAt(svc, "metadata")
	assert.Equal(t, "uid-ns/svc", meta["uid"])
	assert.Equal(t, "2026-11-01T12:05:00Z", meta["creationTimestamp"])
	assert.JSONEq(t, `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"}}`, mapAt(meta, "annotations")[wire.LastAppliedAnnotation].(string))
	assert.Equal(t, "2026-11-01T12:05:00Z", mapAt(mapAt(mapAt(groups, "Pod.v1"), "ns/old"), "metadata")["deletionTimestamp"])

	req = decode(t, apply(t, request, answer, step))
	assert.Empty(t, mapAt(mapAt(req, "children"), "Pod.v1"), "a Terminating Pod goes at the next step")
	assert.Contains(t, mapAt(mapAt(req, "children"), "Service.v1"), "ns/svc", "a declared child stays")
}

// TestClusterIPsNeverShared: the API server never gives two Services one ClusterIP, whatever order
// they are created in; a Service keeps the one it was given, and the case's allocation wins.
func TestClusterIPsNeverShared(t *testing.T) {
	c := testController(false)
	parent, err := c.Parent(Object{"metadata": Object{"name": "w", "namespace": "ns", "uid": "u1"}}, "creator")
	require.NoError(t, err)
	request, err := c.SyncRequest(parent, Object{}, Object{}, false)
	require.NoError(t, err)
	how := Applied{Create: true, Delete: true, ClusterIPs: true, Now: now,
		Allocated: []Object{{"kind": "Service", "metadata": Object{"name": "fixed"}, "spec": Object{"clusterIP": "10.96.0.99"}}}}
	service := func(name string) string {
		return `{"apiVersion":"v1","kind":"Service","metadata":{"name":"` + name + `"}}`
	}
	// b first, then a, which sorts before it, then fixed.
	answers := []string{service("b"), service("b") + "," + service("a"), service("b") + "," + service("a") + "," + service("fixed")}
	ips := map[string]string{}
	for _, children := range answers {
		request = apply(t, request, []byte(`{"status":{},"children":[`+children+`]}`), how)
		seen := map[string]string{}
		for key, svc := range mapAt(mapAt(decode(t, request), "children"), "Service.v1") {
			ip, _ := mapAt(svc.(Object), "spec")["clusterIP"].(string)
			addr, err := netip.ParseAddr(ip)
			require.NoError(t, err, key)
			assert.True(t, netip.MustParsePrefix(ServiceCIDR).Contains(addr), "%s: %s", key, ip)
			assert.NotContains(t, seen, ip, "%s and %s share %s", key, seen[ip], ip)
			seen[ip] = key
			if before, ok := ips[key]; ok {
				assert.Equal(t, before, ip, "%s changed its ClusterIP", key)
			}
			ips[key] = ip
		}
	}
	assert.Equal(t, map[string]string{"ns/b": "10.96.0.10", "ns/a": "10.96.0.11", "ns/fixed": "10.96.0.99"}, ips)
}

// TestDeclared: the children a hook declares once what it waits for exists; here a hook that
// declares a Pod only once its Service is observed.
func TestDeclared(t *testing.T) {
	c := testController(false)
	parent, err := c.Parent(Object{"metadata": Object{"name": "w", "namespace": "ns", "uid": "u1"}}, "creator")
	require.NoError(t, err)
	children, err := c.Children(parent, nil, nil)
	require.NoError(t, err)
	first, err := c.SyncRequest(parent, children, Object{}, false)
	require.NoError(t, err)
	calls := 0
	hook := func(request []byte) ([]byte, error) {
		calls++
		out := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"}}`
		if len(mapAt(mapAt(decode(t, request), "children"), "Service.v1")) > 0 {
			out += `,{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod"}}`
		}
		return []byte(`{"status":{},"children":[` + out + `]}`), nil
	}
	declared, err := Declared(first, hook, 1, nil, now)
	require.NoError(t, err)
	assert.Equal(t, 2, calls)
	assert.Contains(t, declared, "Pod/pod")
	assert.Contains(t, declared, "Service/svc")

	observed, err := c.Children(parent, []Object{{"kind": "Pod", "metadata": Object{"name": "pod"}, "status": Object{"phase": "Running"}}}, declared)
	require.NoError(t, err)
	pod := mapAt(mapAt(observed, "Pod.v1"), "ns/pod")
	meta := mapAt(pod, "metadata")
	assert.Equal(t, "u1", mapAt(meta, "labels")["controller-uid"])
	assert.Equal(t, []any{Object{"apiVersion": "example.dev/v1", "kind": "Widget", "name": "w", "uid": "u1", "controller": true, "blockOwnerDeletion": true}}, meta["ownerReferences"])
	assert.JSONEq(t, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"pod"}}`, mapAt(meta, "annotations")[wire.LastAppliedAnnotation].(string))
	assert.Equal(t, Object{"phase": "Running"}, pod["status"])
	assert.Len(t, meta["managedFields"], 2, "the status has a manager of its own")
}

func apply(t *testing.T, request, answer []byte, how Applied) []byte {
	t.Helper()
	next, err := Apply(request, answer, how)
	require.NoError(t, err)
	return next
}
