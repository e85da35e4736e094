package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
)

// probeOutcome is what one connection attempt to the gate's target says of the Pod's policy.
type probeOutcome int

const (
	// probeAnswered: the target accepted or refused (RST) the connection; nothing drops the Pod's
	// packets to it, so its NetworkPolicy, which denies the target, is not enforced yet.
	probeAnswered probeOutcome = iota
	// probeSilent: no answer within the probe timeout: the packets were dropped, as an enforced
	// policy drops them.
	probeSilent
	// probeFailed: any other error (no route, host unreachable): says nothing either way, and
	// never counts as enforced.
	probeFailed
)

func (o probeOutcome) String() string {
	switch o {
	case probeAnswered:
		return "answered"
	case probeSilent:
		return "silent"
	}
	return "failed"
}

// classifyDial turns a dial's result into an outcome. Only a timeout is silence: a refusal is an
// answer (a RST, or an ICMP port unreachable, came back through whatever filters the Pod).
func classifyDial(err error) probeOutcome {
	var netErr net.Error
	switch {
	case err == nil, errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET):
		return probeAnswered
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return probeSilent
	}
	return probeFailed
}

// dialFunc opens a TCP connection (net.Dialer.DialContext, or a fake in tests).
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// policyGate waits until its target stops answering, from inside the Pod's network namespace.
type policyGate struct {
	dial   dialFunc
	target string
	// timeout bounds the whole wait; probeTimeout one attempt; interval separates an answered or
	// failed attempt from the next.
	timeout, probeTimeout, interval time.Duration
	// silencesNeeded consecutive silent probes mean enforced: one lost answer is not a verdict.
	silencesNeeded int
	now            func() time.Time
	sleep          func(ctx context.Context, d time.Duration) error
}

// gateResult is how a wait went.
type gateResult struct {
	enforced bool
	elapsed  time.Duration
	probes   int
	last     probeOutcome
	lastErr  error
}

// wait probes until silencesNeeded consecutive probes go unanswered (enforced), or the timeout
// passes (not enforced), or ctx ends.
func (g policyGate) wait(ctx context.Context) (gateResult, error) {
	start := g.now()
	deadline := start.Add(g.timeout)
	var r gateResult
	silences := 0
	for {
		if !g.now().Before(deadline) {
			r.elapsed = g.now().Sub(start)
			return r, nil
		}
		probeCtx, cancel := context.WithTimeout(ctx, g.probeTimeout)
		conn, err := g.dial(probeCtx, "tcp", g.target)
		cancel()
		if conn != nil {
			conn.Close()
		}
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		r.probes++
		r.last, r.lastErr = classifyDial(err), err
		if r.last != probeSilent {
			silences = 0
			if err := g.sleep(ctx, g.interval); err != nil {
				return r, err
			}
			continue
		}
		silences++
		if silences >= g.silencesNeeded {
			r.enforced, r.elapsed = true, g.now().Sub(start)
			return r, nil
		}
	}
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Defaults of wait-for-policy, beside the hook's --policy-gate-timeout (its --timeout).
const (
	defaultProbeTimeout   = 500 * time.Millisecond
	defaultProbeInterval  = 100 * time.Millisecond
	defaultSilencesNeeded = 2
)

// runWaitForPolicy is `challenge-hook wait-for-policy`, the policy gate: the init container of
// every instance Pod. It exits 0 once the Pod's NetworkPolicy drops its packets to --target, and
// 1 after --timeout with a termination message (the hook quotes it in the instance's status).
func runWaitForPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := policyGate{
		dial:           (&net.Dialer{}).DialContext,
		timeout:        60 * time.Second,
		probeTimeout:   defaultProbeTimeout,
		interval:       defaultProbeInterval,
		silencesNeeded: defaultSilencesNeeded,
		now:            time.Now,
		sleep:          sleepContext,
	}
	terminationLog := "/dev/termination-log"
	fs := flag.NewFlagSet("wait-for-policy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flagfunc.Var(fs, "target", "", "`host:port` every instance's NetworkPolicy denies, and that answers (accepts or refuses) a Pod no policy selects", flagfunc.HostPort(&g.target))
	flagfunc.Var(fs, "timeout", g.timeout.String(), "give up after this `duration`", flagfunc.PositiveDuration(&g.timeout))
	flagfunc.Var(fs, "probe-timeout", g.probeTimeout.String(), "a probe unanswered for this `duration` was dropped", flagfunc.PositiveDuration(&g.probeTimeout))
	flagfunc.Var(fs, "interval", g.interval.String(), "`duration` between an answered probe and the next", flagfunc.PositiveDuration(&g.interval))
	flagfunc.Var(fs, "silences", fmt.Sprint(g.silencesNeeded), "`number` of consecutive dropped probes that mean the policy is enforced", flagfunc.PositiveInt(&g.silencesNeeded))
	fs.StringVar(&terminationLog, "termination-log", terminationLog, "`file` the reason of a failure is written to (the container's terminationMessagePath)")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "Usage: challenge-hook wait-for-policy --target host:port [flags]\n\n"+
			"The policy gate, the first (init) container of every instance Pod: exits 0 once the Pod's NetworkPolicy\n"+
			"drops its connections to --target, 1 when it still does not after --timeout.\n\nFlags:")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return nil
	}
	if err != nil {
		return fmt.Errorf("wait-for-policy: %w", err)
	}
	if g.target == "" || fs.NArg() > 0 {
		return errors.New("wait-for-policy: --target host:port is required, and nothing else")
	}
	r, err := g.wait(ctx)
	if err != nil {
		return fmt.Errorf("wait-for-policy: %w", err)
	}
	if r.enforced {
		fmt.Fprintf(stdout, "policy enforced after %.3fs: %s dropped %d probes in a row (%d probes)\n", r.elapsed.Seconds(), g.target, g.silencesNeeded, r.probes)
		return nil
	}
	var reason string
	switch r.last {
	case probeAnswered:
		reason = fmt.Sprintf("%s still answers after %s (%d probes): nothing drops this Pod's packets to it", g.target, g.timeout, r.probes)
	case probeSilent:
		reason = fmt.Sprintf("%s dropped fewer than %d probes in a row in %s (%d probes)", g.target, g.silencesNeeded, g.timeout, r.probes)
	default:
		reason = fmt.Sprintf("%s cannot be probed after %s (%d probes): %v", g.target, g.timeout, r.probes, r.lastErr)
	}
	if err := os.WriteFile(terminationLog, []byte(reason), 0o644); err != nil {
		fmt.Fprintf(stderr, "wait-for-policy: write the termination message: %v\n", err)
	}
	return errors.New("wait-for-policy: " + reason)
}
