//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
	"github.com/challenge-hook/challenge-hook/internal/platform"
	"github.com/challenge-hook/challenge-hook/internal/tcpgateway"
	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// terminalBanner is the first line the terminal test's instance writes to every connection.
const terminalBanner = "Welcome to the echo chamber: say something"

// TestPlayerPageTerminal plays a player who opens the player page's terminal in a real browser
// (headless Chromium, as TestPlayerPage): the page (the platform component's handler, over a fake
// API holding the team's Running instance whose endpoint has a webSocketURL) offers websocat's and
// wsrx's commands and an "Open a terminal" link; the terminal page (xterm.js served by the page)
// connects to an in-process TCP gateway's WebSocket listener on 127.0.0.1, which splices it to the
// instance (a server on 127.0.0.3 that writes a banner line, then answers each line it reads):
// the banner shows within 2 s, a typed line reaches the instance as the bytes typed and "\n", and
// the instance's answer shows; Ctrl-C closes the connection (the instance reads its end) and the
// page says so. No script error, no Content-Security-Policy violation (newBrowser's checks): the
// terminal page's policy admits the gateway's origin and xterm.js's styles, nothing else. Needs
// no cluster of its own (it runs in make e2e's suite, for the browser).
func TestPlayerPageTerminal(t *testing.T) {
	t.Parallel()
	ctx := e2eutil.TestContext(t)
	instance := startBannerEcho(t)
	wsURL := startWebSocketGateway(ctx, t, instance.addr)
	pageURL, linkKey := startPageOverFakeAPI(ctx, t, wsURL)

	b := newBrowser(t)
	openInstancePage(ctx, t, b, pageURL, linkKey, wsURL)

	opened := time.Now()
	b.click(t, "a.terminal")
	term := b.waitTerminal(ctx, t, 2*time.Second, "the instance's banner in the terminal within 2 s of the click", func(s terminalState) bool {
		return strings.Contains(s.Screen, terminalBanner)
	})
	t.Logf("banner %s after the click on a.terminal (%s), in a terminal of %d rows", time.Since(opened).Round(time.Millisecond), term.Path, term.Rows)
	if term.Status != "Connected" || term.State != "open" {
		t.Errorf("#terminal-status %q (data-state %q), want Connected (open)", term.Status, term.State)
	}

	// A line as a player types it, with a Backspace on the way: the instance reads the line as
	// edited, and its answer shows.
	typed := "hello, gateway?"
	if err := chromedp.Do(b.tab, typeKeys(typed+"\b!\r")); err != nil {
		t.Fatalf("type into the terminal: %v", err)
	}
	term = b.waitTerminal(ctx, t, 5*time.Second, "the instance's answer to the typed line", func(s terminalState) bool {
		return strings.Contains(s.Screen, "you said: hello, gateway!")
	})
	if lines := strings.Split(term.Screen, "\n"); !slices.Contains(lines, "hello, gateway!") {
		t.Errorf("the screen %q has no line %q: the terminal echoes what is typed, as edited (a cooked tty's echo)", term.Screen, "hello, gateway!")
	}
	if got := instance.received(); got != "hello, gateway!\n" {
		t.Errorf("the instance read %q, want %q (the line as edited, then \\n)", got, "hello, gateway!\n")
	}

	// Ctrl-C ends the connection, as nc's SIGINT would.
	if err := chromedp.Do(b.tab, chromedp.KeyEvent("c", chromedp.KeyModifiers(chromedp.ModifierCtrl))); err != nil {
		t.Fatalf("Ctrl-C: %v", err)
	}
	term = b.waitTerminal(ctx, t, 5*time.Second, "#terminal-status and the screen to say the connection closed", func(s terminalState) bool {
		return s.State == "closed" && strings.Contains(s.Screen, "[connection closed]")
	})
	if term.Status != "Connection closed" {
		t.Errorf("after Ctrl-C: #terminal-status %q, want Connection closed", term.Status)
	}
	select {
	case <-instance.ended:
	case <-time.After(5 * time.Second):
		t.Errorf("the instance did not read the end of its connection within 5 s of Ctrl-C")
	}
}

// openInstancePage opens team-terminal's page through a signed link, and checks that it shows
// the Running instance with websocat's and wsrx's commands for wsURL and a visible a.terminal
// (the page's script shows it; the binary embeds xterm.js).
func openInstancePage(ctx context.Context, t *testing.T, b *browser, pageURL string, linkKey []byte, wsURL string) {
	t.Helper()
	b.navigate(t, pageURL+"/i/open?"+platform.SignLink(linkKey, platform.Link{
		Namespace: "ctf", Definition: "pwn-echo", Owner: "team-terminal", Expires: time.Now().Add(2 * time.Minute)}).Encode())
	st := b.waitState(ctx, t, 15*time.Second, "the page to show the Running instance", func(s pageState) bool {
		return s.Path == "/i/ctf/pwn-echo/" && s.Phase == "Running"
	})
	for _, want := range []string{"websocat -b " + wsURL, "wsrx connect " + wsURL + " --port 1337", "nc 127.0.0.1 1337", wsURL} {
		if !slices.Contains(st.Commands, want) {
			t.Errorf("the page's commands %q lack %q", st.Commands, want)
		}
	}
	href, err := chromedp.Run(b.tab, chromedp.Evaluate[string](`(() => { const a = document.querySelector("a.terminal");
		return a && a.offsetParent !== null ? a.getAttribute("href") : ""; })()`))
	if err != nil || href == "" {
		t.Fatalf("no visible a.terminal on the page (%v): was the test built without xterm.js? hack/fetch-xterm.sh (which make e2e runs) fetches it", err)
	}
}

// bannerEcho is the terminal test's instance: on every connection it writes terminalBanner and
// "\n", then answers each line with "you said: <line>\n"; it records what it read.
type bannerEcho struct {
	addr  netip.AddrPort
	ended chan struct{} // closed when a connection reaches its end
	mu    sync.Mutex
	read  strings.Builder
}

func (e *bannerEcho) received() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.read.String()
}

func startBannerEcho(t *testing.T) *bannerEcho {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.3:0")
	if err != nil {
		t.Fatalf("the instance's listener on 127.0.0.3: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	e := &bannerEcho{addr: ln.Addr().(*net.TCPAddr).AddrPort(), ended: make(chan struct{})}
	var once sync.Once
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				defer once.Do(func() { close(e.ended) })
				if _, err := io.WriteString(conn, terminalBanner+"\n"); err != nil {
					return
				}
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					e.mu.Lock()
					e.read.WriteString(line)
					e.mu.Unlock()
					if err != nil {
						return
					}
					if _, err := io.WriteString(conn, "you said: "+strings.TrimSuffix(line, "\n")+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return e
}

// startWebSocketGateway runs a TCP gateway in-process, its WebSocket listener on 127.0.0.1, its
// Service CIDR the instance's loopback address alone, and returns the WebSocket URL of a token
// for the instance, as the hook's endpoint would carry it.
func startWebSocketGateway(ctx context.Context, t *testing.T, instance netip.AddrPort) string {
	t.Helper()
	cfg := tcpgateway.Defaults()
	cfg.Key = randomBytes(t, tcptoken.MinKeyBytes)
	cfg.ServiceCIDRs = []netip.Prefix{netip.PrefixFrom(instance.Addr(), 32)}
	cfg.ShutdownDelay, cfg.DrainTimeout = 0, time.Second
	gw, err := tcpgateway.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("the gateway: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gwCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- gw.ServeWebSocket(gwCtx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
			t.Errorf("the gateway's WebSocket listener: %v", err)
		}
	})
	token, err := tcptoken.Mint(cfg.Key, tcptoken.Target{Service: instance})
	if err != nil {
		t.Fatal(err)
	}
	return "ws://" + ln.Addr().String() + "/ws/" + token
}

// startPageOverFakeAPI serves the player page on 127.0.0.1 over a fake API (client-go's fake
// dynamic client, behind the component's own watches) that holds ChallengeDefinition ctf/pwn-echo,
// marked for the page, and team-terminal's Challenge of it, Running with one TCP gateway endpoint
// whose webSocketURL is wsURL; it returns the page's URL and the link key.
func startPageOverFakeAPI(ctx context.Context, t *testing.T, wsURL string) (string, []byte) {
	t.Helper()
	def := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.APIVersion, "kind": "ChallengeDefinition",
		"metadata": map[string]any{"namespace": "ctf", "name": "pwn-echo", "annotations": map[string]any{v1alpha1.AnnotationPlayerPage: "true"}},
		"spec":     map[string]any{"timeout": "30m"},
	}}
	token := wsURL[strings.LastIndex(wsURL, "/")+1:]
	chal := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.APIVersion, "kind": "Challenge",
		"metadata": map[string]any{"namespace": "ctf", "name": "pwn-echo-terminal", "labels": map[string]any{v1alpha1.LabelOwner: "team-terminal"}},
		"spec":     map[string]any{"definitionRef": map[string]any{"name": "pwn-echo"}, "owner": "team-terminal"},
		"status": map[string]any{"phase": v1alpha1.PhaseRunning, "reason": v1alpha1.ReasonReady,
			"expiresAt": time.Now().Add(30 * time.Minute).UTC().Format(time.RFC3339),
			"endpoints": []any{map[string]any{"name": "pwn", "protocol": "TCP", "host": "tcp.challenges.localhost", "port": int64(1337),
				"url": "tcp://tcp.challenges.localhost:1337", "command": "nc tcp.challenges.localhost 1337", "token": token, "webSocketURL": wsURL}}},
	}}
	gvr := func(resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: v1alpha1.Group, Version: v1alpha1.Version, Resource: resource}
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		gvr("challenges"): "ChallengeList", gvr("challengedefinitions"): "ChallengeDefinitionList"}, def, chal)
	kube, err := platform.NewKube(client, []string{"ctf"})
	if err != nil {
		t.Fatal(err)
	}
	if !kube.Start(ctx) {
		t.Fatal("the fake API's watches did not sync")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pageURL := "http://" + ln.Addr().String()
	linkKey := randomBytes(t, platform.MinLinkKeyBytes)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	instancer := platform.NewInstancer(kube, time.Now, logger, platform.RateLimit{Burst: 10, Every: time.Second})
	srv := &http.Server{Handler: platform.NewPageHandler(instancer, kube, platform.PageOptions{Keys: [][]byte{linkKey}, Origin: pageURL, Actions: platform.DefaultPageActions}),
		ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return pageURL, linkKey
}

// terminalState is what the test reads of the terminal page.
type terminalState struct {
	Path   string `json:"path"`
	Status string `json:"status"` // #terminal-status's text
	State  string `json:"state"`  // #terminal's data-state
	Screen string `json:"screen"` // the terminal's rows, as xterm.js renders them, one a line
	Rows   int    `json:"rows"`
}

const terminalStateJS = `(() => {
  const q = (s) => document.querySelector(s);
  const rows = [...document.querySelectorAll("#terminal .xterm-rows > div")];
  return {
    path: location.pathname,
    status: q("#terminal-status") ? q("#terminal-status").textContent : "",
    state: q("#terminal") ? q("#terminal").getAttribute("data-state") || "" : "",
    screen: rows.map((r) => r.textContent.replace(/\u00a0/g, " ").trimEnd()).join("\n"),
    rows: rows.length,
  };
})()`

// waitTerminal reads the terminal page every 50 ms until cond holds, and fails the test with the
// last state read when it does not within timeout.
func (b *browser) waitTerminal(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(terminalState) bool) terminalState {
	t.Helper()
	var last terminalState
	deadline := time.Now().Add(timeout)
	for {
		readCtx, cancel := context.WithTimeout(b.tab, time.Second)
		s, err := chromedp.Run(readCtx, chromedp.Evaluate[terminalState](terminalStateJS))
		cancel()
		if err == nil {
			last = s
			if cond(s) {
				return s
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not within %s; the terminal page: %+v (last read error: %v)", what, timeout, last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// typeKeys types text into the focused element as a keyboard does: per key, a keyDown that
// carries its text (as Chromium's own key events, Puppeteer's and Playwright's do), then a keyUp.
// chromedp's SendKeys and KeyEvent send the text in a separate char event instead, which
// xterm.js reads as a second key: every character twice.
func typeKeys(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, target *chromedp.Target) error {
		for _, r := range text {
			for _, ev := range kb.Encode(r) {
				if ev.Type == kb.KeyChar {
					continue
				}
				if ev.Type == kb.KeyDown {
					down := *ev
					if key, ok := kb.Keys[r]; ok && key.Print {
						down.Text, down.UnmodifiedText = key.Text, key.Unmodified
					} else if r == '\r' {
						down.Text = "\r"
					}
					ev = &down
				}
				if _, err := cdp.Call(ctx, target, input.DispatchKeyEvent, *ev); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
