package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
)

// credential is a bearer token and what it grants. The hook knows two, each for one listener:
// Metacontroller's (--token-file: /sync, /finalize, /customize) and the platform's
// (--verify-token-file: /flags/verify). Neither opens the other's routes.
type credential struct {
	name   string // how messages name it, e.g. "the flag-verification token (--verify-token-file)"
	grants string // the routes it opens, for messages
	digest [sha256.Size]byte
	set    bool
}

func newCredential(name, grants string, token []byte) credential {
	c := credential{name: name, grants: grants, set: len(token) > 0}
	if c.set {
		c.digest = sha256.Sum256(token)
	}
	return c
}

// matches compares digests, so that the comparison is constant-time in the token's length too.
func (c credential) matches(presented [sha256.Size]byte) bool {
	return c.set && subtle.ConstantTimeCompare(presented[:], c.digest[:]) == 1
}

// presentedToken is the digest of the request's bearer token, and whether it sent one.
func presentedToken(r *http.Request) ([sha256.Size]byte, bool) {
	scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
	return sha256.Sum256([]byte(strings.TrimSpace(token))), found && strings.EqualFold(scheme, "Bearer")
}

// requireBearerToken lets a request through when it sends `Authorization: Bearer <want's token>`,
// or anything at all when want is not set (Metacontroller's only with
// --insecure-serve-without-token, which parseServerConfig demands without --token-file). A request that sends one of the other credentials is refused with 403 whether
// want is set or not: that credential is valid, and grants something else. Any other request
// gets 401.
func requireBearerToken(want credential, others ...credential) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			presented, bearer := presentedToken(r)
			if bearer {
				for _, other := range others {
					if other.matches(presented) {
						respondError(w, r, http.StatusForbidden, "",
							fmt.Sprintf("%s grants %s only, not %s", other.name, other.grants, r.URL.Path))
						return
					}
				}
			}
			if want.set && (!bearer || !want.matches(presented)) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="challenge-hook"`)
				respondError(w, r, http.StatusUnauthorized, "", "missing or invalid bearer token")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
