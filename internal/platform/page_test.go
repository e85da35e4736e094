package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The player page over the fake store, as a browser speaks to it: a signed link traded for a
// session cookie, the page and its /status, and its actions, each refusal checked to write
// nothing.

const testPageOrigin = "https://play.ctf.example.org"

// pageFake is the fake store with what the page needs beyond the contract: definitions by name,
// and restarts (spec.restartedAt), which the contract never writes.
type pageFake struct{ *fakeStore }

func (s pageFake) Definition(namespace, name string) *v1alpha1.ChallengeDefinition {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.definitions {
		if d.Namespace == namespace && d.Name == name {
			return d
		}
	}
	return nil
}

func (s pageFake) Patch(ctx context.Context, namespace, name string, mergePatch []byte) (*v1alpha1.Challenge, error) {
	var patch struct {
		Spec struct {
			RestartedAt *string `json:"restartedAt"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(mergePatch, &patch); err != nil || patch.Spec.RestartedAt == nil {
		return s.fakeStore.Patch(ctx, namespace, name, mergePatch)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	restarted := *s.challenges[namespace+"/"+name]
	restarted.Spec.RestartedAt = *patch.Spec.RestartedAt
	s.challenges[namespace+"/"+name] = &restarted
	s.patches++
	return &restarted, nil
}

// pageDefinition is a definition of namespace ctf, marked for the page when marked, living 30m,
// 2h at most.
func pageDefinition(name string, marked bool, flag *v1alpha1.Flag) *v1alpha1.ChallengeDefinition {
	d := definition(name, "", flag)
	d.Spec.Timeout = "30m"
	if marked {
		d.Annotations = map[string]string{v1alpha1.AnnotationPlayerPage: "true"}
	}
	return d
}

type pageTest struct {
	t       *testing.T
	store   *fakeStore
	now     time.Time
	handler http.Handler
	logs    *bytes.Buffer
}

func newPageTest(t *testing.T, origin string, actions RateLimit) *pageTest {
	return newPageTestTerminal(t, origin, actions, embedsXterm())
}

// newPageTestTerminal is newPageTest whose page offers a terminal (on) or not, as a binary built
// with or without xterm.js would, whatever this checkout's assets/xterm/ holds.
func newPageTestTerminal(t *testing.T, origin string, actions RateLimit, terminal bool) *pageTest {
	p := &pageTest{t: t, now: testNow, logs: &bytes.Buffer{}}
	clock := func() time.Time { return p.now }
	p.store = newFakeStore(clock, pageDefinition("pwn-heap", true, nil), pageDefinition("web-notes", true, nil),
		pageDefinition("platform-flag", true, &v1alpha1.Flag{Platform: true, Env: "FLAG"}), pageDefinition("unmarked", false, nil))
	logger := slog.New(slog.NewJSONHandler(p.logs, nil))
	instancer := NewInstancer(pageFake{p.store}, clock, logger, RateLimit{Burst: 100, Every: time.Second})
	p.handler = newPageHandler(instancer, pageFake{p.store}, PageOptions{Keys: [][]byte{linkKey, previousLinkKey}, Origin: origin, Actions: actions}, terminal)
	return p
}

func newPage(t *testing.T) *pageTest {
	return newPageTest(t, testPageOrigin, RateLimit{Burst: 100, Every: time.Second})
}

// newPageWithTerminal is newPage offering a terminal (on) or not.
func newPageWithTerminal(t *testing.T, on bool) *pageTest {
	return newPageTestTerminal(t, testPageOrigin, RateLimit{Burst: 100, Every: time.Second}, on)
}

// session is the cookie of owner's session on namespace/definition.
func (p *pageTest) session(owner, namespace, definition string) *http.Cookie {
	s := Session{Namespace: namespace, Definition: definition, Owner: owner, Expires: p.now.Add(SessionLifetime).Unix()}
	return &http.Cookie{Name: sessionCookie, Value: SealSession([][]byte{linkKey}, s)}
}

func (p *pageTest) do(method, target string, cookie *http.Cookie, header http.Header) *http.Response {
	p.t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if cookie != nil {
		r.AddCookie(cookie)
	}
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	p.handler.ServeHTTP(w, r)
	return w.Result()
}

func (p *pageTest) get(target string, cookie *http.Cookie) (*http.Response, string) {
	p.t.Helper()
	resp := p.do(http.MethodGet, target, cookie, nil)
	body, err := io.ReadAll(resp.Body)
	require.NoError(p.t, err)
	return resp, string(body)
}

// act posts action as the page's form does, from origin.
func (p *pageTest) act(action string, cookie *http.Cookie, origin string) *http.Response {
	p.t.Helper()
	return p.do(http.MethodPost, "/i/ctf/pwn-heap/"+action, cookie, http.Header{"Origin": {origin}})
}

// status is the page's /status, decoded.
func (p *pageTest) status(cookie *http.Cookie) pageStatus {
	p.t.Helper()
	resp, body := p.get("/i/ctf/pwn-heap/status", cookie)
	require.Equal(p.t, http.StatusOK, resp.StatusCode, body)
	var s pageStatus
	require.NoError(p.t, json.Unmarshal([]byte(body), &s))
	return s
}

// link is the query of a link signed with key.
func (p *pageTest) link(key []byte, l Link) string {
	return "/i/open?" + SignLink(key, l).Encode()
}

func (p *pageTest) validLink() Link {
	return Link{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: p.now.Add(2 * time.Minute)}
}

// assertPageHeaders checks what every HTML answer carries.
func assertPageHeaders(t *testing.T, resp *http.Response, what string) {
	t.Helper()
	assert.Equal(t, "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		resp.Header.Get("Content-Security-Policy"), what)
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), what)
	assert.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"), what)
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"), what)
}

func assertRefused(t *testing.T, resp *http.Response, body string, status int, what string) {
	t.Helper()
	assert.Equal(t, status, resp.StatusCode, what)
	assert.Regexp(t, `<p id="refused"[^>]*>`, body, what)
	assert.Empty(t, resp.Cookies(), "%s: a refusal sets no cookie", what)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"), what)
	assertPageHeaders(t, resp, what)
}

func TestPageOpen(t *testing.T) {
	for origin, secure := range map[string]bool{testPageOrigin: true, "http://127.0.0.1:8081": false} {
		p := newPageTest(t, origin, DefaultPageActions)
		resp, body := p.get(p.link(linkKey, p.validLink()), nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode, body)
		assertPageHeaders(t, resp, origin)
		assert.Contains(t, body, `<meta http-equiv="refresh" content="0;url=/i/ctf/pwn-heap/">`)
		assert.Contains(t, body, `<a id="continue" href="/i/ctf/pwn-heap/">`)
		require.Len(t, resp.Cookies(), 1)
		c := resp.Cookies()[0]
		assert.Equal(t, sessionCookie, c.Name)
		assert.Equal(t, "/i/ctf/pwn-heap/", c.Path)
		assert.True(t, c.HttpOnly, "the script never reads the session")
		assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
		assert.Equal(t, secure, c.Secure, origin)
		assert.Equal(t, int(SessionLifetime/time.Second), c.MaxAge)
		s, err := OpenSession([][]byte{linkKey}, c.Value, p.now)
		require.NoError(t, err)
		assert.Equal(t, Session{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: p.now.Add(SessionLifetime).Unix()}, s)

		page, body := p.get("/i/ctf/pwn-heap/", c)
		assert.Equal(t, http.StatusOK, page.StatusCode, "the cookie opens the page")
		assert.Contains(t, body, `id="phase" data-phase="none"`)
	}
	p := newPage(t)
	resp, _ := p.get(p.link(previousLinkKey, p.validLink()), nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the previous key still opens links during a rotation")
}

func TestPageOpenRefused(t *testing.T) {
	p := newPage(t)
	good := p.validLink()
	altered := func(field, value string) string {
		q := SignLink(linkKey, good)
		q.Set(field, value)
		return "/i/open?" + q.Encode()
	}
	other := good
	other.Expires = p.now.Add(-time.Second)
	for name, target := range map[string]string{
		"forged":           p.link([]byte("somebody else's key, 32+ bytes long..."), good),
		"expired":          p.link(linkKey, other),
		"other owner":      altered("owner", "team-43"),
		"other definition": altered("def", "web-notes"),
		"later expiry":     altered("exp", "1796389900"),
		"no signature":     altered("sig", ""),
		"no query":         "/i/open",
	} {
		resp, body := p.get(target, nil)
		assertRefused(t, resp, body, http.StatusForbidden, name)
		assert.Contains(t, body, "This link is not valid or has expired. Go back to the platform and open the challenge again.", name)
		assert.NotContains(t, body, "signature", "%s: the page says what to do, not which check failed", name)
	}
	assert.Contains(t, p.logs.String(), "wrong signature", "the log says which check failed")
}

// The page, its /status and its actions need a session for exactly their namespace and
// definition.
func TestPageNeedsItsSession(t *testing.T) {
	p := newPage(t)
	expired := Session{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: p.now.Unix()}
	for name, cookie := range map[string]*http.Cookie{
		"no session":             nil,
		"another definition's":   p.session("team-42", "ctf", "web-notes"),
		"another namespace's":    p.session("team-42", "ctf-b", "pwn-heap"),
		"under another key":      {Name: sessionCookie, Value: SealSession([][]byte{[]byte("not the key, but 32 bytes or more.......")}, Session{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: p.now.Add(time.Hour).Unix()})},
		"expired":                {Name: sessionCookie, Value: SealSession([][]byte{linkKey}, expired)},
		"a link's query instead": {Name: sessionCookie, Value: SignLink(linkKey, p.validLink()).Encode()},
	} {
		resp, body := p.get("/i/ctf/pwn-heap/", cookie)
		assertRefused(t, resp, body, http.StatusForbidden, name)
		assert.Contains(t, body, refusedLink, name)
		resp, body = p.get("/i/ctf/pwn-heap/status", cookie)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, name)
		assert.JSONEq(t, `{"error":"`+refusedLink+`"}`, body, name)
		for _, action := range []string{actionStart, actionExtend, actionRestart, actionStop, actionDelete} {
			resp := p.act(action, cookie, testPageOrigin)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, action)
		}
		assert.Zero(t, p.store.writes(), name)
	}
}

func TestPageHoldsNoFlagAndEscapesTheStatus(t *testing.T) {
	p := newPage(t)
	cookie := p.session("team-42", "ctf", "pwn-heap")
	p.store.definitions[0].Spec.Flag = &v1alpha1.Flag{Value: "flag{static-secret}", Env: "FLAG"}
	require.Equal(t, http.StatusSeeOther, p.act(actionStart, cookie, testPageOrigin).StatusCode)
	key := p.store.keys()[0]
	p.store.challenges[key].Spec.Flag = "flag{instance-secret}"
	hostile := `<script>alert(1)</script>`
	p.store.sync(key, v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseError, Reason: v1alpha1.ReasonCrashLoopBackOff, Message: hostile,
		ExpiresAt: p.now.Add(time.Hour).Format(time.RFC3339)})

	resp, body := p.get("/i/ctf/pwn-heap/", cookie)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assertPageHeaders(t, resp, "the page")
	assert.Contains(t, body, `<p id="message">CrashLoopBackOff: &lt;script&gt;alert(1)&lt;/script&gt;</p>`)
	assert.NotContains(t, body, hostile)
	assert.NotContains(t, body, "flag{")

	_, raw := p.get("/i/ctf/pwn-heap/status", cookie)
	assert.NotContains(t, raw, "flag{")
	assert.NotContains(t, raw, "<script>", "the JSON escapes it too")
	assert.Equal(t, "CrashLoopBackOff: "+hostile, p.status(cookie).Message)
}

func TestPageHeadersOnEveryAnswer(t *testing.T) {
	p := newPage(t)
	cookie := p.session("team-42", "ctf", "pwn-heap")
	for what, resp := range map[string]*http.Response{
		"the page":          p.do(http.MethodGet, "/i/ctf/pwn-heap/", cookie, nil),
		"a link":            p.do(http.MethodGet, p.link(linkKey, p.validLink()), nil, nil),
		"a refused link":    p.do(http.MethodGet, "/i/open?sig=00", nil, nil),
		"no such page":      p.do(http.MethodGet, "/i/ctf/pwn-heap/nothing/here", cookie, nil),
		"a refused action":  p.act(actionStart, cookie, "https://evil.example.org"),
		"an action":         p.act(actionStart, cookie, testPageOrigin),
		"an unmarked one":   p.do(http.MethodGet, "/i/ctf/unmarked/", p.session("team-42", "ctf", "unmarked"), nil),
		"the status (JSON)": p.do(http.MethodGet, "/i/ctf/pwn-heap/status", cookie, nil),
	} {
		assertPageHeaders(t, resp, what)
	}
}

func TestPageAssets(t *testing.T) {
	p := newPage(t)
	for file, contentType := range map[string]string{"page.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml",
		"terminal.js": "text/javascript; charset=utf-8"} {
		resp, body := p.get("/i/assets/"+file, nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode, file)
		assert.Equal(t, contentType, resp.Header.Get("Content-Type"), file)
		assert.NotEmpty(t, body, file)
		assert.NotRegexp(t, `https?://`, strings.ReplaceAll(body, `xmlns="http://www.w3.org/2000/svg"`, ""), "%s loads nothing from elsewhere", file)
		again := p.do(http.MethodGet, "/i/assets/"+file, nil, http.Header{"If-None-Match": {resp.Header.Get("ETag")}})
		assert.Equal(t, http.StatusNotModified, again.StatusCode, file)
	}
	for _, script := range []string{"page.js", "terminal.js"} {
		_, js := p.get("/i/assets/"+script, nil)
		assert.NotContains(t, js, "innerHTML", "%s never parses a status or an instance's output as HTML", script)
		assert.NotContains(t, js, "outerHTML", script)
		assert.NotContains(t, js, "insertAdjacentHTML", script)
	}
	resp, _ := p.get("/i/assets/other.js", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// Each action from the page's origin does what it says, and goes back to the page.
func TestPageActions(t *testing.T) {
	p := newPage(t)
	cookie := p.session("team-42", "ctf", "pwn-heap")
	act := func(action string) {
		t.Helper()
		resp := p.act(action, cookie, testPageOrigin)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, action)
		assert.Equal(t, "/i/ctf/pwn-heap/", resp.Header.Get("Location"), action)
	}

	act(actionStart)
	require.Len(t, p.store.keys(), 1)
	key := p.store.keys()[0]
	created := p.store.challenge(key)
	assert.Equal(t, "team-42", created.Spec.Owner, "the session's owner")
	assert.Equal(t, "team-42", created.Labels[v1alpha1.LabelOwner])
	assert.Equal(t, "pwn-heap", created.Spec.DefinitionRef.Name)
	assert.Equal(t, challengeName("ctf", "pwn-heap", "team-42", 1), created.Name, "the name the rCTF contract gives it")
	assert.Empty(t, created.Spec.Timeout, "the definition's own timeout")
	assert.Empty(t, created.Spec.Flag)
	assert.Equal(t, []string{actionExtend, actionStop, actionDelete}, p.status(cookie).Actions)

	p.store.sync(key, v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseRunning, ExpiresAt: p.now.Add(30 * time.Minute).Format(time.RFC3339)})
	p.now = p.now.Add(20 * time.Minute)
	act(actionExtend)
	assert.Equal(t, p.now.Add(30*time.Minute).Format(time.RFC3339), p.store.challenge(key).Spec.ExpiresAt, "now + the definition's timeout")
	p.now = testNow.Add(110 * time.Minute)
	act(actionExtend)
	assert.Equal(t, testNow.Add(2*time.Hour).Format(time.RFC3339), p.store.challenge(key).Spec.ExpiresAt, "at most creation + maxLifetime")

	act(actionRestart)
	assert.Equal(t, p.now.Format(time.RFC3339), p.store.challenge(key).Spec.RestartedAt)
	act(actionStop)
	assert.True(t, p.store.challenge(key).Spec.Stopped)
	p.store.sync(key, v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseStopped, Reason: v1alpha1.ReasonStopped})
	act(actionStart)
	assert.False(t, p.store.challenge(key).Spec.Stopped, "a start of a stopped instance starts it again")
	assert.Equal(t, 1, p.store.creates)

	act(actionDelete)
	assert.NotNil(t, p.store.challenge(key).DeletionTimestamp)
	assert.Equal(t, "Stopping", p.status(cookie).PhaseText)

	// A browser that sends no Origin but says the request is its own page's.
	p2 := newPage(t)
	resp := p2.do(http.MethodPost, "/i/ctf/pwn-heap/start", p2.session("team-42", "ctf", "pwn-heap"), http.Header{"Sec-Fetch-Site": {"same-origin"}})
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, 1, p2.store.creates)
}

// An action from anywhere but the page's origin is refused and writes nothing.
func TestPageActionsNeedTheOrigin(t *testing.T) {
	for _, action := range []string{actionStart, actionExtend, actionRestart, actionStop, actionDelete} {
		p := newPage(t)
		cookie := p.session("team-42", "ctf", "pwn-heap")
		if action != actionStart {
			require.Equal(t, http.StatusSeeOther, p.act(actionStart, cookie, testPageOrigin).StatusCode)
			p.store.sync(p.store.keys()[0], v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseRunning, ExpiresAt: p.now.Add(30 * time.Minute).Format(time.RFC3339)})
		}
		require.Contains(t, p.status(cookie).Actions, action)
		writes := p.store.writes()
		for name, header := range map[string]http.Header{
			"no Origin":                     {},
			"a foreign Origin":              {"Origin": {"https://evil.example.org"}},
			"the origin over http":          {"Origin": {"http://play.ctf.example.org"}},
			"an opaque Origin":              {"Origin": {"null"}},
			"two Origins":                   {"Origin": {testPageOrigin, "https://evil.example.org"}},
			"a foreign Origin, same-origin": {"Origin": {"https://evil.example.org"}, "Sec-Fetch-Site": {"same-origin"}},
			"no Origin, cross-site":         {"Sec-Fetch-Site": {"cross-site"}},
		} {
			resp := p.do(http.MethodPost, "/i/ctf/pwn-heap/"+action, cookie, header)
			body, _ := io.ReadAll(resp.Body)
			assertRefused(t, resp, string(body), http.StatusForbidden, action+", "+name)
			assert.Contains(t, string(body), `<a id="back" href="/i/ctf/pwn-heap/">`)
			assert.Equal(t, writes, p.store.writes(), "%s, %s: a refused action writes nothing", action, name)
		}
	}
}

// A team's actions are bounded, and no other team's.
func TestPageActionRate(t *testing.T) {
	p := newPageTest(t, testPageOrigin, RateLimit{Burst: 3, Every: time.Minute})
	cookie := p.session("team-42", "ctf", "pwn-heap")
	for i := range 3 {
		action := []string{actionStart, actionStop, actionDelete}[i]
		require.Equal(t, http.StatusSeeOther, p.act(action, cookie, testPageOrigin).StatusCode, action)
	}
	p.store.challenges[p.store.keys()[0]].DeletionTimestamp = nil // as if it was gone and started again
	writes := p.store.writes()
	resp := p.act(actionStop, cookie, testPageOrigin)
	body, _ := io.ReadAll(resp.Body)
	assertRefused(t, resp, string(body), http.StatusTooManyRequests, "a fourth action")
	assert.Contains(t, string(body), refusedRate)
	assert.Equal(t, writes, p.store.writes())

	other := p.session("team-43", "ctf", "pwn-heap")
	assert.Equal(t, http.StatusSeeOther, p.act(actionStart, other, testPageOrigin).StatusCode, "another team acts")
	p.now = p.now.Add(time.Minute)
	assert.Equal(t, http.StatusSeeOther, p.act(actionStop, cookie, testPageOrigin).StatusCode, "a minute later, team-42 acts again")
}

func TestPageStartRefused(t *testing.T) {
	p := newPage(t)
	platform := p.session("team-42", "ctf", "platform-flag")
	resp, body := p.get("/i/ctf/platform-flag/", platform)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.NotContains(t, body, `<form id="start"`, "no start of a definition that takes its flag from the platform")
	resp = p.do(http.MethodPost, "/i/ctf/platform-flag/start", platform, http.Header{"Origin": {testPageOrigin}})
	raw, _ := io.ReadAll(resp.Body)
	assertRefused(t, resp, string(raw), http.StatusConflict, "platform flag")
	assert.Contains(t, string(raw), "gets its flag from the platform")

	unmarked := p.session("team-42", "ctf", "unmarked")
	resp, body = p.get("/i/ctf/unmarked/", unmarked)
	assertRefused(t, resp, body, http.StatusNotFound, "unmarked")
	resp = p.do(http.MethodPost, "/i/ctf/unmarked/start", unmarked, http.Header{"Origin": {testPageOrigin}})
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	missing := p.session("team-42", "ctf", "missing")
	resp = p.do(http.MethodPost, "/i/ctf/missing/start", missing, http.Header{"Origin": {testPageOrigin}})
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Zero(t, p.store.writes())
	assert.Contains(t, p.logs.String(), v1alpha1.AnnotationPlayerPage, "the log names the annotation to add")
}

// An action the page does not offer now is refused and writes nothing.
func TestPageActionNotNow(t *testing.T) {
	p := newPage(t)
	cookie := p.session("team-42", "ctf", "pwn-heap")
	for _, action := range []string{actionExtend, actionRestart, actionStop, actionDelete} {
		assert.Equal(t, http.StatusConflict, p.act(action, cookie, testPageOrigin).StatusCode, "%s without an instance", action)
	}
	p.act(actionStart, cookie, testPageOrigin)
	p.store.sync(p.store.keys()[0], v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseRunning})
	writes := p.store.writes()
	assert.Equal(t, http.StatusConflict, p.act(actionStart, cookie, testPageOrigin).StatusCode, "a start of a running instance")
	assert.Equal(t, writes, p.store.writes())
	p.store.definitions[0].Spec.Timeout = ""
	assert.Equal(t, http.StatusConflict, p.act(actionExtend, cookie, testPageOrigin).StatusCode, "no timeout to extend by")
	assert.Equal(t, writes, p.store.writes())
}

var formID = regexp.MustCompile(`<form id="([a-z]+)" method="post" action="/i/ctf/pwn-heap/([a-z]+)"><button type="submit" aria-label="[^"]+">`)

func TestPageButtonsPerPhase(t *testing.T) {
	in := func(d time.Duration) string { return testNow.Add(d).Format(time.RFC3339) }
	for _, tc := range []struct {
		name   string
		status *v1alpha1.ChallengeStatus // nil: no instance
		want   []string
		text   string
	}{
		{"no instance", nil, []string{"start"}, "Not started"},
		{"not synced", &v1alpha1.ChallengeStatus{}, []string{"extend", "stop", "delete"}, "Starting"},
		{"creating", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseCreating, ExpiresAt: in(time.Hour)}, []string{"extend", "stop", "delete"}, "Starting"},
		{"queued", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseQueued, QueuePosition: 2}, []string{"extend", "stop", "delete"}, "Queued"},
		{"running", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseRunning, ExpiresAt: in(time.Hour)}, []string{"extend", "restart", "stop", "delete"}, "Running"},
		{"running, at its maxLifetime", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseRunning, ExpiresAt: in(2 * time.Hour)}, []string{"restart", "stop", "delete"}, "Running"},
		{"error", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseError, Reason: v1alpha1.ReasonOOMKilled}, []string{"restart", "stop", "delete"}, "Error"},
		{"stopped", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseStopped, Reason: v1alpha1.ReasonStopped, ExpiresAt: in(time.Hour)}, []string{"start", "extend", "delete"}, "Stopped"},
		{"idle", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseStopped, Reason: v1alpha1.ReasonIdle, ExpiresAt: in(time.Hour)}, []string{"start", "extend", "delete"}, "Stopped (idle)"},
		{"expired", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseExpired, ExpiresAt: in(-time.Minute)}, []string{"start", "delete"}, "Expired"},
		{"terminating", &v1alpha1.ChallengeStatus{Phase: v1alpha1.PhaseTerminating}, []string{}, "Stopping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPage(t)
			cookie := p.session("team-42", "ctf", "pwn-heap")
			if tc.status != nil {
				p.act(actionStart, cookie, testPageOrigin)
				p.store.sync(p.store.keys()[0], *tc.status)
			}
			_, body := p.get("/i/ctf/pwn-heap/", cookie)
			forms := []string{}
			for _, m := range formID.FindAllStringSubmatch(body, -1) {
				assert.Equal(t, m[1], m[2], "form #%s posts to another action", m[1])
				forms = append(forms, m[1])
			}
			assert.Equal(t, tc.want, forms)
			s := p.status(cookie)
			assert.Equal(t, tc.want, s.Actions, "/status offers what the page shows")
			assert.Equal(t, tc.text, s.PhaseText)
			assert.Contains(t, body, `data-phase="`+s.Phase+`"`)
			assert.Contains(t, body, `<a id="refresh" href="/i/ctf/pwn-heap/">Refresh</a>`, "a page without its script refreshes by a link")
			if tc.status != nil && tc.status.Phase == v1alpha1.PhaseQueued {
				assert.Contains(t, body, `<p id="queue">Position 2 in your team's queue</p>`)
			} else {
				assert.NotContains(t, body, `id="queue"`)
			}
		})
	}
}

func TestPageShowsTimesAndWarnings(t *testing.T) {
	p := newPage(t)
	cookie := p.session("team-42", "ctf", "pwn-heap")
	p.act(actionStart, cookie, testPageOrigin)
	p.store.sync(p.store.keys()[0], v1alpha1.ChallengeStatus{
		Phase: v1alpha1.PhaseRunning, ExpiresAt: p.now.Add(4*time.Minute + 5*time.Second).Format(time.RFC3339),
		IdleAt: p.now.Add(61 * time.Minute).Format(time.RFC3339),
		Conditions: []metav1.Condition{
			{Type: conditionExpiringSoon, Status: metav1.ConditionTrue, Message: "<b>not shown</b>"},
			{Type: conditionIdleSoon, Status: metav1.ConditionFalse},
			{Type: "Ready", Status: metav1.ConditionTrue},
		},
	})
	_, body := p.get("/i/ctf/pwn-heap/", cookie)
	assert.Contains(t, body, `<span id="expires-in" data-expires-at="2026-12-04T12:04:05Z">4m 05s</span>`)
	assert.Contains(t, body, `<span id="idle-in" data-idle-at="2026-12-04T13:01:00Z">1h 01m 00s</span>`)
	assert.Contains(t, body, "<ul id=\"warnings\">\n<li>The instance expires soon: extend it if you need more time.</li>\n</ul>")
	s := p.status(cookie)
	assert.Equal(t, []string{"The instance expires soon: extend it if you need more time."}, s.Warnings)
	assert.Equal(t, "2026-12-04T12:04:05Z", s.ExpiresAt)
}

// The commands of a Running instance: the TCP gateway's nc line, its token, the one-liner and
// pwntools', its WebSocket URL with websocat's and wsrx's commands, and its terminal; an HTTPS
// URL; no in-cluster endpoint.
func TestPageStatusOfARunningInstance(t *testing.T) {
	p := newPageWithTerminal(t, true)
	cookie := p.session("team-42", "ctf", "pwn-heap")
	p.act(actionStart, cookie, testPageOrigin)
	c := &contract{store: p.store, now: p.now}
	c.running(p.store.keys()[0])

	s := p.status(cookie)
	assert.Equal(t, "Running", s.Phase)
	assert.Equal(t, []pageEndpoint{
		{Name: "pwn", Host: "tcp.ctf.example.org", Port: 1337, Token: "tok3n", WebSocketURL: "wss://tcp.ctf.example.org/ws/tok3n", Commands: []pageCommand{
			{Label: "Connect, then type the token", Text: "nc tcp.ctf.example.org 1337"},
			{Label: "Token", Text: "tok3n", Token: true},
			{Label: "In one line", Text: "(echo tok3n; cat) | nc tcp.ctf.example.org 1337"},
			{Label: "pwntools", Text: `r = remote("tcp.ctf.example.org", 1337); r.sendline(b"tok3n")`},
			{Label: "WebSocket URL", Text: "wss://tcp.ctf.example.org/ws/tok3n"},
			{Label: "websocat", Text: "websocat -b wss://tcp.ctf.example.org/ws/tok3n"},
			{Label: "wsrx: map it to local port 1337", Text: "wsrx connect wss://tcp.ctf.example.org/ws/tok3n --port 1337"},
			{Label: "then, while wsrx runs", Text: "nc 127.0.0.1 1337"},
		}, Terminal: "/i/ctf/pwn-heap/terminal?endpoint=0"},
		{Name: "web", Host: "a1b2c3.ctf.example.org", Port: 443, URL: "https://a1b2c3.ctf.example.org/", Commands: []pageCommand{
			{Label: "URL", Text: "https://a1b2c3.ctf.example.org/"},
		}},
	}, s.Endpoints)

	_, body := p.get("/i/ctf/pwn-heap/", cookie)
	assert.Equal(t, 2, strings.Count(body, `<li class="endpoint">`))
	assert.Equal(t, 9, strings.Count(body, `<code class="command`))
	assert.Equal(t, 9, strings.Count(body, `<button type="button" class="copy"`), "a copy button per command")
	assert.Contains(t, body, `<code class="command">websocat -b wss://tcp.ctf.example.org/ws/tok3n</code> <button type="button" class="copy" aria-label="Copy: websocat" hidden>Copy</button>`)
	assert.Contains(t, body, `<code class="command">wsrx connect wss://tcp.ctf.example.org/ws/tok3n --port 1337</code>`)
	assert.Contains(t, body, `<p class="terminal-link" hidden><a class="terminal" href="/i/ctf/pwn-heap/terminal?endpoint=0">Open a terminal</a></p>`,
		"the terminal is offered by the script alone")
	assert.Equal(t, 1, strings.Count(body, `class="terminal"`), "the HTTPS endpoint has no terminal")
	assert.Contains(t, body, `<code class="command token">tok3n</code>`)
	assert.Contains(t, body, `<code class="command">(echo tok3n; cat) | nc tcp.ctf.example.org 1337</code>`)
	assert.Contains(t, body, `<code class="command">r = remote(&#34;tcp.ctf.example.org&#34;, 1337); r.sendline(b&#34;tok3n&#34;)</code>`)
	assert.NotContains(t, body, "svc.cluster.local")
}

func TestPageCommands(t *testing.T) {
	for _, tc := range []struct {
		ep   v1alpha1.Endpoint
		want string
	}{
		{v1alpha1.Endpoint{Protocol: "TCP", Host: "t.ctf.example.org", Port: 8443, URL: "tls://t.ctf.example.org:8443"}, "ncat --ssl t.ctf.example.org 8443"},
		{v1alpha1.Endpoint{Protocol: "TCP", Host: "203.0.113.7", Port: 31337, URL: "tcp://203.0.113.7:31337"}, "nc 203.0.113.7 31337"},
		{v1alpha1.Endpoint{Protocol: "UDP", Host: "203.0.113.7", Port: 31337, URL: "udp://203.0.113.7:31337"}, "nc -u 203.0.113.7 31337"},
		{v1alpha1.Endpoint{Protocol: "TCP", Host: "h.ctf.example.org", Port: 80, URL: "http://h.ctf.example.org/"}, "http://h.ctf.example.org/"},
	} {
		got := commandsOf(tc.ep)
		require.Len(t, got, 1)
		assert.Equal(t, tc.want, got[0].Text)
	}
}

func TestCountdown(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Minute: "0s", 41 * time.Second: "41s", 29*time.Minute + 41*time.Second + 900*time.Millisecond: "29m 41s",
		time.Hour + 2*time.Minute + 3*time.Second: "1h 02m 03s", 26 * time.Hour: "26h 00m 00s"} {
		assert.Equal(t, want, countdown(d), d.String())
	}
}

// TestKubeDefinition: the page reads its definitions from the watches, only in the component's
// namespaces.
func TestKubeDefinition(t *testing.T) {
	def := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.APIVersion, "kind": "ChallengeDefinition",
		"metadata": map[string]any{"namespace": "ctf", "name": "pwn", "annotations": map[string]any{v1alpha1.AnnotationPlayerPage: "true"}},
		"spec":     map[string]any{"timeout": "30m"},
	}}
	elsewhere := def.DeepCopy()
	elsewhere.SetNamespace("other")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		challengesGVR: "ChallengeList", definitionsGVR: "ChallengeDefinitionList"}, def, elsewhere)
	kube, err := NewKube(client, []string{"ctf"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.True(t, kube.Start(ctx))
	got := kube.Definition("ctf", "pwn")
	require.NotNil(t, got)
	assert.Equal(t, "30m", got.Spec.Timeout)
	assert.Nil(t, kube.Definition("ctf", "web"))
	assert.Nil(t, kube.Definition("other", "pwn"), "a namespace the component does not watch")
}

// The page's refusal of a link never echoes the link: the page holds nothing a player could
// be tricked into pasting elsewhere.
func TestPageRefusalEchoesNothing(t *testing.T) {
	p := newPage(t)
	q := url.Values{"ns": {"ctf"}, "def": {"<img src=x>"}, "owner": {"team-42"}, "exp": {"1"}, "sig": {"00"}}
	_, body := p.get("/i/open?"+q.Encode(), nil)
	assert.NotContains(t, body, "img")
}
