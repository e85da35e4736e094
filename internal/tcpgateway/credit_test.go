package tcpgateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// TestCreditBuysNoEviction: one address holds every waiting slot of a full gateway silent and
// presents its own valid token (once before the flood; or also once, or twice, per eviction of one
// of its connections, on connections it holds), so that it has credit all along; fresh players,
// each from an address of its own, connect while it holds the slots and send a valid token within
// the token timeout (after a paste of 0.2 s or 1 s). Every fresh player gets in: the source holding
// the most waiting slots gives them up first, whatever its credit.
func TestCreditBuysNoEviction(t *testing.T) {
	for _, credit := range []struct {
		name        string
		perEviction int // valid tokens presented after each eviction of one of its connections
	}{
		{"credit once", 0},
		{"credit per eviction", 1},
		{"credit twice per eviction", 2},
	} {
		for _, paste := range []time.Duration{200 * time.Millisecond, time.Second} {
			t.Run(fmt.Sprintf("%s, paste %s", credit.name, paste), func(t *testing.T) {
				testCreditBuysNoEviction(t, credit.perEviction, paste)
			})
		}
	}
}

func testCreditBuysNoEviction(t *testing.T, perEviction int, paste time.Duration) {
	const (
		slots = 200 // under victimScan: an eviction looks at every waiting connection
		fresh = 30
		flood = "127.0.4.1"
	)
	instance := startBackend(t, echo)
	g := startGateway(t, func(c *Config) {
		c.MaxConnections = slots
		c.MaxConnectionsPerToken = 1000
		c.TokenTimeout = 10 * time.Second
	})
	token := mint(t, tcptoken.Target{Service: instance.addr()})
	floodSource := sourceOf(netip.MustParseAddr(flood))

	ctx, stop := context.WithCancel(context.Background())
	f := &creditedFlood{addr: g.addr, source: flood, token: token, perEviction: perEviction, spend: make(chan struct{}, 100*slots)}
	var floodDone sync.WaitGroup
	defer func() {
		stop()
		floodDone.Wait()
	}()
	require.NoError(t, f.present(ctx), "the flood's address presents its own valid token")
	for range slots {
		floodDone.Go(func() { f.hold(ctx) })
	}
	waitFor(t, func() bool { return g.admission.pendingOf(floodSource) == slots }, "the flood holding every slot")
	require.Positive(t, g.admission.creditOf(floodSource, time.Now()), "the flood's address has credit")

	// Fresh players, one every 20 ms, each pasting its token after paste.
	var players sync.WaitGroup
	failures := make([]error, fresh)
	for i := range fresh {
		players.Go(func() {
			failures[i] = freshPlayer(g.addr, fmt.Sprintf("127.0.5.%d", i+1), token, paste)
		})
		time.Sleep(20 * time.Millisecond)
	}
	players.Wait()
	credit := g.admission.creditOf(floodSource, time.Now())
	stop()
	floodDone.Wait()

	in := 0
	for i, err := range failures {
		if assert.NoError(t, err, "fresh player %d", i+1) {
			in++
		}
	}
	t.Logf("%d of %d fresh players in (%d slots, paste %s); the flood's connections evicted %d times, its valid tokens %d, its credit in the window at the end %d",
		in, fresh, slots, paste, f.evictions.Load(), f.valid.Load(), credit)
	assert.Positive(t, credit, "the flood's address kept its credit")
	assert.Positive(t, f.evictions.Load(), "the newcomers took the flood's slots")
}

// creditedFlood holds waiting slots from one address, each connection connecting again floodRetry
// after it ended, and presents that address's own valid token perEviction times per eviction of one
// of them, on connections it holds (which takes no other slot).
type creditedFlood struct {
	addr, source, token string
	perEviction         int
	spend               chan struct{} // a valid token to present on a held connection
	evictions, valid    atomic.Int64
}

const floodRetry = 50 * time.Millisecond

// dial connects from the flood's address and reads the prompt; the connection closes when ctx
// ends.
func (f *creditedFlood) dial(ctx context.Context) (net.Conn, *bufio.Reader, error) {
	c, err := dialFrom(ctx, f.source, f.addr)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, func() { c.Close() })
	r := bufio.NewReader(c)
	prompt := make([]byte, len(Prompt))
	if _, err := io.ReadFull(r, prompt); err != nil || string(prompt) != Prompt {
		c.Close()
		return nil, nil, fmt.Errorf("no prompt: %q, %v", prompt, err)
	}
	return c, r, nil
}

// present presents the flood's valid token on a new connection.
func (f *creditedFlood) present(ctx context.Context) error {
	c, r, err := f.dial(ctx)
	if err != nil {
		return err
	}
	return f.presentOn(c, r)
}

// presentOn presents the flood's valid token on c, reaches the instance and closes.
func (f *creditedFlood) presentOn(c net.Conn, r *bufio.Reader) error {
	defer c.Close()
	if _, err := io.WriteString(c, f.token+"\nx"); err != nil {
		return err
	}
	if b, err := r.ReadByte(); err != nil || b != 'x' {
		return fmt.Errorf("the flood's own token did not reach its instance: %v", err)
	}
	f.valid.Add(1)
	return nil
}

// hold holds a slot silent until ctx ends, connecting again floodRetry after its connection ended.
// When its connection is evicted, it asks perEviction others to present the valid token; when
// asked, it presents it on its own.
func (f *creditedFlood) hold(ctx context.Context) {
	for ctx.Err() == nil {
		if c, r, err := f.dial(ctx); err == nil {
			ended := make(chan string, 1)
			go func() {
				rest, _ := io.ReadAll(r)
				ended <- string(rest)
			}()
			select {
			case rest := <-ended:
				c.Close()
				if rest == evictedLine {
					f.evictions.Add(1)
					for range f.perEviction {
						select {
						case f.spend <- struct{}{}:
						default:
						}
					}
				}
			case <-f.spend:
				// The reader above reads what the instance echoes: present without it.
				c.SetReadDeadline(time.Now())
				<-ended
				c.SetReadDeadline(time.Time{})
				f.presentOn(c, r)
			case <-ctx.Done():
				c.Close()
				<-ended
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(floodRetry):
		}
	}
}

// freshPlayer connects from source, waits paste, sends the token and expects its byte back.
func freshPlayer(addr, source, token string, paste time.Duration) error {
	c, err := dialFrom(context.Background(), source, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	prompt := make([]byte, len(Prompt))
	if _, err := io.ReadFull(r, prompt); err != nil || string(prompt) != Prompt {
		return fmt.Errorf("no prompt: %q, %v", prompt, err)
	}
	time.Sleep(paste)
	if _, err := io.WriteString(c, token+"\nx"); err != nil {
		return err
	}
	b, err := r.ReadByte()
	if err == nil && b == 'x' {
		return nil
	}
	rest, _ := io.ReadAll(r)
	return fmt.Errorf("not in: read %q, %v", strings.TrimSpace(string(append([]byte{b}, rest...))), err)
}

// dialFrom connects to addr from source, an address of the loopback range.
func dialFrom(ctx context.Context, source, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 10 * time.Second}
	return d.DialContext(ctx, "tcp4", addr)
}

// pendingOf is the number of connections of source waiting for their token.
func (a *admission) pendingOf(source netip.Addr) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.sources[source]; e != nil {
		return e.pending
	}
	return 0
}

// creditOf is the number of valid tokens source presented in the window.
func (a *admission) creditOf(source netip.Addr, now time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.sources[source]; e != nil {
		e.expire(now)
		return e.valid
	}
	return 0
}
