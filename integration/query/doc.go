// Package query tests the read side of a real hub over real member
// clusters: the query API over gRPC and REST (query_test.go), the
// Kubernetes API through kubectl and client-go informers (kube_test.go),
// kubectl's Tables printed as the members print them (table_test.go),
// informers across kill -9 and restarts (kube_restart_test.go),
// authorization on every surface (auth_test.go), acting on members through
// fleetview with kubectl as the caller (actthrough_test.go) and what
// it adds to a request's latency (actthrough_latency_test.go), member RBAC decided as
// the member decides it (memberrbac_test.go), the web console in
// headless chromium (console_test.go), limits and connection bounds under
// load and slow clients (limits_test.go, connbounds_test.go), the metrics
// a scrape reports (metrics_test.go), and resourceVersions across replicas,
// restarts and a fleet of 200 clusters (versions_test.go). Shared helpers
// are in integration/fixture.
package query
