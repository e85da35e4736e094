package tcptoken

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	key      = bytes.Repeat([]byte{7}, MinKeyBytes)
	otherKey = bytes.Repeat([]byte{8}, MinKeyBytes)
	target   = Target{Service: netip.MustParseAddrPort("10.96.12.34:31337"), ProofOfWorkBits: 20, ProxyProtocol: true}
)

func TestMintThenOpen(t *testing.T) {
	for _, want := range []Target{target, {Service: netip.MustParseAddrPort("10.0.0.1:1")}} {
		token, err := Mint(key, want)
		require.NoError(t, err)
		assert.Len(t, token, Length)
		assert.Equal(t, strings.ToLower(token), token, "minted lower case")
		got, err := Open(key, token)
		require.NoError(t, err)
		assert.Equal(t, want, got)

		// Players type it: case and the line's white space do not matter.
		got, err = Open(key, "  "+strings.ToUpper(token)+"\r\n")
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

func TestMintIsDeterministic(t *testing.T) {
	a, err := Mint(key, target)
	require.NoError(t, err)
	b, err := Mint(key, target)
	require.NoError(t, err)
	assert.Equal(t, a, b, "the same instance keeps its token across syncs")
}

func TestOnlyTheKeyOpens(t *testing.T) {
	token, err := Mint(key, target)
	require.NoError(t, err)
	_, err = Open(otherKey, token)
	assert.ErrorIs(t, err, ErrInvalid)
}

// TestEveryAlteredCharacterIsRefused changes each character of a valid token to every other
// character of the alphabet: no edit leads anywhere, in particular not to a neighbouring address.
func TestEveryAlteredCharacterIsRefused(t *testing.T) {
	token, err := Mint(key, target)
	require.NoError(t, err)
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	for i := range token {
		for _, c := range alphabet {
			if byte(c) == token[i] {
				continue
			}
			altered := token[:i] + string(c) + token[i+1:]
			_, err := Open(key, altered)
			require.ErrorIs(t, err, ErrInvalid, "token altered at %d to %q", i, c)
		}
	}
}

func TestMalformedTokensAreInvalid(t *testing.T) {
	token, err := Mint(key, target)
	require.NoError(t, err)
	for _, bad := range []string{"", "x", token[:Length-1], token + "a", strings.Repeat("a", Length), strings.Repeat("=", Length), token[:Length-1] + "1"} {
		_, err := Open(key, bad)
		assert.ErrorIs(t, err, ErrInvalid, "%q", bad)
	}
}

func TestMintRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		key    []byte
		target Target
	}{
		"short key":     {key[:MinKeyBytes-1], target},
		"IPv6":          {key, Target{Service: netip.MustParseAddrPort("[fd00::1]:80")}},
		"port 0":        {key, Target{Service: netip.MustParseAddrPort("10.0.0.1:0")}},
		"too much work": {key, Target{Service: target.Service, ProofOfWorkBits: MaxProofOfWorkBits + 1}},
	} {
		_, err := Mint(tc.key, tc.target)
		assert.Error(t, err, name)
	}
}

func FuzzOpen(f *testing.F) {
	token, err := Mint(key, target)
	require.NoError(f, err)
	f.Add(token)
	f.Add(strings.ToUpper(token))
	f.Add("")
	f.Add(strings.Repeat("a", Length))
	f.Fuzz(func(t *testing.T, s string) {
		got, err := Open(key, s)
		if err != nil {
			return
		}
		// Whatever opens was minted: minting its target again gives the same token.
		again, err := Mint(key, got)
		require.NoError(t, err)
		assert.Equal(t, strings.ToLower(strings.TrimSpace(s)), again)
	})
}
