// What the API server does to the objects Metacontroller and the hook write: how it stores a
// created object (uid, times, managedFields) and the ClusterIPs it gives Services.

package mcsim

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Created is obj as the API server stores it when a client creates it: in defaultNamespace unless
// it names one, and created now unless it says when.
func Created(obj Object, defaultNamespace string, now time.Time) Object {
	obj = deepCopy(obj)
	meta := mapAt(obj, "metadata")
	if meta["namespace"] == nil || meta["namespace"] == "" {
		meta["namespace"] = defaultNamespace
	}
	if _, ok := meta["creationTimestamp"]; !ok {
		meta["creationTimestamp"] = now.UTC().Format(time.RFC3339)
	}
	obj["metadata"] = meta
	return obj
}

// Stored is obj as the API server stores it once creator created it and statusManager wrote its
// status: apiVersion and kind, generation 1 unless it says, and managedFields.
func Stored(obj Object, kind Kind, creator, statusManager string) Object {
	obj = deepCopy(obj)
	obj["apiVersion"], obj["kind"] = kind.APIVersion, kind.Kind
	meta := mapAt(obj, "metadata")
	obj["metadata"] = meta
	if _, ok := meta["generation"]; !ok {
		meta["generation"] = 1
	}
	meta["managedFields"] = managedFields(obj, creator, statusManager, meta["creationTimestamp"])
	return obj
}

// statusManager is who writes a kind's status, for its managedFields.
func statusManager(kind any) string {
	switch kind {
	case "Pod":
		return "kubelet"
	case "Service":
		return "service-controller"
	case "Ingress":
		return "ingress-nginx"
	case "HTTPRoute", "TLSRoute":
		return "gateway-controller"
	case "Deployment", "DaemonSet":
		return "kube-controller-manager"
	}
	return ""
}

// managedFields is what the API server records of who set an object's fields, as Metacontroller
// sends it (a hook reads none of it, but it is much of a request's size): the manager of
// everything but the status, and the status subresource's.
func managedFields(obj Object, manager, statusManager string, at any) []any {
	owned := Object{}
	for k, v := range obj {
		switch k {
		case "apiVersion", "kind", "status":
		case "metadata":
			owned[k] = Object{}
			for _, field := range []string{"labels", "annotations", "ownerReferences"} {
				if v, ok := v.(Object)[field]; ok {
					owned[k].(Object)[field] = v
				}
			}
		default:
			owned[k] = v
		}
	}
	entry := func(manager string, fields any) Object {
		return Object{"manager": manager, "operation": "Update", "apiVersion": obj["apiVersion"], "time": at, "fieldsType": "FieldsV1", "fieldsV1": fields}
	}
	out := []any{entry(manager, fieldsV1(owned))}
	if status, ok := obj["status"]; ok {
		status := entry(statusManager, fieldsV1(Object{"status": status}))
		status["subresource"] = "status"
		out = append(out, status)
	}
	return out
}

// fieldsV1 is a value's fields in the API server's FieldsV1 form: "f:<key>" for each key, a list
// or a value as {}.
func fieldsV1(v any) Object {
	out := Object{}
	if m, ok := v.(Object); ok {
		for k, v := range m {
			out["f:"+k] = fieldsV1(v)
		}
	}
	return out
}

// timestamp is how the API server writes a time.
func timestamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// ServiceCIDR is where the simulated API server allocates ClusterIPs: the first addresses of
// Kubernetes' default Service range, from .10.
const ServiceCIDR = "10.96.0.0/16"

// allocateClusterIPs gives each Service (by "<namespace>/<name>") what the API server allocated at
// its creation: the spec of allocated's Service of the same name, and a ClusterIP when it has
// none: the n-th address for the n-th Service in key order, or the next one no other Service holds.
func allocateClusterIPs(services Object, allocated []Object) {
	keys := slices.Sorted(maps.Keys(services))
	taken := map[any]bool{}
	for _, key := range keys {
		obj := services[key].(Object)
		spec := mapAt(obj, "spec")
		for _, a := range allocated {
			if a["kind"] == "Service" && mapAt(a, "metadata")["name"] == mapAt(obj, "metadata")["name"] {
				spec = Merge(spec, mapAt(a, "spec"))
			}
		}
		obj["spec"] = spec
		taken[spec["clusterIP"]] = true
	}
	for i, key := range keys {
		spec := mapAt(services[key].(Object), "spec")
		if spec["clusterIP"] != nil {
			continue
		}
		for n := i; ; n++ {
			ip := fmt.Sprintf("10.96.%d.%d", (10+n)/256, (10+n)%256)
			if !taken[ip] {
				spec["clusterIP"], taken[ip] = ip, true
				break
			}
		}
	}
}
