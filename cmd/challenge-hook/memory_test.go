package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

const deploymentFile = "../../manifests/hook-deployment.yaml"

// deploymentMemory reads the hook container's memory limit, its GOMEMLIMIT and its args from
// manifests/hook-deployment.yaml, so that the test and the Deployment cannot drift apart.
func deploymentMemory(t *testing.T) (limit, goMemLimit int64, args []string) {
	t.Helper()
	content, err := os.ReadFile(deploymentFile)
	require.NoError(t, err)
	var deployment appsv1.Deployment
	require.NoError(t, yaml.Unmarshal(content, &deployment))
	containers := deployment.Spec.Template.Spec.Containers
	require.Len(t, containers, 1)
	c := containers[0]
	quantity, ok := c.Resources.Limits["memory"]
	require.True(t, ok, "%s sets no memory limit", deploymentFile)
	for _, env := range c.Env {
		if env.Name == "GOMEMLIMIT" {
			goMemLimit = parseGoMemLimit(t, env.Value)
		}
	}
	require.Positive(t, goMemLimit, "%s sets no GOMEMLIMIT", deploymentFile)
	return quantity.Value(), goMemLimit, c.Args
}

// parseGoMemLimit parses GOMEMLIMIT's syntax: a number of bytes with an optional B, KiB, MiB, GiB
// or TiB suffix.
func parseGoMemLimit(t *testing.T, v string) int64 {
	t.Helper()
	for i, suffix := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if number, ok := strings.CutSuffix(v, suffix); ok {
			n, err := strconv.ParseInt(number, 10, 64)
			require.NoError(t, err, "GOMEMLIMIT %q", v)
			return n << (10 * (4 - i))
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	require.NoError(t, err, "GOMEMLIMIT %q", v)
	return n
}

// maximalRequest is a real sync request grown to exactly size bytes with the content that costs
// the hook most: env values of the definition's container (32 KiB each, the CRD's largest), which
// the hook decodes, copies into the Pod it answers with and encodes again, so that the answer is
// as large as the request. (Only bytes that are not UTF-8 would grow it more, each decoded as a
// 3-byte U+FFFD: readBody refuses those, measured at 115 MiB for this test's load otherwise.)
func maximalRequest(t *testing.T, size int) []byte {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/life-3-running-http/request.json")
	require.NoError(t, err)
	var req map[string]any
	require.NoError(t, json.Unmarshal(raw, &req))
	related := req["related"].(map[string]any)["ChallengeDefinition.ctf.challenge-hook.dev/v1alpha1"].(map[string]any)
	require.Len(t, related, 1)
	var container map[string]any
	for _, def := range related {
		container = def.(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	}
	encode := func() []byte {
		body, err := json.Marshal(req)
		require.NoError(t, err)
		return body
	}
	const valueMax = 32 << 10 // the CRD's maxLength of an env value
	var env []any
	for i := 0; ; i++ {
		entry := map[string]any{"name": fmt.Sprintf("FILL_%03d", i), "value": ""}
		env = append(env, entry)
		container["env"] = env
		room := size - len(encode())
		if room <= 0 {
			require.Greater(t, i, 0, "the request is larger than %d bytes without any filling", size)
			env = env[:len(env)-1]
			container["env"] = env
			break
		}
		entry["value"] = strings.Repeat("x", min(room, valueMax))
		if room <= valueMax {
			break
		}
	}
	body := encode()
	require.LessOrEqual(t, len(body), size)
	require.Greater(t, len(body), size-64, "filled to the byte, give or take an env entry's name")
	return body
}

// memorySample is the process's memory as the Go runtime sees it: what it holds from the OS and
// has not released (an upper bound of its RSS from the Go heap, stacks and runtime), and the heap.
func memorySample() (held, heapInuse uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Sys - ms.HeapReleased, ms.HeapInuse
}

// TestMaximalConcurrentLoadFitsTheMemoryLimit: twice the concurrency bound of clients send
// maximal requests without pause, so that the bounds are always full and more wait: requests of
// the whole body budget (--max-request-bytes, to the byte: one at a time), then of a slot's share
// of it (as many at a time as there are slots); the process's memory, test and client included,
// stays under the container's memory limit in manifests/hook-deployment.yaml, with the
// Deployment's GOMEMLIMIT in force.
func TestMaximalConcurrentLoadFitsTheMemoryLimit(t *testing.T) {
	limit, goMemLimit, deploymentArgs := deploymentMemory(t)
	var serverArgs []string
	for _, arg := range deploymentArgs {
		// The Deployment's limits on requests, not its listeners or files.
		if strings.HasPrefix(arg, "--max-request-bytes=") || strings.HasPrefix(arg, "--max-concurrent-requests=") {
			serverArgs = append(serverArgs, arg)
		}
	}
	cfg, _, err := parseServerConfig(serverArgs, noEnv)
	require.NoError(t, err)
	slots := cfg.maxConcurrentRequests
	srv, _ := newTestServer(t, append(serverArgs, "--clock=2026-11-01T12:05:00Z", "--flag-key-file=../../testdata/flag.key", "--log-level=warn")...)
	for _, size := range []int{int(cfg.maxRequestBytes), int(cfg.maxRequestBytes) / slots} {
		t.Run(fmt.Sprintf("%d bytes", size), func(t *testing.T) {
			loadFitsTheMemoryLimit(t, srv.URL, maximalRequest(t, size), slots, limit, goMemLimit)
		})
	}
}

// loadFitsTheMemoryLimit sends body from 2 × slots clients for 3 s and checks the process's peak
// memory against limit.
func loadFitsTheMemoryLimit(t *testing.T, url string, body []byte, slots int, limit, goMemLimit int64) {
	resp, answer := post(t, url+"/sync", "application/json", body)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%.300s", answer)
	require.Contains(t, string(answer), `"phase":"Running"`)
	require.Greater(t, len(answer), len(body)*9/10, "the answer carries the filling too")
	answer = nil

	previous := debug.SetMemoryLimit(goMemLimit)
	defer debug.SetMemoryLimit(previous)
	runtime.GC()
	debug.FreeOSMemory()
	baseline, _ := memorySample()

	var peakHeld, peakHeap atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			held, heap := memorySample()
			peakHeld.Store(max(peakHeld.Load(), held))
			peakHeap.Store(max(peakHeap.Load(), heap))
			select {
			case <-stopSampling:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * slots}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	var ok, overloaded, failed atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for range 2 * slots {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				resp, err := client.Post(url+"/sync", "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					overloaded.Add(1)
				default:
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(stopSampling)
	<-sampled

	mib := func(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	t.Logf("%d clients, %d in flight at most, requests of %d bytes: %d answered, %d told to retry (429); memory held from the OS %s before, %s at peak (heap in use %s at peak); limit %s, GOMEMLIMIT %s",
		2*slots, slots, len(body), ok.Load(), overloaded.Load(), mib(baseline), mib(peakHeld.Load()), mib(peakHeap.Load()),
		mib(uint64(limit)), mib(uint64(goMemLimit)))
	assert.Zero(t, failed.Load(), "failed requests")
	assert.Positive(t, ok.Load())
	assert.Less(t, peakHeld.Load(), uint64(limit), "the maximal concurrent load exceeds the container's memory limit (%s)",
		resource.NewQuantity(limit, resource.BinarySI))
}
