package platform

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/challenge-hook/challenge-hook/api/v1alpha1"
)

// The page's actions, each POST /i/<ns>/<def>/<action>.
const (
	actionStart   = "start"
	actionExtend  = "extend"
	actionRestart = "restart"
	actionStop    = "stop"
	actionDelete  = "delete"
)

// pageAction is one of the page's actions: what it does to the visit's instance (offered only
// in the phases actionsOf names), and what refuses it whatever the phase (nil: nothing).
// Its button says label, and description to a screen reader (page.js has the same words).
type pageAction struct {
	name, label, description string
	refuse                   func(def *v1alpha1.ChallengeDefinition) *instancerError
	do                       func(h *pageHandler, ctx context.Context, v visit) *instancerError
}

var pageActions = []pageAction{
	{name: actionStart, label: "Start", description: "Start the instance", refuse: startRefusal, do: (*pageHandler).start},
	{name: actionExtend, label: "Extend", description: "Extend the instance's time", refuse: func(def *v1alpha1.ChallengeDefinition) *instancerError {
		_, refused := extension(def)
		return refused
	}, do: (*pageHandler).extend},
	{name: actionRestart, label: "Restart", description: "Restart the instance (same address and flag)", do: (*pageHandler).restart},
	{name: actionStop, label: "Stop", description: "Stop the instance (start it again later)", do: (*pageHandler).stop},
	{name: actionDelete, label: "Delete", description: "Delete the instance", do: (*pageHandler).delete},
}

func actionByName(name string) pageAction {
	for _, a := range pageActions {
		if a.name == name {
			return a
		}
	}
	return pageAction{name: name, label: name, description: name}
}

// act serves action a: only from the page's own origin (the cookie is SameSite=Strict, and the
// Origin says so again), within the owner's rate, when the page offers it; then back to the page
// (the script follows with /status).
func (h *pageHandler) act(a pageAction) func(http.ResponseWriter, *http.Request, visit) {
	return func(w http.ResponseWriter, r *http.Request, v visit) {
		now := h.instancer.clock()
		var refused *instancerError
		switch {
		case !h.sameOrigin(r):
			refused = refuse(http.StatusForbidden, refusedOrigin)
		case !h.actions.allow(v.team, now):
			refused = refuse(http.StatusTooManyRequests, refusedRate)
		case a.refuse != nil && a.refuse(v.definition) != nil:
			refused = a.refuse(v.definition)
		case !slices.Contains(actionsOf(v.instance, phaseOf(v.instance), v.definition, now), a.name):
			refused = refuse(http.StatusConflict, refusedNotNow)
		default:
			// An action finishes even if the player stops waiting: half of one would leave the
			// instance as nobody asked.
			refused = a.do(h, context.WithoutCancel(r.Context()), v)
		}
		if refused != nil {
			h.logAction(r.Context(), v, a.name, refused.status, refused.message)
			writeRefused(w, refused.status, refused.message, v.path)
			return
		}
		h.logAction(r.Context(), v, a.name, http.StatusSeeOther, "done")
		http.Redirect(w, r, v.path, http.StatusSeeOther)
	}
}

// sameOrigin says whether r comes from the page's origin: its Origin, or, from a browser that
// sends none, Sec-Fetch-Site.
func (h *pageHandler) sameOrigin(r *http.Request) bool {
	if origins := r.Header.Values("Origin"); len(origins) > 0 {
		return len(origins) == 1 && origins[0] == h.origin
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// startRefusal refuses a start of a definition whose flag the platform gives (flag.platform:
// true): the page has no flag to give.
func startRefusal(def *v1alpha1.ChallengeDefinition) *instancerError {
	if def.Spec.Flag != nil && def.Spec.Flag.Platform {
		return refuse(http.StatusConflict, "This challenge gets its flag from the platform: start it there.")
	}
	return nil
}

// extension is how much time an extension gives: the definition's timeout (without one, the
// hook's default applies, which the component does not know: no extension).
func extension(def *v1alpha1.ChallengeDefinition) (time.Duration, *instancerError) {
	timeout, err := time.ParseDuration(def.Spec.Timeout)
	if err != nil || timeout <= 0 {
		return 0, refuse(http.StatusConflict, "This challenge cannot be extended.")
	}
	return timeout, nil
}

// start creates the owner's instance as the rCTF contract does, living the definition's
// timeout; it starts a stopped one again, and replaces an expired one.
func (h *pageHandler) start(ctx context.Context, v visit) *instancerError {
	_, refused := h.instancer.start(ctx, v.target, 0, nil, "")
	return refused
}

// extend moves the instance's expiry to the definition's timeout from now, within its
// maxLifetime.
func (h *pageHandler) extend(ctx context.Context, v visit) *instancerError {
	timeout, refused := extension(v.definition)
	if refused == nil {
		_, refused = h.instancer.renew(ctx, v.target, timeout)
	}
	return refused
}

// restart recreates the instance's Pods: same host, token and flag.
func (h *pageHandler) restart(ctx context.Context, v visit) *instancerError {
	now := h.instancer.clock().UTC().Format(time.RFC3339)
	if _, err := h.instancer.patch(ctx, v.instance, map[string]any{"spec": map[string]any{"restartedAt": now}}); err != nil {
		return h.instancer.apiFailure("restart the instance", err)
	}
	return nil
}

// stop removes the instance's Pods and keeps the rest: a start brings it back.
func (h *pageHandler) stop(ctx context.Context, v visit) *instancerError {
	if _, err := h.instancer.patch(ctx, v.instance, map[string]any{"spec": map[string]any{"stopped": true}}); err != nil {
		return h.instancer.apiFailure("stop the instance", err)
	}
	return nil
}

// delete deletes the instance.
func (h *pageHandler) delete(ctx context.Context, v visit) *instancerError {
	_, refused := h.instancer.remove(ctx, v.target)
	return refused
}
