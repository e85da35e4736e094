package tcpgateway

import (
	"bytes"
	"errors"
	"io"
)

// errLineTooLong is a line without its end within the cap.
var errLineTooLong = errors.New("line too long")

// lineReader reads the player's lines (the token, the proof of work) from a connection into a
// fixed buffer and keeps what follows the last line read: bytes a client sends after its token
// without waiting (pwntools' sendline, a pasted script) belong to the instance and are forwarded
// before the splice.
type lineReader struct {
	r     io.Reader
	buf   []byte
	start int // first unread byte
	end   int // end of the bytes read
}

// newLineReader reads lines of at most maxLine bytes, not counting the line's end (LF or CRLF).
func newLineReader(r io.Reader, maxLine int) *lineReader {
	return &lineReader{r: r, buf: make([]byte, maxLine+2)}
}

// readLine returns the next line without its LF or CRLF. It never reads more than the buffer
// holds: a line longer than the cap is errLineTooLong, a connection closed before the line's end
// is io.EOF (io.ErrUnexpectedEOF after part of a line). The line is valid until the next call.
func (l *lineReader) readLine() ([]byte, error) {
	for {
		if i := bytes.IndexByte(l.buf[l.start:l.end], '\n'); i >= 0 {
			line := l.buf[l.start : l.start+i]
			l.start += i + 1
			line = bytes.TrimSuffix(line, []byte{'\r'})
			if len(line) > len(l.buf)-2 {
				return nil, errLineTooLong
			}
			return line, nil
		}
		if l.start > 0 {
			// Keep the unread bytes at the buffer's start: the line read before is no longer needed.
			l.end = copy(l.buf, l.buf[l.start:l.end])
			l.start = 0
		}
		if l.end == len(l.buf) {
			return nil, errLineTooLong
		}
		n, err := l.r.Read(l.buf[l.end:])
		l.end += n
		if n > 0 {
			continue
		}
		if err == io.EOF && l.end > l.start {
			return nil, io.ErrUnexpectedEOF
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		return nil, err
	}
}

// rest returns the bytes read after the last line, to forward to the instance.
func (l *lineReader) rest() []byte {
	return l.buf[l.start:l.end]
}
