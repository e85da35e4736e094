package tcpgateway

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// LogFlushDelay is the longest a log line waits in a LogWriter's buffer before it is written.
const LogFlushDelay = 100 * time.Millisecond

// logBufferBytes is a LogWriter's buffer: a full one is written at once. A connection's log line
// is about 250 bytes: about 130 lines.
const logBufferBytes = 32 << 10

// LogWriter buffers the gateway's log lines and writes them at most LogFlushDelay after the first
// line it holds (or as soon as its buffer is full), so that the line of each spliced connection
// costs no write(2) of its own: one write carries all the lines of 100 ms. The lines are not
// changed, only written together; Flush writes what it holds (the gateway's command calls it on
// the way out, and for every warning or error, see FlushingHandler).
type LogWriter struct {
	mu    sync.Mutex
	buf   *bufio.Writer
	timer *time.Timer // armed while the buffer holds lines
}

// NewLogWriter buffers the lines written to w.
func NewLogWriter(w io.Writer) *LogWriter {
	l := &LogWriter{buf: bufio.NewWriterSize(w, logBufferBytes)}
	l.timer = time.AfterFunc(time.Hour, func() { l.Flush() })
	l.timer.Stop()
	return l
}

// Write buffers p (one log line: slog's handlers write each record with one call), and arms the
// flush when the buffer was empty.
func (l *LogWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	wasEmpty := l.buf.Buffered() == 0
	n, err := l.buf.Write(p)
	if wasEmpty && l.buf.Buffered() > 0 {
		l.timer.Reset(LogFlushDelay)
	}
	return n, err
}

// Flush writes the lines held.
func (l *LogWriter) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer.Stop()
	return l.buf.Flush()
}

// FlushingHandler writes the records of h, and flushes w after every record at level or above
// (warnings and errors reach the log at once, the line per connection within LogFlushDelay).
type FlushingHandler struct {
	slog.Handler
	w     *LogWriter
	level slog.Level
}

// NewFlushingHandler returns h, flushing w after every record at level or above.
func NewFlushingHandler(h slog.Handler, w *LogWriter, level slog.Level) *FlushingHandler {
	return &FlushingHandler{Handler: h, w: w, level: level}
}

// Handle writes r and flushes when its level is at or above the handler's.
func (h *FlushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= h.level {
		if flushErr := h.w.Flush(); err == nil {
			err = flushErr
		}
	}
	return err
}

// WithAttrs keeps the flushing.
func (h *FlushingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &FlushingHandler{Handler: h.Handler.WithAttrs(attrs), w: h.w, level: h.level}
}

// WithGroup keeps the flushing.
func (h *FlushingHandler) WithGroup(name string) slog.Handler {
	return &FlushingHandler{Handler: h.Handler.WithGroup(name), w: h.w, level: h.level}
}
