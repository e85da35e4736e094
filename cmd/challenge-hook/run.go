package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
)

// run is the whole program: args include the program name; nothing here touches process globals.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	subcommands := map[string]func(args []string) error{
		"render":             func(args []string) error { return runRender(args, getenv, stdout, stderr) },
		"flag":               func(args []string) error { return runFlag(args, getenv, stdout, stderr) },
		"wait-for-policy":    func(args []string) error { return runWaitForPolicy(ctx, args, stdout, stderr) },
		"tcp-gateway":        func(args []string) error { return runTCPGateway(ctx, args, stderr) },
		"policy-gate-target": func(args []string) error { return runPolicyGateTarget(ctx, args, stdout, stderr) },
		"activity-stamper":   func(args []string) error { return runActivityStamper(ctx, args, stderr) },
		"platform":           func(args []string) error { return runPlatform(ctx, args, stderr) },
	}
	if len(args) > 1 {
		if subcommand, ok := subcommands[args[1]]; ok {
			return subcommand(args[2:])
		}
	}
	var programArgs []string
	if len(args) > 1 {
		programArgs = args[1:]
	}
	cfg, flags, err := parseServerConfig(programArgs, getenv)
	if errors.Is(err, flag.ErrHelp) {
		flags.usage(stderr, "challenge-hook [flags]\n       challenge-hook render -f challenge.yaml [-f definition.yaml] [flags] (render -h for its flags)\n       challenge-hook flag --definition <namespace>/<name> --owner <owner> --flag-key-file <file> (flag -h for its flags)\n       challenge-hook wait-for-policy --target host:port (the policy gate, run by every instance Pod; wait-for-policy -h for its flags)\n       challenge-hook tcp-gateway --key-file <file> (the TCP gateway; tcp-gateway -h for its flags)\n       challenge-hook policy-gate-target (the policy gate's target for kube-network-policies clusters; policy-gate-target -h for its flags)\n       challenge-hook activity-stamper (stamps the Challenges with the TCP gateways' activity; activity-stamper -h for its flags)\n       challenge-hook platform --rctf-token-file <file> --namespaces <names> (serves rCTF's instancer contract; platform -h for its flags)")
		return nil
	}
	if err != nil {
		return err
	}
	a, err := newApp(cfg, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	metricsLn, err := net.Listen("tcp", cfg.metricsListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	var verifyLn net.Listener
	if a.verifyHandler != nil {
		if verifyLn, err = net.Listen("tcp", cfg.verifyListen); err != nil {
			ln.Close()
			metricsLn.Close()
			return fmt.Errorf("--verify-listen: %w", err)
		}
	}
	return a.serve(ctx, ln, verifyLn, metricsLn)
}
