package sync

import (
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Hardened defaults of every instance's Pod.
const (
	defaultCPURequest       = "50m"
	defaultMemoryRequest    = "64Mi"
	defaultCPULimit         = "500m"
	defaultMemoryLimit      = "256Mi"
	progressDeadlineSeconds = 120
	tmpVolumeName           = "tmp"
	tmpSizeLimit            = "64Mi"
	flagVolumeName          = "flag"
	flagSecretKey           = "flag"
	flagFileMode            = 0o444
)

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func boolPtr(b bool) *bool { return &b }

// buildDeployment returns the instance's workload: one replica, recreated rather than rolled, with
// a Pod that passes Pod Security "restricted" unless the template opts out.
func buildDeployment(in instance) deployment {
	t := in.template
	runAsRoot := t.Security != nil && t.Security.RunAsRoot
	readOnlyRoot := t.Security == nil || t.Security.ReadOnlyRootFilesystem == nil || *t.Security.ReadOnlyRootFilesystem

	pod := podSpec{
		AutomountServiceAccountToken: false,
		EnableServiceLinks:           false,
		RuntimeClassName:             t.RuntimeClassName,
		SecurityContext:              podSecurityContext{SeccompProfile: seccompProfile{Type: "RuntimeDefault"}},
	}
	if !runAsRoot {
		pod.SecurityContext.RunAsNonRoot = boolPtr(true)
	}
	if t.Security != nil && t.Security.RunAsUser != nil {
		uid := *t.Security.RunAsUser
		pod.SecurityContext.RunAsUser = &uid
	}

	var mounts []volumeMount
	if readOnlyRoot {
		// Most programs need a writable /tmp; it is the only writable path, and bounded.
		pod.Volumes = append(pod.Volumes, volume{Name: tmpVolumeName, EmptyDir: &emptyDirVolumeSource{SizeLimit: tmpSizeLimit}})
		mounts = append(mounts, volumeMount{Name: tmpVolumeName, MountPath: "/tmp"})
	}
	var flagEnv []envVar
	if f := t.Flag; f != nil {
		if f.Path != "" {
			base := pathBase(f.Path)
			pod.Volumes = append(pod.Volumes, volume{Name: flagVolumeName, Secret: &secretVolumeSource{
				SecretName:  in.flagSecretName(),
				Items:       []keyToPath{{Key: flagSecretKey, Path: base}},
				DefaultMode: flagFileMode,
			}})
			mounts = append(mounts, volumeMount{Name: flagVolumeName, MountPath: f.Path, SubPath: base, ReadOnly: true})
		}
		if f.Env != "" {
			flagEnv = []envVar{{Name: f.Env, ValueFrom: &envVarSource{SecretKeyRef: secretKeySelector{Name: in.flagSecretName(), Key: flagSecretKey}}}}
		}
	}

	for _, c := range t.Containers {
		out := container{
			Name:         c.Name,
			Image:        c.Image,
			Command:      c.Command,
			Args:         c.Args,
			Resources:    containerResources(c.Resources),
			VolumeMounts: mounts,
			SecurityContext: containerSecurityContext{
				AllowPrivilegeEscalation: false,
				Capabilities:             capabilities{Drop: []string{"ALL"}},
				ReadOnlyRootFilesystem:   readOnlyRoot,
			},
			ReadinessProbe: readinessProbe(c),
		}
		for _, p := range c.Ports {
			out.Ports = append(out.Ports, containerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: protocolOf(p)})
		}
		for _, e := range c.Env {
			out.Env = append(out.Env, envVar{Name: e.Name, Value: e.Value})
		}
		out.Env = append(out.Env, flagEnv...)
		pod.Containers = append(pod.Containers, out)
	}

	return deployment{
		APIVersion: "apps/v1",
		Kind:       "Deployment",
		Metadata:   in.meta(in.name),
		Spec: deploymentSpec{
			Replicas:                1,
			RevisionHistoryLimit:    1,
			ProgressDeadlineSeconds: progressDeadlineSeconds,
			Selector:                labelSelector{MatchLabels: in.selector},
			// Recreate: a challenge instance is one player's state; two Pods at once would split it.
			Strategy: deploymentStrategy{Type: "Recreate"},
			Template: podTemplate{Metadata: templateMeta{Labels: in.labels}, Spec: pod},
		},
	}
}

func pathBase(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

// containerResources fills in default requests and limits and writes every quantity in the API
// server's canonical form ("0.5" becomes "500m"), which is what it stores: any other spelling would
// differ from the live object on every sync.
func containerResources(r *ResourceRequirements) resourceRequirements {
	requests := map[string]string{"cpu": defaultCPURequest, "memory": defaultMemoryRequest}
	limits := map[string]string{"cpu": defaultCPULimit, "memory": defaultMemoryLimit}
	if r != nil {
		for name, value := range r.Requests {
			requests[name] = value
		}
		for name, value := range r.Limits {
			limits[name] = value
		}
		// A default must never contradict what the template set: a lone limit below the default
		// request lowers the request; a lone request above the default limit raises the limit.
		for name := range requests {
			_, setRequest := r.Requests[name]
			_, setLimit := r.Limits[name]
			limit, hasLimit := limits[name]
			if !hasLimit || setRequest == setLimit {
				continue
			}
			req, lim := resource.MustParse(requests[name]), resource.MustParse(limit)
			if req.Cmp(lim) > 0 {
				if setLimit {
					requests[name] = limit
				} else {
					limits[name] = requests[name]
				}
			}
		}
	}
	return resourceRequirements{Requests: canonicalQuantities(requests), Limits: canonicalQuantities(limits)}
}

func canonicalQuantities(in map[string]string) map[string]string {
	out := make(map[string]string, len(in))
	for name, value := range in {
		q := resource.MustParse(value)
		out[name] = q.String()
	}
	return out
}

// readinessProbe is the template's probe, or by default a TCP connect to the container's first TCP
// port. Every field the API server would default is written out.
func readinessProbe(c Container) *probe {
	p := c.ReadinessProbe
	if p == nil {
		for _, port := range c.Ports {
			if protocolOf(port) == "TCP" {
				return &probe{TCPSocket: &tcpSocketAction{Port: port.ContainerPort}, PeriodSeconds: 5, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
			}
		}
		return nil
	}
	out := &probe{
		InitialDelaySeconds: p.InitialDelaySeconds,
		PeriodSeconds:       orDefault(p.PeriodSeconds, 5),
		TimeoutSeconds:      orDefault(p.TimeoutSeconds, 1),
		SuccessThreshold:    1,
		FailureThreshold:    orDefault(p.FailureThreshold, 3),
	}
	switch {
	case p.TCPSocket != nil:
		out.TCPSocket = &tcpSocketAction{Port: p.TCPSocket.Port}
	case p.HTTPGet != nil:
		path := p.HTTPGet.Path
		if path == "" {
			path = "/"
		}
		out.HTTPGet = &httpGetAction{Path: path, Port: p.HTTPGet.Port, Scheme: "HTTP"}
	case p.Exec != nil:
		out.Exec = &execAction{Command: p.Exec.Command}
	}
	return out
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}
