package stamper

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// t0 is the tests' start: the clock and the gateways' times count from it.
var t0 = time.Date(2026, 11, 27, 13, 40, 0, 0, time.UTC)

// fakeGateway serves GET /activity as a gateway does, from the activity it is told of.
type fakeGateway struct {
	*httptest.Server
	mu       sync.Mutex
	activity map[string]time.Time // address -> last activity
	status   int                  // 0: 200 and the activity; else this status, empty
	body     string               // when set, served instead of the activity
	queries  []string             // the raw query of every request
}

func newFakeGateway(t *testing.T) *fakeGateway {
	g := &fakeGateway{activity: map[string]time.Time{}}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	t.Cleanup(g.Close)
	return g
}

// newFakeGatewayAt is a fake gateway listening on ip:port.
func newFakeGatewayAt(t *testing.T, ip string, port int) (*fakeGateway, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(port)))
	if err != nil {
		return nil, err
	}
	g := &fakeGateway{activity: map[string]time.Time{}}
	g.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(g.serve)}}
	g.Start()
	t.Cleanup(g.Close)
	return g, nil
}

func (g *fakeGateway) serve(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queries = append(g.queries, r.URL.RawQuery)
	if r.URL.Path != "/activity" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	if g.status != 0 {
		w.WriteHeader(g.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if g.body != "" {
		fmt.Fprint(w, g.body)
		return
	}
	var since time.Time
	if s := r.URL.Query().Get("since"); s != "" {
		var err error
		if since, err = time.Parse(time.RFC3339Nano, s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	type entry struct {
		Address      string    `json:"address"`
		LastActivity time.Time `json:"lastActivity"`
	}
	out := struct {
		Services []entry `json:"services"`
	}{Services: []entry{}}
	for address, at := range g.activity {
		if at.After(since) {
			out.Services = append(out.Services, entry{address, at})
		}
	}
	slices.SortFunc(out.Services, func(a, b entry) int { return strings.Compare(a.Address, b.Address) })
	json.NewEncoder(w).Encode(out)
}

// used records activity on address at.
func (g *fakeGateway) used(address string, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.activity[address] = at
}

func (g *fakeGateway) set(status int, body string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.status, g.body = status, body
}

func (g *fakeGateway) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.queries)
}

// fakeCluster holds the instances' Services, and plays the hook: it keeps each instance's idle
// deadline (idleAt), which a stamp moves as the hook's next sync would.
type fakeCluster struct {
	mu       sync.Mutex
	services map[netip.AddrPort]types.NamespacedName
	objects  map[types.NamespacedName]*Service
	idleAt   map[types.NamespacedName]time.Time
	version  int
	stamps   []string // key=value of every write
	refuse   []error  // the next writes' errors, in order
	gets     int
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{services: map[netip.AddrPort]types.NamespacedName{}, objects: map[types.NamespacedName]*Service{},
		idleAt: map[types.NamespacedName]time.Time{}}
}

var servicesResource = schema.GroupResource{Resource: "services"}

// add is the Service ns/name of a running instance whose idle clock started at last, and its
// addresses; idleTimeout zero: an instance that does not idle.
func (f *fakeCluster) add(key types.NamespacedName, idleTimeout time.Duration, last time.Time, addresses ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	f.objects[key] = &Service{Key: key, UID: types.UID(fmt.Sprint("uid-", f.version)), ResourceVersion: fmt.Sprint(f.version), IdleTimeout: idleTimeout}
	f.idleAt[key] = last.Add(idleTimeout)
	for _, a := range addresses {
		f.services[netip.MustParseAddrPort(a)] = key
	}
}

func (f *fakeCluster) ServiceAt(address netip.AddrPort) (types.NamespacedName, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key, ok := f.services[address]
	return key, ok
}

func (f *fakeCluster) Service(key types.NamespacedName) (Service, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	svc, ok := f.objects[key]
	if !ok {
		return Service{}, false
	}
	return *svc, true
}

func (f *fakeCluster) Get(ctx context.Context, key types.NamespacedName) (Service, error) {
	f.gets++
	svc, ok := f.Service(key)
	if !ok {
		return Service{}, apierrors.NewNotFound(servicesResource, key.Name)
	}
	return svc, nil
}

func (f *fakeCluster) Stamp(ctx context.Context, key types.NamespacedName, resourceVersion, value string) (Service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.refuse) > 0 {
		err := f.refuse[0]
		f.refuse = f.refuse[1:]
		if apierrors.IsConflict(err) { // written meanwhile
			f.version++
			f.objects[key].ResourceVersion = fmt.Sprint(f.version)
		}
		return Service{}, err
	}
	svc, ok := f.objects[key]
	if !ok {
		return Service{}, apierrors.NewNotFound(servicesResource, key.Name)
	}
	if svc.ResourceVersion != resourceVersion {
		return Service{}, apierrors.NewConflict(servicesResource, key.Name, fmt.Errorf("resourceVersion %s, not %s", svc.ResourceVersion, resourceVersion))
	}
	old, _ := time.Parse(time.RFC3339, svc.Stamp)
	stamp, err := time.Parse(time.RFC3339, value)
	if err != nil || stamp.Before(old) {
		return Service{}, apierrors.NewForbidden(servicesResource, key.Name, fmt.Errorf("the stamp %q goes back from %q", value, svc.Stamp))
	}
	f.version++
	svc.ResourceVersion, svc.Stamp = fmt.Sprint(f.version), value
	f.stamps = append(f.stamps, key.String()+"="+value)
	// The hook's next sync.
	f.idleAt[key] = latest(f.idleAt[key], stamp.Add(svc.IdleTimeout))
	return *svc, nil
}

// idleDeadline is when the hook stops the instance of the Service key for idleness.
func (f *fakeCluster) idleDeadline(key types.NamespacedName) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idleAt[key]
}

func (f *fakeCluster) written() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stamps)
}

// clock is the tests' clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

// newTestStamper is a Stamper of the gateways at gateways (host:port), on a fake cluster, with a
// clock at t0.
func newTestStamper(t *testing.T, gateways string, cluster Cluster, lookup func(context.Context, string) ([]string, error)) (*Stamper, *clock, *prometheus.Registry, *strings.Builder) {
	t.Helper()
	registry := prometheus.NewRegistry()
	logs := &strings.Builder{}
	c := &clock{now: t0}
	s, err := New(Config{Gateways: gateways, Interval: 2 * time.Second, Timeout: 5 * time.Second}, cluster,
		slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), NewMetrics(registry), Options{Lookup: lookup, Now: c.Now})
	require.NoError(t, err)
	return s, c, registry, logs
}

// hostPort is a test server's host:port.
func hostPort(g *fakeGateway) string { return strings.TrimPrefix(g.URL, "http://") }

var web = types.NamespacedName{Namespace: "ctf", Name: "web-team42"}

func TestDecide(t *testing.T) {
	stamped := Service{Key: web, Stamp: "2026-11-27T13:40:00Z", IdleTimeout: 8 * time.Minute} // a quarter: 2m
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, c := range []struct {
		what     string
		service  Service
		written  time.Time
		activity time.Time
		want     decision
	}{
		{"activity a quarter after the stamp: stamped, to the second", stamped, time.Time{}, at(2*time.Minute + 300*time.Millisecond),
			decision{stamp: at(2 * time.Minute), write: true}},
		{"less than a quarter later: not yet", stamped, time.Time{}, at(2*time.Minute - time.Second), decision{}},
		{"nothing newer than the stamp: placed", stamped, time.Time{}, at(-time.Second), decision{placed: true}},
		{"no stamp yet: stamped at once", withStamp(stamped, ""), time.Time{}, at(10 * time.Second), decision{stamp: at(10 * time.Second), write: true}},
		{"after the stamp last written by less than a quarter: not yet", stamped, at(3 * time.Minute), at(4 * time.Minute), decision{}},
		{"after the stamp last written by a quarter", stamped, at(3 * time.Minute), at(5 * time.Minute), decision{stamp: at(5 * time.Minute), write: true}},
		{"older than the annotation: never backwards", withStamp(stamped, "2026-11-27T13:50:00Z"), time.Time{}, at(9 * time.Minute), decision{placed: true}},
		{"an unreadable annotation counts for nothing", withStamp(stamped, "yesterday"), time.Time{}, at(time.Minute), decision{stamp: at(time.Minute), write: true}},
		{"an annotation far ahead of the clock: reported, not moved back", withStamp(stamped, "2027-01-01T00:00:00Z"), time.Time{}, at(9 * time.Minute),
			decision{placed: true, ahead: "2027-01-01T00:00:00Z"}},
		{"no idle-timeout annotation (an instance that does not idle): placed, never stamped", Service{Key: web}, time.Time{}, at(time.Hour), decision{placed: true}},
	} {
		assert.Equal(t, c.want, decide(c.service, c.written, c.activity, at(10*time.Minute)), c.what)
	}
}

func withStamp(svc Service, stamp string) Service {
	svc.Stamp = stamp
	return svc
}

// TestCoalescedAndNeverIdle: a session moves bytes every second for 20 minutes through one
// gateway to an instance with idleTimeout 60s, the stamper polling every 2 s: at most one write
// per quarter of the idleTimeout (15 s), every stamp later than the one before, and the instance's
// idleAt always ahead of the clock (it never stops while used). Then the session stops: no write
// more, and its idleAt passes.
func TestCoalescedAndNeverIdle(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	const idleTimeout = time.Minute
	cluster.add(web, idleTimeout, t0, "10.96.12.7:1337")
	s, clk, registry, _ := newTestStamper(t, hostPort(gw), cluster, nil)
	ctx := context.Background()

	end := t0.Add(20 * time.Minute)
	for clk.now.Before(end) {
		clk.now = clk.now.Add(2 * time.Second)
		gw.used("10.96.12.7:1337", clk.now.Add(-300*time.Millisecond))
		s.Tick(ctx)
		idleAt := cluster.idleDeadline(web)
		require.True(t, idleAt.After(clk.now.Add(idleTimeout/2)), "at %s the instance in use stops at %s", clk.now, idleAt)
	}
	stamps := cluster.written()
	var previous time.Time
	for _, s := range stamps {
		_, value, _ := strings.Cut(s, "=")
		stamp, err := time.Parse(time.RFC3339, value)
		require.NoError(t, err)
		if !previous.IsZero() {
			assert.GreaterOrEqual(t, stamp.Sub(previous), idleTimeout/4, "%s after %s", stamp, previous)
		}
		previous = stamp
	}
	assert.LessOrEqual(t, len(stamps), 1+int(20*time.Minute/(idleTimeout/4)), "writes in 20 minutes (the first at once): %v", stamps)
	assert.GreaterOrEqual(t, len(stamps), int(20*time.Minute/(idleTimeout/4+2*time.Second)), "writes in 20 minutes: %v", stamps)
	assert.Equal(t, float64(len(stamps)), testutil.ToFloat64(s.metrics.written))
	t.Logf("%d stamps in 20 minutes of use, idleTimeout %s, a poll every 2 s", len(stamps), idleTimeout)

	// The session ends: nothing more is written, and the idle deadline passes.
	for range 60 {
		clk.now = clk.now.Add(2 * time.Second)
		s.Tick(ctx)
	}
	assert.Equal(t, stamps, cluster.written(), "stamps without activity")
	assert.True(t, clk.now.After(cluster.idleDeadline(web)), "idle at %s, now %s", cluster.idleDeadline(web), clk.now)
	assert.Equal(t, 0.0, testutil.ToFloat64(s.metrics.pollsFailed.WithLabelValues(failRequest)))
	// The session's last activity, within a quarter of the last stamp, is kept no longer than the
	// retention.
	assert.LessOrEqual(t, len(s.pending), 1)
	clk.now = clk.now.Add(Retention)
	s.Tick(ctx)
	assert.Empty(t, s.pending, "activity kept past the retention")
	_ = registry
}

// TestNeverBackwards: a gateway's activity older than the Service's stamp (another writer stamped
// it later) is never written, and neither is activity within a quarter of it.
func TestNeverBackwards(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337")
	cluster.objects[web].Stamp = "2026-11-27T13:45:00Z" // ahead of the gateways (another writer's)
	s, clk, _, _ := newTestStamper(t, hostPort(gw), cluster, nil)
	clk.now = t0.Add(6 * time.Minute)
	gw.used("10.96.12.7:1337", t0.Add(3*time.Minute))
	s.Tick(context.Background())
	gw.used("10.96.12.7:1337", t0.Add(5*time.Minute+30*time.Second))
	s.Tick(context.Background())
	assert.Empty(t, cluster.written())
	gw.used("10.96.12.7:1337", t0.Add(6*time.Minute))
	s.Tick(context.Background())
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:46:00Z"}, cluster.written())
}

// TestMapping: activity is placed by the Service addresses: the latest of an instance's addresses
// is its stamp (one write), an address no Service has yet is kept until one does (the watch may
// lag the gateway), and an address that is no instance's is forgotten after the retention.
func TestMapping(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	other := types.NamespacedName{Namespace: "ctf-b", Name: "pwn-team7"}
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337", "10.96.12.7:1338", "[fd00::7]:1337")
	s, clk, _, _ := newTestStamper(t, hostPort(gw), cluster, nil)
	clk.now = t0.Add(2 * time.Minute)
	gw.used("10.96.12.7:1337", t0.Add(70*time.Second))
	gw.used("10.96.12.7:1338", t0.Add(90*time.Second))
	gw.used("[fd00::7]:1337", t0.Add(80*time.Second))
	gw.used("10.96.40.1:31337", t0.Add(100*time.Second)) // other's Service, not yet watched
	gw.used("10.96.0.1:443", t0.Add(100*time.Second))    // no instance's
	s.Tick(context.Background())
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:41:30Z"}, cluster.written())

	cluster.add(other, 4*time.Minute, t0, "10.96.40.1:31337")
	clk.now = clk.now.Add(2 * time.Second)
	s.Tick(context.Background())
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:41:30Z", "ctf-b/pwn-team7=2026-11-27T13:41:40Z"}, cluster.written())

	assert.Contains(t, s.pending, netip.MustParseAddrPort("10.96.0.1:443"))
	clk.now = t0.Add(100*time.Second + Retention + time.Second)
	s.Tick(context.Background())
	assert.Empty(t, s.pending, "activity kept past the retention")
}

// TestAGatewayFailing: of two gateways, one fails in every way a poll can (no answer, an error
// status, a body that is not the activity); the other's activity is stamped all along, each
// failure is counted by its reason, and logged once, not on every poll.
func TestAGatewayFailing(t *testing.T) {
	good, err := newFakeGatewayAt(t, "127.0.0.1", 0)
	require.NoError(t, err)
	port := good.Listener.Addr().(*net.TCPAddr).Port
	bad, err := newFakeGatewayAt(t, "127.0.0.2", port)
	if err != nil {
		t.Skipf("127.0.0.2:%d: %v (a loopback without 127.0.0.0/8)", port, err)
	}
	lookup := func(ctx context.Context, host string) ([]string, error) {
		assert.Equal(t, "gateways.test", host)
		return []string{"127.0.0.2", "127.0.0.1"}, nil
	}
	cluster := newFakeCluster()
	cluster.add(web, 40*time.Second, t0, "10.96.12.7:1337")
	s, clk, _, logs := newTestStamper(t, fmt.Sprintf("gateways.test:%d", port), cluster, lookup)
	ctx := context.Background()
	for _, failure := range []struct {
		reason string
		set    func()
	}{
		{failStatus, func() { bad.set(http.StatusNotFound, "") }},
		{failResponse, func() {
			bad.set(0, `{"services":[{"address":"not an address","lastActivity":"2026-11-27T13:40:00Z"}]}`)
		}},
		{failResponse, func() { bad.set(0, `<html>`) }},
		{failRequest, func() { bad.Close() }},
	} {
		failure.set()
		before := testutil.ToFloat64(s.metrics.pollsFailed.WithLabelValues(failure.reason))
		for range 3 {
			clk.now = clk.now.Add(10 * time.Second)
			good.used("10.96.12.7:1337", clk.now)
			s.Tick(ctx)
		}
		assert.Equal(t, before+3, testutil.ToFloat64(s.metrics.pollsFailed.WithLabelValues(failure.reason)), failure.reason)
	}
	assert.Len(t, cluster.written(), 12, "a stamp every poll (10 s, a quarter of 40 s): the good gateway's activity")
	assert.Equal(t, 2.0, testutil.ToFloat64(s.metrics.gateways))
	assert.Equal(t, 4, strings.Count(logs.String(), `"level":"ERROR"`), "one error a failure, not one a poll:\n%s", logs)
	assert.Contains(t, logs.String(), "127.0.0.2")

	// The name does not resolve: counted and said, then resolved again.
	s.lookup = func(context.Context, string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: "gateways.test", IsNotFound: true}
	}
	s.Tick(ctx)
	s.Tick(ctx)
	assert.Equal(t, 2.0, testutil.ToFloat64(s.metrics.pollsFailed.WithLabelValues(failResolve)))
	assert.Contains(t, logs.String(), "challenge-hook-tcp-gateway-activity")
}

// TestSeveralGatewaysByDNS: the gateways' name resolves, at every poll, to every gateway Pod;
// each is polled with the newest time it answered as since, and the latest activity of all wins.
// A Pod that leaves the name loses its cursor; one that joins is asked for everything it keeps.
func TestSeveralGatewaysByDNS(t *testing.T) {
	a, err := newFakeGatewayAt(t, "127.0.0.1", 0)
	require.NoError(t, err)
	port := a.Listener.Addr().(*net.TCPAddr).Port
	b, err := newFakeGatewayAt(t, "127.0.0.2", port)
	if err != nil {
		t.Skipf("127.0.0.2:%d: %v (a loopback without 127.0.0.0/8)", port, err)
	}
	resolved := []string{"127.0.0.1", "127.0.0.2", "127.0.0.1"}
	lookup := func(context.Context, string) ([]string, error) { return resolved, nil }
	cluster := newFakeCluster()
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337")
	s, clk, _, _ := newTestStamper(t, fmt.Sprintf("gateway-pods.test:%d", port), cluster, lookup)
	ctx := context.Background()

	clk.now = t0.Add(3 * time.Minute)
	a.used("10.96.12.7:1337", t0.Add(70*time.Second+123*time.Millisecond))
	b.used("10.96.12.7:1337", t0.Add(100*time.Second)) // the same instance, a player on the other replica
	s.Tick(ctx)
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:41:40Z"}, cluster.written())
	s.Tick(ctx)
	assert.Equal(t, []string{"", "since=2026-11-27T13%3A41%3A10.123Z"}, a.requests(), "a is asked once (resolved twice), then since its newest")
	assert.Equal(t, []string{"", "since=2026-11-27T13%3A41%3A40Z"}, b.requests())

	resolved = []string{"127.0.0.1"} // b's Pod left
	s.Tick(ctx)
	assert.Len(t, b.requests(), 2)
	resolved = []string{"127.0.0.2", "127.0.0.1"} // and came back (a new Pod at the same address)
	s.Tick(ctx)
	assert.Equal(t, "", b.requests()[2], "a gateway that joins is asked for everything")
	assert.Equal(t, 2.0, testutil.ToFloat64(s.metrics.gateways))
}

// TestConflictAndRefusal: a Service written meanwhile (Conflict) is read again and stamped in
// the same round; a refusal (the admission policy, RBAC) is counted by its reason, said with what
// to check, and tried again on the next round.
func TestConflictAndRefusal(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337")
	s, clk, _, logs := newTestStamper(t, hostPort(gw), cluster, nil)
	ctx := context.Background()
	gr := servicesResource

	clk.now = t0.Add(3 * time.Minute)
	gw.used("10.96.12.7:1337", t0.Add(2*time.Minute))
	cluster.refuse = []error{apierrors.NewConflict(gr, web.Name, fmt.Errorf("the object has been modified"))}
	s.Tick(ctx)
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:42:00Z"}, cluster.written())
	assert.Equal(t, 1, cluster.gets)
	assert.Equal(t, 1.0, testutil.ToFloat64(s.metrics.refused.WithLabelValues("Conflict")))

	gw.used("10.96.12.7:1337", t0.Add(3*time.Minute))
	cluster.refuse = []error{apierrors.NewForbidden(gr, web.Name, fmt.Errorf("ValidatingAdmissionPolicy 'challenge-hook-activity-stamper' denied request"))}
	s.Tick(ctx)
	assert.Len(t, cluster.written(), 1)
	assert.Equal(t, 1.0, testutil.ToFloat64(s.metrics.refused.WithLabelValues("Forbidden")))
	assert.Contains(t, logs.String(), "ValidatingAdmissionPolicy challenge-hook-activity-stamper")
	s.Tick(ctx)
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:42:00Z", "ctf/web-team42=2026-11-27T13:43:00Z"}, cluster.written(), "tried again")

	// Deleted: forgotten.
	gw.used("10.96.12.7:1337", t0.Add(5*time.Minute))
	delete(cluster.objects, web)
	s.Tick(ctx)
	assert.Len(t, cluster.written(), 2)
}

// TestGatewayClockAhead: activity from a gateway whose clock is ahead is stamped at the stamper's
// time, never ahead of it (the hook ignores a stamp more than a minute ahead of its clock, and no
// later stamp could move one back).
func TestGatewayClockAhead(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337")
	s, clk, _, logs := newTestStamper(t, hostPort(gw), cluster, nil)
	clk.now = t0.Add(2 * time.Minute)
	gw.used("10.96.12.7:1337", t0.Add(time.Hour))
	s.Tick(context.Background())
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:42:00Z"}, cluster.written())
	assert.Contains(t, logs.String(), "ahead of this clock")
}

// TestRecreatedChallenge: a Challenge deleted and created again under the same name between two
// polls is a new instance, with a new Service of the same name: what the stamper wrote on the old
// one does not hold back its stamps, even when the new one started before that stamp by the API
// server's clock (a few seconds of skew with the stamper's).
func TestRecreatedChallenge(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337")
	s, clk, _, _ := newTestStamper(t, hostPort(gw), cluster, nil)
	clk.now = t0.Add(5 * time.Minute)
	gw.used("10.96.12.7:1337", t0.Add(5*time.Minute))
	s.Tick(context.Background())
	require.Equal(t, []string{"ctf/web-team42=2026-11-27T13:45:00Z"}, cluster.written())

	cluster.add(web, 4*time.Minute, t0.Add(4*time.Minute+55*time.Second), "10.96.12.7:1337") // deleted, created again
	clk.now = t0.Add(5*time.Minute + 56*time.Second)
	gw.used("10.96.12.7:1337", clk.now)
	s.Tick(context.Background())
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:45:00Z", "ctf/web-team42=2026-11-27T13:45:56Z"}, cluster.written())
}

// TestCursorNeverAheadOfTheClock: one entry dated a day ahead (a gateway's clock off, or a lie)
// does not pin the gateway's cursor there: the stamper asks it since no later than its own clock,
// and the activity that follows is seen and stamped.
func TestCursorNeverAheadOfTheClock(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337")
	s, clk, _, _ := newTestStamper(t, hostPort(gw), cluster, nil)
	ctx := context.Background()
	clk.now = t0.Add(time.Minute)
	gw.used("10.96.99.9:80", t0.Add(24*time.Hour))
	s.Tick(ctx)
	assert.Empty(t, cluster.written())

	var polled []time.Time // the clock at each poll
	for range 3 {
		clk.now = clk.now.Add(2 * time.Minute)
		gw.used("10.96.12.7:1337", clk.now.Add(-time.Second))
		polled = append(polled, clk.now)
		s.Tick(ctx)
	}
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:42:59Z", "ctf/web-team42=2026-11-27T13:44:59Z", "ctf/web-team42=2026-11-27T13:46:59Z"}, cluster.written())
	queries := gw.requests()
	require.Len(t, queries, 4)
	for i, query := range queries[1:] {
		values, err := url.ParseQuery(query)
		require.NoError(t, err)
		since, err := time.Parse(time.RFC3339Nano, values.Get("since"))
		require.NoError(t, err, query)
		assert.False(t, since.After(polled[i]), "asked since %s at %s", since, polled[i])
	}
}

// TestMemoryBoundedWhateverAGatewayAnswers: a gateway that answers, at every poll, thousands of
// addresses no Service has (lying, or taken) grows the stamper's activity to its bound and no
// further; the dropped entries are counted and said once while it goes on, and the activity of an
// instance's Service, in the same answers, is still stamped.
func TestMemoryBoundedWhateverAGatewayAnswers(t *testing.T) {
	gw := newFakeGateway(t)
	cluster := newFakeCluster()
	cluster.add(web, 4*time.Minute, t0, "10.96.12.7:1337")
	s, clk, _, logs := newTestStamper(t, hostPort(gw), cluster, nil)
	s.maxPending = 1000
	ctx := context.Background()
	const perPoll = 3000
	for poll := range 5 {
		clk.now = clk.now.Add(time.Minute)
		for i := range perPoll {
			// Addresses sorted before the instance's: the answer fills the bound before it.
			gw.used(fmt.Sprintf("10.200.%d.%d:%d", poll, i%250+1, 1000+i/250), clk.now)
		}
		gw.used("10.96.12.7:1337", clk.now)
		s.Tick(ctx)
		assert.LessOrEqual(t, len(s.pending), s.maxPending, "poll %d", poll)
	}
	assert.Equal(t, []string{"ctf/web-team42=2026-11-27T13:41:00Z", "ctf/web-team42=2026-11-27T13:42:00Z", "ctf/web-team42=2026-11-27T13:43:00Z",
		"ctf/web-team42=2026-11-27T13:44:00Z", "ctf/web-team42=2026-11-27T13:45:00Z"}, cluster.written())
	assert.Equal(t, float64(5*perPoll-s.maxPending), testutil.ToFloat64(s.metrics.dropped))
	assert.Equal(t, 1, strings.Count(logs.String(), "its most"), "said once while it goes on:\n%s", logs)

	// An answer longer than maxActivityBytes is read no further, and is a failed poll.
	held := len(s.pending)
	gw.set(0, `{"services":[`+strings.Repeat(`{"address":"10.201.0.1:80","lastActivity":"2026-11-27T13:45:00Z"},`, maxActivityBytes/60)+`]}`)
	s.Tick(ctx)
	assert.Equal(t, 1.0, testutil.ToFloat64(s.metrics.pollsFailed.WithLabelValues(failResponse)))
	assert.Contains(t, logs.String(), fmt.Sprintf("longer than %d bytes", maxActivityBytes))
	assert.Equal(t, held, len(s.pending))
}
