package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// TestClientRateLimited: the API client is held to --client-go-qps after --client-go-burst
// requests, as Metacontroller's is: the shape of a burst of syncs is Metacontroller's, not a
// faster client's. Requests are counted, not timed: within the first 300 ms a client at 5 a
// second with a burst of 2 makes at most 2 + 2 of them.
func TestClientRateLimited(t *testing.T) {
	var requests atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"x"}}`))
	}))
	defer server.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+server.URL+`"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600))
	config, err := restConfig(kubeconfig, 5, 2)
	require.NoError(t, err)
	client, err := corev1client.NewForConfig(config)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	for ctx.Err() == nil {
		_, _ = client.Namespaces().Get(ctx, "x", metav1.GetOptions{})
	}
	assert.LessOrEqual(t, requests.Load(), int32(4), "requests in 300 ms at qps 5, burst 2")
	assert.GreaterOrEqual(t, requests.Load(), int32(2), "the burst goes at once")
}
