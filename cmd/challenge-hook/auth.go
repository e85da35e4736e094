package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// requireBearerToken refuses requests without `Authorization: Bearer <token>`. With no token
// configured it lets everything through (the hook's NetworkPolicy then admits only Metacontroller).
func requireBearerToken(token []byte) func(http.Handler) http.Handler {
	if len(token) == 0 {
		return func(next http.Handler) http.Handler { return next }
	}
	// Comparing digests keeps the comparison constant-time in the token's length too.
	want := sha256.Sum256(token)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			scheme, presented, found := strings.Cut(r.Header.Get("Authorization"), " ")
			got := sha256.Sum256([]byte(strings.TrimSpace(presented)))
			if !found || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="challenge-hook"`)
				respondError(w, r, http.StatusUnauthorized, "", "missing or invalid bearer token")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
