//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

var ingressGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}

// collidingChallenges are two instances whose children were named alike when a pod's children were
// named <challenge>-<pod>: a, of one pod web exposed over HTTP, and a-web, of one Pod exposed over
// HTTP. Each maps to the Service its Ingress must route to, its own.
var collidingChallenges = map[string]string{"a": "a--web", "a-web": "a-web"}

func collidingChallenge(name string) *unstructured.Unstructured {
	chal := validChallenge(name)
	if name == "a" {
		tpl := validTemplate()
		tpl["pods"] = []any{map[string]any{"name": "web", "containers": tpl["containers"], "expose": tpl["expose"]}}
		delete(tpl, "containers")
		delete(tpl, "expose")
		tpl["flag"] = map[string]any{"dynamic": true, "env": "FLAG"}
		tpl["pods"].([]any)[0].(map[string]any)["containers"].([]any)[0].(map[string]any)["flag"] = true
		spec(chal)["template"] = tpl
	}
	return chal
}

// TestCollidingNamesRouteOnlyToTheirOwn: the Challenge a with a pod web and the Challenge a-web,
// both exposed over HTTP, created one after the other in either order under the real
// Metacontroller, both run, and each one's Ingress routes only to a Service that the same
// Challenge controls, its own, which its status's endpoint names: no route, and no status, leads
// a team to the other's instance. A Challenge named like a pod's children (a--web) is refused at
// admission with the reason.
func TestCollidingNamesRouteOnlyToTheirOwn(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	for _, order := range [][]string{{"a", "a-web"}, {"a-web", "a"}} {
		t.Run(strings.Join(order, "-then-"), func(t *testing.T) {
			t.Parallel()
			ctx := e2eutil.TestContext(t)
			ns := c.createNamespace(ctx, t, "names-"+order[0], podSecurityRestricted)
			watches := map[string]*challengeWatch{}
			for _, name := range order {
				w, _ := startChallenge(ctx, t, c, ns, collidingChallenge(name))
				watches[name] = w
				time.Sleep(time.Second) // the first one's children exist when the second's are declared
			}
			running := map[string]*unstructured.Unstructured{}
			hosts := map[string]string{}
			for _, name := range order {
				running[name] = watches[name].phase(t, 90*time.Second, "Running").obj
				hosts[name] = statusString(running[name], "instanceId") + "."
			}
			if hosts["a"] == hosts["a-web"] {
				t.Fatalf("both instances have the host %s", hosts["a"])
			}
			for _, name := range order {
				chal := running[name]
				children := childrenOf(ctx, t, c, ns, chal.GetUID())
				checkControllerOwner(t, chal, children)
				ingresses := ofResource(children, "ingresses.networking.k8s.io")
				if len(ingresses) != 1 || ingresses[0].GetName() != name {
					t.Fatalf("Challenge %s: Ingresses %v, want one named %s", name, names(ingresses), name)
				}
				want := collidingChallenges[name]
				if backends := ingressBackends(ingresses[0]); !slices.Equal(backends, []string{want}) {
					t.Errorf("Ingress %s routes to %v, want its own Service %s", name, backends, want)
				}
				if services := byName(ofResource(children, "services")); services[want] == nil {
					t.Errorf("Challenge %s does not control the Service %s its Ingress routes to (it controls %v)", name, want, sortedKeys(services))
				}
				endpoints, _, _ := unstructured.NestedSlice(chal.Object, "status", "endpoints")
				if len(endpoints) != 1 {
					t.Fatalf("Challenge %s: endpoints %v, want one", name, endpoints)
				}
				if host, _ := endpoints[0].(map[string]any)["host"].(string); !strings.HasPrefix(host, hosts[name]) {
					t.Errorf("Challenge %s publishes the host %s, want its own %s...", name, host, hosts[name])
				}
			}
			// Whatever the hook or Metacontroller did: every Ingress of the namespace routes only to
			// Services that its own Challenge controls.
			ingresses, err := c.dyn.Resource(ingressGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(ingresses.Items) != 2 {
				t.Errorf("%d Ingresses in the namespace, want 2", len(ingresses.Items))
			}
			for i := range ingresses.Items {
				ing := &ingresses.Items[i]
				owner := metav1.GetControllerOf(ing)
				for _, backend := range ingressBackends(ing) {
					svc, err := c.dyn.Resource(serviceGVR).Namespace(ns).Get(ctx, backend, metav1.GetOptions{})
					if err != nil {
						t.Errorf("Ingress %s routes to Service %s: %v", ing.GetName(), backend, err)
						continue
					}
					if svcOwner := metav1.GetControllerOf(svc); owner == nil || svcOwner == nil || svcOwner.UID != owner.UID {
						t.Errorf("Ingress %s (controller %v) routes to Service %s (controller %v): another instance's", ing.GetName(), owner, backend, svcOwner)
					}
				}
			}
			refused := collidingChallenge("a--web")
			refused.SetNamespace(ns)
			if err := createDryRun(ctx, c, refused); err == nil || !strings.Contains(err.Error(), "metadata.name must not contain '--'") {
				t.Errorf("a Challenge named a--web: %v, want refused because of its '--'", err)
			}
		})
	}
}
