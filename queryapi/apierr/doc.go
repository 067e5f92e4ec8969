// Package apierr owns the one table that translates fleetview's sentinel
// errors into what each API boundary shows: the gRPC code, the HTTP status
// and the Kubernetes Status reason. The gRPC services translate lower-layer
// errors into codes with it; the REST paths and the Kubernetes API read the
// HTTP status and reason of a code back from the same rows, so a code never
// means two things on two paths.
package apierr
