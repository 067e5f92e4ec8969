// Package query holds no tests of its own: the read side of a real hub
// over real member clusters is tested by API surface, one package each.
//
//   - service: the query service over gRPC and its REST gateway (List
//     filters, readiness, bad input, snapshot paging under churn, watch
//     resume, search, the cluster inventory).
//   - kubeapi: the Kubernetes API through kubectl and client-go (lists,
//     gets, watches and informers, the list policy, protobuf, kubectl's
//     Tables printed as the members print them).
//   - resume: watches resumed across kill -9, restarts and
//     replicas (the real binary), and a version's size over a fleet of
//     200 clusters.
//   - authz: authorization on every surface (policy, TLS, tokens, client
//     certificates) and member RBAC decided as the member decides it.
//   - actthrough: acting on members through fleetview with kubectl as the
//     caller, its fairness, adversarial requests, the identity map, and
//     what it adds to a request's latency.
//   - console: the web console in headless chromium.
//   - limits: limits and connection bounds under load and slow clients.
//   - metrics: the metrics a scrape reports and the dashboard's queries.
//
// Shared helpers are in integration/fixture; fixture.Hubs runs one test
// body against the in-process hub and the built binary.
package query
