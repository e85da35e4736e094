// Package monitoring holds the test of manifests/components/monitoring: every alert and dashboard
// query parses with Prometheus's own PromQL parser and names only series that exist. It is a
// module of its own so that Prometheus's dependencies stay out of the hook's go.mod.
package monitoring
