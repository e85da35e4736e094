// ctfbox is the one static binary of make e2e-node's test images (hack/build-images.sh):
//
//	ctfbox serve         a challenge server: HTTP on :8080 (/ the flag, /healthz, /self what the
//	                     process sees of its sandbox, /fill?mib=N writes to /tmp), raw TCP on :1337 (the flag, then close) and a
//	                     UDP echo on :1337. The flag comes from $FLAG_ENV (default FLAG) or the file
//	                     $FLAG_FILE (default /flag.txt), as the hook delivers it.
//	ctfbox probe [-ignore-term] [-until-ok] [-listen :8080] [-interval 200ms] NAME=tcp|udp://HOST:PORT ...
//	                     an attacker: opens one new connection to every target every interval and
//	                     prints each result as a JSON line; POST /targets (lines NAME=URL) on the
//	                     listen address adds or replaces targets, GET /healthz answers ok.
//	                     Targets dns://HOST:PORT and dnstcp://HOST:PORT send one DNS query for
//	                     the A record of probe.ctf.test. (over UDP, over TCP) and count an answer
//	                     with an address. Targets tcpread://HOST:PORT count an answer only
//	                     once the first byte arrives (a player's first byte of the challenge);
//	                     with -until-ok a target is dropped after its first answer.
//	ctfbox dns [-listen :53] [-a 192.0.2.53]
//	                     a stand-in for the cluster DNS: answers every A query with one fixed
//	                     address (any other type: no record), on UDP and TCP
//	ctfbox flood [-rate 500] [-inflight 512] [-hold 30s] HOST:PORT ...
//	                     a flood: opens new TCP connections to each target at -rate a second,
//	                     up to -inflight at once, holds those accepted for -hold, and prints a
//	                     JSON line per target every second (attempts, connected, refused, timeouts,
//	                     and slow: answers that took longer than -slow)
//	ctfbox backlog [-port 8080] [-backlog 8]
//	                     a listener that never accepts: its accept queue fills with -backlog
//	                     connections, after which it drops new ones (a saturated server)
//	ctfbox crash CODE    exits with CODE after 200 ms
//	ctfbox oom           allocates and touches memory until the kernel kills it
//	ctfbox pause         sleeps until SIGTERM or SIGINT (the Pod sandbox image)
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ctfbox serve|probe|dns|flood|backlog|crash|oom|pause")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve()
	case "probe":
		probe(os.Args[2:])
	case "dns":
		dnsServer(os.Args[2:])
	case "flood":
		flood(os.Args[2:])
	case "backlog":
		backlogListener(os.Args[2:])
	case "crash":
		code, _ := strconv.Atoi(append(os.Args[2:], "1")[0])
		fmt.Println("crashing with exit code", code)
		time.Sleep(200 * time.Millisecond)
		os.Exit(code)
	case "oom":
		var keep [][]byte
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = byte(i)
			}
			keep = append(keep, b)
			if len(keep)%16 == 0 {
				fmt.Println("allocated MiB:", len(keep))
			}
		}
	case "pause":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
	default:
		fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
		os.Exit(2)
	}
}

// ---------------------------------------------------------------- serve

// readFlag returns the flag from the environment variable or the file, and where it came from.
func readFlag() (flag, source string) {
	env := envOr("FLAG_ENV", "FLAG")
	file := envOr("FLAG_FILE", "/flag.txt")
	if v := os.Getenv(env); v != "" {
		return v, "env " + env
	}
	if b, err := os.ReadFile(file); err == nil {
		return strings.TrimSpace(string(b)), "file " + file
	}
	return "", "none"
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func serve() {
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	started := hex.EncodeToString(nonce) // new for every process: a restart shows
	go serveTCPFlag()
	go serveUDPEcho()
	srv := &http.Server{Addr: ":8080", Handler: challengeMux(started), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		_ = srv.Close()
	}()
	fmt.Println("serving :8080 (HTTP), :1337 (TCP flag, UDP echo); started", started)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fatal(err)
	}
}

// challengeMux is serve's HTTP side; started is the process's nonce, which /self shows.
func challengeMux(started string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		f, _ := readFlag()
		fmt.Fprintln(w, f)
	})
	mux.HandleFunc("/self", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(self(started))
	})
	// /fill?mib=N writes N MiB to /tmp/fill: past the emptyDir's sizeLimit, the kubelet evicts the Pod.
	mux.HandleFunc("/fill", func(w http.ResponseWriter, r *http.Request) {
		mib, _ := strconv.Atoi(r.URL.Query().Get("mib"))
		if err := os.WriteFile("/tmp/fill", make([]byte, mib<<20), 0o600); err != nil {
			http.Error(w, err.Error(), http.StatusInsufficientStorage)
			return
		}
		fmt.Fprintln(w, "wrote", mib, "MiB to /tmp/fill")
	})
	return mux
}

// serveTCPFlag writes the flag to every connection on TCP :1337 and closes it.
func serveTCPFlag() {
	ln, err := net.Listen("tcp", ":1337")
	if err != nil {
		fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			continue
		}
		f, _ := readFlag()
		_, _ = fmt.Fprintln(c, f)
		_ = c.Close()
	}
}

// serveUDPEcho sends every datagram on UDP :1337 back to its sender.
func serveUDPEcho() {
	pc, err := net.ListenPacket("udp", ":1337")
	if err != nil {
		fatal(err)
	}
	buf := make([]byte, 1500)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err == nil {
			_, _ = pc.WriteTo(buf[:n], addr)
		}
	}
}

// self is what the process sees of its sandbox: the securityContext promises, checked from inside.
func self(started string) map[string]any {
	out := map[string]any{"started": started, "pid": os.Getpid(), "uid": os.Getuid(), "gid": os.Getgid()}
	groups, _ := os.Getgroups()
	out["groups"] = groups
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			switch v = strings.TrimSpace(v); {
			case !ok:
			case k == "CapEff" || k == "CapPrm" || k == "CapBnd" || k == "CapAmb" || k == "CapInh" || k == "NoNewPrivs" || k == "Seccomp":
				out[k] = v
			}
		}
	}
	out["rootWrite"] = writeErr("/probe-root")
	out["tmpWrite"] = writeErr("/tmp/probe")
	var st syscall.Statfs_t
	if err := syscall.Statfs("/tmp", &st); err == nil {
		out["tmpBytes"] = st.Blocks * uint64(st.Bsize)
	}
	_, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
	out["serviceAccountToken"] = err == nil
	var kube []string
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "KUBERNETES_") {
			kube = append(kube, e)
		}
	}
	out["kubernetesEnv"] = kube
	_, out["flagSource"] = readFlag()
	return out
}

// writeErr writes and removes a file: "" when that worked, else the error.
func writeErr(path string) string {
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		return err.Error()
	}
	_ = os.Remove(path)
	return ""
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// ---------------------------------------------------------------- probe

type result struct {
	T      time.Time `json:"t"`
	Target string    `json:"target"`
	OK     bool      `json:"ok"`
	Ms     float64   `json:"ms"`
	Err    string    `json:"err,omitempty"`
}

type targets struct {
	mu sync.Mutex
	m  map[string]string // name -> tcp://host:port or udp://host:port
}

func (t *targets) set(line string) error {
	name, url, ok := strings.Cut(strings.TrimSpace(line), "=")
	scheme, _, _ := strings.Cut(url, "://")
	if !ok || name == "" || !strings.Contains(url, "://") || !slices.Contains([]string{"tcp", "tcpread", "udp", "dns", "dnstcp"}, scheme) {
		return fmt.Errorf("target %q: want NAME=tcp|tcpread|udp|dns|dnstcp://HOST:PORT", line)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[name] = url
	return nil
}

func (t *targets) drop(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, name)
}

func (t *targets) snapshot() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.m))
	for k, v := range t.m {
		out[k] = v
	}
	return out
}

// jsonLines writes values as JSON lines to stdout from many goroutines, a whole line at a time.
type jsonLines struct {
	mu  sync.Mutex
	out *json.Encoder
}

func (j *jsonLines) emit(v any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	_ = j.out.Encode(v)
}

func probe(args []string) {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	ignoreTerm := fs.Bool("ignore-term", false, "ignore SIGTERM (a process that outlives its Pod's deletion until SIGKILL)")
	listen := fs.String("listen", ":8080", "control address (empty: none)")
	interval := fs.Duration("interval", 200*time.Millisecond, "time between two attempts on one target")
	timeout := fs.Duration("timeout", time.Second, "timeout of one attempt")
	untilOK := fs.Bool("until-ok", false, "drop a target after its first answer")
	_ = fs.Parse(args)
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	ts := &targets{m: map[string]string{}}
	for _, a := range fs.Args() {
		if err := ts.set(a); err != nil {
			fatal(err)
		}
	}
	out := &jsonLines{out: json.NewEncoder(os.Stdout)}
	if *listen != "" {
		go serveControl(*listen, ts)
	}
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for ; ; <-tick.C {
		for name, url := range ts.snapshot() {
			go func() {
				r := attempt(name, url, *timeout)
				if r.OK && *untilOK {
					ts.drop(name)
				}
				out.emit(r)
			}()
		}
	}
}

// serveControl serves probe's control address: GET /healthz, and /targets (POST: lines NAME=URL
// added or replaced; any other method: the targets as JSON).
func serveControl(listen string, ts *targets) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/targets", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			_ = json.NewEncoder(w).Encode(ts.snapshot())
			return
		}
		sc := bufio.NewScanner(io.LimitReader(r.Body, 1<<16))
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "" {
				continue
			}
			if err := ts.set(sc.Text()); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fatal(err)
	}
}

// attempt opens one new connection (so that the policy agent sees its first packet) and reports
// whether the peer answered: a TCP handshake, or a UDP datagram echoed.
func attempt(name, url string, timeout time.Duration) result {
	start := time.Now()
	r := result{T: start, Target: name}
	proto, addr, _ := strings.Cut(url, "://")
	if proto == "dns" || proto == "dnstcp" {
		return lookup(r, proto, addr, timeout)
	}
	network := proto
	if proto == "tcpread" {
		network = "tcp"
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		defer c.Close()
		switch proto {
		case "tcpread":
			_ = c.SetDeadline(start.Add(timeout))
			_, err = c.Read(make([]byte, 1))
		case "udp":
			_ = c.SetDeadline(start.Add(timeout))
			if _, err = c.Write([]byte("ping")); err == nil {
				buf := make([]byte, 16)
				_, err = c.Read(buf)
			}
		}
	}
	r.Ms = float64(time.Since(start).Microseconds()) / 1000
	r.OK = err == nil
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// ---------------------------------------------------------------- dns

// probeName is the name the probe looks up: fully qualified, so that no search domain is tried.
const probeName = "probe.ctf.test."

// lookup sends one query for probeName's A record to the server at addr, over UDP (dns) or TCP
// (dnstcp), with Go's own resolver: whatever the Pod's resolv.conf says, it asks addr only.
func lookup(r result, proto, addr string, timeout time.Duration) result {
	network := "udp"
	if proto == "dnstcp" {
		network = "tcp" // a connection that is no PacketConn: the resolver frames its query for TCP
	}
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ips, err := resolver.LookupIP(ctx, "ip4", probeName)
	if err == nil && len(ips) == 0 {
		err = errors.New("no address in the answer")
	}
	r.Ms = float64(time.Since(r.T).Microseconds()) / 1000
	r.OK = err == nil
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

func dnsServer(args []string) {
	fs := flag.NewFlagSet("dns", flag.ExitOnError)
	listen := fs.String("listen", ":53", "UDP and TCP address")
	a := fs.String("a", "192.0.2.53", "the address of every A record")
	_ = fs.Parse(args)
	addr := net.ParseIP(*a).To4()
	if addr == nil {
		fatal(fmt.Errorf("-a %q: not an IPv4 address", *a))
	}
	pc, err := net.ListenPacket("udp", *listen)
	if err != nil {
		fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fatal(err)
	}
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				continue
			}
			if reply := dnsReply(buf[:n], addr); reply != nil {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				continue
			}
			go serveDNSStream(c, addr)
		}
	}()
	fmt.Println("answering A queries with", addr, "on", *listen, "(UDP and TCP)")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}

// serveDNSStream answers the queries of one TCP connection, each framed by its 2-byte length.
func serveDNSStream(c net.Conn, addr net.IP) {
	defer c.Close()
	for {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		reply := dnsReply(query, addr)
		if reply == nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(reply))), reply...)); err != nil {
			return
		}
	}
}

// dnsReply answers a query of one question (RFC 1035 section 4): an A record of addr for an A
// question, no record for any other; nil for what is no query.
func dnsReply(query []byte, addr net.IP) []byte {
	const headerLen = 12
	if len(query) < headerLen || query[2]&0x80 != 0 || binary.BigEndian.Uint16(query[4:6]) != 1 {
		return nil
	}
	end := headerLen
	for end < len(query) && query[end] != 0 { // the question's name: labels, then a zero byte
		end += int(query[end]) + 1
	}
	end += 1 + 4 // the zero byte, QTYPE, QCLASS
	if end > len(query) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(query[end-4 : end-2])
	reply := append([]byte(nil), query[:end]...)
	reply[2] = 0x80 | 0x04 | query[2]&0x79      // QR, AA, the query's opcode and RD
	reply[3] = 0                                // no error
	binary.BigEndian.PutUint16(reply[8:10], 0)  // NSCOUNT
	binary.BigEndian.PutUint16(reply[10:12], 0) // ARCOUNT
	binary.BigEndian.PutUint16(reply[6:8], 0)   // ANCOUNT
	if qtype == 1 {
		binary.BigEndian.PutUint16(reply[6:8], 1)
		reply = append(reply, 0xc0, headerLen)              // the question's name, by pointer
		reply = append(reply, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4) // A, IN, TTL 0, RDLENGTH 4
		reply = append(reply, addr...)
	}
	return reply
}

// ---------------------------------------------------------------- flood, backlog

// floodCounts is one target's tally over one second.
type floodCounts struct {
	T                                                    time.Time `json:"t"`
	Target                                               string    `json:"target"`
	Attempts, Connected, Refused, Timeouts, Others, Slow int64
}

// floodOptions are flood's flags.
type floodOptions struct {
	rate, inflight      int
	hold, timeout, slow time.Duration
}

func flood(args []string) {
	fs := flag.NewFlagSet("flood", flag.ExitOnError)
	var o floodOptions
	fs.IntVar(&o.rate, "rate", 500, "new connections a second, per target")
	fs.IntVar(&o.inflight, "inflight", 512, "connections attempted or held at once, per target")
	fs.DurationVar(&o.hold, "hold", 30*time.Second, "how long an accepted connection is held open")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "timeout of one attempt")
	fs.DurationVar(&o.slow, "slow", 500*time.Millisecond, "an answer (connected or refused) later than this is counted slow too")
	_ = fs.Parse(args)
	if fs.NArg() == 0 || o.rate <= 0 || o.inflight <= 0 {
		fatal(errors.New("flood: want -rate > 0, -inflight > 0 and HOST:PORT targets"))
	}
	out := &jsonLines{out: json.NewEncoder(os.Stdout)}
	for _, target := range fs.Args() {
		go floodTarget(target, o, out)
	}
	select {}
}

// floodTally is one target's counts of the current second, which its attempts add to.
type floodTally struct {
	mu     sync.Mutex
	counts floodCounts
}

// floodTarget attempts a connection to target every 1/rate s while a slot of -inflight is free,
// and writes the target's tally every second.
func floodTarget(target string, o floodOptions, out *jsonLines) {
	tally := &floodTally{counts: floodCounts{Target: target}}
	slots := make(chan struct{}, o.inflight)
	report := time.NewTicker(time.Second)
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	for {
		select {
		case now := <-report.C:
			tally.mu.Lock()
			tally.counts.T = now
			out.emit(tally.counts)
			tally.counts = floodCounts{Target: target}
			tally.mu.Unlock()
		case <-tick.C:
			select {
			case slots <- struct{}{}:
			default:
				continue // every slot busy: this tick's connection is not attempted
			}
			go func() {
				defer func() { <-slots }()
				tally.attempt(target, o)
			}()
		}
	}
}

// attempt connects to target once, counts how that went, and holds an accepted connection for
// -hold.
func (t *floodTally) attempt(target string, o floodOptions) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", target, o.timeout)
	took := time.Since(start)
	t.mu.Lock()
	t.counts.Attempts++
	answered := err == nil || errors.Is(err, syscall.ECONNREFUSED)
	if answered && took > o.slow {
		t.counts.Slow++
	}
	var netErr net.Error
	switch {
	case err == nil:
		t.counts.Connected++
	case errors.Is(err, syscall.ECONNREFUSED):
		t.counts.Refused++
	case errors.As(err, &netErr) && netErr.Timeout():
		t.counts.Timeouts++
	default:
		t.counts.Others++
	}
	t.mu.Unlock()
	if c != nil {
		time.Sleep(o.hold)
		c.Close()
	}
}

// backlogListener listens with a small accept queue and never accepts: once the queue is full,
// the kernel drops new SYNs, and the listener is silent to everyone.
func backlogListener(args []string) {
	fs := flag.NewFlagSet("backlog", flag.ExitOnError)
	port := fs.Int("port", 8080, "TCP port, on every address")
	backlog := fs.Int("backlog", 8, "length of the accept queue")
	_ = fs.Parse(args)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: *port}); err != nil {
		fatal(err)
	}
	if err := syscall.Listen(fd, *backlog); err != nil {
		fatal(err)
	}
	fmt.Printf("listening on :%d with an accept queue of %d, never accepting\n", *port, *backlog)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
