package stamper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/challenge-hook/challenge-hook/internal/tcpgateway"
)

// The gateway's GET /activity, on its metrics listener, answers tcpgateway.ActivityReport: one
// entry per instance Service address (ClusterIP:port, what a token names) whose spliced sessions
// moved a byte either way within the gateway's retention, with the time of the last byte, sorted
// by address; with ?since=<RFC 3339 time>, only the entries after it.

// maxActivityBytes bounds a gateway's answer: an entry is about 80 bytes, so this is some 100,000
// instance ports, far beyond an event's.
const maxActivityBytes = 8 << 20

// serviceActivity is one entry of an answer, checked.
type serviceActivity struct {
	address netip.AddrPort
	at      time.Time
}

// The reasons a poll fails, the label of the failed polls' metric.
const (
	failResolve  = "resolve"  // the gateways' name does not resolve
	failRequest  = "request"  // no answer: refused, timed out
	failStatus   = "status"   // an answer other than 200
	failResponse = "response" // an answer that is not the activity
)

// fetchError is a failed poll of one gateway, and its reason.
type fetchError struct {
	reason string
	err    error
}

func (e *fetchError) Error() string { return e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// fetcher asks one gateway for its activity.
type fetcher struct {
	client *http.Client
}

func newFetcher(timeout time.Duration) fetcher {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // the gateways are Pods of the cluster, never behind a proxy
	transport.MaxIdleConnsPerHost = 1
	return fetcher{client: &http.Client{Transport: transport, Timeout: timeout}}
}

// fetch asks the gateway at address (host:port) for the activity after since (all it keeps when
// since is zero).
func (f fetcher) fetch(ctx context.Context, address string, since time.Time) ([]serviceActivity, *fetchError) {
	u := url.URL{Scheme: "http", Host: address, Path: "/activity"}
	if !since.IsZero() {
		u.RawQuery = url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, &fetchError{failRequest, err}
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, &fetchError{failRequest, fmt.Errorf("%w: is the gateway's metrics port reachable from the stamper (its NetworkPolicy)?", err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxActivityBytes+1))
	if err != nil {
		return nil, &fetchError{failRequest, fmt.Errorf("read the answer: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &fetchError{failStatus, fmt.Errorf("%s answers %s: %.200q: does the gateway serve /activity (the same release as the stamper)?", u.Path, resp.Status, body)}
	}
	if len(body) > maxActivityBytes {
		return nil, &fetchError{failResponse, fmt.Errorf("the answer is longer than %d bytes", maxActivityBytes)}
	}
	var decoded tcpgateway.ActivityReport
	if err := json.Unmarshal(body, &decoded); err != nil {
		return nil, &fetchError{failResponse, fmt.Errorf("the answer is not the activity: %w", err)}
	}
	services := make([]serviceActivity, 0, len(decoded.Services))
	var bad []string
	for _, s := range decoded.Services {
		if !s.Address.IsValid() || s.LastActivity.IsZero() {
			bad = append(bad, s.Address.String())
			continue
		}
		services = append(services, serviceActivity{netip.AddrPortFrom(s.Address.Addr().Unmap(), s.Address.Port()), s.LastActivity})
	}
	if len(bad) > 0 {
		return nil, &fetchError{failResponse, errors.New("entries without an address (ClusterIP:port) or a lastActivity: " + strings.Join(bad, ", "))}
	}
	return services, nil
}
