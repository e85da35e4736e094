package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// child is a process of the run (the gateway, HAProxy), stopped by its PID.
type child struct {
	name    string
	cmd     *exec.Cmd
	addr    string        // where players connect
	wsAddr  string        // where players connect with WebSocket; "" when the gateway has no such listener
	metrics string        // the gateway's metrics listener; "" for other children
	exited  chan struct{} // closed once Wait returned
	err     error         // Wait's, once exited is closed
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// start starts cmd and waits for it in the background.
func (c *child) start() error {
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.cmd.Path, err)
	}
	c.exited = make(chan struct{})
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	return nil
}

// stop ends the child by its PID (SIGTERM, SIGKILL after 40 s) and waits for it.
func (c *child) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(40 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
}

// gatewayHelp is the binary's `tcp-gateway -h` output.
func gatewayHelp(binary string) (string, error) {
	out, err := exec.Command(binary, "tcp-gateway", "-h").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s tcp-gateway -h: %w: %s", binary, err, out)
	}
	return string(out), nil
}

// knows says whether the -h output lists the flag name.
func knows(help, name string) bool {
	return regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(name) + `\b`).MatchString(help)
}

// gatewayArgs keeps the flags (--name=value) that help lists, and says which it left out: the run
// passes a flag beyond --listen, --metrics-listen and --key-file only when the binary knows it,
// so that it works with binaries from before and after a flag was added (--service-cidrs) or
// removed.
func gatewayArgs(help string, flags ...string) (kept []string, left []string) {
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if knows(help, name) {
			kept = append(kept, f)
		} else {
			left = append(left, f)
		}
	}
	return kept, left
}

// noted are the flags left out that startGateway said so of already.
var noted = map[string]bool{}

// startGateway runs the gateway with the flags given (those it knows) and GOMAXPROCS procs, and
// waits for its address. Its log, at the default level as deployed (a line per spliced
// connection), is read and dropped; lines holding "level":"ERROR" are printed.
func startGateway(binary, keyFile string, procs int, flags ...string) (*child, error) {
	help, err := gatewayHelp(binary)
	if err != nil {
		return nil, err
	}
	kept, left := gatewayArgs(help, flags...)
	if note := strings.Join(left, " "); note != "" && !noted[note] {
		fmt.Printf("  (this gateway binary has no %s: not passed)\n", note)
		noted[note] = true
	}
	args := append([]string{"tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--key-file=" + keyFile}, kept...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", procs))
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	c := &child{name: "gateway", cmd: cmd}
	if err := c.start(); err != nil {
		return nil, err
	}
	go func() {
		<-c.exited
		pw.Close()
	}()
	addr := make(chan [3]string, 1) // the TCP listener's, the WebSocket listener's, the metrics'
	go readGatewayLog(pr, addr)
	select {
	case a := <-addr:
		c.addr, c.wsAddr, c.metrics = a[0], a[1], a[2]
		return c, nil
	case <-c.exited:
		return nil, fmt.Errorf("the gateway exited before listening: %v", c.err)
	case <-time.After(30 * time.Second):
		c.stop()
		return nil, errors.New("the gateway did not log its address within 30s")
	}
}

// readGatewayLog reads the gateway's log to its end: it sends the addresses of its "listening"
// line to addr, prints the lines holding "level":"ERROR" and those that are no JSON, and drops the
// rest (read all the same: a full pipe would block the gateway).
func readGatewayLog(stderr io.Reader, addr chan<- [3]string) {
	scanner := bufio.NewScanner(stderr)
	sent := false
	for scanner.Scan() {
		var entry struct {
			Level       string `json:"level"`
			Msg         string `json:"msg"`
			Addr        string `json:"addr"`
			WSAddr      string `json:"websocket_addr"`
			MetricsAddr string `json:"metrics_addr"`
		}
		if json.Unmarshal(scanner.Bytes(), &entry) != nil {
			fmt.Printf("  gateway: %s\n", scanner.Bytes())
			continue
		}
		if !sent && entry.Msg == "listening" {
			addr <- [3]string{entry.Addr, entry.WSAddr, entry.MetricsAddr}
			sent = true
		}
		if entry.Level == "ERROR" {
			fmt.Printf("  gateway: %s\n", scanner.Bytes())
		}
	}
	io.Copy(io.Discard, stderr)
}

// haproxyInstall is how to get the HAProxy of the comparison on Debian.
const haproxyInstall = "apt-get install -y haproxy (Debian's HAProxy 2.6)"

// haproxyConfig is HAProxy as it is usually put in front of a TCP service: plain TCP mode, one
// frontend on loopback, one server, no logging, no health check, timeouts like the gateway's
// (5 s to connect, 15 minutes idle), as many threads as the gateway has Go procs, and maxconn
// high enough for every connection of the run.
const haproxyConfig = `global
    maxconn %[1]d
    nbthread %[2]d

defaults
    mode tcp
    maxconn %[1]d
    timeout connect 5s
    timeout client 15m
    timeout server 15m

frontend players
    bind %[3]s
    default_backend instance

backend instance
    server echo %[4]s
`

// startHAProxy runs HAProxy (in the foreground: -db) in front of backend with the configuration
// above, written to dir, and waits until it accepts connections.
func startHAProxy(binary, dir, backend string, maxconn, threads int) (*child, error) {
	// HAProxy does not say which port it got for port 0: take a free one from the kernel.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, haproxyConfig, maxconn, threads, addr, backend), 0o600); err != nil {
		return nil, err
	}
	var output bytes.Buffer
	cmd := exec.Command(binary, "-db", "-f", cfg)
	cmd.Stdout, cmd.Stderr = &output, &output
	c := &child{name: "haproxy", cmd: cmd, addr: addr}
	if err := c.start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-c.exited:
			return nil, fmt.Errorf("haproxy exited (%v): %s", c.err, output.String())
		default:
		}
		if conn, err := net.DialTimeout("tcp4", addr, time.Second); err == nil {
			conn.Close()
			return c, nil
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("haproxy did not accept connections within 30s: %s", output.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
