package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// floorHandler is the least any JSON webhook must do: read the whole request body and write a
// response of the hook's size. Whatever the hook costs above this is the price of its own work.
func floorHandler(response []byte) http.Handler {
	contentLength := strconv.Itoa(len(response))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", contentLength)
		_, _ = w.Write(response)
	})
}

// floorMain serves the floor until ctx ends. It prints "listening on <addr>" first, so that the
// runner can start it on port 0 and learn the port without a race.
func floorMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on (loopback only)")
	responseFile := fs.String("response", "", "file holding the canned response body")
	if err := fs.Parse(args); err != nil {
		return err
	}
	response, err := os.ReadFile(*responseFile)
	if err != nil {
		return fmt.Errorf("floor: read canned response: %w", err)
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("floor: listen address %q: %w", *listen, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("floor: listen address %q is not a loopback address", *listen)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	// Same timeouts a production server would set; they cost nothing per request.
	srv := &http.Server{
		Handler:           floorHandler(response),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
	fmt.Printf("listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("floor: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("floor: shutdown: %w", err)
	}
	return nil
}
