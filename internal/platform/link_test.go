package platform

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	linkKey         = []byte("a link key of the platform's, 32+ bytes long")
	previousLinkKey = []byte("the link key before the rotation, 32+ bytes")
)

// linkVector is a signed link as any language must sign it, its signature computed apart (with
// openssl dgst -sha256 -hmac and with python3's hmac): docs/player-page.md lists it.
var linkVector = struct {
	key  string
	link Link
	sig  string
}{
	key:  "a link key of the platform's, 32+ bytes long",
	link: Link{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: time.Unix(1796389200, 0)},
	sig:  "91347573c99c68ad3af3e218db6766d766622c608850ecaadf4155ef00811f75",
}

func TestLinkVector(t *testing.T) {
	q := SignLink([]byte(linkVector.key), linkVector.link)
	assert.Equal(t, "challenge-hook/link/v1\nctf\npwn-heap\nteam-42\n1796389200", linkVector.link.message())
	assert.Equal(t, linkVector.sig, q.Get("sig"))
	l, err := VerifyLink([][]byte{[]byte(linkVector.key)}, q, linkVector.link.Expires.Add(-time.Minute))
	require.NoError(t, err)
	assert.Equal(t, linkVector.link, l)
}

func TestVerifyLink(t *testing.T) {
	now := time.Unix(1796389000, 0)
	good := Link{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: now.Add(2 * time.Minute)}
	keys := [][]byte{linkKey, previousLinkKey}

	l, err := VerifyLink(keys, SignLink(linkKey, good), now)
	require.NoError(t, err)
	assert.Equal(t, good, l)
	_, err = VerifyLink(keys, SignLink(previousLinkKey, good), now)
	assert.NoError(t, err, "the previous key still opens links during a rotation")

	altered := func(field, value string) url.Values {
		q := SignLink(linkKey, good)
		q.Set(field, value)
		return q
	}
	for name, tc := range map[string]struct {
		query url.Values
		now   time.Time
		says  string
	}{
		"forged":             {SignLink([]byte("somebody else's key, 32+ bytes long..."), good), now, "wrong signature"},
		"other owner":        {altered("owner", "team-43"), now, "wrong signature"},
		"other definition":   {altered("def", "web-notes"), now, "wrong signature"},
		"other namespace":    {altered("ns", "ctf-b"), now, "wrong signature"},
		"later expiry":       {altered("exp", "1796389900"), now, "wrong signature"},
		"expired":            {SignLink(linkKey, good), good.Expires, "expired"},
		"replayed later":     {SignLink(linkKey, good), now.Add(time.Hour), "expired"},
		"too far ahead":      {SignLink(linkKey, Link{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: now.Add(time.Hour)}), now, "more than 5m0s ahead"},
		"no signature":       {altered("sig", ""), now, "no hex"},
		"repeated owner":     {url.Values{"ns": {"ctf"}, "def": {"pwn-heap"}, "owner": {"team-42", "team-43"}, "exp": {"1796389120"}, "sig": {"00"}}, now, "owner is missing or repeated"},
		"owner no label":     {SignLink(linkKey, Link{Namespace: "ctf", Definition: "pwn-heap", Owner: "team 42", Expires: now.Add(time.Minute)}), now, "a label value"},
		"namespace no label": {SignLink(linkKey, Link{Namespace: "CTF", Definition: "pwn-heap", Owner: "team-42", Expires: now.Add(time.Minute)}), now, "namespace"},
	} {
		_, err := VerifyLink(keys, tc.query, tc.now)
		if assert.Error(t, err, name) {
			assert.ErrorIs(t, err, errLink, name)
			assert.Contains(t, err.Error(), tc.says, name)
		}
	}
}

func TestSession(t *testing.T) {
	now := time.Unix(1796389000, 0)
	s := Session{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-42", Expires: now.Add(SessionLifetime).Unix()}
	keys := [][]byte{linkKey, previousLinkKey}
	cookie := SealSession(keys, s)
	got, err := OpenSession(keys, cookie, now)
	require.NoError(t, err)
	assert.Equal(t, s, got)
	_, err = OpenSession([][]byte{previousLinkKey}, cookie, now)
	assert.Error(t, err, "a session under another key is none")
	_, err = OpenSession(keys, cookie, now.Add(SessionLifetime))
	assert.ErrorContains(t, err, "expired")
	// A player who edits the cookie to another team's gets nothing.
	other := SealSession([][]byte{[]byte("not the key, but 32 bytes or more.......")}, Session{Namespace: "ctf", Definition: "pwn-heap", Owner: "team-43", Expires: s.Expires})
	_, err = OpenSession(keys, other, now)
	assert.ErrorContains(t, err, "signature")
	payload, mac, _ := cutDot(cookie)
	_, err = OpenSession(keys, payload+"x."+mac, now)
	assert.Error(t, err)
}

func cutDot(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '.' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
