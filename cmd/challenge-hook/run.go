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
	if len(args) > 1 && args[1] == "render" {
		return runRender(args[2:], getenv, stdout, stderr)
	}
	if len(args) > 1 && args[1] == "flag" {
		return runFlag(args[2:], getenv, stdout, stderr)
	}
	if len(args) > 1 && args[1] == "wait-for-policy" {
		return runWaitForPolicy(ctx, args[2:], stdout, stderr)
	}
	if len(args) > 1 && args[1] == "tcp-gateway" {
		return runTCPGateway(ctx, args[2:], stderr)
	}
	var programArgs []string
	if len(args) > 1 {
		programArgs = args[1:]
	}
	cfg, flags, err := parseServerConfig(programArgs, getenv)
	if errors.Is(err, flag.ErrHelp) {
		flags.usage(stderr, "challenge-hook [flags]\n       challenge-hook render -f challenge.yaml [-f definition.yaml] [flags] (render -h for its flags)\n       challenge-hook flag --definition <namespace>/<name> --owner <owner> --flag-key-file <file> (flag -h for its flags)\n       challenge-hook wait-for-policy --target host:port (the policy gate, run by every instance Pod; wait-for-policy -h for its flags)\n       challenge-hook tcp-gateway --key-file <file> (the TCP gateway; tcp-gateway -h for its flags)")
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
