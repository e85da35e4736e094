package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	kjson "sigs.k8s.io/json"

	corev1 "k8s.io/api/core/v1"

	"github.com/challenge-hook/challenge-hook/internal/mcsim"
)

// defaultHookTimeout is a webhook's timeout when its CompositeController names none.
const defaultHookTimeout = 10 * time.Second

// hook calls one of a CompositeController's webhooks.
type hook struct {
	// kind is sync, finalize or customize.
	kind    string
	version string
	url     string
	token   string
	client  *http.Client
}

// tooManyRequests is a 429 answer: the parent is synced again after its Retry-After.
type tooManyRequests struct{ after time.Duration }

func (e *tooManyRequests) Error() string {
	return fmt.Sprintf("hook answered 429, retry after %s", e.after)
}

// newHook is the hook spec (a CompositeController's spec.hooks.<kind>) describes, nil when spec is
// nil. The authorization token is read from its Secret now, as Metacontroller reads it when it
// starts a controller.
func newHook(ctx context.Context, getSecret func(ctx context.Context, namespace, name string) (*corev1.Secret, error), metrics *Metrics, controller, kind string, spec mcsim.Object) (*hook, error) {
	if spec == nil {
		return nil, nil
	}
	h := &hook{kind: kind, version: "v1"}
	if v, _ := spec["version"].(string); v != "" {
		h.version = v
	}
	webhook, _ := spec["webhook"].(mcsim.Object)
	if webhook == nil {
		return nil, fmt.Errorf("hook %s: no webhook", kind)
	}
	url, err := webhookURL(webhook)
	if err != nil {
		return nil, fmt.Errorf("hook %s: %w", kind, err)
	}
	h.url = url
	timeout := defaultHookTimeout
	if s, _ := webhook["timeout"].(string); s != "" {
		if timeout, err = time.ParseDuration(s); err != nil || timeout <= 0 {
			return nil, fmt.Errorf("hook %s: timeout %q: want a positive duration", kind, s)
		}
	}
	if ref, _ := webhook["authorization"].(mcsim.Object); ref != nil {
		secretRef, _ := ref["secretRef"].(mcsim.Object)
		name, _ := secretRef["name"].(string)
		namespace, _ := secretRef["namespace"].(string)
		key, _ := secretRef["key"].(string)
		secret, err := getSecret(ctx, namespace, name)
		if err != nil {
			return nil, fmt.Errorf("hook %s: the authorization Secret %s/%s: %w", kind, namespace, name, err)
		}
		token, ok := secret.Data[key]
		if !ok {
			return nil, fmt.Errorf("hook %s: the authorization Secret %s/%s has no key %q", kind, namespace, name, key)
		}
		h.token = strings.TrimSpace(string(token))
	}
	h.client = &http.Client{Timeout: timeout, Transport: metrics.instrument(kind, url, controller, http.DefaultTransport)}
	return h, nil
}

// webhookURL is where a webhook is served: its url, or its Service's cluster DNS name and path.
func webhookURL(webhook mcsim.Object) (string, error) {
	if url, _ := webhook["url"].(string); url != "" {
		return url, nil
	}
	service, _ := webhook["service"].(mcsim.Object)
	path, _ := webhook["path"].(string)
	name, _ := service["name"].(string)
	namespace, _ := service["namespace"].(string)
	if name == "" || namespace == "" || path == "" {
		return "", errors.New("the webhook names neither a url nor a service (name, namespace) and a path")
	}
	port := int64(80)
	if p, ok := service["port"].(int64); ok {
		port = p
	}
	protocol := "http"
	if p, _ := service["protocol"].(string); p != "" {
		protocol = p
	}
	return fmt.Sprintf("%s://%s.%s:%d%s", protocol, name, namespace, port, path), nil
}

// call POSTs request and decodes the answer into response: strictly for a v2 hook, integers kept
// as int64 as the API server's objects hold them.
func (h *hook) call(ctx context.Context, request any, response any) error {
	body, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("%s hook: encode the request: %w", h.kind, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s hook: %w", h.kind, err)
	}
	req.Header.Set("Content-Type", "application/json")
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s hook: http error: %w", h.kind, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		return &tooManyRequests{after: retryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s hook: read the answer: %w", h.kind, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s hook: unsupported status code: %d body: %s", h.kind, resp.StatusCode, answer)
	}
	strict, err := kjson.UnmarshalStrict(answer, response)
	if err != nil {
		return fmt.Errorf("%s hook: decode the answer: %w", h.kind, err)
	}
	if len(strict) > 0 && h.version == "v2" {
		return fmt.Errorf("%s hook: strict decoding of the v2 answer: %w", h.kind, errors.Join(strict...))
	}
	return nil
}

// retryAfter is a Retry-After header's delay: seconds, or an HTTP date.
func retryAfter(header string, now time.Time) time.Duration {
	if at, err := time.Parse(time.RFC1123, header); err == nil {
		return time.Duration(math.Ceil(at.Sub(now).Seconds())) * time.Second
	}
	seconds, _ := strconv.Atoi(header)
	return time.Duration(seconds) * time.Second
}
