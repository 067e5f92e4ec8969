// Package queryapi serves reads across every member cluster from the
// materialized state: the gRPC services of proto/fleetview/v1, the same
// services as REST through grpc-gateway, the OpenAPI document, and registry
// management. It never calls a member cluster.
//
// Errors from lower layers are sentinel errors; they are translated to gRPC
// codes and HTTP statuses once, in errors.go.
package queryapi
