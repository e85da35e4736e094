// Package manifests holds challenge-hook's Kubernetes manifests (CRDs, the hook's Deployment and
// its neighbours, the CompositeController) and the tests that keep them consistent with each other
// and with the Go types of package sync. It contains no code; `kubectl apply -k manifests/` is its API.
package manifests
