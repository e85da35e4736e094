package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certCheckInterval bounds how often the certificate files are stat'ed: at most once per interval,
// on a TLS handshake.
const certCheckInterval = 2 * time.Second

// fileStamp identifies a version of the certificate and key files.
type fileStamp struct {
	certModTime, keyModTime time.Time
	certSize, keySize       int64
}

// certReloader serves a certificate pair and reloads it when the files change, so that a rotated
// Secret (cert-manager) takes effect without a restart. A pair that does not load is logged and the
// previous one stays in service.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu         sync.Mutex
	cert       *tls.Certificate
	loaded     fileStamp // the files' stamp when cert was loaded
	failed     fileStamp // the last stamp that did not load, to log each bad version once
	lastCheck  time.Time
	checkEvery time.Duration
}

func newCertReloader(certFile, keyFile string, logger *slog.Logger) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile, logger: logger, checkEvery: certCheckInterval}
	stamp, err := c.stamp()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s, --tls-key-file %s: %w", certFile, keyFile, err)
	}
	c.cert, c.loaded, c.lastCheck = &cert, stamp, time.Now()
	return c, nil
}

func (c *certReloader) stamp() (fileStamp, error) {
	certInfo, err := os.Stat(c.certFile)
	if err != nil {
		return fileStamp{}, fmt.Errorf("--tls-cert-file: %w", err)
	}
	keyInfo, err := os.Stat(c.keyFile)
	if err != nil {
		return fileStamp{}, fmt.Errorf("--tls-key-file: %w", err)
	}
	return fileStamp{certInfo.ModTime(), keyInfo.ModTime(), certInfo.Size(), keyInfo.Size()}, nil
}

// GetCertificate is the tls.Config hook: the current pair, reloaded first if the files changed.
func (c *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.lastCheck) >= c.checkEvery {
		c.lastCheck = time.Now()
		c.reloadIfChanged()
	}
	return c.cert, nil
}

func (c *certReloader) reloadIfChanged() {
	stamp, err := c.stamp()
	if err != nil {
		c.logger.Error("checking the TLS certificate files; serving the previous pair", slog.String("error", err.Error()))
		return
	}
	if stamp == c.loaded || stamp == c.failed {
		return
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		c.failed = stamp
		c.logger.Error("reloading the TLS certificate failed; serving the previous pair",
			slog.String("cert_file", c.certFile), slog.String("key_file", c.keyFile), slog.String("error", err.Error()))
		return
	}
	c.cert, c.loaded = &cert, stamp
	attrs := []any{slog.String("cert_file", c.certFile)}
	if cert.Leaf != nil {
		attrs = append(attrs, slog.Time("not_after", cert.Leaf.NotAfter))
	}
	c.logger.Info("reloaded the TLS certificate", attrs...)
}

// tlsConfig is the server's TLS configuration around the reloader.
func (c *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}
