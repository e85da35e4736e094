package tcpgateway

import (
	"container/list"
	"math/bits"
	"net"
	"net/netip"
	"sync"
	"time"
)

// debtWindow is the window over which a source's connections that ended without a valid token
// count as its debt, and its valid tokens as its credit; both are halved at each window's end.
const debtWindow = time.Minute

// victimScan is how many of the oldest pending connections an eviction looks through for the one
// to evict (see admission.victim): a bounded cost per connection accepted at the cap.
const victimScan = 256

// maxInstancesPerSource bounds the instances a source's valid tokens cover (see admission): a
// venue's players beyond that many instances count as that many, and a source's entry holds at
// most that many addresses. 64: the bits of the mask that tells this window's from the last's.
const maxInstancesPerSource = 64

// admission holds the gateway's slots: at most maxConnections connections at once, spliced or
// still presenting a token (pending). No source is ever refused at accept, and a valid token never
// waits on what other connections from its address did: a venue's players share one address.
// Instead, when every slot is taken, a newcomer takes the slot of a pending connection, chosen by
// victim: of the source whose waiting connections most exceed the instances it reached lately
// (the distinct instance addresses its valid tokens named in this window or the last, at most
// maxInstancesPerSource); of sources exceeding as much, one in debt (its connections ended
// without a valid token, at least debtLimit of them in the window and more than its valid tokens:
// bad tokens, silence to the deadline, early closes, evictions); of equals, the oldest.
//
// One instance reached covers one waiting connection, whatever the number of times its token was
// presented: an address that presents its own token now and then covers one of the slots it holds
// silent, not all of them, and a valid token never buys another player's eviction; a venue whose
// players reached twenty instances has twenty waiting connections covered, and gives none of them
// up while a flood's address holds one it did not cover; a player's first connection holds one
// slot uncovered. A connection
// that has not sent its token after others arrived after it is the one that holds a slot for
// nothing; an honest player sends the token within seconds of connecting, and only a flood that
// holds no more than one uncovered slot per address, and turns every slot over within those
// seconds, reaches them. When no connection is pending (every slot spliced to an instance), the
// newcomer is refused.
//
// Memory is bounded: one entry per pending connection, and per source an entry that lives while
// it has a connection pending, or debt, valid tokens or instances reached in the window or the
// last, at most maxSources of them (a source beyond that is untracked: it accrues no debt and no
// instances, and each of its connections counts as one uncovered); each entry keeps at most
// maxInstancesPerSource instance addresses (8 bytes each).
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
	// behind: when admitted, its source held more than one waiting connection beyond the instances
	// it reached lately, this one included (a player holds one: its own); served after the accept
	// of the connections queued behind it (see acceptor), never refused for it.
	behind bool
}

// sourceEntry is what the gateway knows of one source address.
type sourceEntry struct {
	windowStart time.Time
	debt        int // connections that ended without a valid token in the window
	valid       int // valid tokens presented in the window
	pending     int
	// instances are the distinct instance addresses (ClusterIP and port, as instanceKey packs
	// them) that its valid tokens named in this window or the last, at most
	// maxInstancesPerSource; bit i of current says instances[i] was named in this window.
	instances []uint64
	current   uint64
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
		p.behind = p.entry.pending-len(p.entry.instances) > 1
	}
	p.elem = a.pending.PushBack(p)
	return p
}

// victim is the pending connection whose slot a newcomer takes: among the victimScan that have
// waited longest, one of the source whose waiting connections most exceed the instances it
// reached lately (all its waiting connections count, not only those scanned); of sources exceeding
// as much, one in debt; of equals, the oldest. A flood's connections, evicted and back at once, are
// young: by age alone the players pasting their tokens would be the oldest, and go first. Neither
// credit alone nor holdings alone: ranked by credit first, an address that presents its own valid
// token now and then would keep every slot it holds silent while fresh players, who have presented
// nothing yet, give theirs up; ranked by holdings first, a venue's players pasting at once would
// give theirs up to a flood that holds fewer per address.
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
	uncovered int // waiting connections beyond the instances reached lately, at least 0
	inDebt    bool
}

func (a *admission) rank(p *pendingConn, now time.Time) victimRank {
	if p.entry == nil {
		return victimRank{uncovered: 1}
	}
	inDebt := p.entry.inDebt(now, a.debtLimit) // expires the window first
	return victimRank{uncovered: max(p.entry.pending-len(p.entry.instances), 0), inDebt: inDebt}
}

// below says whether r ranks strictly below o: uncovered holdings first, then debt.
func (r victimRank) below(o victimRank) bool {
	if r.uncovered != o.uncovered {
		return r.uncovered < o.uncovered
	}
	return !r.inDebt && o.inDebt
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

// move makes source, not the one it was admitted as, the source of pending connection p: a
// WebSocket request names its player (X-Forwarded-For from a trusted proxy) only once read, and
// the proxy's address is no player. Nothing is charged to either.
func (a *admission) move(p *pendingConn, source netip.Addr, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p.evicted || p.source == source {
		return
	}
	if p.entry != nil {
		p.entry.pending--
		a.forget(p.source, p.entry, now)
	}
	p.source, p.entry = source, a.entry(source, now)
	if p.entry != nil {
		p.entry.pending++
	}
}

// noToken is what presented is given for a connection that presented no valid token.
var noToken netip.AddrPort

// presented ends p's pending state. instance is the instance address its valid token named, or
// noToken. With a valid token it keeps its slot (taking one back, beyond the cap, if it was
// evicted in the instant its token arrived: a valid token is never refused for what others did)
// and its source has reached that instance; otherwise its source pays. It returns whether p was
// evicted.
func (a *admission) presented(p *pendingConn, instance netip.AddrPort, now time.Time) (evicted bool) {
	valid := instance.IsValid()
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
			p.entry.credit(instance, now)
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
	if e.pending == 0 && e.debt == 0 && e.valid == 0 && len(e.instances) == 0 && a.sources[source] == e {
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

// credit counts a valid token naming instance, and the instance among those reached in this
// window: beyond maxInstancesPerSource, a new one takes the place of one reached in the last window
// only, or none.
func (e *sourceEntry) credit(instance netip.AddrPort, now time.Time) {
	e.expire(now)
	e.valid++
	key := instanceKey(instance)
	for i, k := range e.instances {
		if k == key {
			e.current |= 1 << i
			return
		}
	}
	if len(e.instances) < maxInstancesPerSource {
		e.current |= 1 << len(e.instances)
		e.instances = append(e.instances, key)
		return
	}
	if last := ^e.current; last != 0 {
		i := bits.TrailingZeros64(last)
		e.instances[i] = key
		e.current |= 1 << i
	}
}

// instanceKey packs an instance address (an IPv4 ClusterIP and a port, as a token names it) into
// 48 bits: exact, no two instances alike.
func instanceKey(instance netip.AddrPort) uint64 {
	ip := instance.Addr().As4()
	return uint64(ip[0])<<40 | uint64(ip[1])<<32 | uint64(ip[2])<<24 | uint64(ip[3])<<16 | uint64(instance.Port())
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
	for now.Sub(e.windowStart) >= debtWindow && (e.debt > 0 || e.valid > 0 || len(e.instances) > 0) {
		// Halved each window, not cleared: a flood's addresses do not all leave debt in the same
		// instant (and have their first evictions free again); an address with a burst of typos
		// is out within a minute or two.
		e.windowStart = e.windowStart.Add(debtWindow)
		e.debt, e.valid = e.debt/2, e.valid/2
		// The instances reached in the window that ended stay for one more: a venue's players
		// do not all lose their cover in the same instant.
		e.keepCurrentInstances()
	}
	if now.Sub(e.windowStart) >= debtWindow {
		e.windowStart = now
	}
}

// keepCurrentInstances keeps the instances reached in the current window, now the last one's.
func (e *sourceEntry) keepCurrentInstances() {
	kept := e.instances[:0]
	for i, k := range e.instances {
		if e.current&(1<<i) != 0 {
			kept = append(kept, k)
		}
	}
	clear(e.instances[len(kept):])
	e.instances, e.current = kept, 0
	if len(e.instances) == 0 {
		e.instances = nil // the backing array goes with the last one
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
