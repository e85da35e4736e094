//go:build e2e && linux

package e2e

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel stop the hook if the test binary dies without cleaning up (e.g.
// killed by `go test -timeout`), so no hook process outlives the run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
