// Package query holds the read-side vocabulary shared by the query API and
// the backends that answer it: list options, result pages, the multi-cluster
// resourceVersion and continue tokens, and the read errors. Backends
// implement reads in these terms; queryapi translates them to gRPC/HTTP.
package query
