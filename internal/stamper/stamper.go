// Package stamper is the activity stamper (`challenge-hook activity-stamper`): it reads what the
// TCP gateways saw (GET /activity on each gateway Pod's metrics port) and writes it, coalesced, as
// the annotation ctf.challenge-hook.dev/last-activity of the instance's Service the sessions
// reached, which the hook's idle clock reads. The gateways face the internet and hold no
// Kubernetes credential; the stamper holds the one credential that turns their traffic into
// stamps, and an admission policy lets it change that one annotation, forward in time, and nothing
// else. It reads and writes Services alone, never a Challenge: a Challenge's status holds the
// players' capabilities (the TCP tokens, the unguessable hosts), and a credential that may patch an
// object reads it whole in the answer.
//
// Coalescing: a Service is stamped only when it carries the hook's idle-timeout annotation (its
// instance idles), and only when the activity seen is later than its stamp by at least a quarter
// of that idleTimeout (the first stamp at once). So an instance in use costs at most one write per
// quarter of its idleTimeout, and is stamped at least three quarters of it before its idle stop:
// one in use never stops for idleness.
package stamper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/internal/tcpgateway"
)

// AnnotationLastActivity is the Service annotation the stamper writes, which the hook's idle
// clock reads; AnnotationIdleTimeout, which the hook writes, says how often a stamp matters.
const (
	AnnotationLastActivity = v1alpha1.AnnotationLastActivity
	AnnotationIdleTimeout  = v1alpha1.AnnotationIdleTimeout
)

// Retention is how long a gateway remembers a Service's last activity, and how long the stamper
// keeps activity it could not place yet (a Service its cache does not hold yet).
const Retention = tcpgateway.ActivityRetention

// maxClockSkew is how far ahead of the stamper's clock a gateway's time may be: the hook ignores a
// stamp more than a minute ahead of its own clock, so the stamper never writes one ahead of its
// own, and reports a gateway whose clock is further off.
const maxClockSkew = time.Minute

// maxPending bounds the activity the stamper keeps per Service address, whatever the gateways
// answer: an address no Service is known for is kept only while fewer than this many are (the
// addresses of the Services it watches always are: the cluster bounds those). About 100 bytes an
// entry: some 10 MB at most, beside at most maxActivityBytes of each gateway's answer while it is
// read, within the component's memory limit of 128Mi.
const maxPending = 100000

// Service is what the stamper reads of an instance's Service.
type Service struct {
	Key types.NamespacedName
	// UID tells a Service from a later one of the same name (a Challenge deleted and created again).
	UID             types.UID
	ResourceVersion string
	// Stamp is the AnnotationLastActivity as written ("" without one).
	Stamp string
	// IdleTimeout is the AnnotationIdleTimeout (zero without one, or unreadable: the instance does
	// not idle, and is never stamped).
	IdleTimeout time.Duration
}

// Cluster is the stamper's view of the cluster: the instances' Services it watches, and its one
// write.
type Cluster interface {
	// ServiceAt is the instance's Service that serves address (ClusterIP:port, as a token names it).
	ServiceAt(address netip.AddrPort) (types.NamespacedName, bool)
	// Service is the Service as last seen by the watch.
	Service(key types.NamespacedName) (Service, bool)
	// Get reads the Service from the API server.
	Get(ctx context.Context, key types.NamespacedName) (Service, error)
	// Stamp sets the annotation to value, if the Service is still at resourceVersion, and returns
	// the Service as written.
	Stamp(ctx context.Context, key types.NamespacedName, resourceVersion, value string) (Service, error)
}

// Config is the stamper's configuration.
type Config struct {
	// Gateways is host:port: host resolves (every poll) to the gateway Pods' addresses, the port
	// is their metrics port, which serves GET /activity.
	Gateways string
	// Interval is the time between two polls of every gateway.
	Interval time.Duration
	// Timeout bounds one gateway's answer.
	Timeout time.Duration
}

// Stamper polls the gateways and stamps the instances' Services. Run it once.
type Stamper struct {
	cfg     Config
	cluster Cluster
	lookup  func(ctx context.Context, host string) ([]string, error)
	fetcher fetcher
	now     func() time.Time
	logger  *slog.Logger
	metrics *Metrics
	// maxPending is the package's, or a test's.
	maxPending int

	// Only Run's goroutine touches what follows.
	cursors map[string]time.Time                  // gateway address -> its newest lastActivity seen
	failing map[string]string                     // gateway address (or "" for its name) -> its last error, while it fails
	pending map[netip.AddrPort]time.Time          // Service address -> the latest activity seen, not yet stamped
	written map[types.NamespacedName]writtenStamp // the stamp last written, until the watch shows it
	warned  map[types.NamespacedName]string       // the stamp reported as ahead of the clock
	full    map[string]bool                       // gateway address -> its last answer had activity dropped (see maxPending)
}

// Options are what a Stamper is built with beside its Config; nil fields take the real thing.
type Options struct {
	// Lookup resolves the gateways' host name (default: the system resolver).
	Lookup func(ctx context.Context, host string) ([]string, error)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// New builds a Stamper.
func New(cfg Config, cluster Cluster, logger *slog.Logger, metrics *Metrics, opts Options) (*Stamper, error) {
	if _, _, err := net.SplitHostPort(cfg.Gateways); err != nil {
		return nil, fmt.Errorf("the gateways %q: want host:port: %w", cfg.Gateways, err)
	}
	if cfg.Interval <= 0 || cfg.Timeout <= 0 {
		return nil, errors.New("the poll interval and timeout must be positive")
	}
	s := &Stamper{
		cfg: cfg, cluster: cluster, lookup: opts.Lookup, now: opts.Now, logger: logger, metrics: metrics,
		fetcher: newFetcher(cfg.Timeout),
		cursors: map[string]time.Time{}, failing: map[string]string{},
		pending: map[netip.AddrPort]time.Time{}, written: map[types.NamespacedName]writtenStamp{},
		warned: map[types.NamespacedName]string{}, full: map[string]bool{}, maxPending: maxPending,
	}
	if s.lookup == nil {
		s.lookup = net.DefaultResolver.LookupHost
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Run polls every gateway at once and then every Interval, and stamps, until ctx ends.
func (s *Stamper) Run(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.Interval)
	defer ticker.Stop()
	for {
		s.Tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Tick is one round: poll the gateways, then stamp what is due.
func (s *Stamper) Tick(ctx context.Context) {
	s.poll(ctx)
	s.stamp(ctx)
}

// gatewayAddresses resolves the gateways' name to host:port of each gateway Pod, sorted.
func (s *Stamper) gatewayAddresses(ctx context.Context) ([]string, error) {
	host, port, _ := net.SplitHostPort(s.cfg.Gateways)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	ips, err := s.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	addresses := make([]string, 0, len(ips))
	for _, ip := range ips {
		addresses = append(addresses, net.JoinHostPort(ip, port))
	}
	slices.Sort(addresses)
	return slices.Compact(addresses), nil
}

// poll asks every gateway for its activity since the last answer, at once, and keeps the latest
// activity of each Service address in pending.
func (s *Stamper) poll(ctx context.Context) {
	addresses, err := s.gatewayAddresses(ctx)
	if err != nil {
		s.metrics.pollsFailed.WithLabelValues(failResolve).Inc()
		s.report("", fmt.Sprintf("resolve the gateways' name %s: %v: check the headless Service challenge-hook-tcp-gateway-activity "+
			"(manifests/components/activity-stamper) and the stamper's --gateways", s.cfg.Gateways, err))
		return
	}
	s.recovered("")
	s.metrics.gateways.Set(float64(len(addresses)))
	if len(addresses) == 0 {
		return
	}
	type answer struct {
		services []serviceActivity
		err      *fetchError
	}
	answers := make([]answer, len(addresses))
	var wg sync.WaitGroup
	for i, address := range addresses {
		wg.Go(func() {
			services, err := s.fetcher.fetch(ctx, address, s.cursors[address])
			answers[i] = answer{services, err}
		})
	}
	wg.Wait()
	now := s.now()
	for i, address := range addresses {
		a := answers[i]
		s.metrics.polls.Inc()
		if a.err != nil {
			s.metrics.pollsFailed.WithLabelValues(a.err.reason).Inc()
			s.report(address, fmt.Sprintf("poll the gateway %s: %v", address, a.err))
			continue
		}
		s.recovered(address)
		s.take(address, a.services, now)
	}
	// Gateways no longer resolved (a Pod replaced) lose their cursor; a new Pod starts afresh.
	for address := range s.cursors {
		if !slices.Contains(addresses, address) {
			delete(s.cursors, address)
			delete(s.failing, address)
			delete(s.full, address)
		}
	}
}

// take holds what one gateway answered: the latest activity of each address it names, unless
// older than Retention or beyond what the stamper may hold (maxPending addresses, but those of
// known Services), and moves its cursor.
func (s *Stamper) take(address string, services []serviceActivity, now time.Time) {
	// The cursor never runs ahead of this clock: one entry dated ahead (a gateway's clock
	// off, or lying) would otherwise make the gateway answer nothing older, and its real
	// activity would go unseen until that date. Asking again since now costs entries read
	// twice, which coalesce.
	cursor := earliest(s.cursors[address], now)
	var ahead, dropped int
	var firstAhead serviceActivity
	for _, service := range services {
		cursor = latest(cursor, earliest(service.at, now))
		if service.at.After(now.Add(maxClockSkew)) {
			if ahead == 0 {
				firstAhead = service
			}
			ahead++
		}
		at := earliest(service.at, now)
		if now.Sub(at) > Retention {
			continue
		}
		if _, held := s.pending[service.address]; !held && len(s.pending) >= s.maxPending {
			if _, placed := s.cluster.ServiceAt(service.address); !placed {
				dropped++
				continue
			}
		}
		if at.After(s.pending[service.address]) {
			s.pending[service.address] = at
		}
	}
	s.cursors[address] = cursor
	if ahead > 0 {
		s.logger.Warn("a gateway reports activity ahead of this clock: fix the nodes' clocks (NTP); the stamp is written at this clock's time",
			slog.String("gateway", address), slog.String("address", firstAhead.address.String()),
			slog.Time("last_activity", firstAhead.at), slog.Time("now", now), slog.Int("entries_ahead", ahead))
	}
	if dropped > 0 {
		s.metrics.dropped.Add(float64(dropped))
		if !s.full[address] {
			s.logger.Warn(fmt.Sprintf("the stamper holds the activity of %d addresses, its most: the activity of addresses no Service is known for is dropped "+
				"until some are placed or age out (%s); a gateway answering many addresses of no instance is lying, or the Services' watch lags", len(s.pending), Retention),
				slog.String("gateway", address), slog.Int("dropped", dropped))
		}
		s.full[address] = true
	} else {
		delete(s.full, address)
	}
}

// report logs a gateway's failure when it starts or changes, not on every poll.
func (s *Stamper) report(gateway, message string) {
	if s.failing[gateway] == message {
		return
	}
	s.failing[gateway] = message
	s.logger.Error(message, slog.String("gateway", gateway))
}

// recovered logs the end of a gateway's failure.
func (s *Stamper) recovered(gateway string) {
	if _, ok := s.failing[gateway]; ok {
		delete(s.failing, gateway)
		what := "the gateway answers again"
		if gateway == "" {
			what = "the gateways' name resolves again"
		}
		s.logger.Info(what, slog.String("gateway", gateway))
	}
}

// stamp writes the stamps that are due, and forgets the activity that is placed or too old.
func (s *Stamper) stamp(ctx context.Context) {
	now := s.now()
	activity := map[types.NamespacedName]time.Time{}
	addresses := map[types.NamespacedName][]netip.AddrPort{}
	for address, at := range s.pending {
		if now.Sub(at) > Retention {
			delete(s.pending, address) // never placed: not an instance's Service, or one long gone
			continue
		}
		key, ok := s.cluster.ServiceAt(address)
		if !ok {
			continue // the Service may not be in the cache yet
		}
		activity[key] = latest(activity[key], at)
		addresses[key] = append(addresses[key], address)
	}
	for key := range s.written {
		if _, ok := s.cluster.Service(key); !ok {
			delete(s.written, key)
			delete(s.warned, key)
		}
	}
	keys := make([]types.NamespacedName, 0, len(activity))
	for key := range activity {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	for _, key := range keys {
		svc, ok := s.cluster.Service(key)
		if !ok {
			continue
		}
		if s.stampOne(ctx, svc, activity[key]) {
			for _, address := range addresses[key] {
				delete(s.pending, address)
			}
		}
	}
}

// stampOne writes the stamp of one Service when it is due; it says whether the activity is placed
// (written, or nothing to write), so that it is forgotten.
func (s *Stamper) stampOne(ctx context.Context, svc Service, activity time.Time) (placed bool) {
	for attempt := 0; ; attempt++ {
		var written time.Time
		if w := s.written[svc.Key]; w.uid == svc.UID {
			written = w.stamp // not one of an earlier Service of the same name
		}
		d := decide(svc, written, activity, s.now())
		if d.ahead != "" && s.warned[svc.Key] != d.ahead {
			s.warned[svc.Key] = d.ahead
			s.logger.Warn("a Service's last-activity stamp is ahead of this clock: no stamp may move it back, so the instance idles although used; "+
				"remove the annotation, or set it to the current time, as an administrator",
				slog.String("service", svc.Key.String()), slog.String("stamp", d.ahead))
		}
		if !d.write {
			return d.placed
		}
		stamped, err := s.cluster.Stamp(ctx, svc.Key, svc.ResourceVersion, formatStamp(d.stamp))
		if err == nil {
			s.metrics.written.Inc()
			s.written[svc.Key] = writtenStamp{svc.UID, d.stamp}
			s.logger.Debug("stamped", slog.String("service", svc.Key.String()), slog.String("stamp", formatStamp(d.stamp)),
				slog.String("resource_version", stamped.ResourceVersion))
			return true
		}
		reason := refusalReason(err)
		s.metrics.refused.WithLabelValues(reason).Inc()
		delete(s.written, svc.Key)
		switch {
		case apierrors.IsNotFound(err):
			return true // deleted: nothing to stamp
		case apierrors.IsConflict(err) && attempt == 0:
			// Written meanwhile (Metacontroller applying a change, another stamp): read it and
			// decide again.
			fresh, err := s.cluster.Get(ctx, svc.Key)
			if err != nil {
				s.logger.Warn("read a Service again after a conflict", slog.String("service", svc.Key.String()), slog.Any("error", err))
				return false
			}
			svc = fresh
			continue
		case apierrors.IsConflict(err):
			return false // the next round reads it again
		case apierrors.IsForbidden(err), apierrors.IsInvalid(err):
			s.logger.Error("the API server refused a stamp: the stamper may change the annotation "+AnnotationLastActivity+" of the instances' Services alone, forward in time; "+
				"check the stamper's Role and its RoleBinding in the Service's namespace, the ValidatingAdmissionPolicy challenge-hook-activity-stamper "+
				"(manifests/components/activity-stamper), and who else writes the annotation",
				slog.String("service", svc.Key.String()), slog.String("stamp", formatStamp(d.stamp)), slog.String("reason", reason), slog.Any("error", err))
			return false
		default:
			s.logger.Error("write a stamp", slog.String("service", svc.Key.String()), slog.Any("error", err))
			return false
		}
	}
}

// writtenStamp is a stamp the stamper wrote, and the Service it wrote it on.
type writtenStamp struct {
	uid   types.UID
	stamp time.Time
}

// decision is what decide says of one Service.
type decision struct {
	stamp  time.Time
	write  bool
	placed bool   // nothing left to write for this activity
	ahead  string // the Service's stamp, when it is ahead of the clock
}

// decide: write activity (to the second) as the stamp when the Service's instance idles (its
// idle-timeout annotation) and activity is later than every stamp it knows (the Service's, the
// one last written) by a quarter of its idleTimeout, or there is none yet; never a stamp before
// the one it has.
func decide(svc Service, written, activity, now time.Time) decision {
	current, err := time.Parse(time.RFC3339, svc.Stamp)
	if err != nil {
		current = time.Time{} // none, or unreadable: the hook ignores it, the admission policy lets any valid stamp replace it
	}
	var d decision
	if current.After(now.Add(maxClockSkew)) {
		d.ahead = svc.Stamp
	}
	known := latest(current, written)
	if !activity.After(known) || svc.IdleTimeout <= 0 {
		d.placed = true // nothing new, or an instance that never idles: nothing to stamp
		return d
	}
	stamp := activity.Truncate(time.Second)
	if (!known.IsZero() && activity.Sub(known) < svc.IdleTimeout/4) || stamp.Before(current) {
		return d
	}
	d.stamp, d.write = stamp, true
	return d
}

// formatStamp is a stamp as the annotation holds it: RFC 3339, UTC, to the second.
func formatStamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// refusalReason is the metric label of a failed write: the API server's reason.
func refusalReason(err error) string {
	switch reason := apierrors.ReasonForError(err); reason {
	case "":
		return "Error"
	default:
		return string(reason)
	}
}

// latest is the latest of times.
func latest(times ...time.Time) time.Time {
	var t time.Time
	for _, c := range times {
		if c.After(t) {
			t = c
		}
	}
	return t
}

// earliest is the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
