// Command loadrun is the load-run half of `make bench`: it serves the floor (a no-op net/http
// handler that answers a canned response), drives the real hook binary and the floor with the same
// load generator (wrk) over loopback keep-alive connections, and prints a report of the figures and
// the hook's ratios to the floor's. It holds the hook to no target: it exits non-zero only on an
// error (a server that does not start, wrk failing, a failed request).
//
//	loadrun floor -listen 127.0.0.1:0 -response response.json
//	loadrun run -hook bin/challenge-hook -hook-args "$(cat testdata/dev.flags)" -body request.json -gobench gobench.txt
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: loadrun floor|run [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "floor":
		err = floorMain(ctx, os.Args[2:])
	case "run":
		err = runMain(ctx, os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q: want floor or run", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadrun:", err)
		os.Exit(2)
	}
}
