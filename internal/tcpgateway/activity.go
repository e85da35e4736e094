package tcpgateway

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ActivityRetention is how long the gateway remembers when bytes last moved to or from an
// instance: longer than any idleTimeout's share a stamper waits between two reads, short enough
// that the table holds only the instances of the last minutes.
const ActivityRetention = 10 * time.Minute

// ActivityReport is the body of the gateway's GET /activity, read by the activity stamper.
type ActivityReport struct {
	Services []ServiceActivity `json:"services"`
}

// ServiceActivity is when bytes last moved either way through a spliced connection to an instance
// Service address (the ClusterIP and port its token names).
type ServiceActivity struct {
	Address      netip.AddrPort `json:"address"`
	LastActivity time.Time      `json:"lastActivity"`
}

// activity is what the gateway knows of its instances' use, for whoever stamps it on the
// Challenges (the gateway itself holds no credential): the spliced connections open now, read
// when asked, and the last byte of those that ended. A connection that moved no byte yet, or none
// for a while, counts for no more than its last byte: holding a session open is not using it.
type activity struct {
	mu    sync.Mutex
	open  map[*usage]struct{}
	ended map[netip.AddrPort]int64 // the last byte of an ended connection to the address, Unix ns
}

func newActivity() *activity {
	return &activity{open: map[*usage]struct{}{}, ended: map[netip.AddrPort]int64{}}
}

// usage is what activity reads of a spliced connection, TCP or WebSocket: its instance and its
// last byte.
type usage struct {
	target   netip.AddrPort // the instance's Service address, as its token names it
	lastByte atomic.Int64   // Unix ns of its last byte, 0 before the first
}

// started records a spliced connection as open.
func (a *activity) started(s *usage) {
	a.mu.Lock()
	a.open[s] = struct{}{}
	a.mu.Unlock()
}

// finished records a spliced connection's end, and its last byte if it moved any.
func (a *activity) finished(s *usage) {
	last := s.lastByte.Load()
	a.mu.Lock()
	delete(a.open, s)
	if last > a.ended[s.target] {
		a.ended[s.target] = last
	}
	a.mu.Unlock()
}

// since returns, sorted by address, every instance address whose connections moved a byte after
// after and within ActivityRetention before now, with the time of the last one; it forgets the
// ended connections' bytes older than the retention.
func (a *activity) since(after, now time.Time) []ServiceActivity {
	oldest := now.Add(-ActivityRetention).UnixNano()
	floor := oldest
	if !after.IsZero() && after.UnixNano() > floor {
		floor = after.UnixNano()
	}
	a.mu.Lock()
	latest := make(map[netip.AddrPort]int64, len(a.ended))
	for address, last := range a.ended {
		if last <= oldest {
			delete(a.ended, address)
			continue
		}
		latest[address] = last
	}
	for s := range a.open {
		if last := s.lastByte.Load(); last > latest[s.target] {
			latest[s.target] = last
		}
	}
	a.mu.Unlock()
	out := make([]ServiceActivity, 0, len(latest))
	for address, last := range latest {
		if last > floor {
			out = append(out, ServiceActivity{Address: address, LastActivity: time.Unix(0, last).UTC()})
		}
	}
	slices.SortFunc(out, func(x, y ServiceActivity) int { return x.Address.Compare(y.Address) })
	return out
}

// Activity returns, sorted by address, the instance Service addresses whose spliced connections
// moved a byte either way after after (the zero time: any) and within ActivityRetention, each
// with the time of its last byte.
func (g *Gateway) Activity(after time.Time) []ServiceActivity {
	return g.activity.since(after, time.Now())
}
