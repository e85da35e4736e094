package tcpgateway

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/big"
	"testing"
	"testing/iotest"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chunked reads its bytes in pieces of the given sizes (cycled), as TCP delivers them.
type chunked struct {
	data  []byte
	sizes []byte
	i     int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = int(c.sizes[c.i%len(c.sizes)])%17 + 1
		c.i++
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// FuzzLineReader: however the bytes arrive, the reader returns the input's lines (without LF or
// CRLF) while they fit the cap, errLineTooLong for the first that does not, never reads more than
// the line cap plus its end beyond a line, and keeps exactly the bytes after the lines.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("abcdefghijklmnopqrstuvwxyz234567\n"), []byte{3}, uint8(40))
	f.Add([]byte("token\r\nanswer\nrest of the stream"), []byte{1, 5}, uint8(8))
	f.Add([]byte("\n\r\n\r\r\n"), []byte{}, uint8(1))
	f.Add(bytes.Repeat([]byte("a"), 300), []byte{16}, uint8(128))
	f.Fuzz(func(t *testing.T, input, sizes []byte, maxLine uint8) {
		limit := int(maxLine)%130 + 1
		src := &chunked{data: input, sizes: sizes}
		lr := newLineReader(src, limit)
		remaining := input
		for {
			line, err := lr.readLine()
			consumed := len(input) - len(src.data)
			want, after, found := bytes.Cut(remaining, []byte{'\n'})
			want = bytes.TrimSuffix(want, []byte{'\r'})
			switch {
			case err == nil:
				require.True(t, found, "a line only with its end")
				require.LessOrEqual(t, len(want), limit)
				require.Equal(t, want, line)
				remaining = after
				// What was read beyond the line is exactly what rest returns.
				require.Equal(t, input[len(input)-len(remaining):consumed], lr.rest())
				continue
			case errors.Is(err, errLineTooLong):
				require.Greater(t, len(want), limit, "a line refused though it fits")
			case errors.Is(err, io.EOF):
				require.Empty(t, remaining)
			case errors.Is(err, io.ErrUnexpectedEOF):
				require.False(t, found)
				require.NotEmpty(t, remaining)
			default:
				t.Fatalf("unexpected error %v", err)
			}
			// Never more read than one capped line beyond the last line returned.
			require.LessOrEqual(t, consumed-(len(input)-len(remaining)), limit+2)
			return
		}
	})
}

// TestLineReaderOneByteAtATime covers reads that return one byte and an error together.
func TestLineReaderOneByteAtATime(t *testing.T) {
	lr := newLineReader(iotest.DataErrReader(iotest.OneByteReader(bytes.NewReader([]byte("ab\r\ncd\nef")))), 4)
	for _, want := range []string{"ab", "cd"} {
		line, err := lr.readLine()
		require.NoError(t, err)
		assert.Equal(t, want, string(line))
	}
	_, err := lr.readLine()
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// FuzzSolves: an answer is accepted exactly when it is printable ASCII without spaces, at most
// maxAnswerBytes, and sha256(challenge + answer), read as a 256-bit number, is below 2^(256-bits):
// checked with big integers, independently of the gateway's bit counting.
func FuzzSolves(f *testing.F) {
	f.Add("00112233445566778899aabbccddeeff", uint8(4), []byte("17"))
	f.Add("00112233445566778899aabbccddeeff", uint8(0), []byte(""))
	f.Add("c", uint8(1), []byte("a b"))
	f.Fuzz(func(t *testing.T, challenge string, bits uint8, answer []byte) {
		bits %= 29
		got := solves(challenge, bits, answer)
		printable := len(answer) > 0 && len(answer) <= maxAnswerBytes
		for _, c := range answer {
			printable = printable && c > ' ' && c <= '~'
		}
		sum := sha256.Sum256(append([]byte(challenge), answer...))
		value := new(big.Int).SetBytes(sum[:])
		bound := new(big.Int).Lsh(big.NewInt(1), uint(256-int(bits)))
		assert.Equal(t, printable && value.Cmp(bound) < 0, got)
	})
}

func TestLeadingZeroBits(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want int
	}{{[]byte{0x80}, 0}, {[]byte{0x01}, 7}, {[]byte{0, 0x40}, 9}, {[]byte{0, 0}, 16}, {nil, 0}} {
		assert.Equal(t, tc.want, leadingZeroBits(tc.b), "%x", tc.b)
	}
}

// FuzzWebSocketFrames holds the player's frame reader (wsFrames, which the gateway reads frames
// with instead of the WebSocket library, so that an idle connection holds no goroutine) to the
// protocol, whatever the bytes and however they are cut: frames made of the input's payloads
// (binary, text, fragmented, with pings between), fed in pieces the input cuts, give back exactly
// those payloads and a pong per ping; and the raw input itself, as frames, never panics nor gives
// more bytes than it holds.
func FuzzWebSocketFrames(f *testing.F) {
	f.Add([]byte("hello\x00world"), []byte{1, 3, 200})
	f.Add([]byte{0x82, 0x80, 1, 2, 3, 4}, []byte{0})
	f.Add([]byte{0x81, 0xfe, 0xff, 0xff, 0, 0, 0, 0}, []byte{2, 2, 2})
	f.Fuzz(func(t *testing.T, input, cuts []byte) {
		var stream, want []byte
		pings := 0
		for i, payload := range bytes.SplitAfter(input, []byte{0}) {
			switch i % 4 {
			case 0:
				stream = append(stream, clientFrame(opBinary, payload, len(payload))...)
			case 1:
				stream = append(stream, clientFrame(opText, payload, len(payload))...)
			case 2: // two fragments, a ping between them
				half := len(payload) / 2
				first := clientFrame(opBinary, payload[:half], half)
				first[0] &^= 0x80
				stream = append(stream, first...)
				stream = append(stream, clientFrame(0x9, []byte("p"), 1)...)
				stream = append(stream, clientFrame(0, payload[half:], len(payload)-half)...)
				pings++
			case 3:
				stream = append(stream, clientFrame(opBinary, nil, 0)...)
				stream = append(stream, clientFrame(opBinary, payload, len(payload))...)
			}
			want = append(want, payload...)
		}
		got, pongs, err := feedFrames(stream, cuts)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, pings, pongs)

		got, _, _ = feedFrames(bytes.Clone(input), cuts)
		assert.LessOrEqual(t, len(got), len(input))
	})
}

// feedFrames feeds stream to a frame reader in the pieces cuts gives (each byte a piece's
// length), as reads of the player's socket would, and returns the payload read and the pongs
// sent; it stops at the player's close or the first error.
func feedFrames(stream, cuts []byte) (payload []byte, pongs int, err error) {
	frames := wsFrames{writeControl: func(messageType int, _ []byte) {
		if messageType == websocket.PongMessage {
			pongs++
		}
	}}
	for i := 0; len(stream) > 0; i++ {
		n := len(stream)
		if len(cuts) > 0 {
			n = min(n, 1+int(cuts[i%len(cuts)]))
		}
		piece := bytes.Clone(stream[:n])
		stream = stream[n:]
		data, end, err := frames.feed(piece)
		payload = append(payload, piece[:data]...)
		if end || err != nil {
			return payload, pongs, err
		}
	}
	return payload, pongs, nil
}
