//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// The activity stamper's identity, as manifests/components/activity-stamper ships it.
const (
	stamperName     = "challenge-hook-activity-stamper"
	stamperUsername = "system:serviceaccount:challenge-hook:" + stamperName
)

// TestActivityStamper: an organizer's overlay of manifests/ with the components tcp-gateway and
// activity-stamper renders with kubectl kustomize, and the API server accepts every object the
// stamper's component adds (its admission policy type-checked without a warning), its Pod admitted
// under Pod Security "restricted" with its ServiceAccount's token. Then, as the stamper's
// ServiceAccount (impersonated), bound in the instances' namespace as the component's RoleBinding
// is in ctf, the API server lets it move the last-activity stamp of an instance's Service forward
// and refuses it every other change, and every read of a Challenge; and the stamper process
// itself, reading a gateway's GET /activity on 127.0.0.1 and writing as that ServiceAccount, keeps
// an instance whose idleTimeout is 30s Running while the gateway reports activity, and lets it
// stop once it does not.
func TestActivityStamper(t *testing.T) {
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	binding := installActivityStamper(ctx, t, c)
	ns := c.createNamespace(ctx, t, "stamper", podSecurityRestricted)
	bindActivityStamper(ctx, t, c, binding, ns)
	def := validDefinition("web")
	spec(def)["idleTimeout"] = idleTimeout.String()
	createObject(ctx, t, c, ns, def)
	stamper := impersonating(t, stamperUsername, stamperName)

	t.Run("admission", func(t *testing.T) { stamperAdmission(ctx, t, c, stamper, ns) })
	t.Run("process", func(t *testing.T) { stamperProcess(ctx, t, c, ns) })
}

// installActivityStamper renders the overlay and creates the activity-stamper component's
// objects, deleted when the test ends, but its RoleBinding, which it returns: that one is in the
// namespace of instances (bindActivityStamper).
func installActivityStamper(ctx context.Context, t *testing.T, c *cluster) (binding *unstructured.Unstructured) {
	t.Helper()
	objs := renderOverlay(ctx, t, c, "manifests/components/tcp-gateway", "manifests/components/activity-stamper")
	created := map[string]bool{}
	for _, obj := range objs {
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Fatalf("%s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		switch {
		case obj.GetKind() == "Namespace" && obj.GetName() == "challenge-hook":
			if err := e2eutil.CreateOrUpdate(ctx, client, obj); err != nil {
				t.Fatal(err)
			}
		case obj.GetKind() == "RoleBinding" && obj.GetName() == stamperName:
			binding = obj
			created[obj.GetKind()+" "+obj.GetName()] = true
		case strings.HasPrefix(obj.GetName(), stamperName) || obj.GetName() == "challenge-hook-tcp-gateway-activity":
			if err := e2eutil.CreateOrUpdate(ctx, client, obj); err != nil {
				t.Fatalf("create %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
			}
			created[obj.GetKind()+" "+obj.GetName()] = true
			t.Cleanup(func() {
				_ = client.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{})
			})
		}
	}
	for _, want := range []string{"ServiceAccount " + stamperName, "ClusterRole " + stamperName, "RoleBinding " + stamperName,
		"Deployment " + stamperName, "NetworkPolicy " + stamperName, "Service " + stamperName + "-metrics", "Service challenge-hook-tcp-gateway-activity",
		"NetworkPolicy challenge-hook-tcp-gateway-activity", "ValidatingAdmissionPolicy " + stamperName, "ValidatingAdmissionPolicyBinding " + stamperName} {
		if !created[want] {
			t.Errorf("the component adds no %s (it added %v)", want, slices.Sorted(maps.Keys(created)))
		}
	}
	// The policy, type-checked by the API server without a warning (an expression that reads a
	// field the request lacks would be one).
	for _, obj := range objs {
		if obj.GetKind() == "ValidatingAdmissionPolicy" && obj.GetName() == stamperName {
			waitTypeChecked(ctx, t, c, "manifests/components/activity-stamper/policy.yaml", obj)
		}
	}
	e2eutil.WaitFor(ctx, t, 60*time.Second, "the stamper's Pod to be admitted", func() (bool, error) {
		pods, err := c.dyn.Resource(podGVR).Namespace("challenge-hook").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + stamperName})
		if err != nil || len(pods.Items) != 1 {
			return false, err
		}
		pod := pods.Items[0]
		if sa, _, _ := unstructured.NestedString(pod.Object, "spec", "serviceAccountName"); sa != stamperName {
			t.Errorf("the stamper's Pod runs as ServiceAccount %q", sa)
		}
		if mount, _, _ := unstructured.NestedBool(pod.Object, "spec", "automountServiceAccountToken"); !mount {
			t.Errorf("the stamper's Pod mounts no ServiceAccount token: it has no credential to stamp with")
		}
		return true, nil
	})
	return binding
}

// bindActivityStamper creates the component's RoleBinding in ns, as an organizer does for each
// namespace of instances, deleted with ns.
func bindActivityStamper(ctx context.Context, t *testing.T, c *cluster, binding *unstructured.Unstructured, ns string) {
	t.Helper()
	if binding == nil {
		t.Fatal("the activity-stamper component has no RoleBinding")
	}
	binding = binding.DeepCopy()
	binding.SetNamespace(ns)
	client, err := c.resourceFor(binding)
	if err != nil {
		t.Fatal(err)
	}
	if err := e2eutil.CreateOrUpdate(ctx, client, binding); err != nil {
		t.Fatalf("bind the stamper in %s: %v", ns, err)
	}
}

// impersonating is a client of the API server that acts as username, with userAgent: the API
// server names the field manager of its writes after it (the program's name, before the "/"), as
// the stamper's, whose writes the admission policy lets own the stamp alone: this test's own user
// agent is the platform's here, whose entry owns the spec.
func impersonating(t *testing.T, username, userAgent string) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: username}
	cfg.UserAgent = userAgent
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("impersonating client: %v", err)
	}
	return dyn
}

// stamperAdmission: the stamper's ServiceAccount moves the stamp of an instance's Service forward,
// and the API server refuses it everything else: RBAC every read or write of a Challenge (whose
// status holds the players' capabilities), a Secret, and a Service's create, delete and status
// writes; the admission policy a label, the spec, another annotation (the hook's idle timeout), a
// finalizer, an owner reference, a stamp going back, removed or that is no time, and another
// manager's metadata.managedFields (stamperManagedFields). Each refusal leaves the Service as it
// was, and says why.
func stamperAdmission(ctx context.Context, t *testing.T, c *cluster, stamper dynamic.Interface, ns string) {
	createObject(ctx, t, c, ns, platformChallenge("stamped", "web", "team-stamped", ""))
	var name string
	e2eutil.WaitFor(ctx, t, time.Minute, "the Service of the Challenge stamped, with the hook's idle timeout", func() (bool, error) {
		list, err := c.dyn.Resource(serviceGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "ctf.challenge-hook.dev/challenge=stamped"})
		if err != nil || len(list.Items) != 1 || list.Items[0].GetAnnotations()[idleTimeoutAnnotation] == "" {
			return false, err
		}
		name = list.Items[0].GetName()
		return true, nil
	})
	services := stamper.Resource(serviceGVR).Namespace(ns)
	admin := c.dyn.Resource(serviceGVR).Namespace(ns)
	stampAt := func(at string) []byte {
		return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, lastActivityAnnotation, at)
	}
	// The first stamp: accepted once the RBAC authorizer knows the binding.
	first := time.Now().UTC().Truncate(time.Second)
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the stamper's first stamp to be accepted", func() (bool, error) {
		_, err := services.Patch(ctx, name, types.MergePatchType, stampAt(first.Format(time.RFC3339)), metav1.PatchOptions{})
		return err == nil, err
	})
	// Every refusal below is the policy's once it is in force: a stamp going back is the probe.
	e2eutil.WaitFor(ctx, t, 30*time.Second, "the admission policy to refuse a stamp going back", func() (bool, error) {
		_, err := services.Patch(ctx, name, types.MergePatchType, stampAt(first.Add(-time.Hour).Format(time.RFC3339)),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	})
	before, err := admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forward := first.Add(time.Minute).Format(time.RFC3339)
	if _, err := services.Patch(ctx, name, types.MergePatchType, stampAt(forward), metav1.PatchOptions{}); err != nil {
		t.Errorf("a stamp forward refused: %v", err)
	}
	challenges := stamper.Resource(chalGVR).Namespace(ns)
	for _, refused := range []struct {
		what  string
		do    func() error
		check func(error) bool
		says  string
	}{
		{"a label", patch(services, name, `{"metadata":{"labels":{"team":"blue"}}}`), apierrors.IsForbidden, "may not change a Service's labels"},
		{"the Challenge label", patch(services, name, `{"metadata":{"labels":{"ctf.challenge-hook.dev/challenge":"other"}}}`), apierrors.IsForbidden, "labels"},
		{"the spec", patch(services, name, `{"spec":{"selector":{"app":"elsewhere"}}}`), apierrors.IsForbidden, "may not change a Service's spec"},
		{"the hook's idle timeout", patch(services, name, fmt.Sprintf(`{"metadata":{"annotations":{%q:"1000h"}}}`, idleTimeoutAnnotation)),
			apierrors.IsForbidden, "and no other"},
		{"another annotation added with a stamp", patch(services, name, fmt.Sprintf(`{"metadata":{"annotations":{"example.org/new":"x",%q:%q}}}`,
			lastActivityAnnotation, first.Add(2*time.Minute).Format(time.RFC3339))), apierrors.IsForbidden, "and no other"},
		{"a finalizer added", patch(services, name, `{"metadata":{"finalizers":["example.org/hold"]}}`),
			apierrors.IsForbidden, "may not change a Service's finalizers"},
		{"its owner reference removed", patch(services, name, `{"metadata":{"ownerReferences":null}}`),
			apierrors.IsForbidden, "may not change a Service's owner references"},
		{"a stamp going back", patch(services, name, string(stampAt(first.Format(time.RFC3339)))), apierrors.IsInvalid, "never goes back"},
		{"a stamp that is no time", patch(services, name, string(stampAt("now"))), apierrors.IsInvalid, "must be an RFC 3339 time"},
		{"the stamp removed", patch(services, name, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, lastActivityAnnotation)), apierrors.IsInvalid, "must be an RFC 3339 time"},
		{"its status", func() error {
			_, err := services.Patch(ctx, name, types.MergePatchType, []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.1"}]}}}`), metav1.PatchOptions{}, "status")
			return err
		}, apierrors.IsForbidden, "cannot patch resource \"services/status\""},
		{"a deletion", func() error { return services.Delete(ctx, name, metav1.DeleteOptions{}) }, apierrors.IsForbidden, "cannot delete resource"},
		{"a Service of its own", func() error {
			svc := before.DeepCopy()
			svc.SetName("stamper-made")
			svc.SetResourceVersion("")
			_, err := services.Create(ctx, svc, metav1.CreateOptions{})
			return err
		}, apierrors.IsForbidden, "cannot create resource"},
		{"a Challenge, read", func() error {
			_, err := challenges.Get(ctx, "stamped", metav1.GetOptions{})
			return err
		}, apierrors.IsForbidden, "cannot get resource \"challenges\""},
		{"the Challenges, listed", func() error {
			_, err := challenges.List(ctx, metav1.ListOptions{})
			return err
		}, apierrors.IsForbidden, "cannot list resource \"challenges\""},
		{"a Challenge, stamped", func() error {
			_, err := challenges.Patch(ctx, "stamped", types.MergePatchType, stampAt(forward), metav1.PatchOptions{})
			return err
		}, apierrors.IsForbidden, "cannot patch resource \"challenges\""},
		{"a Secret", func() error {
			_, err := stamper.Resource(secretGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
			return err
		}, apierrors.IsForbidden, "cannot list resource \"secrets\""},
		{"the Services of a namespace it is not bound in", func() error {
			_, err := stamper.Resource(serviceGVR).Namespace("default").List(ctx, metav1.ListOptions{})
			return err
		}, apierrors.IsForbidden, "cannot list resource \"services\""},
	} {
		err := refused.do()
		switch {
		case err == nil:
			t.Errorf("%s: accepted, want refused", refused.what)
		case !refused.check(err) || !strings.Contains(err.Error(), refused.says):
			t.Errorf("%s: %v, want refused saying %q", refused.what, err, refused.says)
		default:
			t.Logf("%s: refused: %v", refused.what, err)
		}
	}
	after, err := admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := after.GetAnnotations()[lastActivityAnnotation]; got != forward {
		t.Errorf("the stamp is %q, want the forward stamp %s", got, forward)
	}
	unstamped := func(u *unstructured.Unstructured) map[string]string {
		annotations := maps.Clone(u.GetAnnotations())
		delete(annotations, lastActivityAnnotation)
		return annotations
	}
	if !maps.Equal(unstamped(after), unstamped(before)) || !maps.Equal(after.GetLabels(), before.GetLabels()) ||
		!slices.Equal(after.GetFinalizers(), before.GetFinalizers()) || !reflect.DeepEqual(after.GetOwnerReferences(), before.GetOwnerReferences()) ||
		fmt.Sprint(after.Object["spec"]) != fmt.Sprint(before.Object["spec"]) {
		t.Errorf("a refused change landed: before %v, after %v", before.Object, after.Object)
	}
	stamperManagedFields(ctx, t, admin, services, name, first.Add(2*time.Minute))
}

// stamperManagedFields, on the instance's Service name whose stamp is before at: an administrator
// (this test's user agent) writes the stamp with a note of its own, and the stamper's stamp
// forward, whose ownership the API server moves from the administrator's entry of
// metadata.managedFields to the stamper's, is accepted: the administrator's entry keeps its note,
// the stamper's owns the stamp alone, Metacontroller's (the spec, since its create) is untouched.
// Then a stamp by the stamper whose merge patch also writes metadata.managedFields is refused when
// it forges an Apply entry owning spec.type, inflates the stamper's own entry to about 960 KB
// (what would make every request Metacontroller sends for the Challenge too large for the hook),
// adds two entries, or empties the managed fields (the API server keeps only the writer's); after
// them the managed fields are as the accepted stamp left them.
func stamperManagedFields(ctx context.Context, t *testing.T, admin, services dynamic.ResourceInterface, name string, at time.Time) {
	stampOwned := map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{"f:" + lastActivityAnnotation: map[string]any{}}}}
	entries := func(u *unstructured.Unstructured) []any {
		list, _, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
		return list
	}
	ownerOf := func(u *unstructured.Unstructured, path ...string) (owners []string) {
		for _, e := range entries(u) {
			e := e.(map[string]any)
			if _, found, _ := unstructured.NestedFieldNoCopy(e, append([]string{"fieldsV1"}, path...)...); found {
				owners = append(owners, fmt.Sprint(e["manager"], "/", e["operation"]))
			}
		}
		return owners
	}
	stampPath := []string{"f:metadata", "f:annotations", "f:" + lastActivityAnnotation}
	notePath := []string{"f:metadata", "f:annotations", "f:example.org/note"}
	stampBody := func(at time.Time, managedFields []any, note bool) []byte {
		annotations := map[string]any{lastActivityAnnotation: at.Format(time.RFC3339)}
		if note {
			annotations["example.org/note"] = "kept"
		}
		metadata := map[string]any{"annotations": annotations}
		if managedFields != nil {
			metadata["managedFields"] = managedFields
		}
		body, err := json.Marshal(map[string]any{"metadata": metadata})
		if err != nil {
			t.Fatal(err)
		}
		return body
	}

	byAdmin, err := admin.Patch(ctx, name, types.MergePatchType, stampBody(at, nil, true), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("the administrator's stamp: %v", err)
	}
	adminOwners := ownerOf(byAdmin, stampPath...)
	specOwners := ownerOf(byAdmin, "f:spec")
	if len(adminOwners) != 1 || !slices.Equal(ownerOf(byAdmin, notePath...), adminOwners) || len(specOwners) == 0 || slices.Contains(specOwners, adminOwners[0]) {
		t.Fatalf("after the administrator's stamp, the stamp is owned by %v, the note by %v and the spec by %v: want the administrator's entry owning the stamp and the note, another the spec",
			adminOwners, ownerOf(byAdmin, notePath...), specOwners)
	}
	taken, err := services.Patch(ctx, name, types.MergePatchType, stampBody(at.Add(time.Minute), nil, false), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("a stamp taking the stamp from the administrator's entry refused: %v", err)
	}
	if owners := ownerOf(taken, stampPath...); !slices.Equal(owners, []string{stamperName + "/Update"}) {
		t.Errorf("after the stamper's stamp, the stamp is owned by %v, want %s/Update alone", owners, stamperName)
	}
	if owners := ownerOf(taken, notePath...); !slices.Equal(owners, adminOwners) {
		t.Errorf("after the stamper's stamp, the note is owned by %v, want %v", owners, adminOwners)
	}
	if owners := ownerOf(taken, "f:spec"); !slices.Equal(owners, specOwners) {
		t.Errorf("after the stamper's stamp, the spec is owned by %v, want %v", owners, specOwners)
	}
	for _, e := range entries(taken) {
		if e := e.(map[string]any); e["manager"] == stamperName && fmt.Sprint(e["fieldsV1"]) != fmt.Sprint(stampOwned) {
			t.Errorf("the stamper's entry owns %v, want the stamp alone", e["fieldsV1"])
		}
	}
	t.Logf("a stamp taking the stamp from the administrator's entry (%s): accepted; managed fields %v", adminOwners[0], entries(taken))

	withEntries := func(edit func(entries []any) []any) []any { return edit(entries(taken)) } // a copy
	// The entries of the main resource: the status subresource's are not the stamper's to keep.
	mainEntries := func(u *unstructured.Unstructured) string {
		return fmt.Sprint(slices.DeleteFunc(entries(u), func(e any) bool { return e.(map[string]any)["subresource"] != nil }))
	}
	forged := func(manager, operation string, fields map[string]any) map[string]any {
		return map[string]any{"manager": manager, "operation": operation, "apiVersion": "v1",
			"time": time.Now().UTC().Format(time.RFC3339), "fieldsType": "FieldsV1", "fieldsV1": fields}
	}
	padding := map[string]any{"f:" + lastActivityAnnotation: map[string]any{}}
	for i := range 29000 {
		padding[fmt.Sprintf("f:example.org/padding-%05d", i)] = map[string]any{}
	}
	next := at.Add(2 * time.Minute)
	for _, refused := range []struct {
		what          string
		managedFields []any
		says          string
	}{
		{"a stamp forging an Apply entry owning spec.type", withEntries(func(e []any) []any {
			return append(e, forged("e2e-admin", "Apply", map[string]any{"f:spec": map[string]any{"f:type": map[string]any{}}}))
		}), "and no other manager's"},
		{"a stamp inflating the stamper's own entry", withEntries(func(e []any) []any {
			for _, entry := range e {
				if entry := entry.(map[string]any); entry["manager"] == stamperName {
					entry["fieldsV1"] = map[string]any{"f:metadata": map[string]any{"f:annotations": padding}}
				}
			}
			return e
		}), "and nothing else"},
		{"a stamp adding two entries", withEntries(func(e []any) []any {
			return append(e, forged("x-1", "Update", map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{}}}),
				forged("x-2", "Update", map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{}}}))
		}), "may add one entry to a Service's metadata.managedFields, its own, not 2"},
		{"a stamp emptying the managed fields", []any{map[string]any{}}, "may not remove another manager's entry"},
	} {
		body := stampBody(next, refused.managedFields, false)
		_, err := services.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
		switch {
		case err == nil:
			t.Errorf("%s (a merge patch of %d bytes): accepted, want refused", refused.what, len(body))
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), refused.says):
			t.Errorf("%s: %v, want refused saying %q", refused.what, err, refused.says)
		default:
			t.Logf("%s (a merge patch of %d bytes): refused: %.300s", refused.what, len(body), err)
		}
	}
	after, err := admin.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mainEntries(after), mainEntries(taken); got != want {
		t.Errorf("a refused write changed the managed fields: %s, want %s", got, want)
	}
	if got := after.GetAnnotations()[lastActivityAnnotation]; got != at.Add(time.Minute).Format(time.RFC3339) {
		t.Errorf("the stamp is %q after the refused writes, want %s", got, at.Add(time.Minute).Format(time.RFC3339))
	}
}

// patch is a merge patch of the object name with body.
func patch(objects dynamic.ResourceInterface, name, body string) func() error {
	return func() error {
		_, err := objects.Patch(context.Background(), name, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
}

// fakeActivity serves GET /activity as a gateway does, for one Service address: while active,
// bytes move through it now; after, its last activity stays when it stopped.
type fakeActivity struct {
	mu      sync.Mutex
	address string
	active  bool
	last    time.Time
	polls   int
}

func (f *fakeActivity) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	if f.active {
		f.last = time.Now()
	}
	type entry struct {
		Address      string    `json:"address"`
		LastActivity time.Time `json:"lastActivity"`
	}
	out := struct {
		Services []entry `json:"services"`
	}{Services: []entry{}}
	since, _ := time.Parse(time.RFC3339Nano, r.URL.Query().Get("since"))
	if !f.last.IsZero() && f.last.After(since) {
		out.Services = append(out.Services, entry{f.address, f.last})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (f *fakeActivity) set(active bool) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active = active
	if !active {
		f.last = time.Now()
	}
	return f.last
}

// stamperProcess: `challenge-hook activity-stamper`, as the stamper's ServiceAccount, polling a
// fake gateway on 127.0.0.1 that reports activity on an instance's Service address (idleTimeout
// 30s), watching the Services of ns alone: the instance stays Running for 75 s, its Service
// stamped at once and then at most once per quarter of its idleTimeout; once the gateway reports
// nothing new, the instance stops (Stopped, Idle) within its idleTimeout.
func stamperProcess(ctx context.Context, t *testing.T, c *cluster, ns string) {
	createObject(ctx, t, c, ns, platformChallenge("used", "web", "team-used", ""))
	chals := c.dyn.Resource(chalGVR).Namespace(ns)
	state := func() (phase, reason string, obj *unstructured.Unstructured) {
		u, err := chals.Get(ctx, "used", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		phase, _, _ = unstructured.NestedString(u.Object, "status", "phase")
		reason, _, _ = unstructured.NestedString(u.Object, "status", "reason")
		return phase, reason, u
	}
	e2eutil.WaitFor(ctx, t, 2*time.Minute, "used Running", func() (bool, error) {
		phase, _, _ := state()
		return phase == "Running", nil
	})
	services, err := c.dyn.Resource(serviceGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: "ctf.challenge-hook.dev/challenge=used"})
	if err != nil || len(services.Items) != 1 {
		t.Fatalf("the instance's Service: %v, %d found", err, len(services.Items))
	}
	service := services.Items[0].GetName()
	stampOf := func() string {
		u, err := c.dyn.Resource(serviceGVR).Namespace(ns).Get(ctx, service, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u.GetAnnotations()[lastActivityAnnotation]
	}
	clusterIP, _, _ := unstructured.NestedString(services.Items[0].Object, "spec", "clusterIP")
	ports, _, _ := unstructured.NestedSlice(services.Items[0].Object, "spec", "ports")
	port, _, _ := unstructured.NestedInt64(ports[0].(map[string]any), "port")
	gateway := &fakeActivity{address: fmt.Sprintf("%s:%d", clusterIP, port), active: true}
	server := httptest.NewServer(gateway)
	defer server.Close()

	bin := os.Getenv("E2E_HOOK_BIN")
	if bin == "" {
		bin = filepath.Join(c.root, "bin", "challenge-hook")
	}
	logs := &lockedBuffer{}
	cmd := exec.Command(bin, "activity-stamper", "--kubeconfig="+e2eutil.ImpersonatingKubeconfig(t, stamperUsername),
		"--gateways="+strings.TrimPrefix(server.URL, "http://"), "--interval=1s", "--namespaces="+ns, "--metrics-listen=127.0.0.1:0", "--log-level=debug")
	dieWithParent(cmd)
	cmd.Stdout, cmd.Stderr = logs, logs
	proc, err := e2eutil.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		proc.Stop(syscall.SIGTERM, 10*time.Second)
		if t.Failed() {
			t.Logf("activity-stamper log:\n%s", tail(logs.String(), 8192))
		}
	}()

	// 75 s of activity: Running all along.
	begin := time.Now()
	for time.Since(begin) < 75*time.Second {
		select {
		case <-proc.Exited():
			t.Fatalf("the stamper exited: %v\n%s", proc.Err(), logs.String())
		default:
		}
		if phase, reason, u := state(); phase != "Running" {
			t.Fatalf("%s into the gateway's activity, the instance (idleTimeout %s) is %s/%s: the Service's stamp %q, status %v",
				time.Since(begin).Round(time.Second), idleTimeout, phase, reason, stampOf(), u.Object["status"])
		}
		time.Sleep(time.Second)
	}
	stamps := stamperMetric(t, logs.String(), "challenge_hook_activity_stamper_stamps_written_total")
	t.Logf("Running for %s while the gateway reported activity: %v stamps written (a quarter of the idleTimeout is %s), the last %s",
		time.Since(begin).Round(time.Second), stamps, idleTimeout/4, stampOf())
	// The first stamp at once (the Service had none), then one per quarter at most; the stamper
	// started before begin.
	if maxStamps := float64(time.Since(begin)/(idleTimeout/4) + 2); stamps > maxStamps || stamps < 2 {
		t.Errorf("%v stamps in %s, want from 2 to %v (one per quarter of the idleTimeout)", stamps, time.Since(begin).Round(time.Second), maxStamps)
	}

	// The players leave: the instance stops within its idleTimeout of their last byte.
	lastByte := gateway.set(false)
	e2eutil.WaitFor(ctx, t, idleTimeout+20*time.Second, "used Stopped/Idle once the gateway reports no activity", func() (bool, error) {
		phase, reason, _ := state()
		return phase == "Stopped" && reason == "Idle", nil
	})
	stoppedAfter := time.Since(lastByte)
	t.Logf("Stopped/Idle %.1fs after the last activity the gateway reported (idleTimeout %s)", stoppedAfter.Seconds(), idleTimeout)
	if stoppedAfter > idleTimeout+5*time.Second {
		t.Errorf("stopped %.1fs after the last activity, want within the idleTimeout (%s) and a sync", stoppedAfter.Seconds(), idleTimeout)
	}
	for _, reason := range []string{"Forbidden", "Invalid"} {
		if n := stamperMetric(t, logs.String(), `challenge_hook_activity_stamper_stamps_refused_total{reason="`+reason+`"}`); n > 0 {
			t.Errorf("%v stamps refused (%s)", n, reason)
		}
	}
	if n := stamperMetric(t, logs.String(), `challenge_hook_activity_stamper_gateway_polls_failed_total{reason="request"}`); n > 0 {
		t.Errorf("%v polls of the gateway failed", n)
	}

	// Every series of the stamper that the monitoring component's alerts and dashboard select
	// (hack/monitoring/referenced-series.txt), with the label values they match, as this stamper
	// serves them; TestMonitoring checks the other programs' lines.
	samples, err := scrape(ctx, "http://"+stamperMetricsAddr(t, logs.String())+"/metrics")
	if err != nil {
		t.Fatalf("scrape the stamper: %v", err)
	}
	if checkReferencedSeries(t, map[string][]metricSample{"activity-stamper": samples},
		map[string]string{"platform": "TestMonitoring", "challenge-hook": "TestMonitoring", "metacontroller": "TestMonitoring"}) == 0 {
		t.Errorf("%s names no series of the activity stamper", referencedSeriesFile)
	}
}

// stamperMetricsAddr is the address of the stamper's /metrics, from its "listening" log line.
func stamperMetricsAddr(t *testing.T, logs string) string {
	t.Helper()
	m := regexp.MustCompile(`"metrics_addr":"([^"]+)"`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("the stamper logged no metrics address:\n%s", logs)
	}
	return m[1]
}

// stamperMetric reads a series of the stamper's /metrics; 0 when it has none.
func stamperMetric(t *testing.T, logs, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + stamperMetricsAddr(t, logs) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(strings.Builder)
	if _, err := io.Copy(body, resp.Body); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(body.String()) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			n, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	return 0
}
