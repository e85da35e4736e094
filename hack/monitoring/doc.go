// Package monitoring holds the tests of manifests/components/monitoring: Prometheus's rule
// manager runs the alerts' rule tests (the *.test.yaml beside them) as `promtool test rules`
// would, Prometheus's query engine evaluates every dashboard panel over a synthetic event, and
// every alert and dashboard query parses and names only series that exist. It is a module of its
// own so that Prometheus's dependencies stay out of the hook's go.mod.
package monitoring
