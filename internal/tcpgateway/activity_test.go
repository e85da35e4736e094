package tcpgateway

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// TestActivityIsBytesMoved: an instance is active when bytes move through a session to it, either
// way; a session held open with nothing flowing adds nothing, and a session that ended still counts
// for its last byte.
func TestActivityIsBytesMoved(t *testing.T) {
	instance := startBackend(t, echo)
	other := startBackend(t, echo)
	g := startGateway(t, nil)

	held := connect(t, g.addr)
	held.send(mint(t, tcptoken.Target{Service: other.addr()}) + "\n")
	waitFor(t, func() bool { return other.accepted.Load() == 1 }, "the held session spliced")
	assert.Empty(t, g.Activity(time.Time{}), "a session that moved no byte is no activity")

	p := connect(t, g.addr)
	before := time.Now()
	reachEcho(t, mint(t, tcptoken.Target{Service: instance.addr()}), p)
	after := time.Now()
	got := g.Activity(time.Time{})
	require.Len(t, got, 1, "only the instance whose session moved bytes")
	assert.Equal(t, instance.addr(), got[0].Address)
	assert.False(t, got[0].LastActivity.Before(before) || got[0].LastActivity.After(after),
		"last byte at %s, moved between %s and %s", got[0].LastActivity, before, after)
	assert.Empty(t, g.Activity(got[0].LastActivity), "nothing moved since its last byte")

	// Its end is remembered: a short session between two reads of a stamper still counts.
	p.conn.Close()
	waitFor(t, func() bool { return g.closed(closedByPeers) == 1 }, "the session ended")
	assert.Equal(t, got, g.Activity(before))

	// The held session's first bytes make its instance active, after the other's.
	held.send("y")
	held.expect("y")
	got = g.Activity(before)
	require.Len(t, got, 2)
	assert.Negative(t, got[0].Address.Compare(got[1].Address), "sorted by address")
	last := map[netip.AddrPort]time.Time{got[0].Address: got[0].LastActivity, got[1].Address: got[1].LastActivity}
	assert.True(t, last[other.addr()].After(last[instance.addr()]), "%v", got)
}

// TestActivityForgottenAfterRetention: ended sessions' bytes are kept for ActivityRetention, then
// forgotten, so that the table holds only the instances of the last minutes.
func TestActivityForgottenAfterRetention(t *testing.T) {
	a := newActivity()
	now := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	recent, old := netip.MustParseAddrPort("10.96.0.20:1337"), netip.MustParseAddrPort("10.96.0.10:1337")
	for address, last := range map[netip.AddrPort]time.Time{recent: now.Add(-time.Minute), old: now.Add(-ActivityRetention - time.Second)} {
		s := &usage{target: address}
		s.lastByte.Store(last.UnixNano())
		a.started(s)
		a.finished(s)
	}
	assert.Equal(t, []ServiceActivity{{Address: recent, LastActivity: now.Add(-time.Minute)}}, a.since(time.Time{}, now))
	assert.NotContains(t, a.ended, old, "forgotten")
	assert.Empty(t, a.since(now.Add(-time.Minute), now), "since is exclusive")
	assert.Empty(t, a.open)
}
