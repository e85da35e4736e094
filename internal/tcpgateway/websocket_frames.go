package tcpgateway

import (
	"encoding/binary"
	"errors"

	"github.com/gorilla/websocket"
)

// wsFrames reads the player's frames once spliced, from bytes handed to it as they arrive, and
// writes their payload to the instance: the library's reader waits for a whole frame header (and
// handles control frames) inside NextReader, which would hold a goroutine per idle connection;
// this holds none between two reads, so the player's direction parks in the poller. Its state
// between two reads is a partial header or control frame and where the data frame being read is.
type wsFrames struct {
	// writeControl sends the player a control frame: a ping's pong, the close frame of an error.
	writeControl func(messageType int, data []byte)
	hdr          [14]byte // the header being read: 2 bytes, the extended length, the mask key
	hdrN         int
	opcode       int
	inFrame      bool // its header was read, its payload not all yet
	key          [4]byte
	pos          int   // the mask key's position of the next payload byte
	left         int64 // payload bytes of the current frame still to read
	inMsg        bool  // a data message is in progress: continuation frames belong to it
	msgSize      int64 // payload bytes of the current data message so far
	ctl          []byte
}

// errWSProtocol is a player's frame that breaks RFC 6455: closed with 1002.
var errWSProtocol = errors.New("websocket: protocol error")

// feed reads the frames in b, their payload unmasked and moved to b's start (b[:data]: the
// instance's bytes, written at once by the caller, a write per read, not one per frame): end once
// the player's close frame came, or an error (the player told why by a close frame, when the
// error is its own).
func (f *wsFrames) feed(b []byte) (data int, end bool, err error) {
	rest := b
	for len(rest) > 0 || f.inFrame && f.left == 0 {
		if !f.inFrame {
			if rest, err = f.header(rest); err != nil || !f.inFrame {
				return data, false, err
			}
		}
		n := int(min(f.left, int64(len(rest))))
		p := rest[:n]
		rest = rest[n:]
		f.left -= int64(n)
		if f.opcode >= websocket.CloseMessage {
			f.pos = unmaskTo(f.key, f.pos, p, p)
			f.ctl = append(f.ctl, p...)
		} else {
			// p lies at or after b[data:]: moved down as it is unmasked.
			f.pos = unmaskTo(f.key, f.pos, b[data:], p)
			data += n
		}
		if f.left == 0 {
			f.inFrame = false
			if f.opcode >= websocket.CloseMessage && f.control() {
				return data, true, nil
			}
		}
	}
	return data, false, nil
}

// header reads the frame header at b's start, as far as b holds it: the bytes after it; inFrame
// once it is whole.
func (f *wsFrames) header(b []byte) ([]byte, error) {
	for {
		need := 2
		if f.hdrN >= 2 {
			need = headerBytes(f.hdr[1])
		}
		k := copy(f.hdr[f.hdrN:need], b)
		f.hdrN += k
		b = b[k:]
		if f.hdrN < need {
			return b, nil
		}
		if need > 2 {
			break
		}
	}
	f.hdrN = 0
	return b, f.parse()
}

// headerBytes is the length of a masked frame's header, from its second byte.
func headerBytes(b1 byte) int {
	switch b1 & 0x7f {
	case 126:
		return 8
	case 127:
		return 14
	}
	return 6
}

// parse checks the header read and sets the frame's state.
func (f *wsFrames) parse() error {
	h := f.hdr
	opcode, final, length := int(h[0]&0x0f), h[0]&0x80 != 0, int64(h[1]&0x7f)
	off := 2
	switch length {
	case 126:
		length, off = int64(binary.BigEndian.Uint16(h[2:])), 4
	case 127:
		length, off = int64(binary.BigEndian.Uint64(h[2:])), 10
	}
	copy(f.key[:], h[off:off+4])
	f.pos = 0
	switch {
	case h[0]&0x70 != 0 || h[1]&0x80 == 0 || length < 0:
		return f.fail(websocket.CloseProtocolError, "bad frame header")
	case opcode >= websocket.CloseMessage && opcode <= websocket.PongMessage:
		if !final || length > 125 {
			return f.fail(websocket.CloseProtocolError, "bad control frame")
		}
		f.ctl = f.ctl[:0]
	case opcode == 0 && f.inMsg, (opcode == websocket.TextMessage || opcode == websocket.BinaryMessage) && !f.inMsg:
		if opcode != 0 {
			f.msgSize = 0
		}
		f.inMsg = !final
		f.msgSize += length
		if f.msgSize > maxMessageBytes {
			return f.fail(websocket.CloseMessageTooBig, "")
		}
	default:
		return f.fail(websocket.CloseProtocolError, "unexpected frame")
	}
	f.opcode, f.left, f.inFrame = opcode, length, true
	return nil
}

// control handles a whole control frame: a ping is answered, a pong ignored, a close is the
// player's end (true).
func (f *wsFrames) control() (end bool) {
	switch f.opcode {
	case websocket.CloseMessage:
		return true
	case websocket.PingMessage:
		f.writeControl(websocket.PongMessage, f.ctl)
	}
	return false
}

// fail tells the player why its frames end the connection, as the library would.
func (f *wsFrames) fail(code int, reason string) error {
	f.writeControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason))
	return errWSProtocol
}

// unmaskTo writes src unmasked to dst, whose start is at or before src's (the same bytes, or
// the frame's payload moved down over the headers before it), src's first byte at the key's
// position pos, 32 bytes at a time: the position of the byte after it. A word is read before it
// is written, and written no later than where it was read, so no byte is written before it is read.
func unmaskTo(key [4]byte, pos int, dst, src []byte) int {
	var k8 [8]byte
	for i := range k8 {
		k8[i] = key[(pos+i)&3]
	}
	kw := binary.LittleEndian.Uint64(k8[:])
	dst = dst[:len(src)]
	i := 0
	for ; i+32 <= len(src); i += 32 {
		s, d := src[i:i+32], dst[i:i+32]
		w0, w1 := binary.LittleEndian.Uint64(s[0:]), binary.LittleEndian.Uint64(s[8:])
		w2, w3 := binary.LittleEndian.Uint64(s[16:]), binary.LittleEndian.Uint64(s[24:])
		binary.LittleEndian.PutUint64(d[0:], w0^kw)
		binary.LittleEndian.PutUint64(d[8:], w1^kw)
		binary.LittleEndian.PutUint64(d[16:], w2^kw)
		binary.LittleEndian.PutUint64(d[24:], w3^kw)
	}
	for ; i < len(src); i++ {
		dst[i] = src[i] ^ key[(pos+i)&3]
	}
	return (pos + len(src)) & 3
}

// maxServerHeaderBytes is the longest header of a frame to the player (unmasked): 2 bytes and a
// 64-bit length.
const maxServerHeaderBytes = 10

// appendServerHeader appends the header of a final, unmasked frame of n payload bytes.
func appendServerHeader(dst []byte, messageType, n int) []byte {
	b0 := byte(0x80 | messageType)
	switch {
	case n < 126:
		return append(dst, b0, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(dst, b0, 126), uint16(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, b0, 127), uint64(n))
}
