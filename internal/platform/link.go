package platform

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// A signed link is how a CTF platform sends a player to the player page: the platform signs, per
// click, the namespace, the definition and the owner (the team) with an expiry at most
// MaxLinkLifetime ahead, under a key it shares with the component (a Secret of its own, apart
// from the flag and gateway keys). Any language signs it in a few lines:
//
//	message = "challenge-hook/link/v1\n" + namespace + "\n" + definition + "\n" + owner + "\n" + expires
//	sig     = lowercase hex of HMAC-SHA256(key, message)
//	link    = <page>/i/open?ns=<namespace>&def=<definition>&owner=<owner>&exp=<expires>&sig=<sig>
//
// expires is a Unix time in seconds, in decimal; each value is URL-encoded. The page trades a
// valid link for a session cookie bound to that owner, namespace and definition.

// linkDomain starts every signed message: a signature for anything else is none for a link.
const linkDomain = "challenge-hook/link/v1"

// MaxLinkLifetime bounds how far ahead a link may expire: a link leaks (a browser's history, a
// screenshot), so it opens the page only briefly; the session it is traded for lasts.
const MaxLinkLifetime = 5 * time.Minute

// linkClockSkew is how far the platform's clock may run ahead of the component's.
const linkClockSkew = 30 * time.Second

// MinLinkKeyBytes is the least a link key holds: whoever has it opens every team's page.
const MinLinkKeyBytes = 32

// Link is what a signed link names: whose instance of which definition the page shows.
type Link struct {
	Namespace  string
	Definition string
	Owner      string
	Expires    time.Time
}

func (l Link) message() string {
	return linkDomain + "\n" + l.Namespace + "\n" + l.Definition + "\n" + l.Owner + "\n" + strconv.FormatInt(l.Expires.Unix(), 10)
}

// SignLink signs l with key: the link's query, as a platform writes it (tests and tools sign
// with it; platforms sign in their own language).
func SignLink(key []byte, l Link) url.Values {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(l.message()))
	return url.Values{
		"ns": {l.Namespace}, "def": {l.Definition}, "owner": {l.Owner},
		"exp": {strconv.FormatInt(l.Expires.Unix(), 10)}, "sig": {hex.EncodeToString(mac.Sum(nil))},
	}
}

// errLink is every refusal of a link: the page says only what to do (go back to the platform
// and open the challenge again), never which check failed.
var errLink = errors.New("the link is not valid")

// VerifyLink checks a link's query at now against keys (the current key, and the previous one
// during a rotation): its signature under one of them, its expiry (in the future, at most
// MaxLinkLifetime ahead), and names that are a namespace, a definition and an owner. The error
// says which check failed, for the component's log; the player sees only errLink's message.
func VerifyLink(keys [][]byte, query url.Values, now time.Time) (Link, error) {
	for _, field := range []string{"ns", "def", "owner", "exp", "sig"} {
		if len(query[field]) != 1 {
			return Link{}, fmt.Errorf("%w: %s is missing or repeated", errLink, field)
		}
	}
	seconds, err := strconv.ParseInt(query.Get("exp"), 10, 64)
	if err != nil {
		return Link{}, fmt.Errorf("%w: exp is no Unix time", errLink)
	}
	l := Link{Namespace: query.Get("ns"), Definition: query.Get("def"), Owner: query.Get("owner"), Expires: time.Unix(seconds, 0)}
	sig, err := hex.DecodeString(query.Get("sig"))
	if err != nil || len(sig) != sha256.Size {
		return Link{}, fmt.Errorf("%w: sig is no hex HMAC-SHA256", errLink)
	}
	valid := false
	for _, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(l.message()))
		valid = hmac.Equal(mac.Sum(nil), sig) || valid
	}
	switch {
	case !valid:
		return Link{}, fmt.Errorf("%w: wrong signature", errLink)
	case !now.Before(l.Expires):
		return Link{}, fmt.Errorf("%w: expired at %s", errLink, l.Expires.UTC().Format(time.RFC3339))
	case l.Expires.After(now.Add(MaxLinkLifetime + linkClockSkew)):
		return Link{}, fmt.Errorf("%w: expires %s, more than %s ahead", errLink, l.Expires.UTC().Format(time.RFC3339), MaxLinkLifetime)
	}
	if err := checkNames(l.Namespace, l.Definition, l.Owner); err != nil {
		return Link{}, fmt.Errorf("%w: %v", errLink, err)
	}
	return l, nil
}

func checkNames(namespace, definition, owner string) error {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(definition); len(errs) > 0 || len(definition) > 63 {
		return fmt.Errorf("definition %q: a ChallengeDefinition's name", definition)
	}
	if errs := validation.IsValidLabelValue(owner); len(errs) > 0 || owner == "" {
		return fmt.Errorf("owner %q: a label value", owner)
	}
	return nil
}

// Session is what the page's cookie holds: the owner, namespace and definition a link named, and
// until when the cookie is good.
type Session struct {
	Namespace  string `json:"ns"`
	Definition string `json:"def"`
	Owner      string `json:"owner"`
	Expires    int64  `json:"exp"`
}

// SessionLifetime is how long a session lasts after its link: an event's day.
const SessionLifetime = 24 * time.Hour

// sessionKey derives the session cookies' key from a link key: every replica derives the same,
// and a rotation of the link key rotates it.
func sessionKey(linkKey []byte) []byte {
	mac := hmac.New(sha256.New, linkKey)
	mac.Write([]byte("challenge-hook/session/v1"))
	return mac.Sum(nil)
}

// SealSession is the cookie value of s under the first key: base64url(JSON) "." base64url(MAC).
func SealSession(keys [][]byte, s Session) string {
	payload, _ := json.Marshal(s) // a struct of strings and a number: no error
	mac := hmac.New(sha256.New, sessionKey(keys[0]))
	mac.Write(payload)
	return base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// OpenSession checks a cookie value at now under keys and returns its session.
func OpenSession(keys [][]byte, value string, now time.Time) (Session, error) {
	encoded, encodedMAC, ok := strings.Cut(value, ".")
	payload, err := base64.RawURLEncoding.DecodeString(encoded)
	if !ok || err != nil {
		return Session{}, errors.New("no session: the cookie is malformed")
	}
	got, err := base64.RawURLEncoding.DecodeString(encodedMAC)
	if err != nil {
		return Session{}, errors.New("no session: the cookie is malformed")
	}
	valid := false
	for _, key := range keys {
		mac := hmac.New(sha256.New, sessionKey(key))
		mac.Write(payload)
		valid = hmac.Equal(mac.Sum(nil), got) || valid
	}
	if !valid {
		return Session{}, errors.New("no session: the cookie's signature is wrong")
	}
	var s Session
	if err := json.Unmarshal(payload, &s); err != nil {
		return Session{}, errors.New("no session: the cookie is malformed")
	}
	if now.Unix() >= s.Expires {
		return Session{}, errors.New("no session: the cookie expired")
	}
	return s, nil
}
