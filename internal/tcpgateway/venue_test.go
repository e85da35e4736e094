package tcpgateway

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// TestVenueKeepsItsSlotsUnderAFlood: 20 players behind one address (a venue's NAT), each with an
// instance of its own, have played once; then a flood from 20 addresses holds every waiting slot of
// a full gateway silent (10 connections each, back 50 ms after each eviction), either presenting
// nothing or presenting the attacker's own valid token (once before, twice per eviction). The
// venue's players connect again, each after the one before by 25 ms, and paste their tokens after
// 0.5 to 2 s, twice each: the venue holds up to 20 waiting connections, twice what any flood
// address holds, and every one of its players gets in, since each instance its players reached
// covers one of its waiting connections, and the attacker's one instance covers one of an address's.
func TestVenueKeepsItsSlotsUnderAFlood(t *testing.T) {
	for _, credited := range []bool{false, true} {
		name := "silent flood"
		if credited {
			name = "credited flood"
		}
		t.Run(name, func(t *testing.T) { testVenueKeepsItsSlotsUnderAFlood(t, credited) })
	}
}

func testVenueKeepsItsSlotsUnderAFlood(t *testing.T, credited bool) {
	const (
		slots        = 200 // under victimScan: an eviction looks at every waiting connection
		players      = 20
		floodAddrs   = 20
		perFloodAddr = slots / floodAddrs
		venue        = "127.0.7.1"
		rounds       = 2
	)
	g := startGateway(t, func(c *Config) {
		c.MaxConnections = slots
		c.MaxConnectionsPerToken = 1000
		c.TokenTimeout = 10 * time.Second
	})
	tokens := make([]string, players)
	for i := range tokens {
		tokens[i] = mint(t, tcptoken.Target{Service: startBackend(t, echo).addr()})
	}
	floodToken := mint(t, tcptoken.Target{Service: startBackend(t, echo).addr()})

	// The venue has played: each player once, the gateway empty.
	for i, token := range tokens {
		require.NoError(t, freshPlayer(g.addr, venue, token, 0), "venue player %d before the flood", i+1)
	}

	ctx, stop := context.WithCancel(context.Background())
	var floodDone sync.WaitGroup
	defer func() {
		stop()
		floodDone.Wait()
	}()
	var floods []*creditedFlood
	for i := range floodAddrs {
		f := &creditedFlood{addr: g.addr, source: fmt.Sprintf("127.0.6.%d", i+1), token: floodToken, spend: make(chan struct{}, 100*slots)}
		if credited {
			f.perEviction = 2
			require.NoError(t, f.present(ctx), "flood address %s presents its own valid token", f.source)
		}
		floods = append(floods, f)
		for range perFloodAddr {
			floodDone.Go(func() { f.hold(ctx) })
		}
	}
	flooding := func() int {
		n := 0
		for _, f := range floods {
			n += g.admission.pendingOf(sourceOf(netip.MustParseAddr(f.source)))
		}
		return n
	}
	waitFor(t, func() bool { return flooding() == slots }, "the flood holding every slot")

	var venuePlayers sync.WaitGroup
	failures := make([][rounds]error, players)
	for i := range players {
		venuePlayers.Go(func() {
			for round := range rounds {
				paste := 500*time.Millisecond + time.Duration((i*7+round*11)%players)*1500*time.Millisecond/(players-1)
				failures[i][round] = freshPlayer(g.addr, venue, tokens[i], paste)
			}
		})
		time.Sleep(25 * time.Millisecond)
	}
	venuePlayers.Wait()
	stop()
	floodDone.Wait()

	in := 0
	for i := range failures {
		for round, err := range failures[i] {
			if assert.NoError(t, err, "venue player %d, round %d", i+1, round+1) {
				in++
			}
		}
	}
	var evictions, valid int64
	for _, f := range floods {
		evictions += f.evictions.Load()
		valid += f.valid.Load()
	}
	t.Logf("%d of %d venue connections in (%d slots, %d flood addresses holding %d each); the flood's connections evicted %d times, its valid tokens %d",
		in, players*rounds, slots, floodAddrs, perFloodAddr, evictions, valid)
	assert.Positive(t, evictions, "the venue's players took the flood's slots")
}

// TestInstancesCoverOneWaitingConnectionEach: a source's valid tokens cover as many of its waiting
// connections as the distinct instances they named in this window or the last, however many times
// each was presented, and at most maxInstancesPerSource; what they cover ranks as nothing held, and
// an entry keeps no more addresses than that, nor any two windows on.
func TestInstancesCoverOneWaitingConnectionEach(t *testing.T) {
	a := newAdmission(10, 10, 100)
	now := time.Now()
	instance := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), 31337)
	}
	source := netip.MustParseAddr("192.0.2.1")
	e := a.entry(source, now)
	uncovered := func(pending int) int {
		e.pending = pending
		return a.rank(&pendingConn{entry: e}, now).uncovered
	}

	for range 10 {
		e.credit(instance(1), now)
	}
	assert.Equal(t, 15, uncovered(16), "one instance presented 10 times covers one")
	assert.Equal(t, 0, uncovered(1))

	e.credit(netip.AddrPortFrom(instance(1).Addr(), 31338), now)
	assert.Equal(t, 14, uncovered(16), "another port of the instance is another address a token names")

	for i := range 100 {
		e.credit(instance(1000+i), now)
	}
	assert.Len(t, e.instances, maxInstancesPerSource, "beyond the cap, as many as the cap")
	assert.Equal(t, 0, uncovered(maxInstancesPerSource), "covered: ranked as holding nothing")
	assert.Equal(t, 1, uncovered(maxInstancesPerSource+1))

	now = now.Add(debtWindow)
	assert.Equal(t, 0, uncovered(maxInstancesPerSource), "the last window's instances still cover")
	for i := range 3 {
		e.credit(instance(2000+i), now)
	}
	assert.Len(t, e.instances, maxInstancesPerSource, "new instances take the place of the last window's")
	now = now.Add(debtWindow)
	assert.Equal(t, 13, uncovered(16), "the instances of the window before the last cover nothing")
	assert.Len(t, e.instances, 3)

	now = now.Add(2 * debtWindow)
	assert.Equal(t, 1, uncovered(1), "two windows on, none covers")
	assert.Empty(t, e.instances, "two windows on, none kept")
	e.pending = 0
	now = now.Add(8 * debtWindow) // its 114 valid tokens halved to none
	a.forget(source, e, now)
	assert.Zero(t, a.size(), "an entry with nothing left is forgotten")

	assert.Equal(t, 1, a.rank(&pendingConn{}, now).uncovered, "an untracked source's connection counts as one uncovered")
}

// TestAdmittedBehind: a connection is served behind the accepts queued after it when its source
// holds more than one waiting connection beyond the instances it reached: not a player's first,
// nor a venue's players up to one each per instance they reached; a flood's second on. An
// untracked source's are never behind (nothing known of them).
func TestAdmittedBehind(t *testing.T) {
	a := newAdmission(1000, 10, 2)
	now := time.Now()
	player := netip.MustParseAddr("192.0.2.1")
	assert.False(t, a.admit(nil, player, now).behind, "a player's first connection")
	assert.True(t, a.admit(nil, player, now).behind, "a second, no instance reached")

	venue := netip.MustParseAddr("192.0.2.2")
	e := a.entry(venue, now)
	for i := range 3 {
		e.credit(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, 0, byte(i)}), 31337), now)
	}
	for i := range 4 {
		assert.False(t, a.admit(nil, venue, now).behind, "the venue's connection %d, three instances reached", i+1)
	}
	assert.True(t, a.admit(nil, venue, now).behind, "its fifth")

	untracked := netip.MustParseAddr("192.0.2.3") // beyond maxSources (2)
	for range 3 {
		p := a.admit(nil, untracked, now)
		assert.Nil(t, p.entry)
		assert.False(t, p.behind)
	}
}
