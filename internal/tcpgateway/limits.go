package tcpgateway

import (
	"net/netip"
	"sync"
	"time"
)

// badTokenWindow is the window of the per-source limit on bad tokens.
const badTokenWindow = time.Minute

// sourceVerdict is what the source table says of a new connection.
type sourceVerdict int

const (
	sourceAdmitted sourceVerdict = iota
	sourceUntracked
	sourceRateLimited
	sourceTooManyPending
)

// sourceTable counts, per source, the connections still presenting a token (or a proof of work)
// and the bad tokens of the current minute. Its memory is bounded by maxSources entries: an entry
// lives while its source has a connection pending or bad tokens in the window, and when the table
// is full a new source is admitted untracked (an attacker with that many addresses is bounded by
// the total cap and the token deadline instead; locking everyone out would be worse).
type sourceTable struct {
	badPerWindow int
	maxPending   int
	maxSources   int

	mu        sync.Mutex
	entries   map[netip.Addr]*sourceEntry
	lastSweep time.Time
}

type sourceEntry struct {
	windowStart time.Time
	bad         int
	pending     int
}

func newSourceTable(badPerWindow, maxPending, maxSources int) *sourceTable {
	return &sourceTable{badPerWindow: badPerWindow, maxPending: maxPending, maxSources: maxSources, entries: map[netip.Addr]*sourceEntry{}}
}

// sourceOf is the key of a player's address: the IPv4 address, or the IPv6 /64 (one host's
// allocation: one attacker has all of it).
func sourceOf(addr netip.Addr) netip.Addr {
	addr = addr.Unmap()
	if addr.Is6() {
		prefix, _ := addr.Prefix(64)
		return prefix.Addr()
	}
	return addr
}

// admit decides on a new connection from source and, when it is admitted and tracked, counts it
// pending until done is called.
func (t *sourceTable) admit(source netip.Addr, now time.Time) sourceVerdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[source]
	if e == nil {
		if len(t.entries) >= t.maxSources {
			t.sweep(now)
		}
		if len(t.entries) >= t.maxSources {
			return sourceUntracked
		}
		e = &sourceEntry{windowStart: now}
		t.entries[source] = e
	}
	e.expire(now)
	if e.bad >= t.badPerWindow {
		return sourceRateLimited
	}
	if e.pending >= t.maxPending {
		return sourceTooManyPending
	}
	e.pending++
	return sourceAdmitted
}

// done ends the pending state of a connection admitted from source; bad says it presented a bad
// token or proof of work (or none in time).
func (t *sourceTable) done(source netip.Addr, bad bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[source]
	if e == nil {
		return
	}
	e.pending--
	e.expire(now)
	if bad {
		e.bad++
	}
	if e.pending == 0 && e.bad == 0 {
		delete(t.entries, source)
	}
}

// expire starts a new window once the current one is over.
func (e *sourceEntry) expire(now time.Time) {
	if now.Sub(e.windowStart) >= badTokenWindow {
		e.windowStart = now
		e.bad = 0
	}
}

// sweep removes the entries that hold nothing any more, at most once a second: a full table of
// live entries costs one pass a second, not one per connection.
func (t *sourceTable) sweep(now time.Time) {
	if now.Sub(t.lastSweep) < time.Second {
		return
	}
	t.lastSweep = now
	for source, e := range t.entries {
		e.expire(now)
		if e.pending == 0 && e.bad == 0 {
			delete(t.entries, source)
		}
	}
}

// size is the number of sources tracked.
func (t *sourceTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
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
