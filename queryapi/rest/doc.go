// Package rest owns the REST paths the query API writes itself around
// grpc-gateway, and the Kubernetes Status every REST error answers with.
//
// Design decisions:
//
//   - List, Get and Search (list.go, search.go) write each object's stored
//     JSON straight into the answer, in the gateway's shape: the gateway
//     would convert every object JSON -> Struct -> JSON. Every other /v1
//     path goes to the gateway.
//   - Watch (watch.go) is one JSON event per line, Kubernetes-style: an
//     error before the first event is a real HTTP status with a Status
//     body, a later one an {"type":"ERROR"} line.
//   - The handlers call the services through a gRPC client (the query
//     API's in-process one), so the same interceptors guard, audit and
//     measure every call; the Authorization header travels as gRPC
//     metadata.
//   - Errors are translated once (apierr.ToStatus) and written as a
//     Kubernetes Status (WriteError), the gateway's too
//     (GatewayErrorHandler).
//
// The package knows no service and never imports queryapi.
package rest
