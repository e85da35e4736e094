package sync

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner is the validating, allocation-light JSON reader of the fast decode path. It reads the
// request once, front to back: it checks the syntax of everything (what it skips included, so that
// it never accepts a document encoding/json refuses), and decodes only the fields the hook reads. The strings it keeps are copied into one growing arena (a strings.Builder, which never
// changes bytes it has handed out), so that they cost a few allocations in all rather than one each.
//
// It is deliberately unsure rather than wrong: on anything whose meaning under encoding/json takes
// care to reproduce (a syntax error, a type mismatch, a duplicate or case-folded field name, an
// escaped key, a deep document) it gives up, and the caller decodes the request with encoding/json
// instead, so that errors and corner cases are exactly encoding/json's.
type jsonScanner struct {
	data []byte
	// arena holds the strings the decoder keeps.
	arena strings.Builder
	// scratch is where strings with escapes are decoded before they go to the arena.
	scratch []byte
	pos     int
	// depth counts the open objects and arrays, bounded by maxFastDepth.
	depth int
	// failed is set once the fast path gives up; every read after it fails too.
	failed bool
}

// maxFastDepth bounds nesting on the fast path (encoding/json allows 10000; Kubernetes objects
// nest about 15 deep, managedFields included): deeper documents go to encoding/json.
const maxFastDepth = 100

func newJSONScanner(data []byte) *jsonScanner {
	s := &jsonScanner{data: data}
	// The kept strings (names, labels, statuses, last-applied configurations) are a fraction of a
	// request, most of which is managedFields and specs the hook skips.
	s.arena.Grow(len(data)/3 + 256)
	return s
}

// keep copies raw into the arena and returns it as a string.
func (s *jsonScanner) keep(raw []byte) string {
	start := s.arena.Len()
	s.arena.Write(raw)
	return s.arena.String()[start:]
}

// fail gives up the fast path. Moving to the end makes every later read fail at once, so that the
// decoders unwind without checking after every call.
func (s *jsonScanner) fail() {
	s.failed = true
	s.pos = len(s.data)
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// peek skips white space and returns the next byte, 0 at the end.
func (s *jsonScanner) peek() byte {
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		if c > ' ' || !isSpace(c) {
			return c
		}
		s.pos++
	}
	return 0
}

// expect consumes c, the next byte after white space.
func (s *jsonScanner) expect(c byte) {
	if s.peek() != c {
		s.fail()
		return
	}
	s.pos++
}

// atEnd reports whether only white space is left.
func (s *jsonScanner) atEnd() bool {
	return !s.failed && s.peek() == 0 && s.pos == len(s.data)
}

// null consumes a null literal if one is next and reports whether it did.
func (s *jsonScanner) null() bool {
	if s.peek() != 'n' {
		return false
	}
	s.literal("null")
	return !s.failed
}

func (s *jsonScanner) literal(lit string) {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		s.fail()
		return
	}
	s.pos += len(lit)
}

func (s *jsonScanner) push() {
	s.depth++
	if s.depth > maxFastDepth {
		s.fail()
	}
}

// object starts an object: present is false for null (an absent value), more is true when a
// member follows (false for {}); then key reads its name, and more moves to the next member. A
// value that is not an object or null fails.
func (s *jsonScanner) object() (present, more bool) { return s.open('{', '}') }

// array starts an array, like object: present is false for null, more is false for [].
func (s *jsonScanner) array() (present, more bool) { return s.open('[', ']') }

// open starts an object or an array, whichever opening and closing name.
func (s *jsonScanner) open(opening, closing byte) (present, more bool) {
	switch s.peek() {
	case opening:
		s.pos++
		s.push()
		if s.peek() == closing {
			s.pos++
			s.depth--
			return true, false
		}
		return true, !s.failed
	case 'n':
		s.literal("null")
		return false, false
	default:
		s.fail()
		return false, false
	}
}

// key reads a member name and the colon after it; the name is only valid until the next read.
// Names with escapes or outside ASCII fail: encoding/json matches them to fields after unescaping
// and case folding, which the fast path does not reproduce.
func (s *jsonScanner) key() []byte {
	if s.peek() != '"' {
		s.fail()
		return nil
	}
	start := s.pos + 1
	end := flaggedByte(s.data, start)
	if end < 0 || s.data[end] != '"' {
		var special bool
		if end, special = s.stringEnd(start); s.failed || special {
			s.fail()
			return nil
		}
	}
	s.pos = end + 1
	s.expect(':')
	return s.data[start:end]
}

// more consumes the comma before the next member or element, or the closing bracket.
func (s *jsonScanner) more(closing byte) bool {
	switch s.peek() {
	case ',':
		s.pos++
		return true
	case closing:
		s.pos++
		s.depth--
		return false
	default:
		s.fail()
		return false
	}
}

// str reads a string; null reads as "", as encoding/json leaves a string it decodes null into.
func (s *jsonScanner) str() string {
	switch s.peek() {
	case '"':
	case 'n':
		s.literal("null")
		return ""
	default:
		s.fail()
		return ""
	}
	start := s.pos + 1
	if end := flaggedByte(s.data, start); end >= 0 && s.data[end] == '"' {
		s.pos = end + 1
		return s.keep(s.data[start:end])
	}
	return s.decodeString(start)
}

// decodeString reads the string whose content starts at start and holds an escape or a byte
// outside ASCII: in one pass, it checks it as stringEnd does and decodes it exactly as encoding/json
// does (escapes decoded; invalid UTF-8 and unpaired surrogates become U+FFFD). The decoded bytes go
// through scratch, reused from string to string, into the arena.
func (s *jsonScanner) decodeString(start int) string {
	data := s.data
	if s.scratch == nil {
		// Last-applied configurations, the longest strings with escapes, take a kilobyte or two.
		s.scratch = make([]byte, 0, 2048)
	}
	out := s.scratch[:0]
	i := start
	for {
		// Copy the run up to the next byte that needs a look at once.
		j := flaggedByte(data, i)
		if j < 0 {
			j = i
			for j < len(data) && data[j] >= 0x20 && data[j] != '"' && data[j] != '\\' && data[j] < utf8.RuneSelf {
				j++
			}
			if j == len(data) {
				s.fail()
				return ""
			}
		}
		out = append(out, data[i:j]...)
		switch c := data[j]; {
		case c == '"':
			s.pos = j + 1
			s.scratch = out
			return s.keep(out)
		case c == '\\':
			if j+1 >= len(data) {
				s.fail()
				return ""
			}
			switch e := data[j+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hexEscape(data, j)
				if !ok {
					s.fail()
					return ""
				}
				j += 6
				if utf16.IsSurrogate(r) {
					// A valid pair makes one rune; anything else leaves U+FFFD for the first half
					// and the next escape to the next round, as encoding/json does.
					if second, ok := hexEscape(data, j); ok {
						if pair := utf16.DecodeRune(r, second); pair != unicode.ReplacementChar {
							out = utf8.AppendRune(out, pair)
							i = j + 6
							continue
						}
					}
					r = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, r)
				i = j
				continue
			default:
				s.fail()
				return ""
			}
			i = j + 2
		case c < 0x20:
			s.fail()
			return ""
		default:
			// Outside ASCII: a quote is never part of a multi-byte sequence, so decoding past the
			// string's end cannot swallow it.
			r, size := utf8.DecodeRune(data[j:])
			out = utf8.AppendRune(out, r) // RuneError for an invalid byte, as encoding/json
			i = j + size
		}
	}
}

// hexEscape reads the \uXXXX escape at data[j:], reporting whether there is a valid one.
func hexEscape(data []byte, j int) (rune, bool) {
	if j+6 > len(data) || data[j] != '\\' || data[j+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range data[j+2 : j+6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// flaggedByte is stringEnd's fast path, small enough to be inlined where strings are skipped: the
// index of the first byte from i on that is a quote, a backslash, a control character or not
// ASCII, or -1 when fewer than eight bytes are left before it. A string ends there when it is a
// quote; anything else needs stringEnd's closer look.
func flaggedByte(data []byte, i int) int {
	for i+8 <= len(data) {
		w := binary.LittleEndian.Uint64(data[i:])
		quote := w ^ (0x0101010101010101 * '"')
		backslash := w ^ (0x0101010101010101 * '\\')
		if flagged := ((quote-0x0101010101010101)&^quote | (backslash-0x0101010101010101)&^backslash | (w-0x2020202020202020)&^w | w) & 0x8080808080808080; flagged != 0 {
			return i + bits.TrailingZeros64(flagged)>>3
		}
		i += 8
	}
	return -1
}

// stringEnd finds the closing quote of the string whose content starts at start. special reports
// an escape or a byte outside ASCII: such content needs decodeString to read as encoding/json reads
// it. It checks escapes and refuses control characters, as the JSON grammar does.
func (s *jsonScanner) stringEnd(start int) (end int, special bool) {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	data := s.data
	i := start
	for {
		// Eight bytes at a time while none is a quote, a backslash, a control character or
		// non-ASCII (the has-zero-byte and has-less-than tricks; the lowest flagged byte is exact).
		for i+8 <= len(data) {
			w := binary.LittleEndian.Uint64(data[i:])
			quote := w ^ (ones * '"')
			backslash := w ^ (ones * '\\')
			if flagged := ((quote-ones)&^quote | (backslash-ones)&^backslash | (w-ones*0x20)&^w | w) & highs; flagged != 0 {
				i += bits.TrailingZeros64(flagged) >> 3
				break
			}
			i += 8
		}
		if i >= len(data) {
			s.fail()
			return 0, false
		}
		c := data[i]
		switch {
		case c == '"':
			return i, special
		case c == '\\':
			special = true
			if i+1 >= len(data) {
				s.fail()
				return 0, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(data) || !isHex(data[i+2]) || !isHex(data[i+3]) || !isHex(data[i+4]) || !isHex(data[i+5]) {
					s.fail()
					return 0, false
				}
				i += 6
			default:
				s.fail()
				return 0, false
			}
		case c < 0x20:
			s.fail()
			return 0, false
		case c >= utf8.RuneSelf:
			special = true
			i++
		default:
			i++
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// boolean reads true or false; null reads as false.
func (s *jsonScanner) boolean() bool {
	switch s.peek() {
	case 't':
		s.literal("true")
		return true
	case 'f':
		s.literal("false")
	case 'n':
		s.literal("null")
	default:
		s.fail()
	}
	return false
}

// integer reads a number that must be an integer within [min, max], as encoding/json requires of
// an integer field (no fraction, no exponent); null reads as 0. Anything else fails.
func (s *jsonScanner) integer(bits int) int64 {
	c := s.peek()
	if c == 'n' {
		s.literal("null")
		return 0
	}
	start := s.pos
	end := s.numberEnd()
	if s.failed {
		return 0
	}
	digits := s.data[start:end]
	negative := digits[0] == '-'
	if negative {
		digits = digits[1:]
	}
	limit := uint64(1)<<(bits-1) - 1
	if negative {
		limit++
	}
	var n uint64
	for _, d := range digits {
		if d < '0' || d > '9' { // a fraction or an exponent
			s.fail()
			return 0
		}
		n = n*10 + uint64(d-'0')
		if n > limit {
			s.fail()
			return 0
		}
	}
	if negative {
		return -int64(n)
	}
	return int64(n)
}

// numberEnd checks the number at pos against the JSON grammar, moves past it and returns its end.
func (s *jsonScanner) numberEnd() int {
	data := s.data
	i := s.pos
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && '1' <= data[i] && data[i] <= '9':
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
	default:
		s.fail()
		return 0
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			s.fail()
			return 0
		}
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || data[i] < '0' || data[i] > '9' {
			s.fail()
			return 0
		}
		for i < len(data) && '0' <= data[i] && data[i] <= '9' {
			i++
		}
	}
	s.pos = i
	return i
}

// skip checks and passes over one value of any type: the parts of the request the hook does not
// read (managedFields, Pod specs, ...) cost one pass of the scanner and no allocation.
func (s *jsonScanner) skip() {
	// containers holds one bit per open container, 1 for an object, innermost lowest.
	var containers uint64
	open := 0
	for !s.failed {
		// A value.
		switch s.peek() {
		case '"':
			end := flaggedByte(s.data, s.pos+1)
			if end < 0 || s.data[end] != '"' {
				if end, _ = s.stringEnd(s.pos + 1); s.failed {
					return
				}
			}
			s.pos = end + 1
		case '{':
			s.pos++
			if s.peek() == '}' {
				s.pos++
				break
			}
			if open == 64 || s.depth+open >= maxFastDepth {
				s.fail()
				return
			}
			containers = containers<<1 | 1
			open++
			s.skipKey()
			continue
		case '[':
			s.pos++
			if s.peek() == ']' {
				s.pos++
				break
			}
			if open == 64 || s.depth+open >= maxFastDepth {
				s.fail()
				return
			}
			containers <<= 1
			open++
			continue
		case 't':
			s.literal("true")
		case 'f':
			s.literal("false")
		case 'n':
			s.literal("null")
		default:
			s.numberEnd()
		}
		// After a value: close containers until a comma starts the next value.
		for {
			if open == 0 || s.failed {
				return
			}
			c := s.peek()
			inObject := containers&1 == 1
			if c == ',' {
				s.pos++
				if inObject {
					s.skipKey()
				}
				break
			}
			if inObject && c == '}' || !inObject && c == ']' {
				s.pos++
				containers >>= 1
				open--
				continue
			}
			s.fail()
			return
		}
	}
}

// skipKey passes over a member name that may hold escapes, and its colon.
func (s *jsonScanner) skipKey() {
	if s.peek() != '"' {
		s.fail()
		return
	}
	end := flaggedByte(s.data, s.pos+1)
	if end < 0 || s.data[end] != '"' {
		if end, _ = s.stringEnd(s.pos + 1); s.failed {
			return
		}
	}
	s.pos = end + 1
	s.expect(':')
}

// unknownField skips the value of a member the decoder does not read. encoding/json matches
// member names to fields without regard to case (bytes.EqualFold): a name that matches one of the
// struct's fields that way, or any name outside ASCII, is left to encoding/json.
func (s *jsonScanner) unknownField(name []byte, fields ...string) {
	for _, f := range fields {
		if len(f) == len(name) && asciiEqualFold(f, name) {
			s.fail()
			return
		}
	}
	s.skip()
}

func asciiEqualFold(a string, b []byte) bool {
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// fieldSet records which fields of one object were read, to give duplicates to encoding/json
// (which merges or overwrites them).
type fieldSet uint64

// first marks field bit as read and fails if it was read before.
func (s *jsonScanner) first(seen *fieldSet, bit uint) {
	if *seen&(1<<bit) != 0 {
		s.fail()
		return
	}
	*seen |= 1 << bit
}
