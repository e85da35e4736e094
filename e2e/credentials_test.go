//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
)

// credentialsDoc holds the table of what each ServiceAccount of the shipped manifests may do.
const (
	credentialsDoc     = "docs/security.md"
	credentialsHeading = "### What each ServiceAccount may do"
	// docNamespace is the namespace of instances the shipped RoleBindings name.
	docNamespace = "ctf"
)

// grants are a ServiceAccount's rights in one namespace: resource (as kubectl auth can-i --list
// names it, resource.group) -> its verbs, sorted.
type grants map[string][]string

// credentialRow is one row of the table.
type credentialRow struct {
	serviceAccount string // namespace/name
	inCtf, other   grants
	capability     bool // it reads a player's capability
}

// TestCredentialsAsDocumented applies the RBAC of every shipped manifest (the base, each component,
// manifests/platform-rbac.yaml) to the real API server, the RoleBindings of ctf in a namespace of
// the test's and the cluster-wide objects under names of the test's, and asks, with kubectl auth
// can-i --list as each ServiceAccount, what each may do in that namespace and in another: the
// answers are docs/security.md's table, row by row, every ServiceAccount of the manifests and
// every subject of their bindings has a row, and a row says it reaches a player's capability
// exactly when it may read Challenges (whose status holds the tokens and hosts), Ingresses (the
// hosts) or Secrets (the flags).
func TestCredentialsAsDocumented(t *testing.T) {
	kubectl := os.Getenv("E2E_KUBECTL")
	if kubectl == "" {
		t.Fatal("E2E_KUBECTL is not set: run the e2e tests with `make e2e`")
	}
	c := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := c.createNamespace(ctx, t, "credentials", podSecurityRestricted)
	other := c.createNamespace(ctx, t, "credentials-other", podSecurityRestricted)
	rows := readCredentialTable(t, filepath.Join(c.root, credentialsDoc))

	serviceAccounts := applyShippedRBAC(ctx, t, c, ns)
	for _, sa := range serviceAccounts {
		if _, ok := rows[sa]; !ok {
			t.Errorf("%s has no row for the ServiceAccount %s of the shipped manifests", credentialsDoc, sa)
		}
	}

	// The namespace of the test stands for ctf; the RBAC authorizer takes a moment to know new
	// bindings, so a row is read again until it matches, for a while.
	username := func(sa string) string {
		namespace, name, _ := strings.Cut(sa, "/")
		if namespace == docNamespace {
			namespace = ns
		}
		return "system:serviceaccount:" + namespace + ":" + name
	}
	for _, sa := range slices.Sorted(maps.Keys(rows)) {
		row := rows[sa]
		var inCtf, elsewhere grants
		e2eutil.WaitFor(ctx, t, 30*time.Second, sa+"'s rights as "+credentialsDoc+" says", func() (bool, error) {
			inCtf = canI(ctx, t, kubectl, username(sa), ns)
			elsewhere = canI(ctx, t, kubectl, username(sa), other)
			return fmt.Sprint(inCtf) == fmt.Sprint(row.inCtf) && fmt.Sprint(elsewhere) == fmt.Sprint(row.other), nil
		})
		if fmt.Sprint(inCtf) != fmt.Sprint(row.inCtf) {
			t.Errorf("%s in %s: the API server answers %v, %s says %v", sa, docNamespace, inCtf, credentialsDoc, row.inCtf)
		}
		if fmt.Sprint(elsewhere) != fmt.Sprint(row.other) {
			t.Errorf("%s in another namespace: the API server answers %v, %s says %v", sa, elsewhere, credentialsDoc, row.other)
		}
		if reads := readsCapability(inCtf) || readsCapability(elsewhere); reads != row.capability {
			t.Errorf("%s reads a player's capability: %v, %s says %v", sa, reads, credentialsDoc, row.capability)
		}
		t.Logf("%s: in %s %v; elsewhere %v", sa, docNamespace, inCtf, elsewhere)
	}
}

// readsCapability: the grants read Challenges (their status holds the TCP tokens and the
// unguessable hosts), Ingresses (the hosts) or Secrets (the flags).
func readsCapability(g grants) bool {
	for resource, verbs := range g {
		name, _, _ := strings.Cut(resource, ".")
		if (name == "challenges" || name == "ingresses" || name == "secrets" || name == "*") &&
			slices.ContainsFunc(verbs, func(v string) bool { return v == "get" || v == "list" || v == "watch" || v == "*" }) {
			return true
		}
	}
	return false
}

// applyShippedRBAC creates the ClusterRoles, ClusterRoleBindings, Roles and RoleBindings of every
// YAML file under manifests/, namespaced ones of ctf in ns (their subjects of ctf too), the
// cluster-wide ones under a name of the test's (their references following), deleted when the
// test ends; it returns every ServiceAccount the files create or a binding names, namespace/name.
func applyShippedRBAC(ctx context.Context, t *testing.T, c *cluster, ns string) []string {
	t.Helper()
	var objs []*unstructured.Unstructured
	root := filepath.Join(c.root, "manifests")
	err := filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		read, err := readYAMLObjects(path)
		objs = append(objs, read...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	renamed := func(name string) string { return name + "-" + ns }
	accounts := map[string]bool{}
	for _, obj := range objs {
		switch obj.GetKind() {
		case "ServiceAccount":
			accounts[obj.GetNamespace()+"/"+obj.GetName()] = true
			continue
		case "ClusterRole":
			obj.SetName(renamed(obj.GetName()))
		case "ClusterRoleBinding", "RoleBinding", "Role":
		default:
			continue
		}
		if obj.GetKind() == "ClusterRoleBinding" {
			obj.SetName(renamed(obj.GetName()))
		}
		if obj.GetNamespace() == docNamespace {
			obj.SetNamespace(ns)
		} else if obj.GetNamespace() != "" {
			t.Fatalf("%s %s/%s: the shipped RBAC binds in %s only; add the namespace to this test", obj.GetKind(), obj.GetNamespace(), obj.GetName(), docNamespace)
		}
		if ref, ok, _ := unstructured.NestedString(obj.Object, "roleRef", "name"); ok {
			if kind, _, _ := unstructured.NestedString(obj.Object, "roleRef", "kind"); kind == "ClusterRole" {
				_ = unstructured.SetNestedField(obj.Object, renamed(ref), "roleRef", "name")
			}
		}
		subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
		for _, s := range subjects {
			subject := s.(map[string]any)
			if subject["kind"] != "ServiceAccount" {
				t.Fatalf("%s %s binds a %v: the table lists ServiceAccounts", obj.GetKind(), obj.GetName(), subject["kind"])
			}
			accounts[fmt.Sprint(subject["namespace"], "/", subject["name"])] = true
			if subject["namespace"] == docNamespace {
				subject["namespace"] = ns
			}
		}
		if len(subjects) > 0 {
			_ = unstructured.SetNestedSlice(obj.Object, subjects, "subjects")
		}
		client, err := c.resourceFor(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := e2eutil.CreateOrUpdate(ctx, client, obj); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetNamespace() == "" {
			t.Cleanup(func() { _ = client.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{}) })
		}
	}
	return slices.Sorted(maps.Keys(accounts))
}

// canI is kubectl auth can-i --list as username in namespace: the resources and verbs it grants,
// but what the API server grants every authenticated user (to review its own access) and the
// non-resource URLs.
func canI(ctx context.Context, t *testing.T, kubectl, username, namespace string) grants {
	t.Helper()
	out, err := exec.CommandContext(ctx, kubectl, "auth", "can-i", "--list", "--as="+username, "-n", namespace).Output()
	if err != nil {
		t.Fatalf("kubectl auth can-i --list --as=%s -n %s: %v", username, namespace, err)
	}
	g := grants{}
	row := regexp.MustCompile(`^(\S+)\s+\[[^]]*\]\s+\[([^]]*)\]\s+\[([^]]*)\]\s*$`)
	for line := range strings.Lines(string(out)) {
		m := row.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil || m[1] == "Resources" {
			continue // the header, or a non-resource URL's line (no resource)
		}
		if strings.HasPrefix(m[1], "selfsubject") {
			continue // every authenticated user's
		}
		if m[2] != "" {
			t.Errorf("%s: %s is granted by name (%s): the table names whole resources", username, m[1], m[2])
		}
		g[m[1]] = slices.Sorted(slices.Values(append(g[m[1]], strings.Fields(m[3])...)))
		g[m[1]] = slices.Compact(g[m[1]])
	}
	return g
}

// readCredentialTable reads the table under credentialsHeading: ServiceAccount (namespace/name in
// backquotes, then anything), its grants in ctf, in any other namespace ("nothing", or
// "`resource`, `resource`: verb, verb; ..."), and whether it reaches a player's capability
// ("yes" or "no" first).
func readCredentialTable(t *testing.T, path string) map[string]credentialRow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(data), "\n"+credentialsHeading+"\n")
	if !found {
		t.Fatalf("%s has no section %q", path, credentialsHeading)
	}
	rows := map[string]credentialRow{}
	inTable := false
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if !inTable || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			inTable = true // the header, then its rule
			continue
		}
		if len(cells) != 4 {
			t.Fatalf("%s: a row of %d cells, want 4: %s", path, len(cells), line)
		}
		sa := regexp.MustCompile("^`([^`/]+/[^`]+)`").FindStringSubmatch(strings.TrimSpace(cells[0]))
		if sa == nil {
			t.Fatalf("%s: a row without `namespace/name` first: %s", path, line)
		}
		capability := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(cells[3]), "*"))
		rows[sa[1]] = credentialRow{serviceAccount: sa[1], inCtf: parseGrants(t, cells[1]), other: parseGrants(t, cells[2]),
			capability: strings.HasPrefix(capability, "yes")}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no rows under %q", path, credentialsHeading)
	}
	return rows
}

// parseGrants reads a cell: "nothing", or "`resource`, `resource`: verb, verb; ...".
func parseGrants(t *testing.T, cell string) grants {
	t.Helper()
	cell = strings.TrimSpace(cell)
	g := grants{}
	if cell == "nothing" {
		return g
	}
	for _, entry := range strings.Split(cell, "; ") {
		resources, verbs, ok := strings.Cut(entry, ": ")
		if !ok {
			t.Fatalf("a grant without resources: verbs: %q", entry)
		}
		var list []string
		for _, v := range strings.Split(verbs, ", ") {
			list = append(list, strings.TrimSpace(v))
		}
		slices.Sort(list)
		for _, r := range strings.Split(resources, ", ") {
			g[strings.Trim(strings.TrimSpace(r), "`")] = list
		}
	}
	return g
}
