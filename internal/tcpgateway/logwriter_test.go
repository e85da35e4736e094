package tcpgateway

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingBuffer is a bytes.Buffer safe for the flush timer's goroutine, counting the writes.
type countingBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *countingBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *countingBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *countingBuffer) Writes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// TestLogWriter: info lines are held and written together within LogFlushDelay, unchanged and in
// order; a warning is written at once with what came before it; Flush writes what is held.
func TestLogWriter(t *testing.T) {
	var out countingBuffer
	w := NewLogWriter(&out)
	logger := slog.New(NewFlushingHandler(slog.NewJSONHandler(w, nil), w, slog.LevelWarn))
	logger.Info("connection closed", slog.Int("n", 1))
	logger.Info("connection closed", slog.Int("n", 2))
	assert.Empty(t, out.String(), "info lines wait in the buffer")
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\n") == 2 }, 10*LogFlushDelay, LogFlushDelay/10,
		"written within the flush delay")
	assert.Equal(t, 1, out.Writes(), "both lines in one write")
	assert.Regexp(t, `^\{"time":"[^"]+","level":"INFO","msg":"connection closed","n":1\}\n\{"time":"[^"]+","level":"INFO","msg":"connection closed","n":2\}\n$`, out.String())

	logger.Info("connection closed", slog.Int("n", 3))
	logger.With(slog.String("k", "v")).Warn("something to see")
	assert.Contains(t, out.String(), `"n":3}`+"\n", "a warning writes what came before it")
	assert.Contains(t, out.String(), `"msg":"something to see","k":"v"}`+"\n", "a warning is written at once")

	logger.Info("last", slog.Int("n", 4))
	require.NoError(t, w.Flush())
	assert.True(t, strings.HasSuffix(out.String(), `"msg":"last","n":4}`+"\n"), "Flush writes what is held")
	time.Sleep(2 * LogFlushDelay)
	assert.Equal(t, 1, strings.Count(out.String(), `"n":4`), "nothing written twice")
}

// TestLogWriterFullBuffer: a buffer full of lines is written at once, without waiting for the delay.
func TestLogWriterFullBuffer(t *testing.T) {
	var out countingBuffer
	w := NewLogWriter(&out)
	line := []byte(strings.Repeat("x", 999) + "\n")
	for range logBufferBytes/len(line) + 1 {
		_, err := w.Write(line)
		require.NoError(t, err)
	}
	assert.GreaterOrEqual(t, len(out.String()), logBufferBytes-len(line))
	require.NoError(t, w.Flush())
	assert.Equal(t, (logBufferBytes/len(line)+1)*len(line), len(out.String()))
}
