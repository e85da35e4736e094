package sync

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// namesOver lists every string of 1 to maxLength characters over alphabet.
func namesOver(alphabet string, maxLength int) []string {
	names := []string{""}
	var out []string
	for range maxLength {
		var next []string
		for _, prefix := range names {
			for _, r := range alphabet {
				next = append(next, prefix+string(r))
			}
		}
		out = append(out, next...)
		names = next
	}
	return out
}

// collidingTemplates are templates whose children's names are the likeliest to meet another
// Challenge's: one Pod, and pods (each exposed, each with an internal port that the next one
// reaches, so that every Service is there) in groups of up to eight. A pod name with "--" goes with
// the pod whose name starts it (a--internal with a), whose children's names it could take.
func collidingTemplates(podNames []string) []v1alpha1.DefinitionSpec {
	container := func(flag bool) []v1alpha1.Container {
		return []v1alpha1.Container{{Name: "app", Image: "registry.ctf.example/app:1", Flag: flag,
			Ports: []v1alpha1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "admin", ContainerPort: 9000}}}}
	}
	flag := &v1alpha1.Flag{Dynamic: true, Env: "FLAG"}
	templates := []v1alpha1.DefinitionSpec{{
		Containers: container(false), Expose: []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}}, Flag: flag,
	}}
	var groups [][]string
	var plain []string
	for _, name := range podNames {
		if before, _, found := strings.Cut(name, ComponentSeparator); found {
			groups = append(groups, []string{before, name})
			continue
		}
		plain = append(plain, name)
	}
	for len(plain) > 0 {
		n := min(v1alpha1.MaxPods, len(plain))
		groups = append(groups, plain[:n])
		plain = plain[n:]
	}
	for _, group := range groups {
		t := v1alpha1.DefinitionSpec{Flag: flag}
		for i, name := range group {
			p := v1alpha1.PodTemplate{Name: name, Containers: container(i == 0)}
			if i == 0 {
				p.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeHTTP}}
			} else {
				p.Expose = []v1alpha1.Expose{{Port: 8080, Type: v1alpha1.ExposeNodePort}}
			}
			if len(group) > 1 {
				p.Internal = []v1alpha1.InternalPort{{Port: 9000, From: []string{group[(i+1)%len(group)]}}}
			}
			t.Pods = append(t.Pods, p)
		}
		templates = append(templates, t)
	}
	return templates
}

// TestChildNamesNeverCollide: two Challenges never declare children of the same kind and name,
// whatever their names and their pods' names, and one answer never declares two. Metacontroller
// would give such an object to one of them, and the other's route would send its players there.
// Every Challenge name of up to three characters over a, b and '-', and those of four with "--"
// (the names the hook refuses declare nothing), each with one Pod and with pods named over the
// same alphabet (a-b beside a), answered until every Pod is declared.
func TestChildNamesNeverCollide(t *testing.T) {
	cfg := goldenConfig(t)
	var podNames []string
	for _, name := range append(namesOver("ab-", 3), "a--b", "internal", "a--internal", "a-internal") {
		// Pod names the API server's schema refuses anyway; "--" is the hook's own rule.
		if len(validation.IsDNS1035Label(name)) == 0 {
			podNames = append(podNames, name)
		}
	}
	templates := collidingTemplates(podNames)
	owner := map[string]string{} // kind/name -> the Challenge that declared it
	declaring, pairs := 0, 0
	challenges := namesOver("ab-", 3)
	for _, name := range namesOver("ab-", 4) {
		if len(name) == 4 && strings.Contains(name, ComponentSeparator) {
			challenges = append(challenges, name)
		}
	}
	for _, challenge := range challenges {
		for i, template := range templates {
			parent := Challenge{
				Metadata: ChallengeMeta{Name: challenge, Namespace: "ctf", UID: fmt.Sprintf("uid-%s-%d", challenge, i)},
				Spec:     v1alpha1.ChallengeSpec{Owner: "team-1", Template: &template},
			}
			body, err := EncodeResponse(answerWithEveryPod(t, Request{Parent: parent}, goldenNow, cfg))
			require.NoError(t, err)
			var answer struct {
				Children []struct {
					Kind     string `json:"kind"`
					Metadata struct {
						Name string `json:"name"`
					} `json:"metadata"`
				} `json:"children"`
			}
			require.NoError(t, json.Unmarshal(body, &answer))
			if len(answer.Children) > 0 {
				declaring++
			}
			inAnswer := map[string]bool{}
			for _, child := range answer.Children {
				key := child.Kind + "/" + child.Metadata.Name
				require.False(t, inAnswer[key], "Challenge %s declares %s twice (pods %v)", challenge, key, podsOf(template))
				inAnswer[key] = true
				if other, taken := owner[key]; taken && other != challenge {
					require.Failf(t, "two Challenges' children collide", "Challenges %s and %s both declare %s (pods of %s: %v)", other, challenge, key, challenge, podsOf(template))
				}
				owner[key] = challenge
				pairs++
			}
		}
	}
	require.Greater(t, declaring, 50, "few answers declared anything: the property checked little")
	t.Logf("%d answers declared %d children, %d distinct", declaring, pairs, len(owner))
}

func podsOf(t v1alpha1.DefinitionSpec) []string {
	var names []string
	for _, p := range t.Pods {
		names = append(names, p.Name)
	}
	return names
}

// TestNamesThatCouldCollideAreRefused: a Challenge name with "--", which another Challenge's
// pod children could take, is refused with what to do, even when the API server admitted it
// before its CRD refused such names; so is a pod's name with "--".
func TestNamesThatCouldCollideAreRefused(t *testing.T) {
	cfg := goldenConfig(t)
	template := validPodsDefinition()
	parent := Challenge{
		Metadata: ChallengeMeta{Name: "a--web", Namespace: "ctf", UID: "uid-1"},
		Spec:     v1alpha1.ChallengeSpec{Owner: "team-1", Template: &template},
	}
	resp := Sync(Request{Parent: parent}, goldenNow, cfg)
	require.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	require.Contains(t, resp.Status.Message, `metadata.name: Invalid value: "a--web": must not contain "--"`)
	require.Empty(t, resp.Children)

	template.Pods[2].Name = "admin--bot"
	parent.Metadata.Name = "a"
	resp = Sync(Request{Parent: parent}, goldenNow, cfg)
	require.Equal(t, v1alpha1.ReasonInvalidSpec, resp.Status.Reason)
	require.Contains(t, resp.Status.Message, `spec.template.pods[2].name: Invalid value: "admin--bot"`)
	require.Contains(t, resp.Status.Message, `must not contain "--"`)
}
