package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is the gate's clock in tests: it moves only when the gate sleeps or a probe times out.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// scriptedDialer answers each probe with the next outcome of its script (the last one repeats):
// answered connects to a loopback listener, refused dials a closed loopback port, silent waits
// out the probe's deadline (advancing the fake clock by it), failed returns EHOSTUNREACH.
type scriptedDialer struct {
	t        *testing.T
	script   []probeOutcome
	refused  bool // answer by refusal (RST) rather than by accepting
	clock    *fakeClock
	timeout  time.Duration
	listener string
	closed   string
	calls    int
}

func (d *scriptedDialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	outcome := d.script[min(d.calls, len(d.script)-1)]
	d.calls++
	switch outcome {
	case probeAnswered:
		target := d.listener
		if d.refused {
			target = d.closed
		}
		return (&net.Dialer{}).DialContext(ctx, network, target)
	case probeSilent:
		d.clock.now = d.clock.now.Add(d.timeout)
		return nil, &net.OpError{Op: "dial", Net: network, Err: context.DeadlineExceeded}
	}
	return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}
}

// loopbackTargets are a listening loopback address (connections accepted) and a closed one
// (connections refused): no traffic leaves the machine.
func loopbackTargets(t *testing.T) (listening, closed string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed = free.Addr().String()
	free.Close()
	return ln.Addr().String(), closed
}

func scriptedGate(t *testing.T, refused bool, script ...probeOutcome) (policyGate, *scriptedDialer) {
	listening, closed := loopbackTargets(t)
	clock := &fakeClock{now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	d := &scriptedDialer{t: t, script: script, refused: refused, clock: clock, timeout: defaultProbeTimeout, listener: listening, closed: closed}
	return policyGate{
		dial: d.dial, target: "gate-target:1", timeout: 10 * time.Second, probeTimeout: defaultProbeTimeout,
		interval: defaultProbeInterval, silencesNeeded: defaultSilencesNeeded, now: clock.Now, sleep: clock.Sleep,
	}, d
}

// Enforced: the target answered until the policy agent learnt the Pod, then dropped two probes in
// a row; the gate opens then, not before.
func TestPolicyGateOpensOnceTheTargetIsDropped(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("answers by refusal=%v", refused), func(t *testing.T) {
			g, d := scriptedGate(t, refused, probeAnswered, probeAnswered, probeAnswered, probeSilent, probeSilent, probeAnswered)
			r, err := g.wait(context.Background())
			require.NoError(t, err)
			assert.True(t, r.enforced)
			assert.Equal(t, 5, r.probes)
			assert.Equal(t, 5, d.calls, "no probe after the verdict")
			assert.Equal(t, 3*defaultProbeInterval+2*defaultProbeTimeout, r.elapsed)
		})
	}
}

// Not yet: a target that keeps answering (accepting, or refusing with a RST) keeps the gate shut
// until its timeout, and the result says it still answered.
func TestPolicyGateStaysShutWhileTheTargetAnswers(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("answers by refusal=%v", refused), func(t *testing.T) {
			g, _ := scriptedGate(t, refused, probeAnswered)
			g.timeout = 2 * time.Second
			r, err := g.wait(context.Background())
			require.NoError(t, err)
			assert.False(t, r.enforced)
			assert.Equal(t, probeAnswered, r.last)
			assert.Equal(t, 20, r.probes, "one probe every interval until the timeout")
			assert.Equal(t, 2*time.Second, r.elapsed)
		})
	}
}

// Timeout: one lost answer between answers is not a verdict, and errors that are not silence
// (no route, host unreachable) never count as enforcement.
func TestPolicyGateNeedsConsecutiveSilences(t *testing.T) {
	g, _ := scriptedGate(t, false, probeSilent, probeAnswered, probeSilent, probeAnswered, probeSilent, probeAnswered, probeFailed)
	g.timeout = 3 * time.Second
	r, err := g.wait(context.Background())
	require.NoError(t, err)
	assert.False(t, r.enforced)
	assert.Equal(t, probeFailed, r.last)
	assert.ErrorIs(t, r.lastErr, syscall.EHOSTUNREACH)
}

func TestPolicyGateStopsWithItsContext(t *testing.T) {
	g, _ := scriptedGate(t, false, probeAnswered)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := g.wait(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

// classifyDial on real loopback dials: accepted and refused are answers; a dial that outlives its
// deadline is silence (a deadline already passed stands in for a dropped SYN, with the errors the
// net package gives); unreachable hosts and networks are neither.
func TestClassifyDial(t *testing.T) {
	listening, closed := loopbackTargets(t)
	conn, err := net.Dial("tcp", listening)
	require.NoError(t, err)
	conn.Close()
	assert.Equal(t, probeAnswered, classifyDial(err))
	_, err = net.Dial("tcp", closed)
	require.Error(t, err)
	assert.Equal(t, probeAnswered, classifyDial(err), "refused: %v", err)

	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = (&net.Dialer{}).DialContext(ctx, "tcp", listening)
	require.Error(t, err)
	assert.Equal(t, probeSilent, classifyDial(err), "deadline: %v", err)
	_, err = (&net.Dialer{Timeout: time.Nanosecond}).Dial("tcp", listening)
	if err != nil {
		assert.Equal(t, probeSilent, classifyDial(err), "dialer timeout: %v", err)
	}

	assert.Equal(t, probeFailed, classifyDial(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}))
	assert.Equal(t, probeFailed, classifyDial(&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ENETUNREACH)}))
	assert.Equal(t, probeFailed, classifyDial(errors.New("dial tcp: lookup gate-target: no such host")))
}

// The command fails with a termination message saying the target still answers, and exits
// non-zero; the hook quotes that message in the instance's status.
func TestWaitForPolicyCommandFailsWhileTheTargetAnswers(t *testing.T) {
	_, closed := loopbackTargets(t)
	termination := filepath.Join(t.TempDir(), "termination-log")
	err := run(context.Background(), []string{"challenge-hook", "wait-for-policy", "--target=" + closed, "--timeout=300ms", "--interval=20ms", "--termination-log=" + termination}, noEnv, nil, nil)
	require.Error(t, err)
	message, readErr := os.ReadFile(termination)
	require.NoError(t, readErr)
	assert.Contains(t, string(message), closed+" still answers after 300ms")
	assert.Contains(t, string(message), "nothing drops this Pod's packets to it")
	assert.Contains(t, err.Error(), string(message))
}

func TestWaitForPolicyCommandRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{{}, {"--target=nohostport"}, {"--target=127.0.0.1:1", "extra"}, {"--target=127.0.0.1:1", "--timeout=0s"}} {
		err := run(context.Background(), append([]string{"challenge-hook", "wait-for-policy"}, args...), noEnv, nil, nil)
		assert.Error(t, err, "%v", args)
	}
}

// FuzzPolicyGate: for any sequence of probe outcomes, the gate opens exactly when the first run
// of silencesNeeded consecutive silent probes ends within its timeout, after exactly those probes;
// otherwise it stays shut until the timeout.
func FuzzPolicyGate(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1}, uint8(2))
	f.Add([]byte{1, 0, 1, 0, 2, 1}, uint8(2))
	f.Add([]byte{0}, uint8(1))
	f.Add([]byte{2, 2, 1}, uint8(3))
	f.Fuzz(func(t *testing.T, raw []byte, needed uint8) {
		if len(raw) == 0 || len(raw) > 200 {
			return
		}
		script := make([]probeOutcome, len(raw))
		for i, b := range raw {
			script[i] = probeOutcome(b % 3)
		}
		g, _ := scriptedGate(t, false, script...)
		g.silencesNeeded = int(needed%4) + 1
		g.timeout = 5 * time.Second

		// The model: walk the script with the same clock arithmetic.
		var elapsed time.Duration
		wantEnforced, wantProbes, run := false, 0, 0
		for i := 0; elapsed < g.timeout; i++ {
			o := script[min(i, len(script)-1)]
			wantProbes++
			if o == probeSilent {
				elapsed += g.probeTimeout
				if run++; run == g.silencesNeeded {
					wantEnforced = true
					break
				}
				continue
			}
			run = 0
			elapsed += g.interval
		}
		r, err := g.wait(context.Background())
		require.NoError(t, err)
		assert.Equal(t, wantEnforced, r.enforced)
		assert.Equal(t, wantProbes, r.probes)
		if r.enforced {
			for i := r.probes - g.silencesNeeded; i < r.probes; i++ {
				assert.Equal(t, probeSilent, script[min(i, len(script)-1)], "opened after probe %d, which was not silent", i)
			}
		}
	})
}
