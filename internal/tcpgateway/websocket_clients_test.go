package tcpgateway

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/challenge-hook/challenge-hook/internal/tcptoken"
)

// The real clients players use, byte for byte: each sends 1 MiB of random bytes (not UTF-8) in
// binary messages of 64 KiB, reads the echo and writes it to its standard output. They are
// Debian's packages (python3-websocket, node-ws), which hack/e2e.sh installs; without them these
// tests skip, unless REAL_WEBSOCKET_CLIENTS=required (e2e/websocketclients_test.go runs them so,
// after hack/e2e.sh installed them): then a missing client fails.

// pythonEcho is websocket-client (Debian's python3-websocket): the sender in a thread, as a
// player's script sends while it reads.
const pythonEcho = `
import os, sys, threading, websocket
data = sys.stdin.buffer.read()
ws = websocket.create_connection(os.environ["WS_URL"])
def send():
    for i in range(0, len(data), 65536):
        ws.send_binary(data[i:i + 65536])
threading.Thread(target=send, daemon=True).start()
got = bytearray()
while len(got) < len(data):
    opcode, payload = ws.recv_data()
    if opcode != websocket.ABNF.OPCODE_BINARY:
        sys.exit("a frame of opcode %d" % opcode)
    got += payload
sys.stdout.buffer.write(got)
sys.stdout.flush()
ws.close()
`

// nodeEcho is ws (Debian's node-ws, npm's ws: what wscat is built on).
const nodeEcho = `
const WebSocket = require("ws");
const chunks = [];
process.stdin.on("data", (c) => chunks.push(c));
process.stdin.on("end", () => {
  const data = Buffer.concat(chunks);
  const ws = new WebSocket(process.env.WS_URL);
  const got = [];
  let n = 0;
  ws.on("open", () => {
    for (let i = 0; i < data.length; i += 65536) ws.send(data.subarray(i, i + 65536), { binary: true });
  });
  ws.on("message", (m, isBinary) => {
    if (!isBinary) { console.error("a text frame"); process.exit(3); }
    got.push(m);
    n += m.length;
    if (n >= data.length) process.stdout.write(Buffer.concat(got), () => { ws.close(); process.exit(0); });
  });
  ws.on("error", (e) => { console.error(String(e)); process.exit(2); });
});
`

// realClient is a client program: its interpreter, the arguments that run the script, and the
// command that says whether its WebSocket library is there.
type realClient struct {
	name  string
	path  string
	args  []string
	check []string
}

var realClients = []realClient{
	// /usr/bin/python3, not a python3 earlier in PATH (pyenv's does not see Debian's packages).
	{"python3-websocket", "/usr/bin/python3", []string{"-c", pythonEcho}, []string{"-c", "import websocket"}},
	{"node-ws", "/usr/bin/node", []string{"-e", nodeEcho}, []string{"-e", `require("ws")`}},
}

// TestWebSocketRealClients: each real client's 1 MiB comes back byte for byte through the
// gateway's WebSocket listener and an echo instance.
func TestWebSocketRealClients(t *testing.T) {
	instance := startBackend(t, echo)
	g := startWSGateway(t, func(c *Config) { c.MaxConnectionsPerToken = 100 })
	url := "ws://" + g.wsAddr + "/ws/" + mint(t, tcptoken.Target{Service: instance.addr()})
	for _, client := range realClients {
		t.Run(client.name, func(t *testing.T) {
			check := exec.Command(client.path, client.check...)
			check.Env = clientEnv(url)
			if err := check.Run(); err != nil {
				if os.Getenv("REAL_WEBSOCKET_CLIENTS") == "required" {
					t.Fatalf("%s is missing (%s %v: %v): apt-get install %s", client.name, client.path, client.check, err, client.name)
				}
				t.Skipf("%s is missing (%s %v: %v): apt-get install %s (hack/e2e.sh does)", client.name, client.path, client.check, err, client.name)
			}
			payload := randomBytes(t, 1<<20)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, client.path, client.args...)
			cmd.Env = clientEnv(url)
			cmd.Stdin = bytes.NewReader(payload)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			got, err := cmd.Output()
			require.NoError(t, err, "stderr: %s", stderr.String())
			assert.Equal(t, len(payload), len(got))
			assert.True(t, bytes.Equal(payload, got), "byte for byte")
		})
	}
}

// clientEnv is the clients' environment: WS_URL, and Debian's directory of Node modules (where
// node-ws is) for a node that is not Debian's own.
func clientEnv(url string) []string {
	nodePath := "/usr/share/nodejs"
	if p := os.Getenv("NODE_PATH"); p != "" {
		nodePath = p + ":" + nodePath
	}
	return append(os.Environ(), "WS_URL="+url, "NODE_PATH="+nodePath)
}
