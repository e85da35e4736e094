// Command pause is what the pre-pull DaemonSets run in place of every challenge image's own
// program (manifests/components/prepull): it waits for SIGTERM or SIGINT and exits 0, doing
// nothing else, so that the image stays pulled and in use on the node. Static and small (1.5 MiB
// with -ldflags "-s -w", 2.2 MiB resident), it is shipped in the hook image as /pause; "pause -install <path>"
// copies it there (an init container, into an emptyDir the challenge image's container mounts),
// since neither image has a shell or cp to do it.
package main

import (
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	switch {
	case len(os.Args) == 3 && os.Args[1] == "-install":
		if err := install(os.Args[2]); err != nil {
			_, _ = os.Stderr.WriteString("pause: install " + os.Args[2] + ": " + err.Error() + "\n")
			os.Exit(1)
		}
	case len(os.Args) == 1:
		// PID 1 gets no default action for SIGTERM: without this, the kubelet would wait the
		// whole grace period and then kill it.
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
	default:
		_, _ = os.Stderr.WriteString("usage: pause (wait for SIGTERM) | pause -install <path> (copy this program there)\n")
		os.Exit(2)
	}
}

// install copies the running program to path, executable by anyone: written beside it, then
// renamed, so that a container never runs a half-written copy.
func install(path string) error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pause-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if _, err := io.Copy(tmp, self); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o555); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
