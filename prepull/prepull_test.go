package prepull

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/golden"
	hooksync "github.com/challenge-hook/challenge-hook/sync"
)

// TestDecodePrePullRequestRefuses: what the pre-pull hook cannot read is a bad request (400,
// Metacontroller changes nothing), never a guess.
func TestDecodePrePullRequestRefuses(t *testing.T) {
	for body, want := range map[string]string{
		``:                           "request: EOF",
		`{}`:                         "request has no parent",
		`{"parent":{"metadata":{}}}`: "request has no parent",
		`{"parent":{"metadata":{"name":"web"}},"children":{"Pod.v1":{}}}`:                                   `unknown child type "Pod.v1"`,
		`{"parent":{"metadata":{"name":"web"}},"children":{"DaemonSet.apps/v1":{"ctf/x":{"metadata":{}}}}}`: "has no metadata.name",
		`{"parent":{"metadata":{"name":"web"}}} {}`:                                                         "unexpected data after the JSON object",
	} {
		_, err := DecodeRequest([]byte(body))
		require.ErrorIs(t, err, hooksync.ErrBadRequest, body)
		require.ErrorContains(t, err, want, body)
	}
}

// TestPrePullRefusesWhatItCannotLabel: a definition name longer than a label value (the CRD
// refuses it; a hand-made request may not) keeps what is observed and says why.
func TestPrePullRefusesWhatItCannotLabel(t *testing.T) {
	def := hooksync.ChallengeDefinition{Metadata: hooksync.ObjectMeta{Name: strings.Repeat("a", 64), Namespace: "ctf"}, Spec: v1alpha1.DefinitionSpec{
		Containers: []v1alpha1.Container{{Name: "web", Image: "registry.example/web:1", Ports: []v1alpha1.ContainerPort{{ContainerPort: 8080}}}},
	}}
	cfg := hooksync.DefaultConfig()
	cfg.PrePullImage, cfg.DefinitionNamespaces = "registry.example/hook:1", []string{"ctf"}
	resp := Sync(Request{Parent: def}, cfg)
	require.Equal(t, v1alpha1.PrePullStateInvalidDefinition, resp.Status.PrePull.State)
	require.Contains(t, resp.Status.PrePull.Message, "metadata.name")
	require.Empty(t, resp.Children)

	def.Metadata.Name = "web"
	resp = Sync(Request{Parent: def, Related: []hooksync.ChallengeDefinition{def}}, cfg)
	require.Equal(t, v1alpha1.PrePullStatePrePulling, resp.Status.PrePull.State)
	require.Len(t, resp.Children, 2)
}

// FuzzPrePull: whatever the body, decoding fails with a bad request or the answer is byte for
// byte the same when asked twice, and never panics; seeded with the golden requests.
func FuzzPrePull(f *testing.F) {
	cases, err := golden.Cases(prePullCasesDir)
	require.NoError(f, err)
	for _, c := range cases {
		f.Add(c.Request)
	}
	cfg := hooksync.DefaultConfig()
	cfg.PrePullImage, cfg.DefinitionNamespaces = "registry.example/hook:1", []string{"ctf"}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body)
		if err != nil {
			require.ErrorIs(t, err, hooksync.ErrBadRequest)
			return
		}
		first, err := hooksync.EncodeResponse(Sync(req, cfg))
		require.NoError(t, err)
		again, err := DecodeRequest(body)
		require.NoError(t, err)
		second, err := hooksync.EncodeResponse(Sync(again, cfg))
		require.NoError(t, err)
		require.Equal(t, string(first), string(second))
	})
}

// TestPrePullImagesOfPods: a definition of several pods pre-pulls every pod's images once each,
// in template order, each container named <pod>--<container> (two pods may have containers of the
// same name, and the pod a-b's container c is not the pod a's container b-c), or
// pod<i>-container<j> where that would not fit a container name.
func TestPrePullImagesOfPods(t *testing.T) {
	long := strings.Repeat("c", 59) // bot--<59 c> would be 64 characters
	spec := v1alpha1.DefinitionSpec{Pods: []v1alpha1.PodTemplate{
		{Name: "web", Containers: []v1alpha1.Container{{Name: "app", Image: "registry.example/web:1"}}},
		{Name: "db", Containers: []v1alpha1.Container{{Name: "app", Image: "registry.example/db:1"}}},
		{Name: "bot", Containers: []v1alpha1.Container{{Name: "app", Image: "registry.example/web:1"}, {Name: long, Image: "registry.example/bot:1"}}},
		{Name: "a-b", Containers: []v1alpha1.Container{{Name: "c", Image: "registry.example/a-b:1"}}},
		{Name: "a", Containers: []v1alpha1.Container{{Name: "b-c", Image: "registry.example/a:1"}}},
	}}
	require.Equal(t, []prePullImage{
		{"web--app", "registry.example/web:1"},
		{"db--app", "registry.example/db:1"},
		{"pod2-container1", "registry.example/bot:1"},
		{"a-b--c", "registry.example/a-b:1"},
		{"a--b-c", "registry.example/a:1"},
	}, prePullImages(spec))
}

// manyImagesDefinition is the definition of a co-tenant who wants every node to hold 64
// containers: 8 pods of 8 containers, each of its own image.
func manyImagesDefinition(namespace string) hooksync.ChallengeDefinition {
	spec := v1alpha1.DefinitionSpec{}
	const maxPods, maxContainers = 8, 8 // the most a definition may have (the CRD's and ValidateDefinition's limits)
	for i := range maxPods {
		pod := v1alpha1.PodTemplate{Name: fmt.Sprintf("p%d", i)}
		for j := range maxContainers {
			pod.Containers = append(pod.Containers, v1alpha1.Container{Name: fmt.Sprintf("c%d", j), Image: fmt.Sprintf("registry.example/i%d-%d:1", i, j)})
		}
		spec.Pods = append(spec.Pods, pod)
	}
	spec.Pods[0].Containers[0].Ports = []v1alpha1.ContainerPort{{ContainerPort: 8080}}
	spec.Pods[0].Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeNodePort}}
	return hooksync.ChallengeDefinition{Metadata: hooksync.ObjectMeta{Name: "farm", Namespace: namespace, CreationTimestamp: "2026-11-01T11:00:00Z"}, Spec: spec}
}

// TestPrePullOnlyInNamedNamespaces: a definition outside --definition-namespaces gets no DaemonSet,
// whatever it asks for, and none when the flag is not set at all; its customize relates nothing.
// Inside, the caps still hold: 64 images are over the per-definition cap, and nothing is built.
func TestPrePullOnlyInNamedNamespaces(t *testing.T) {
	cfg := hooksync.DefaultConfig()
	cfg.PrePullImage = "registry.example/hook:1"
	def := manyImagesDefinition("tenant-b")
	require.Empty(t, hooksync.ValidateDefinition(def.Spec, nil))
	require.Len(t, prePullImages(def.Spec), 64)

	for _, namespaces := range [][]string{nil, {"ctf"}} {
		cfg.DefinitionNamespaces = namespaces
		resp := Sync(Request{Parent: def}, cfg)
		assert.Equal(t, v1alpha1.PrePullStateNamespaceNotAllowed, resp.Status.PrePull.State, "%v", namespaces)
		assert.Empty(t, resp.Children, "%v", namespaces)
		assert.Contains(t, resp.Status.PrePull.Message, "--definition-namespaces")
		assert.Empty(t, Customize(CustomizeRequest{Parent: def}, cfg).RelatedResources)
	}

	cfg.DefinitionNamespaces = []string{"ctf", "tenant-b"}
	related := []hooksync.ChallengeDefinition{def}
	resp := Sync(Request{Parent: def, Related: related}, cfg)
	assert.Equal(t, v1alpha1.PrePullStateTooManyImages, resp.Status.PrePull.State)
	assert.Contains(t, resp.Status.PrePull.Message, "64 distinct images")
	assert.Empty(t, resp.Children, "nothing half-built")
	rules := Customize(CustomizeRequest{Parent: def}, cfg).RelatedResources
	require.Len(t, rules, 2)
	assert.Equal(t, []string{"ctf", "tenant-b"}, []string{rules[0].Namespace, rules[1].Namespace})
	assert.Empty(t, rules[0].Names, "every definition of the namespace")

	cfg.PrePullMaxImagesPerDefinition, cfg.PrePullMaxImages = 64, 64
	resp = Sync(Request{Parent: def, Related: related}, cfg)
	assert.Equal(t, v1alpha1.PrePullStatePrePulling, resp.Status.PrePull.State, "within caps the organizer raised")

	// Without the related definitions (a customize answer Metacontroller cached before the
	// namespace was named), the total cannot be counted: nothing new is built, what was is kept.
	observed := hooksync.ObservedObject{}
	observed.Metadata.Name = "farm.prepull"
	observed.Metadata.Annotations.LastApplied = `{"kind":"DaemonSet","metadata":{"name":"farm.prepull"}}`
	resp = Sync(Request{Parent: def, Children: []hooksync.ObservedObject{observed}}, cfg)
	assert.Equal(t, v1alpha1.PrePullStatePending, resp.Status.PrePull.State)
	assert.Contains(t, resp.Status.PrePull.Message, "--prepull-max-images")
	require.Len(t, resp.Children, 1)
	kept, err := json.Marshal(resp.Children[0])
	require.NoError(t, err)
	assert.JSONEq(t, observed.Metadata.Annotations.LastApplied, string(kept), "kept as last applied")
}

// TestPrePullTotalInCreationOrder: the definitions take the total in the order they were created,
// each one that fits what is left; the answer for each is the same whatever the order of the
// related list, and the definitions pre-pulled never hold more than the total together.
func TestPrePullTotalInCreationOrder(t *testing.T) {
	cfg := hooksync.DefaultConfig()
	cfg.PrePullImage = "registry.example/hook:1"
	cfg.DefinitionNamespaces = []string{"ctf", "ctf-2"}
	cfg.PrePullMaxImages = 5
	def := func(ns, name, created string, images int) hooksync.ChallengeDefinition {
		d := hooksync.ChallengeDefinition{Metadata: hooksync.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: created}}
		for i := range images {
			d.Spec.Containers = append(d.Spec.Containers, v1alpha1.Container{Name: fmt.Sprintf("c%d", i), Image: fmt.Sprintf("registry.example/%s-%d:1", name, i)})
		}
		d.Spec.Containers[0].Ports = []v1alpha1.ContainerPort{{ContainerPort: 8080}}
		d.Spec.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeNodePort}}
		return d
	}
	defs := []hooksync.ChallengeDefinition{
		def("ctf", "first", "2026-11-01T09:00:00Z", 3),
		def("ctf-2", "second", "2026-11-01T10:00:00Z", 3), // 6 > 5: refused
		def("ctf", "third", "2026-11-01T10:00:00Z", 2),    // same time, later by namespace: 5 fits
		def("ctf", "fourth", "2026-11-01T11:00:00Z", 1),   // 6 > 5: refused
		def("tenant-b", "elsewhere", "2026-11-01T08:00:00Z", 5),
	}
	want := map[string]string{"first": "PrePulling", "second": "TooManyImages", "third": "PrePulling", "fourth": "TooManyImages", "elsewhere": "NamespaceNotAllowed"}
	reversed := slices.Clone(defs)
	slices.Reverse(reversed)
	total := 0
	for _, d := range defs {
		for _, related := range [][]hooksync.ChallengeDefinition{defs, reversed} {
			resp := Sync(Request{Parent: d, Related: related}, cfg)
			assert.Equal(t, want[d.Metadata.Name], resp.Status.PrePull.State, "%s: %s", d.Metadata.Name, resp.Status.PrePull.Message)
		}
		if Sync(Request{Parent: d, Related: defs}, cfg).Status.PrePull.State == v1alpha1.PrePullStatePrePulling {
			total += len(prePullImages(d.Spec))
		}
	}
	assert.LessOrEqual(t, total, cfg.PrePullMaxImages)

	// Once first opts out, second fits; third still does.
	optOut := false
	defs[0].Spec.PrePull = &optOut
	assert.Equal(t, v1alpha1.PrePullStatePrePulling, Sync(Request{Parent: defs[1], Related: defs}, cfg).Status.PrePull.State)
	assert.Equal(t, v1alpha1.PrePullStatePrePulling, Sync(Request{Parent: defs[2], Related: defs}, cfg).Status.PrePull.State)
}

// TestPrePullContainerNamesUnique: whatever the pods and containers are called, the pre-pull
// containers' names are distinct container names, none that of the init container: joined names
// that collide (a-b/c and a/b-c), a fallback for a name too long that equals a real one, and
// numbered names that equal real ones.
func TestPrePullContainerNamesUnique(t *testing.T) {
	long := strings.Repeat("x", 60)
	for _, pods := range [][][2]string{
		{{"a-b", "c"}, {"a", "b-c"}},
		{{"a-b", "c"}, {"a", "b-c"}, {"a-b-c", "1"}, {"a-b-c-1", "x"}},
		{{"pod0", "container1"}, {long, "y"}, {"z", long}},
		{{"web", "install-pause"}, {"web-install", "pause"}},
		{{long[:31], long[:31]}, {long[:31], long[:30] + "-x"}, {long[:30] + "-" + long[:1], long[:31]}},
	} {
		spec := v1alpha1.DefinitionSpec{}
		for i, p := range pods {
			spec.Pods = append(spec.Pods, v1alpha1.PodTemplate{Name: p[0], Containers: []v1alpha1.Container{{Name: p[1], Image: fmt.Sprintf("registry.example/%d:1", i)}}})
		}
		images := prePullImages(spec)
		require.Len(t, images, len(pods))
		names := map[string]bool{}
		for _, img := range images {
			assert.Empty(t, validation.IsDNS1123Label(img.container), img.container)
			assert.False(t, names[img.container], "%q twice in %v", img.container, images)
			names[img.container] = true
		}
		ds := buildPrePullDaemonSet(hooksync.ChallengeDefinition{Metadata: hooksync.ObjectMeta{Name: "d", Namespace: "ctf"}, Spec: spec}, "d.prepull", images, hooksync.Config{PrePullImage: "registry.example/hook:1"})
		assert.False(t, names[*ds.Spec.Template.Spec.InitContainers[0].Name], "the init container's name is taken")
	}
}
