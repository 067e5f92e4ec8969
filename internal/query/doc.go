// Package query holds the read-side vocabulary shared by the query API and
// the backends that answer it: list options, result pages, the multi-cluster
// resourceVersion and continue tokens (sealed by Sealer), the caller's
// visibility a read carries into the backend (Visibility), compiled field
// selectors (CompileFields), the bookkeeping of list snapshots every backend
// shares (Snapshots), a backend that cannot be used (BackendProblem), the
// memory a streamed answer lends its reads (Reuse), and the read errors. Backends implement reads in these terms; queryapi
// translates them to gRPC/HTTP.
package query
