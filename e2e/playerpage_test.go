//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
	"github.com/challenge-hook/challenge-hook/e2e/e2eutil"
	"github.com/challenge-hook/challenge-hook/internal/platform"
)

// playerPageScreenshot is the README's picture of the player page, rewritten by TestPlayerPage
// when UPDATE_SCREENSHOT=1 (never in CI).
const playerPageScreenshot = "docs/images/player-page.png"

// refusedText is what the page says to a link it refuses, and nothing more (it never says which check failed).
const refusedText = "This link is not valid or has expired. Go back to the platform and open the challenge again."

// TestPlayerPage plays a player in a real browser (headless Chromium, driven by chromedp) on the
// platform component's player page (`challenge-hook platform` as a process with its RBAC,
// startPlatformComponent, given a link key): a definition annotated for the page; a link signed
// as a CTF platform signs it (platform.SignLink) opens the page through its meta refresh, with no
// instance and a start form; start runs the instance, which the page shows Running without a
// reload (its script polls) with the `nc host port` of its NodePort; extend moves the expiry
// later; stop stops it. A link signed with another key gets the 403 page. At 320 px wide nothing
// scrolls sideways. No script error, no CSP violation in the console. UPDATE_SCREENSHOT=1 writes
// the running page to docs/images/player-page.png (1024x768).
func TestPlayerPage(t *testing.T) {
	t.Parallel()
	admin := newCluster(t)
	ctx := e2eutil.TestContext(t)
	ns := admin.createNamespace(ctx, t, "player-page", podSecurityRestricted)

	// The organizer lets players start this definition from the page.
	const timeout, team = 10 * time.Minute, "team-player-page"
	def := lifecycleChallenge("pwn-page", "ghcr.io/example/pwn:1.0", "")
	def.SetKind("ChallengeDefinition")
	def.Object["spec"] = template(def)
	maps.Copy(template(def), map[string]any{"timeout": "10m", "maxLifetime": "1h"})
	def.SetAnnotations(map[string]string{v1alpha1.AnnotationPlayerPage: "true"})
	createObject(ctx, t, admin, ns, def)

	linkKey := randomBytes(t, platform.MinLinkKeyBytes)
	component := startPlatformComponent(ctx, t, admin, ns, linkKey...)
	pagePath := "/i/" + ns + "/" + def.GetName() + "/"
	// A link as the CTF platform signs it, for this team's instance, valid for 2 minutes.
	signedLink := func(key []byte) string {
		return component.pageURL + "/i/open?" + platform.SignLink(key, platform.Link{
			Namespace: ns, Definition: def.GetName(), Owner: team, Expires: time.Now().Add(2 * time.Minute),
		}).Encode()
	}
	b := newBrowser(t)
	if err := chromedp.Do(b.tab, chromedp.EmulateViewport(1024, 768)); err != nil {
		t.Fatalf("the browser's viewport: %v", err)
	}

	// 1. The platform's link opens the page: a 200 with a meta refresh to the page, which shows no
	// instance and a start form.
	opened := b.navigate(t, signedLink(linkKey))
	if opened.Status != 200 {
		t.Errorf("GET /i/open with a valid link: HTTP %d, want 200 (a page whose meta refresh sets the session cookie)", opened.Status)
	}
	checkPageHeaders(t, "the valid link's answer", opened)
	st := b.waitState(ctx, t, 15*time.Second, "the meta refresh to land on "+pagePath, func(s pageState) bool {
		return s.Path == pagePath && s.Phase != ""
	})
	if st.Phase != "none" || !st.hasForm("start") {
		t.Fatalf("the page before any instance: #phase data-phase %q, forms %v; want none and form#start with a submit button", st.Phase, st.Forms)
	}
	if want := "post " + pagePath + "start"; st.Forms["start"] != want {
		t.Errorf("form#start: %q, want %q", st.Forms["start"], want)
	}

	// 2. Start: the script polls until Running, in the same document (the marker stays).
	b.eval(t, `window.e2eSameDocument = true`)
	started := time.Now()
	b.click(t, "form#start button[type=submit]")
	var phases []string
	st = b.waitState(ctx, t, 90*time.Second, "#phase to reach Running", func(s pageState) bool {
		if n := len(phases); s.Phase != "" && (n == 0 || phases[n-1] != s.Phase) {
			phases = append(phases, s.Phase)
		}
		return s.Phase == "Running"
	})
	t.Logf("Running %s after the click on start; the page showed %v", time.Since(started).Round(time.Millisecond), phases)
	if !st.SameDocument || st.Path != pagePath {
		t.Errorf("the page reloaded or navigated (to %s) between start and Running: want the script to poll and re-render in place", st.Path)
	}
	if st.PhaseText != "Running" {
		t.Errorf("#phase reads %q, want Running", st.PhaseText)
	}
	chal := teamInstance(ctx, t, admin, ns, team)
	if ref, _, _ := unstructured.NestedString(chal.Object, "spec", "definitionRef", "name"); ref != def.GetName() || spec(chal)["owner"] != team {
		t.Errorf("the page's start made Challenge %s for owner %v of definition %q, want %s's instance of %s", chal.GetName(), spec(chal)["owner"], ref, team, def.GetName())
	}
	endpoints, _, _ := unstructured.NestedSlice(chal.Object, "status", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("Challenge %s has status.endpoints %v, want the definition's one NodePort", chal.GetName(), endpoints)
	}
	ep, _ := endpoints[0].(map[string]any)
	wantCommand := fmt.Sprintf("nc %v %v", ep["host"], ep["port"])
	if !slices.Contains(st.Commands, wantCommand) {
		t.Errorf("#endpoints' code.command %q, want %q (Challenge %s's endpoint %v)", st.Commands, wantCommand, chal.GetName(), ep)
	}
	expires := st.expiresAt(t)
	if earliest, latest := started.Add(timeout-30*time.Second), time.Now().Add(timeout+5*time.Second); expires.Before(earliest) || expires.After(latest) {
		t.Errorf("#expires-in data-expires-at %s, want the definition's timeout (%s) after the start, from %s to %s", expires.Format(time.RFC3339), timeout,
			earliest.Format(time.RFC3339), latest.Format(time.RFC3339))
	}
	if !st.hasForm("extend") || !st.hasForm("stop") || st.hasForm("start") {
		t.Errorf("the forms of a Running instance: %v, want extend and stop, not start", st.Forms)
	}

	// 3. Extend: data-expires-at moves later (now + timeout: wait a second or two so that it can).
	if wait := time.Until(expires.Add(-timeout + 2*time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	extended := time.Now()
	b.click(t, "form#extend button[type=submit]")
	st = b.waitState(ctx, t, 30*time.Second, "#expires-in's data-expires-at to move later than "+expires.Format(time.RFC3339), func(s pageState) bool {
		at, err := time.Parse(time.RFC3339, s.ExpiresAt)
		return err == nil && at.After(expires)
	})
	if at := st.expiresAt(t); at.Before(extended.Add(timeout - 2*time.Second)) {
		t.Errorf("after extend, data-expires-at %s, want about %s (the timeout from the click)", at.Format(time.RFC3339), extended.Add(timeout).Format(time.RFC3339))
	}
	if !st.SameDocument || st.Phase != "Running" {
		t.Errorf("after extend: phase %q, same document %v; want Running, without a reload", st.Phase, st.SameDocument)
	}

	// The running page, as the README shows it; and at 320 px nothing scrolls sideways.
	if os.Getenv("UPDATE_SCREENSHOT") == "1" {
		b.screenshot(t, filepath.Join(admin.root, playerPageScreenshot))
	}
	b.checkNarrow(t, "the running page")

	// 4. Stop: Stopped, and the page offers start again.
	b.click(t, "form#stop button[type=submit]")
	st = b.waitState(ctx, t, 60*time.Second, "#phase to reach Stopped", func(s pageState) bool { return s.Phase == "Stopped" })
	if !st.SameDocument || !st.hasForm("start") || st.hasForm("stop") {
		t.Errorf("the stopped page: same document %v, forms %v; want no reload, start and no stop", st.SameDocument, st.Forms)
	}
	if stopped, _, _ := unstructured.NestedBool(mustGetChallenge(ctx, t, admin, ns, chal.GetName()).Object, "spec", "stopped"); !stopped {
		t.Errorf("Challenge %s is not spec.stopped after the page's stop", chal.GetName())
	}
	// The page loads afresh with the session cookie alone.
	reloaded := b.navigate(t, component.pageURL+pagePath)
	if reloaded.Status != 200 {
		t.Errorf("GET %s with the session cookie: HTTP %d, want 200", pagePath, reloaded.Status)
	}
	checkPageHeaders(t, "the page", reloaded)
	if st = b.state(t); st.Phase != "Stopped" {
		t.Errorf("the page loaded afresh shows data-phase %q, want Stopped", st.Phase)
	}
	b.checkNarrow(t, "the stopped page")

	// 5. A link signed with another key: the 403 page, which says what to do and nothing else.
	refused := b.navigate(t, signedLink(randomBytes(t, platform.MinLinkKeyBytes)))
	if refused.Status != 403 {
		t.Errorf("GET /i/open with a link signed under another key: HTTP %d, want 403", refused.Status)
	}
	checkPageHeaders(t, "the refusal", refused)
	st = b.state(t)
	if !strings.Contains(st.Refused, refusedText) {
		t.Errorf("the refusal's #refused reads %q (present: %v), want %q", st.Refused, st.HasRefused, refusedText)
	}
	if strings.Contains(strings.ToLower(st.Body), "signature") {
		t.Errorf("the refusal says which check failed: %q", st.Body)
	}
	b.checkNarrow(t, "the refusal")
}

// checkPageHeaders: an HTML answer of the page carries the headers every one must (the spec's
// Content-Security-Policy exactly).
func checkPageHeaders(t *testing.T, what string, resp *network.Response) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-store",
	}
	for name, value := range want {
		var got any
		for k, v := range resp.Headers {
			if strings.EqualFold(k, name) {
				got = v
			}
		}
		if got != value {
			t.Errorf("%s (%s): %s: %v, want %q", what, resp.URL, name, got, value)
		}
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// browser is one headless Chromium with one tab, and what its console said.
type browser struct {
	tab     context.Context
	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// newBrowser starts a headless Chromium (E2E_CHROMIUM, which hack/e2e.sh sets, else chromium on
// PATH) with a fresh profile in t.TempDir(), and records its console. When the test ends it logs
// the console, fails on a script exception or a Content-Security-Policy violation, and stops the
// browser (chromedp's allocator cancel kills it and waits for it), then checks that no process of
// that profile is left, killing and reporting any.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	execPath := os.Getenv("E2E_CHROMIUM")
	if execPath == "" {
		var err error
		if execPath, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("no browser: E2E_CHROMIUM is unset and chromium is not on PATH (make e2e installs Debian's): %v", err)
		}
	}
	// The profile is removed after the cleanup below has stopped the browser. Headless is among
	// chromedp's default options.
	profile := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath), chromedp.UserDataDir(profile), chromedp.WindowSize(1024, 768),
		// Chromium refuses to start as root with its sandbox ("Running as root without
		// --no-sandbox is not supported"): make e2e runs as root on CI machines and containers.
		// As any other user the sandbox stays on (chromedp would otherwise decide for us).
		chromedp.Flag("no-sandbox", os.Geteuid() == 0))
	allocCtx, stopBrowser := chromedp.NewExecAllocator(context.Background(), opts...)
	tab, closeTab := chromedp.NewContext(allocCtx)
	b := &browser{tab: tab}
	t.Cleanup(func() {
		closeTab()
		stopBrowser()
		if left := processesOfProfile(profile); len(left) > 0 {
			time.Sleep(3 * time.Second) // Chromium's children leave after its main process
			if left = processesOfProfile(profile); len(left) > 0 {
				for _, p := range left {
					_ = p.Kill()
				}
				t.Errorf("Chromium processes %v outlived the browser; killed", left)
			}
		}
	})
	if err := chromedp.Do(tab); err != nil { // starts the browser and opens the tab
		t.Fatalf("start %s: %v", execPath, err)
	}
	if version, err := chromedp.Run(tab, chromedp.Evaluate[string](`navigator.userAgent`)); err == nil {
		t.Logf("browser: %s (%s)", execPath, version)
	}
	console := chromedp.Console(tab)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { // before the browser stops
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, m := range b.console {
			t.Logf("console: %s", m)
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				t.Errorf("the page's console: %s", m)
			}
		}
	})
	return b
}

// processesOfProfile: the processes whose command line names the profile directory (Chromium
// gives --user-data-dir to each of its children).
func processesOfProfile(dir string) []*os.Process {
	entries, _ := os.ReadDir("/proc")
	var found []*os.Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "--user-data-dir="+dir) {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil {
			found = append(found, p)
		}
	}
	return found
}

// navigate loads url in the tab and returns the document's HTTP response.
func (b *browser) navigate(t *testing.T, url string) *network.Response {
	t.Helper()
	resp, err := chromedp.Run(b.tab, chromedp.NavigateResponse(url))
	if err != nil {
		t.Fatalf("navigate to %s: %v", url, err)
	}
	return resp
}

func (b *browser) click(t *testing.T, selector string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.tab, 10*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		t.Fatalf("click %s: %v (the page: %+v)", selector, err, b.state(t))
	}
}

func (b *browser) eval(t *testing.T, js string) {
	t.Helper()
	if err := chromedp.Do(b.tab, chromedp.Evaluate[chromedp.Void](js)); err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
}

// pageState is what the test reads of the page, by the spec's ids and classes.
type pageState struct {
	Path         string            `json:"path"`
	Phase        string            `json:"phase"`     // #phase's data-phase; "" without #phase
	PhaseText    string            `json:"phaseText"` // #phase's text
	ExpiresAt    string            `json:"expiresAt"` // #expires-in's data-expires-at
	Commands     []string          `json:"commands"`  // #endpoints code.command
	Forms        map[string]string `json:"forms"`     // form id -> "<method> <action path>", forms with a submit button
	HasRefused   bool              `json:"hasRefused"`
	Refused      string            `json:"refused"` // #refused's text
	Body         string            `json:"body"`
	SameDocument bool              `json:"sameDocument"` // the marker the test set in window is still there
	ScrollWidth  int               `json:"scrollWidth"`
}

const pageStateJS = `(() => {
  const q = (s) => document.querySelector(s);
  const text = (e) => (e ? e.textContent.replace(/\s+/g, " ").trim() : "");
  const phase = q("#phase"), expires = q("#expires-in"), refused = q("#refused");
  const forms = {};
  for (const f of document.querySelectorAll("form[id]")) {
    if (f.querySelector("button[type=submit]")) forms[f.id] = f.method + " " + new URL(f.action).pathname;
  }
  return {
    path: location.pathname,
    phase: phase ? phase.getAttribute("data-phase") || "" : "",
    phaseText: text(phase),
    expiresAt: expires ? expires.getAttribute("data-expires-at") || "" : "",
    commands: [...document.querySelectorAll("#endpoints code.command")].map(text),
    forms,
    hasRefused: !!refused,
    refused: text(refused),
    body: document.body ? document.body.innerText : "",
    sameDocument: window.e2eSameDocument === true,
    scrollWidth: document.documentElement.scrollWidth,
  };
})()`

func (s pageState) hasForm(id string) bool { _, ok := s.Forms[id]; return ok }

func (s pageState) expiresAt(t *testing.T) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s.ExpiresAt)
	if err != nil {
		t.Fatalf("#expires-in data-expires-at %q: %v", s.ExpiresAt, err)
	}
	return at
}

func (b *browser) readState() (pageState, error) {
	ctx, cancel := context.WithTimeout(b.tab, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[pageState](pageStateJS))
}

func (b *browser) state(t *testing.T) pageState {
	t.Helper()
	s, err := b.readState()
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	return s
}

// waitState reads the page every 100 ms until cond holds (a read during a navigation fails and
// is read again), and fails the test with the last state read when it does not within timeout.
func (b *browser) waitState(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(pageState) bool) pageState {
	t.Helper()
	var last pageState
	err := e2eutil.WaitUntil(ctx, timeout, what, func() (bool, error) {
		s, err := b.readState()
		if err != nil {
			return false, err
		}
		last = s
		return cond(s), nil
	})
	if err != nil {
		last.Body = strings.Join(strings.Fields(last.Body), " ")
		t.Fatalf("%v; the page: %+v", err, last)
	}
	return last
}

// checkNarrow: at 320 px wide the page scrolls only down (the viewport back at 1024x768 after).
func (b *browser) checkNarrow(t *testing.T, what string) {
	t.Helper()
	if err := chromedp.Do(b.tab, chromedp.EmulateViewport(320, 640)); err != nil {
		t.Fatalf("a 320 px viewport: %v", err)
	}
	if s := b.state(t); s.ScrollWidth > 320 {
		t.Errorf("%s at 320 px wide: document.documentElement.scrollWidth %d, want <= 320 (no horizontal scroll)", what, s.ScrollWidth)
	}
	if err := chromedp.Do(b.tab, chromedp.EmulateViewport(1024, 768)); err != nil {
		t.Fatalf("the 1024x768 viewport: %v", err)
	}
}

// screenshot writes the viewport (1024x768) as a PNG to path.
func (b *browser) screenshot(t *testing.T, path string) {
	t.Helper()
	png, err := chromedp.Run(b.tab, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}
