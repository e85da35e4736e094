//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"testing"
)

// TestWebSocketRealClientsInstalled runs internal/tcpgateway's TestWebSocketRealClients (1 MiB
// echoed byte for byte through Debian's python3-websocket and node-ws) with the clients required:
// hack/e2e.sh installed them, so that here a missing client fails where make test skips it.
func TestWebSocketRealClientsInstalled(t *testing.T) {
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	cmd := exec.Command(goBin, "test", "-count=1", "-run", "^TestWebSocketRealClients$", "-v", "./internal/tcpgateway/")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "REAL_WEBSOCKET_CLIENTS=required")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the real WebSocket clients' test failed: %v", err)
	}
}
