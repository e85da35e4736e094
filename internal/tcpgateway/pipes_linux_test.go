package tcpgateway

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPipePoolBounded: the pool lends at most splicePipes pipes at once; one given back is lent
// again, one discarded (it may hold bytes) frees its place.
func TestPipePoolBounded(t *testing.T) {
	pool := newPipePool(splicePipes)
	defer pool.close()
	var lent []*pipe
	for range splicePipes {
		p := pool.get()
		require.NotNil(t, p)
		lent = append(lent, p)
	}
	assert.Nil(t, pool.get(), "a pipe beyond the bound")
	size, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(lent[0].w), 1032 /* F_GETPIPE_SZ */, 0)
	require.Zero(t, errno)
	assert.EqualValues(t, pipeBytes, size, "the pipe's capacity")
	assert.Equal(t, splicePipes, pool.lent())
	pool.put(lent[0])
	assert.Same(t, lent[0], pool.get(), "a pipe given back is lent again")
	pool.discard(lent[1])
	assert.NotNil(t, pool.get(), "a discarded pipe frees its place")
	assert.Nil(t, pool.get())
	for _, p := range lent[2:] {
		pool.put(p)
	}
}
