package tcpgateway

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"
)

// debtWindow is the window over which a source's connections that ended without a valid token
// count as its debt, and its valid tokens as its credit; both are halved at each window's end.
const debtWindow = time.Minute

// victimScan is how many of the oldest pending connections an eviction looks through for one of
// a source in debt before it takes the oldest: a bounded cost per connection accepted at the cap.
const victimScan = 256

// admission holds the gateway's slots: at most maxConnections connections at once, spliced or
// still presenting a token (pending). No source is ever refused at accept, and a valid token never
// waits on what other connections from its address did: a venue's players share one address.
// Instead, when every slot is taken, a newcomer takes the slot of a pending connection, chosen by
// victim: of a source in debt first (its connections ended without a valid token, at least
// debtLimit of them in the window and more than its valid tokens: bad tokens, silence to the
// deadline, early closes, evictions), then of one without a valid token lately, then of the one
// holding the most waiting. A connection that has not sent its token after others arrived after it is the one that
// holds a slot for nothing; an honest player sends the token within seconds of connecting, and
// only a flood that turns every slot over within those seconds reaches them. When no connection is
// pending (every slot spliced to an instance), the newcomer is refused.
//
// Memory is bounded: one entry per pending connection, and per source an entry that lives while
// it has a connection pending, or debt or valid tokens in the window, at most maxSources of them (a source beyond
// that is untracked: it accrues no debt, and its connections are evicted by age alone).
type admission struct {
	maxConnections int
	debtLimit      int
	maxSources     int

	mu        sync.Mutex
	slots     int       // connections holding a slot
	pending   list.List // of *pendingConn, oldest first
	sources   map[netip.Addr]*sourceEntry
	lastSweep time.Time
}

// pendingConn is a connection that holds a slot and has not presented a valid token yet.
type pendingConn struct {
	conn    *net.TCPConn
	source  netip.Addr
	entry   *sourceEntry // nil: untracked
	elem    *list.Element
	evicted bool // its slot went to a newcomer
}

// sourceEntry is what the gateway knows of one source address.
type sourceEntry struct {
	windowStart time.Time
	debt        int // connections that ended without a valid token in the window
	valid       int // valid tokens presented in the window
	pending     int
}

func newAdmission(maxConnections, debtLimit, maxSources int) *admission {
	return &admission{maxConnections: maxConnections, debtLimit: debtLimit, maxSources: maxSources, sources: map[netip.Addr]*sourceEntry{}}
}

// sourceOf is the key of a player's address: the IPv4 address, or the IPv6 /56 (a customer's
// allocation, as ISPs delegate it: one holder has all of it).
func sourceOf(addr netip.Addr) netip.Addr {
	addr = addr.Unmap()
	if addr.Is6() {
		prefix, _ := addr.Prefix(56)
		return prefix.Addr()
	}
	return addr
}

// admit gives conn a slot, taking it from a pending connection when all are held (which it
// evicts: its reads end at once), and counts it pending. It returns nil when every slot is spliced.
func (a *admission) admit(conn *net.TCPConn, source netip.Addr, now time.Time) *pendingConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.slots >= a.maxConnections {
		victim := a.victim(now)
		if victim == nil {
			return nil
		}
		a.evict(victim, now)
	} else {
		a.slots++
	}
	p := &pendingConn{conn: conn, source: source, entry: a.entry(source, now)}
	if p.entry != nil {
		p.entry.pending++
	}
	p.elem = a.pending.PushBack(p)
	return p
}

// victim is the pending connection whose slot a newcomer takes: among the victimScan that have
// waited longest, one of a source in debt first, then one of a source with no valid token in the
// window, then one of the source that holds the most of them waiting; of equals, the oldest. A
// flood's connections, evicted and back at once, are young: by age alone the players pasting their
// tokens would be the oldest, and go first.
func (a *admission) victim(now time.Time) *pendingConn {
	var best *pendingConn
	var bestRank victimRank
	scanned := 0
	for e := a.pending.Front(); e != nil && scanned < victimScan; e = e.Next() {
		p := e.Value.(*pendingConn)
		if r := a.rank(p, now); best == nil || bestRank.below(r) {
			best, bestRank = p, r
		}
		scanned++
	}
	return best
}

// victimRank orders the candidates for eviction: the higher, the sooner.
type victimRank struct {
	inDebt, noCredit bool
	pending          int
}

func (a *admission) rank(p *pendingConn, now time.Time) victimRank {
	if p.entry == nil {
		return victimRank{noCredit: true, pending: 1}
	}
	return victimRank{inDebt: p.entry.inDebt(now, a.debtLimit), noCredit: p.entry.valid == 0, pending: p.entry.pending}
}

// below says whether r ranks strictly below o.
func (r victimRank) below(o victimRank) bool {
	if r.inDebt != o.inDebt {
		return o.inDebt
	}
	if r.noCredit != o.noCredit {
		return o.noCredit
	}
	return r.pending < o.pending
}

// evict takes p's slot away: it leaves the pending list, its source pays for the slot it held for
// nothing, and its read ends at once (its goroutine tells the player and closes).
func (a *admission) evict(p *pendingConn, now time.Time) {
	a.pending.Remove(p.elem)
	p.evicted = true
	if p.entry != nil {
		p.entry.pending--
		p.entry.charge(now)
	}
	p.conn.SetReadDeadline(time.Unix(1, 0))
}

// presented ends p's pending state. valid says it presented a valid token: then it keeps its slot
// (taking one back, beyond the cap, if it was evicted in the instant its token arrived: a valid
// token is never refused for what others did); otherwise its source pays. It returns whether p was
// evicted.
func (a *admission) presented(p *pendingConn, valid bool, now time.Time) (evicted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.evicted {
		if valid {
			p.evicted = false
			a.slots++
		}
		return !valid
	}
	a.pending.Remove(p.elem)
	if p.entry != nil {
		p.entry.pending--
		if valid {
			p.entry.credit(now)
		} else {
			p.entry.charge(now)
		}
		a.forget(p.source, p.entry, now)
	}
	return false
}

// release frees the slot of a connection that ended, unless an eviction gave it away.
func (a *admission) release(p *pendingConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !p.evicted {
		a.slots--
	}
}

// inDebt says whether the source is in debt (see sourceEntry.inDebt).
func (a *admission) inDebt(source netip.Addr, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.sources[source]
	return e != nil && e.inDebt(now, a.debtLimit)
}

// charge counts against source a connection whose valid token was followed by no right proof of
// work.
func (a *admission) charge(source netip.Addr, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.entry(source, now); e != nil {
		e.charge(now)
	}
}

// entry is source's entry, made when the table has room; nil when it has none.
func (a *admission) entry(source netip.Addr, now time.Time) *sourceEntry {
	if e := a.sources[source]; e != nil {
		return e
	}
	if len(a.sources) >= a.maxSources {
		a.sweep(now)
		if len(a.sources) >= a.maxSources {
			return nil
		}
	}
	e := &sourceEntry{windowStart: now}
	a.sources[source] = e
	return e
}

// forget drops the entry of a source that holds nothing any more.
func (a *admission) forget(source netip.Addr, e *sourceEntry, now time.Time) {
	e.expire(now)
	if e.pending == 0 && e.debt == 0 && e.valid == 0 && a.sources[source] == e {
		delete(a.sources, source)
	}
}

// sweep removes the entries that hold nothing any more, at most once a second: a full table of
// live entries costs one pass a second, not one per connection.
func (a *admission) sweep(now time.Time) {
	if now.Sub(a.lastSweep) < time.Second {
		return
	}
	a.lastSweep = now
	for source, e := range a.sources {
		a.forget(source, e, now)
	}
}

// slotsHeld is the number of slots held.
func (a *admission) slotsHeld() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.slots
}

// size is the number of sources tracked.
func (a *admission) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.sources)
}

func (e *sourceEntry) charge(now time.Time) {
	e.expire(now)
	e.debt++
}

func (e *sourceEntry) credit(now time.Time) {
	e.expire(now)
	e.valid++
}

// inDebt: at least limit connections ended without a valid token in the window, and more of them
// than valid tokens. A venue's address, whose players present valid tokens all along, stays out of
// debt though some of its connections are evicted under a flood or one of its players guesses;
// an address that presents nothing but bad tokens and silence is in debt at limit.
func (e *sourceEntry) inDebt(now time.Time, limit int) bool {
	e.expire(now)
	return e.debt >= limit && e.debt > e.valid
}

// expire starts a new window once the current one is over.
func (e *sourceEntry) expire(now time.Time) {
	for now.Sub(e.windowStart) >= debtWindow && (e.debt > 0 || e.valid > 0) {
		// Halved each window, not cleared: a flood's addresses do not all leave debt in the same
		// instant (and have their first evictions free again); an address with a burst of typos
		// is out within a minute or two.
		e.windowStart = e.windowStart.Add(debtWindow)
		e.debt, e.valid = e.debt/2, e.valid/2
	}
	if now.Sub(e.windowStart) >= debtWindow {
		e.windowStart = now
	}
}

// targetCounter counts the open connections per instance address, up to max each. Entries exist
// only while a connection is open: its memory is bounded by the total cap of connections.
type targetCounter struct {
	max    int
	mu     sync.Mutex
	counts map[netip.AddrPort]int
}

func newTargetCounter(max int) *targetCounter {
	return &targetCounter{max: max, counts: map[netip.AddrPort]int{}}
}

// acquire counts a connection to target, unless it has max already.
func (c *targetCounter) acquire(target netip.AddrPort) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts[target] >= c.max {
		return false
	}
	c.counts[target]++
	return true
}

func (c *targetCounter) release(target netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts[target] <= 1 {
		delete(c.counts, target)
		return
	}
	c.counts[target]--
}
