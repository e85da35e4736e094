//go:build !linux

package tcpgateway

import "syscall"

// pipe is none: the poller, which would carry one, does not exist either.
type pipe struct{}

func (*pipePool) pumpCarried(syscall.RawConn, *pipe, int) error { return nil }

// pipePool lends no pipe where splice(2) does not exist: every copy goes through a buffer.
type pipePool struct{}

func newPipePool(int) *pipePool { return &pipePool{} }

func (*pipePool) setMax(int) {}

func (*pipePool) idle() int { return 0 }

func (*pipePool) lent() int { return 0 }

func (*pipePool) close() {}

func (*pipePool) move(dst, src syscall.RawConn) (total int64, end, dry, noPipe bool, err error) {
	return 0, false, false, true, nil
}
