package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// raiseNoFile raises this process's soft RLIMIT_NOFILE to its hard limit, which its children
// inherit (Go raises its own soft limit by itself, but gives children the original one unless the
// program sets it), and returns the hard limit.
func raiseNoFile() (uint64, error) {
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		return 0, err
	}
	limit.Cur = limit.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		return 0, err
	}
	return limit.Max, nil
}

// loadAverage is /proc/loadavg's three load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// startEcho serves an echo instance on loopback: banner first when not empty, then every byte
// back, the end passed on. spliced copies with io.Copy (splice(2), as a Go instance would);
// otherwise through a buffer, for the memory figure: splice holds a pipe, two more descriptors
// per connection of this process, which RLIMIT_NOFILE does not allow at thousands of connections.
func startEcho(spliced bool, banner string) (net.Listener, error) {
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
				if banner != "" {
					if _, err := io.WriteString(c, banner); err != nil {
						return
					}
				}
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

// startInstance starts an echo instance (startEcho) and mints its token under key.
func startInstance(key []byte, spliced bool, banner string) (net.Listener, string, error) {
	ln, err := startEcho(spliced, banner)
	if err != nil {
		return nil, "", err
	}
	token, err := tcptoken.Mint(key, tcptoken.Target{Service: ln.Addr().(*net.TCPAddr).AddrPort()})
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	return ln, token, nil
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
// returns the rate and, given the pid of the process in between, the connections per CPU-second
// it spent.
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
		wg.Go(func() {
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
		})
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

// percentile is the q-th percentile of d (nearest rank below), 0 for none.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*q/100))]
}

// median of rates.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// goRuntimeSeries are the Go runtime's figures the idle memory is broken down into: where an
// idle connection's RSS goes (goroutine stacks, heap), and its goroutines.
var goRuntimeSeries = []string{"go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines"}

// goRuntime reads goRuntimeSeries from a gateway's metrics listener; nil when it has none (the
// ceiling, HAProxy) or did not answer.
func goRuntime(metricsAddr string) map[string]float64 {
	if metricsAddr == "" {
		return nil
	}
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		name, value, ok := strings.Cut(scanner.Text(), " ")
		if ok && slices.Contains(goRuntimeSeries, name) {
			out[name], _ = strconv.ParseFloat(value, 64)
		}
	}
	return out
}

// goRuntimePerConn says what the Go runtime holds per connection above the baseline: stacks and
// heap in KiB, goroutines; "" without figures.
func goRuntimePerConn(base, now map[string]float64, n int) string {
	if base == nil || now == nil {
		return ""
	}
	per := func(name string) float64 { return (now[name] - base[name]) / float64(n) }
	return fmt.Sprintf(" (Go runtime per connection: stacks %.1f KiB, heap %.1f KiB, %.1f goroutines)",
		per("go_memstats_stack_inuse_bytes")/1024, per("go_memstats_heap_inuse_bytes")/1024, per("go_goroutines"))
}
