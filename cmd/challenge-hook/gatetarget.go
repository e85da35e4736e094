package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/flagfunc"
)

// runPolicyGateTarget is `challenge-hook policy-gate-target`, the process of the policy gate's
// target (manifests/components/policy-gate-target): it keeps a Pod whose network namespace has no
// listening TCP socket, so that the kernel refuses every connection to it with a RST. Silence means
// "enforced" to the gate, so its target must answer whatever else reaches it: a listener can be
// made silent by filling its accept queue, a closed port has no queue to fill (a SYN is answered
// where it arrives, statelessly). The process checks, at start and every --check-interval, that
// nothing listens beside it (a service mesh's sidecar would accept, and queue, connections), and
// exits with the reason when something does: the Pod restarts, leaves its Service's endpoints, and
// a Service without endpoints is refused by kube-proxy, which keeps every gate shut.
func runPolicyGateTarget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	interval := 10 * time.Second
	netDir := "/proc/self/net"
	fs := flag.NewFlagSet("policy-gate-target", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flagfunc.Var(fs, "check-interval", interval.String(), "how often (`duration`) to check that no TCP socket listens in this Pod", flagfunc.PositiveDuration(&interval))
	fs.StringVar(&netDir, "proc-net", netDir, "`directory` of this network namespace's tcp and tcp6 socket tables")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stderr, "Usage: challenge-hook policy-gate-target [flags]\n\n"+
			"The policy gate's target: holds a Pod in which nothing listens, so that its kernel refuses (RST) every\n"+
			"TCP connection, which no load can queue up. Exits 1 when a socket listens in the Pod.\n\nFlags:")
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return nil
	}
	if err != nil {
		return fmt.Errorf("policy-gate-target: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("policy-gate-target: unexpected arguments %q", fs.Args())
	}
	check := func() error {
		listening, err := listeningTCPPorts(netDir)
		if err != nil {
			return fmt.Errorf("policy-gate-target: %w", err)
		}
		if len(listening) > 0 {
			return fmt.Errorf("policy-gate-target: TCP sockets listen in this Pod (%s): they accept, and queue, connections that this Pod's kernel must refuse; "+
				"run it without sidecars (a service mesh's injection, say) and with nothing else in the Pod", strings.Join(listening, ", "))
		}
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "policy-gate-target: nothing listens in this Pod: its kernel refuses every TCP connection (RST)")
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := check(); err != nil {
				return err
			}
		}
	}
}

// tcpListen is the state LISTEN in /proc/net/tcp (include/net/tcp_states.h).
const tcpListen = "0A"

// listeningTCPPorts lists the sockets in state LISTEN of a network namespace's socket tables (the
// files tcp and tcp6 of netDir, /proc/self/net in a Pod), as "tcp port N" or "tcp6 port N".
func listeningTCPPorts(netDir string) ([]string, error) {
	var listening []string
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(filepath.Join(netDir, table))
		if errors.Is(err, os.ErrNotExist) && table == "tcp6" {
			continue // a kernel without IPv6
		}
		if err != nil {
			return nil, fmt.Errorf("read the socket table: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st ...; local_address is ADDRESS:PORT in hex.
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != tcpListen {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			port, err := strconv.ParseUint(hexPort, 16, 16)
			if !ok || err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: unreadable local address %q", table, fields[1])
			}
			listening = append(listening, fmt.Sprintf("%s port %d", table, port))
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
	}
	return listening, nil
}
