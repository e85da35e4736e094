package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunServesAndStopsCleanly(t *testing.T) {
	t.Parallel()
	r := startRun(t, "--listen=127.0.0.1:0")
	for path, want := range map[string]string{"/healthz": `{"status":"ok"}`, "/readyz": `{"status":"ok"}`} {
		resp, err := http.Get("http://" + r.addr + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.JSONEq(t, want, string(body), path)
	}
	start := time.Now()
	require.NoError(t, r.stop(t))
	assert.Less(t, time.Since(start), 2*time.Second, "an idle server stops at once")
	_, err := net.DialTimeout("tcp", r.addr, time.Second)
	assert.Error(t, err, "the listener is closed after run returns")
	assert.Contains(t, r.logs.String(), `"msg":"stopped"`)
}

func TestRunFailsOnAnAddressInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = run(context.Background(), []string{"challenge-hook", "--listen=" + ln.Addr().String(), "--metrics-listen=127.0.0.1:0", "--" + insecureNoTokenFlag}, noEnv, io.Discard, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--listen")
}

// isRefusal reports a request that never reached a handler because the listener had closed.
func isRefusal(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
}

// TestGracefulShutdownUnderLoad cancels run's context while 8 workers hammer /sync: every request
// sent before the cancel must succeed, /readyz must fail during the drain, a request whose body is
// still arriving when the listener closes must complete, and run must return nil.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	r := startRun(t, "--listen=127.0.0.1:0", "--shutdown-delay=300ms", "--shutdown-timeout=10s")
	base := "http://" + r.addr
	body := mutate(t, func(map[string]any) {})
	// One connection per request: each request is either accepted by the server or refused.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

	var shutdownBegan atomic.Bool
	var sent, okBefore, okAfter, refusedAfter atomic.Int64
	var mu gosync.Mutex
	var failures []string
	fail := func(message string) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, message)
		}
	}

	// A request started before the cancel whose body is still arriving when the listener closes.
	slowBody, slowWriter := io.Pipe()
	slowDone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/sync", slowBody)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			slowDone <- err
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			slowDone <- errors.New("slow request: status " + resp.Status + ": " + string(answer))
			return
		}
		slowDone <- nil
	}()
	_, err := slowWriter.Write(body[:len(body)/2])
	require.NoError(t, err)

	var readyBefore, notReadyDuringDrain atomic.Bool
	stopProbing := make(chan struct{})
	var wg gosync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopProbing:
				return
			case <-time.After(10 * time.Millisecond):
			}
			began := shutdownBegan.Load()
			resp, err := client.Get(base + "/readyz")
			if err != nil {
				continue
			}
			resp.Body.Close()
			switch {
			case !began && resp.StatusCode == http.StatusOK:
				readyBefore.Store(true)
			case began && resp.StatusCode == http.StatusServiceUnavailable:
				notReadyDuringDrain.Store(true)
			}
		}
	}()

	deadline := time.Now().Add(2 * time.Second)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				began := shutdownBegan.Load()
				sent.Add(1)
				resp, err := client.Post(base+"/sync", "application/json", bytes.NewReader(body))
				switch {
				case err != nil && began && isRefusal(err):
					refusedAfter.Add(1)
					time.Sleep(5 * time.Millisecond) // nothing listens any more; do not spin
				case err != nil:
					fail(fmt.Sprintf("request failed (sent after the cancel: %t): %v", began, err))
				default:
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						fail("status " + resp.Status)
					} else if began {
						okAfter.Add(1)
					} else {
						okBefore.Add(1)
					}
				}
			}
		}()
	}

	time.Sleep(time.Second)
	shutdownBegan.Store(true)
	r.cancel()

	// Once the listener is closed, finish the slow request's body: the server must still answer it.
	require.Eventually(t, func() bool {
		conn, err := net.DialTimeout("tcp", r.addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err != nil
	}, 5*time.Second, 10*time.Millisecond, "the listener never closed")
	_, err = slowWriter.Write(body[len(body)/2:])
	require.NoError(t, err)
	require.NoError(t, slowWriter.Close())

	var runErr error
	select {
	case runErr = <-r.done:
		r.done <- runErr
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of cancel")
	}
	close(stopProbing)
	wg.Wait()

	t.Logf("graceful shutdown: sent %d, ok %d before the cancel, ok %d during the drain, refused %d after the listener closed",
		sent.Load(), okBefore.Load(), okAfter.Load(), refusedAfter.Load())
	assert.NoError(t, runErr)
	assert.Empty(t, failures)
	assert.NoError(t, <-slowDone, "the request in flight when the listener closed")
	assert.Positive(t, okBefore.Load())
	assert.Positive(t, refusedAfter.Load(), "the listener closed before the load stopped")
	assert.True(t, readyBefore.Load(), "/readyz answered 200 while serving")
	assert.True(t, notReadyDuringDrain.Load(), "/readyz answered 503 during the drain")
}

// writeSelfSignedPair writes a fresh certificate for 127.0.0.1 with the given serial number.
func writeSelfSignedPair(t *testing.T, certFile, keyFile string, serial int64) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	template := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "challenge-hook test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}

func TestTLSCertificateReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeSelfSignedPair(t, certFile, keyFile, 1)
	r := startRun(t, "--listen=127.0.0.1:0", "--tls-cert-file="+certFile, "--tls-key-file="+keyFile)

	roots := x509.NewCertPool()
	roots.AddCert(first)
	// servedSerial makes a fresh TLS handshake and returns the serial of the certificate served.
	servedSerial := func() int64 {
		transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}
		defer transport.CloseIdleConnections()
		resp, err := (&http.Client{Transport: transport, Timeout: 5 * time.Second}).Get("https://" + r.addr + "/healthz")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	require.Equal(t, int64(1), servedSerial())

	second := writeSelfSignedPair(t, certFile, keyFile, 2)
	roots.AddCert(second)
	start := time.Now()
	require.Eventually(t, func() bool { return servedSerial() == 2 }, 10*time.Second, 100*time.Millisecond,
		"the new certificate was never served")
	t.Logf("new certificate served %s after the files changed", time.Since(start).Round(time.Millisecond))
	assert.Contains(t, r.logs.String(), "reloaded the TLS certificate")

	// A pair that does not load is logged, and the previous one stays in service.
	require.NoError(t, os.WriteFile(certFile, []byte("not a certificate\n"), 0o644))
	require.Eventually(t, func() bool {
		require.Equal(t, int64(2), servedSerial())
		return strings.Contains(r.logs.String(), "reloading the TLS certificate failed")
	}, 10*time.Second, 100*time.Millisecond)
	assert.Equal(t, int64(2), servedSerial())
	require.NoError(t, r.stop(t))

	var failures int
	for _, line := range strings.Split(r.logs.String(), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil {
			continue
		}
		if msg, _ := entry["msg"].(string); strings.HasPrefix(msg, "reloading the TLS certificate failed") {
			failures++
			assert.Equal(t, "ERROR", entry["level"])
		}
	}
	assert.Equal(t, 1, failures, "each bad version of the files is logged once; logs:\n%s", r.logs)
}
