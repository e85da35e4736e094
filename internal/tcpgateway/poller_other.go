//go:build !linux

package tcpgateway

import "errors"

// poller parks no direction where epoll does not exist: each waits as a goroutine.
type poller struct{}

// errNoPoller: the gateway has no poller; its directions wait as goroutines.
var errNoPoller = errors.New("no poller")

func newPoller() (*poller, error) { return nil, errNoPoller }

func (*poller) arm(*direction) error { return errNoPoller }

func (*poller) forget(*direction) {}

func (*poller) notifyAll() {}

func (*poller) close() {}
