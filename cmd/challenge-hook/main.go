// Command challenge-hook is a Metacontroller sync hook for per-participant CTF challenge instances.
// `challenge-hook [flags]` serves the hook; `challenge-hook render -f challenge.yaml` prints what the
// hook would answer, without a cluster.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "challenge-hook: %v\n", err)
		stop()
		os.Exit(1)
	}
}
