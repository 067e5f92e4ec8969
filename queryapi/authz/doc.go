// Package authz owns who may read what through the query API: the Guard
// (authentication and the authorization of every call), the audit log
// (Audit), and the member clusters' own RBAC as a scope.
//
// Design decisions:
//
//   - The Guard (authz.go) and the Audit (audit.go) are gRPC interceptor
//     pairs, the audit first so it records refusals too. The REST gateway,
//     the /v1 handlers and the Kubernetes API reach the services in-process
//     through the same chain, so one Guard and one Audit cover every
//     protocol.
//   - A scope drops from an answer what the caller may not see
//     (authzfilter.go); discovery shows a caller only what it may read
//     (authzdiscovery.go). A search and a list carry the caller's
//     visibility into the backend (WithVisibility, VisibleFrom), applied
//     before the limit; a watch is narrowed to the caller's clusters and
//     judges hidden objects out before it queues them.
//   - Under ModeMemberRBAC and ModeBoth the member clusters' own RBAC is a
//     scope (authzmember.go, authzsearch.go), read from the cached RBAC
//     objects (memberrbac.Members); a watch is ended with Forbidden when a
//     member's RBAC takes its access away (authzrevoke.go). Acting through
//     fleetview to a member admits the caller here first (actthrough.go).
//   - The members' RBAC objects are followed from the cache through the
//     query service's own watch (RBACFollower, memberrbac.go), one object
//     applied at a time; a member's RBAC that has not been applied once
//     keeps the hub not ready, bounded in time and never for a member
//     whose collector is down (RBACReadiness, readyrbac.go).
//
// The package knows no service: the query API composes it (queryapi.New)
// and never the other way round.
package authz
