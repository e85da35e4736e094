package platform

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The player page: a page of the component's own, on a listener of its own, where a player
// reaches their team's instance of one ChallengeDefinition through a link the CTF platform signs
// (link.go): it shows the instance (phase, time left, endpoints and the commands to paste) and
// starts, extends, restarts, stops and deletes it. Its routes and element ids are what
// e2e/playerpage_test.go drives in a real browser; docs/player-page.md is the
// organizer's view.
//
// Its state comes from the component's watches, as the rCTF contract's answers do, and its
// actions are the Instancer's (the same start, extension and deletion, the same writes that wait
// for the watch to bring them back).

// sessionCookie is the session's cookie, one per definition (its Path is the definition's page).
const sessionCookie = "chp_session"

// DefinitionGetter reads one ChallengeDefinition from the component's watches (nil: none there).
type DefinitionGetter interface {
	Definition(namespace, name string) *v1alpha1.ChallengeDefinition
}

// PageOptions configure the player page.
type PageOptions struct {
	// Keys are the link keys, the current one first, then the previous one during a rotation
	// (each at least MinLinkKeyBytes).
	Keys [][]byte
	// Origin is the page's public origin, scheme://host[:port]: the only Origin an action is
	// taken from, and Secure cookies when it is https.
	Origin string
	// Actions bounds each owner's actions (start, extend, restart, stop, delete) on the page.
	Actions RateLimit
}

// DefaultPageActions is how many actions a team may take on the page: 10 at once, then one
// every 6 s: clicks, never a loop.
var DefaultPageActions = RateLimit{Burst: 10, Every: 6 * time.Second}

// pageCSP is the page's Content-Security-Policy: its own script and style, nothing else.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// The sentences of the page's refusals: what to do, never which check failed (the log says).
const (
	refusedLink        = "This link is not valid or has expired. Go back to the platform and open the challenge again."
	refusedUnavailable = "This challenge is not available on this page. Ask the organizers."
	refusedOrigin      = "This request did not come from the challenge's page. Open the page and try again."
	refusedRate        = "Too many actions at once. Wait a minute and try again."
	refusedNotNow      = "That is not possible now: the instance changed meanwhile. Look at the page again."
)

//go:embed assets
var pageAssets embed.FS

// pageTemplates are the page's HTML answers, each the layout with its own main.
var pageTemplates = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"actionLabel":       func(name string) string { return actionByName(name).label },
		"actionDescription": func(name string) string { return actionByName(name).description },
	}
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(pageAssets, "assets/layout.html"))
	out := map[string]*template.Template{}
	for _, name := range []string{"page", "open", "refused", "terminal"} {
		out[name] = template.Must(template.Must(layout.Clone()).ParseFS(pageAssets, "assets/"+name+".html"))
	}
	return out
}()

// pageHandler serves the player page.
type pageHandler struct {
	instancer   *Instancer
	definitions DefinitionGetter
	keys        [][]byte
	origin      string
	secure      bool
	actions     *teamRate
	// terminal: the page offers a terminal to the endpoints with a WebSocket URL (xterm.js is
	// embedded).
	terminal bool
}

// NewPageHandler serves the player page (every route here): /i/open trades a signed link for a
// session; /i/<ns>/<def>/ is the page of the session's owner, /status its state as JSON, and
// POST /i/<ns>/<def>/<action> its actions; /i/<ns>/<def>/terminal?endpoint=<n> the terminal to
// an endpoint's WebSocket URL; /i/assets/ its scripts and styles.
func NewPageHandler(instancer *Instancer, definitions DefinitionGetter, opts PageOptions) http.Handler {
	return newPageHandler(instancer, definitions, opts, embedsXterm())
}

// newPageHandler is NewPageHandler offering a terminal or not (tests: as a binary built with or
// without xterm.js would, whatever this checkout holds).
func newPageHandler(instancer *Instancer, definitions DefinitionGetter, opts PageOptions, terminal bool) http.Handler {
	h := &pageHandler{instancer: instancer, definitions: definitions, keys: opts.Keys, origin: opts.Origin,
		secure: strings.HasPrefix(opts.Origin, "https://"), actions: newTeamRate(opts.Actions), terminal: terminal}
	if !h.terminal {
		instancer.logger.Info("player page: no terminal: this binary was built without xterm.js (internal/platform/assets/xterm/, " +
			"filled by hack/fetch-xterm.sh, which make build runs); the page shows the WebSocket commands without it")
	}
	r := chi.NewRouter()
	r.Use(pageHeaders)
	r.Get("/i/open", h.open)
	r.Get("/i/assets/{file}", serveAsset)
	r.Get("/i/{ns}/{def}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path+"/", http.StatusMovedPermanently)
	})
	r.Get("/i/{ns}/{def}/", h.withSession(h.page))
	r.Get("/i/{ns}/{def}/status", h.withSession(h.status))
	r.Get("/i/{ns}/{def}/terminal", h.withSession(h.terminalPage))
	for _, action := range pageActions {
		r.Post("/i/{ns}/{def}/"+action.name, h.withSession(h.act(action)))
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeRefused(w, http.StatusNotFound, "This page does not exist.", "")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeRefused(w, http.StatusMethodNotAllowed, "This page does not exist.", "")
	})
	return r
}

// pageHeaders are on every answer: the page runs only its own script and style, is framed by
// nobody, sends no Referer (a link's signature, the page's path) and is never cached (it shows a
// player's instance).
func pageHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", pageCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// open trades a signed link for a session cookie, answered with a page that moves on to the
// definition's page (a redirect would not carry a SameSite=Strict cookie after a click from
// the platform's site).
func (h *pageHandler) open(w http.ResponseWriter, r *http.Request) {
	now := h.instancer.clock()
	link, err := VerifyLink(h.keys, r.URL.Query(), now)
	if err != nil {
		h.instancer.logger.Info("player page: link refused", slog.Any("error", err))
		writeRefused(w, http.StatusForbidden, refusedLink, "")
		return
	}
	session := Session{Namespace: link.Namespace, Definition: link.Definition, Owner: link.Owner, Expires: now.Add(SessionLifetime).Unix()}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: SealSession(h.keys, session), Path: pagePath(link.Namespace, link.Definition),
		MaxAge: int(SessionLifetime / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: h.secure,
	})
	h.instancer.logger.Info("player page: session opened", slog.String("owner", link.Owner),
		slog.String("definition", link.Namespace+"/"+link.Definition))
	writeHTML(w, http.StatusOK, "open", struct{ Next string }{pagePath(link.Namespace, link.Definition)})
}

// pagePath is the page of the definition namespace/name.
func pagePath(namespace, definition string) string {
	return "/i/" + namespace + "/" + definition + "/"
}

// visit is a request of a session's owner on their page: the session's target (its definition
// from the watches, marked for the page) and the owner's latest instance of it.
type visit struct {
	target
	instance *v1alpha1.Challenge
	path     string
}

// withSession serves next only with a session for exactly the path's namespace and definition,
// and only for a definition of the component's namespaces marked for the page.
func (h *pageHandler) withSession(next func(http.ResponseWriter, *http.Request, visit)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns, def := chi.URLParam(r, "ns"), chi.URLParam(r, "def")
		asJSON := strings.HasSuffix(r.URL.Path, "/status")
		session, err := h.session(r, ns, def)
		if err != nil {
			h.instancer.logger.Info("player page: no session", slog.String("path", r.URL.Path), slog.Any("error", err))
			refusePage(w, asJSON, http.StatusForbidden, refusedLink, "")
			return
		}
		definition := h.definitions.Definition(ns, def)
		if definition == nil || definition.Annotations[v1alpha1.AnnotationPlayerPage] != "true" {
			h.instancer.logger.Info("player page: the definition is absent or not marked for the page", slog.String("definition", ns+"/"+def),
				slog.String("owner", session.Owner), slog.String("annotation", v1alpha1.AnnotationPlayerPage))
			refusePage(w, asJSON, http.StatusNotFound, refusedUnavailable, "")
			return
		}
		t := target{definition: definition, team: session.Owner}
		next(w, r, visit{target: t, instance: h.instancer.current(t), path: pagePath(ns, def)})
	}
}

// session is the request's session, if it names namespace and definition.
func (h *pageHandler) session(r *http.Request, namespace, definition string) (Session, error) {
	cookie, err := r.Cookie(sessionCookie)
	if err != nil {
		return Session{}, errors.New("no session cookie")
	}
	s, err := OpenSession(h.keys, cookie.Value, h.instancer.clock())
	if err != nil {
		return Session{}, err
	}
	if s.Namespace != namespace || s.Definition != definition {
		return Session{}, errors.New("the session is for another definition: " + s.Namespace + "/" + s.Definition)
	}
	return s, nil
}

// page answers the page of the visit's instance.
func (h *pageHandler) page(w http.ResponseWriter, r *http.Request, v visit) {
	now := h.instancer.clock()
	writeHTML(w, http.StatusOK, "page", struct {
		Path, Definition, Now string
		S                     pageStatus
	}{v.path, v.definition.Name, now.UTC().Format(time.RFC3339), h.view(v, now)})
}

// status answers the page's state as JSON, for its script.
func (h *pageHandler) status(w http.ResponseWriter, r *http.Request, v visit) {
	respond(w, http.StatusOK, h.view(v, h.instancer.clock()))
}

// pageError is the JSON of a refusal on /status.
type pageError struct {
	Error string `json:"error"`
}

// refusePage answers a refusal as JSON (for /status) or as a page.
func refusePage(w http.ResponseWriter, asJSON bool, status int, message, back string) {
	if asJSON {
		respond(w, status, pageError{Error: message})
		return
	}
	writeRefused(w, status, message, back)
}

// writeRefused answers a page #refused that says message, with a link back to the page back
// (none when empty).
func writeRefused(w http.ResponseWriter, status int, message, back string) {
	writeHTML(w, status, "refused", struct{ Message, Back string }{message, back})
}

// writeHTML answers the template name executed with data: whole or not at all.
func writeHTML(w http.ResponseWriter, status int, name string, data any) {
	var body bytes.Buffer
	if err := pageTemplates[name].ExecuteTemplate(&body, "layout", data); err != nil {
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(body.Bytes())
}

// asset is an embedded file the page loads, with its type and a validator.
type asset struct {
	content     []byte
	contentType string
	etag        string
}

// assets are the files the page serves, by name: its own, and xterm.js's when this binary was
// built with them (hack/fetch-xterm.sh puts them in assets/xterm/).
var assets = func() map[string]asset {
	out := map[string]asset{}
	for _, f := range []struct{ name, path, contentType string }{
		{"page.js", "assets/page.js", "text/javascript; charset=utf-8"},
		{"page.css", "assets/page.css", "text/css; charset=utf-8"},
		{"favicon.svg", "assets/favicon.svg", "image/svg+xml"},
		{"terminal.js", "assets/terminal.js", "text/javascript; charset=utf-8"},
		{"xterm.js", xtermScript, "text/javascript; charset=utf-8"},
		{"xterm.css", xtermStyle, "text/css; charset=utf-8"},
		{"xterm-license.txt", xtermLicense, "text/plain; charset=utf-8"},
	} {
		content, err := fs.ReadFile(pageAssets, f.path)
		if errors.Is(err, fs.ErrNotExist) && strings.HasPrefix(f.path, xtermDir) {
			continue // built without xterm.js: no terminal
		}
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(content)
		out[f.name] = asset{content: content, contentType: f.contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return out
}()

// serveAsset answers the page's script or style, revalidated by its ETag (a new image's script
// replaces the old at once).
func serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := assets[chi.URLParam(r, "file")]
	if !ok {
		writeRefused(w, http.StatusNotFound, "This page does not exist.", "")
		return
	}
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.content))
}

// logAction logs an action taken or refused.
func (h *pageHandler) logAction(ctx context.Context, v visit, action string, status int, message string) {
	level := slog.LevelInfo
	if status >= http.StatusInternalServerError {
		level = slog.LevelWarn
	}
	h.instancer.logger.Log(ctx, level, "player page: action", slog.String("action", action), slog.String("owner", v.team),
		slog.String("definition", v.definition.Namespace+"/"+v.definition.Name), slog.Int("status", status), slog.String("message", message))
}
