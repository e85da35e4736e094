// Command tcpgateway-load is the TCP gateway's loopback load run (make bench-gateway): it runs
// `challenge-hook tcp-gateway` as a child process in front of an echo instance served here, and
// measures each figure through the gateway and directly to the same instance, in the same run,
// alternating the two:
//
//   - connect: dial until the first byte echoed by the instance (through the gateway: the prompt
//     and the token on the way), p50 and p99;
//   - echo: a 1-byte round trip, over -open connections held open both ways at once, p50 and p99;
//   - bulk: MiB/s of -bulk-mib each way through the echo instance on one connection, and the
//     gateway's CPU time per GiB it spliced (utime+stime from /proc);
//   - new connections per second (connect, 1-byte echo, close, from -workers goroutines) and the
//     gateway's connections per CPU-second (its utime+stime from /proc);
//   - memory per idle connection: the gateway's RSS (/proc/<pid>/status VmRSS, a fresh child)
//     before and after opening each count of -idle spliced connections, divided by the count.
//
// Everything listens on 127.0.0.1; the child is stopped by its PID.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "tcpgateway-load: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	binary   string
	connects int
	open     int
	rounds   int
	bulkMiB  int
	workers  int
	rateFor  time.Duration
	idle     []int
}

func run() error {
	var o options
	var idle string
	flag.StringVar(&o.binary, "binary", "bin/challenge-hook", "the challenge-hook `binary` to run as the gateway")
	flag.IntVar(&o.connects, "connects", 2000, "connections timed for the connect latency, each way")
	flag.IntVar(&o.open, "open", 1000, "connections held open each way while echo latency is measured")
	flag.IntVar(&o.rounds, "rounds", 5, "1-byte echoes per open connection")
	flag.IntVar(&o.bulkMiB, "bulk-mib", 512, "MiB sent (and echoed) per bulk transfer")
	flag.IntVar(&o.workers, "workers", 8, "goroutines opening connections for the connection rate")
	flag.DurationVar(&o.rateFor, "rate-for", 5*time.Second, "duration of each connection-rate run")
	flag.StringVar(&idle, "idle", "1000,9500", "comma-separated counts of idle connections for the memory figure")
	flag.Parse()
	for _, s := range strings.Split(idle, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return fmt.Errorf("-idle %q: counts above 0", idle)
		}
		o.idle = append(o.idle, n)
	}

	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err == nil {
		fmt.Printf("RLIMIT_NOFILE %d (Go raises the soft limit to the hard one in every process)\n", limit.Max)
	}
	instance, err := startEcho(true)
	if err != nil {
		return err
	}
	defer instance.Close()
	quietInstance, err := startEcho(false)
	if err != nil {
		return err
	}
	defer quietInstance.Close()
	key := make([]byte, 32)
	rand.Read(key)
	keyText := base64.StdEncoding.EncodeToString(key)
	token, err := tcptoken.Mint([]byte(keyText), tcptoken.Target{Service: instance.Addr().(*net.TCPAddr).AddrPort()})
	if err != nil {
		return err
	}
	quietToken, err := tcptoken.Mint([]byte(keyText), tcptoken.Target{Service: quietInstance.Addr().(*net.TCPAddr).AddrPort()})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "tcpgateway-load")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(keyText+"\n"), 0o600); err != nil {
		return err
	}

	g, err := startGateway(o.binary, keyFile)
	if err != nil {
		return err
	}
	direct := func() (net.Conn, error) { return net.Dial("tcp4", instance.Addr().String()) }
	through := func() (net.Conn, error) { return dialGateway(g.addr, token) }

	fmt.Printf("\nconnect (dial to first echoed byte), %d connections each way, alternating\n", o.connects)
	var dConn, gConn []time.Duration
	for range o.connects {
		for _, p := range []struct {
			dial func() (net.Conn, error)
			d    *[]time.Duration
		}{{direct, &dConn}, {through, &gConn}} {
			start := time.Now()
			c, err := p.dial()
			if err == nil {
				err = echoByte(c)
				c.Close()
			}
			if err != nil {
				return fmt.Errorf("connect: %w", err)
			}
			*p.d = append(*p.d, time.Since(start))
		}
	}
	printLatency("connect", dConn, gConn)

	fmt.Printf("\necho (1 byte), %d connections open each way, %d rounds over all\n", o.open, o.rounds)
	var dOpen, gOpen []net.Conn
	for range o.open {
		dc, err := direct()
		if err != nil {
			return err
		}
		gc, err := through()
		if err != nil {
			return err
		}
		dOpen, gOpen = append(dOpen, dc), append(gOpen, gc)
	}
	var dEcho, gEcho []time.Duration
	for range o.rounds {
		for i := range o.open {
			for _, p := range []struct {
				c net.Conn
				d *[]time.Duration
			}{{dOpen[i], &dEcho}, {gOpen[i], &gEcho}} {
				start := time.Now()
				if err := echoByte(p.c); err != nil {
					return fmt.Errorf("echo: %w", err)
				}
				*p.d = append(*p.d, time.Since(start))
			}
		}
	}
	printLatency("echo", dEcho, gEcho)
	for i := range dOpen {
		dOpen[i].Close()
		gOpen[i].Close()
	}

	fmt.Printf("\nbulk, %d MiB each way on one connection, best of 3 alternating\n", o.bulkMiB)
	var dBest, gBest float64
	var gatewayCPU time.Duration
	for range 3 {
		for _, p := range []struct {
			dial func() (net.Conn, error)
			best *float64
			pid  int
		}{{direct, &dBest, 0}, {through, &gBest, g.cmd.Process.Pid}} {
			var before time.Duration
			if p.pid != 0 {
				if before, err = cpuTime(p.pid); err != nil {
					return err
				}
			}
			rate, err := bulk(p.dial, o.bulkMiB)
			if err != nil {
				return fmt.Errorf("bulk: %w", err)
			}
			*p.best = max(*p.best, rate)
			if p.pid != 0 {
				after, err := cpuTime(p.pid)
				if err != nil {
					return err
				}
				gatewayCPU += after - before
			}
		}
	}
	// Each transfer crosses the gateway twice (there and echoed back): 2 × 3 × bulk-mib.
	fmt.Printf("  direct %.0f MiB/s, gateway %.0f MiB/s: %.2f of direct; the gateway process: %.0f ms of CPU per GiB spliced\n",
		dBest, gBest, gBest/dBest, gatewayCPU.Seconds()*1000/(float64(2*3*o.bulkMiB)/1024))

	fmt.Printf("\nnew connections (connect, 1-byte echo, close), %d workers, %s each\n", o.workers, o.rateFor)
	dRate, _, err := connectionRate(direct, o.workers, o.rateFor, 0)
	if err != nil {
		return err
	}
	gRate, perCPU, err := connectionRate(through, o.workers, o.rateFor, g.cmd.Process.Pid)
	if err != nil {
		return err
	}
	fmt.Printf("  direct %.0f/s, gateway %.0f/s; the gateway process: %.0f connections per CPU-second\n", dRate, gRate, perCPU)
	g.stop()

	fmt.Printf("\nmemory per idle spliced connection: RSS of a fresh gateway process\n")
	g, err = startGateway(o.binary, keyFile)
	if err != nil {
		return err
	}
	defer g.stop()
	// Warm up: the runtime's first connections allocate what every later one reuses.
	through = func() (net.Conn, error) { return dialGateway(g.addr, quietToken) }
	for range 100 {
		c, err := through()
		if err != nil {
			return err
		}
		echoByte(c)
		c.Close()
	}
	time.Sleep(time.Second)
	base, err := rss(g.cmd.Process.Pid)
	if err != nil {
		return err
	}
	fmt.Printf("  baseline %.1f MiB\n", float64(base)/(1<<20))
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, n := range o.idle {
		for len(held) < n {
			c, err := through()
			if err == nil {
				err = echoByte(c)
			}
			if err != nil {
				return fmt.Errorf("idle connection %d: %w", len(held)+1, err)
			}
			held = append(held, c)
		}
		time.Sleep(2 * time.Second)
		now, err := rss(g.cmd.Process.Pid)
		if err != nil {
			return err
		}
		fmt.Printf("  %d idle connections: RSS %.1f MiB, %.1f KiB per connection above the baseline\n",
			n, float64(now)/(1<<20), float64(now-base)/float64(n)/1024)
	}
	return nil
}

// startEcho serves an echo instance on loopback: every byte back, the end passed on. spliced
// copies with io.Copy (splice(2), as a Go instance would); otherwise through a buffer, for the
// memory figure: splice holds a pipe, two more descriptors per connection of this process, which
// RLIMIT_NOFILE does not allow at thousands of connections.
func startEcho(spliced bool) (net.Listener, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if spliced {
					io.Copy(c, c)
					return
				}
				io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 64<<10))
			}()
		}
	}()
	return ln, nil
}

// gateway is the gateway's child process.
type gateway struct {
	cmd  *exec.Cmd
	addr string
}

// startGateway runs the gateway with limits that let one source and one token hold every
// connection of the run, and waits for its address.
func startGateway(binary, keyFile string) (*gateway, error) {
	cmd := exec.Command(binary, "tcp-gateway", "--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0", "--key-file="+keyFile,
		"--max-connections=100000", "--max-connections-per-token=100000", "--service-cidrs=127.0.0.0/8")
	// At the default log level, as deployed: a line per spliced connection, read and dropped here.
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	addr := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stderr)
		sent := false
		for scanner.Scan() {
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if !sent && json.Unmarshal(scanner.Bytes(), &entry) == nil && entry.Msg == "listening" {
				addr <- entry.Addr
				sent = true
			}
		}
	}()
	select {
	case a := <-addr:
		return &gateway{cmd: cmd, addr: a}, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, errors.New("the gateway did not log its address within 30s")
	}
}

// stop ends the child by its PID and waits for it.
func (g *gateway) stop() {
	g.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		g.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		g.cmd.Process.Kill()
		<-done
	}
}

// dialGateway connects through the gateway: the prompt, the token.
func dialGateway(addr, token string) (net.Conn, error) {
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		return nil, err
	}
	prompt := make([]byte, len("token: "))
	if _, err := io.ReadFull(c, prompt); err != nil {
		c.Close()
		return nil, fmt.Errorf("prompt: %w", err)
	}
	if _, err := io.WriteString(c, token+"\n"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func echoByte(c net.Conn) error {
	b := []byte{'x'}
	if _, err := c.Write(b); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if b[0] != 'x' {
		return fmt.Errorf("echoed %q", b)
	}
	return nil
}

// bulk sends mib MiB and reads them back at once, and returns MiB/s.
func bulk(dial func() (net.Conn, error), mib int) (float64, error) {
	c, err := dial()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := echoByte(c); err != nil {
		return 0, err
	}
	total := int64(mib) << 20
	start := time.Now()
	errs := make(chan error, 1)
	go func() {
		buf := bytes.Repeat([]byte{'b'}, 256<<10)
		var err error
		for sent := int64(0); sent < total && err == nil; sent += int64(len(buf)) {
			_, err = c.Write(buf)
		}
		errs <- err
	}()
	n, err := io.CopyN(io.Discard, c, total)
	if err != nil {
		return 0, fmt.Errorf("after %d bytes: %w", n, err)
	}
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(mib) / time.Since(start).Seconds(), nil
}

// connectionRate opens, echoes on and closes connections from workers goroutines for d, and
// returns the rate and, given the gateway's pid, the connections per CPU-second it spent.
func connectionRate(dial func() (net.Conn, error), workers int, d time.Duration, pid int) (float64, float64, error) {
	var cpuBefore time.Duration
	if pid != 0 {
		var err error
		if cpuBefore, err = cpuTime(pid); err != nil {
			return 0, 0, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var count atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := dial()
				if err == nil {
					err = echoByte(c)
					c.Close()
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, fmt.Errorf("connection rate: %w", firstErr)
	}
	rate := float64(count.Load()) / elapsed.Seconds()
	if pid == 0 {
		return rate, 0, nil
	}
	cpuAfter, err := cpuTime(pid)
	if err != nil {
		return 0, 0, err
	}
	return rate, float64(count.Load()) / (cpuAfter - cpuBefore).Seconds(), nil
}

// cpuTime is a process's user and system time (/proc/<pid>/stat fields 14 and 15).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its closing parenthesis.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// rss is a process's resident set size in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kib << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// printLatency prints p50 and p99 of both ways and what the gateway adds.
func printLatency(what string, direct, through []time.Duration) {
	p := func(d []time.Duration, q int) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)*q/100]
	}
	for _, q := range []int{50, 99} {
		fmt.Printf("  %s p%d: direct %s, gateway %s, added %s\n", what, q,
			p(direct, q).Round(time.Microsecond), p(through, q).Round(time.Microsecond), (p(through, q) - p(direct, q)).Round(time.Microsecond))
	}
}
