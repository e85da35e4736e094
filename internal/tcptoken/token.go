// Package tcptoken mints and opens the tokens of the TCP gateway: the line a player types after
// `nc <gateway> <port>` to reach their own instance. A token is the whole routing state: it carries
// the instance's ClusterIP Service address and the gateway options of its exposure, authenticated
// with the gateway key, so the gateway holds no table and no Kubernetes credential, and only a
// holder of the key (the hook) can mint one.
//
// Layout (20 bytes, 32 characters of lower-case RFC 4648 base32 without padding):
//
//	0..3   the Service's IPv4 ClusterIP
//	4..5   the Service port, big-endian
//	6      proof-of-work difficulty in bits (0: none)
//	7      options: bit 0 PROXY protocol v2 towards the instance; bits 1..7 must be 0
//	8..19  the first 96 bits of HMAC-SHA256(key, domain || bytes 0..7)
//
// The address is not secret (it is the instance's own Service); the tag is what a player cannot
// forge or guess: 96 bits, checked in constant time.
package tcptoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Length is the number of characters of a token.
const Length = 32

// MinKeyBytes is the shortest gateway key accepted: 256 bits, as the flag key.
const MinKeyBytes = 32

// MaxProofOfWorkBits bounds the difficulty a token may ask for: 2^28 hashes is minutes on a
// laptop, beyond anything an event asks of a player.
const MaxProofOfWorkBits = 28

const (
	payloadBytes = 8
	tagBytes     = 12
	optionProxy  = 1 << 0
	// domain separates the token's MAC from every other use a key could be put to.
	domain = "challenge-hook tcp-gateway token v1\x00"
)

var encoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// Target is where a token leads and how the gateway treats the connection.
type Target struct {
	// Service is the instance's ClusterIP Service address (IPv4) and port.
	Service netip.AddrPort
	// ProofOfWorkBits is the difficulty of the puzzle posed before connecting (0: none).
	ProofOfWorkBits uint8
	// ProxyProtocol sends a PROXY protocol v2 header with the player's address to the instance.
	ProxyProtocol bool
}

// ErrInvalid is the error of every token that does not open: malformed or forged alike, so that
// the gateway's answer says nothing about which.
var ErrInvalid = errors.New("invalid token")

// Mint returns the token of t under key.
func Mint(key []byte, t Target) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	if !t.Service.Addr().Is4() {
		return "", fmt.Errorf("service address %s: the TCP gateway reaches IPv4 ClusterIPs only", t.Service.Addr())
	}
	if t.Service.Port() == 0 {
		return "", errors.New("service port 0")
	}
	if t.ProofOfWorkBits > MaxProofOfWorkBits {
		return "", fmt.Errorf("proof of work of %d bits: at most %d", t.ProofOfWorkBits, MaxProofOfWorkBits)
	}
	var raw [payloadBytes + tagBytes]byte
	ip := t.Service.Addr().As4()
	copy(raw[0:4], ip[:])
	binary.BigEndian.PutUint16(raw[4:6], t.Service.Port())
	raw[6] = t.ProofOfWorkBits
	if t.ProxyProtocol {
		raw[7] |= optionProxy
	}
	copy(raw[payloadBytes:], tag(key, raw[:payloadBytes]))
	return strings.ToLower(encoding.EncodeToString(raw[:])), nil
}

// Open returns the target of token if key minted it. Case and surrounding white space do not
// matter (players type it). Every failure is ErrInvalid, wrapped with no detail of the token.
func Open(key []byte, token string) (Target, error) {
	if err := checkKey(key); err != nil {
		return Target{}, err
	}
	token = strings.TrimSpace(token)
	if len(token) != Length {
		return Target{}, ErrInvalid
	}
	var raw [payloadBytes + tagBytes]byte
	n, err := encoding.Decode(raw[:], []byte(strings.ToUpper(token)))
	if err != nil || n != len(raw) {
		return Target{}, ErrInvalid
	}
	if !hmac.Equal(raw[payloadBytes:], tag(key, raw[:payloadBytes])) {
		return Target{}, ErrInvalid
	}
	// A valid tag over a payload this version cannot read: minted by a newer hook, refused whole.
	if raw[7]&^optionProxy != 0 || raw[6] > MaxProofOfWorkBits {
		return Target{}, ErrInvalid
	}
	port := binary.BigEndian.Uint16(raw[4:6])
	if port == 0 {
		return Target{}, ErrInvalid
	}
	return Target{
		Service:         netip.AddrPortFrom(netip.AddrFrom4([4]byte(raw[0:4])), port),
		ProofOfWorkBits: raw[6],
		ProxyProtocol:   raw[7]&optionProxy != 0,
	}, nil
}

func tag(key, payload []byte) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(domain))
	mac.Write(payload)
	return mac.Sum(nil)[:tagBytes]
}

func checkKey(key []byte) error {
	if len(key) < MinKeyBytes {
		return fmt.Errorf("gateway key of %d bytes: at least %d (for example: head -c 32 /dev/urandom)", len(key), MinKeyBytes)
	}
	return nil
}
