package tcpgateway

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/bits"
)

// The proof of work is hashcash-style: the gateway poses a random challenge of its own per
// connection, and the player answers with any string x (printable ASCII without spaces) such that
// sha256(challenge + x) starts with the token's number of zero bits. Checking is one hash over a
// bounded line: constant memory and time, however the player answers.

// challengeBytes is the randomness of a challenge: 128 bits, so no answer is ever reused.
const challengeBytes = 16

// maxAnswerBytes bounds an answer; a counter of the solver below needs at most 20 digits.
const maxAnswerBytes = 64

// Solver is the one-line solver the puzzle prints, for players: it prints an answer for the
// challenge and the number of bits that follow it as its arguments.
const Solver = `python3 -c 'import hashlib,itertools,sys;c,b=sys.argv[1].encode(),int(sys.argv[2]);print(next(i for i in itertools.count() if int.from_bytes(hashlib.sha256(c+str(i).encode()).digest(),"big")>>(256-b)==0))'`

// newChallenge returns a fresh random challenge, as the player sees it (32 hexadecimal digits).
func newChallenge() (string, error) {
	var b [challengeBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("proof-of-work challenge: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// puzzle is what the gateway writes: the statement and the command that solves it on a line, and
// the prompt for the answer.
func puzzle(challenge string, zeroBits uint8) string {
	return fmt.Sprintf("proof of work: sha256(%s + answer) with %d leading zero bits; solve with: %s %s %d\nanswer: ",
		challenge, zeroBits, Solver, challenge, zeroBits)
}

// solves says whether answer is a solution of the challenge: a non-empty string of printable ASCII
// without spaces, of at most maxAnswerBytes, such that sha256(challenge + answer) has zeroBits
// leading zero bits.
func solves(challenge string, zeroBits uint8, answer []byte) bool {
	if len(answer) == 0 || len(answer) > maxAnswerBytes {
		return false
	}
	for _, c := range answer {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	h := sha256.New()
	h.Write([]byte(challenge))
	h.Write(answer)
	var sum [sha256.Size]byte
	return leadingZeroBits(h.Sum(sum[:0])) >= int(zeroBits)
}

// leadingZeroBits counts the zero bits at the start of b.
func leadingZeroBits(b []byte) int {
	n := 0
	for _, c := range b {
		if c != 0 {
			return n + bits.LeadingZeros8(c)
		}
		n += 8
	}
	return n
}
