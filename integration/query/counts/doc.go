// Package counts tests QueryService.Count on real member clusters: the
// counts by cluster, phase, image, namespace and label, through REST and
// gRPC, for an unrestricted and two restricted callers, against what each
// member's own objects say (read with client-go, not through fleetview).
package counts
