// Package related tests the relationship reads on real member clusters:
// QueryService.Related over REST and gRPC, and the fleetview.io relation
// field selectors through kubectl, for an unrestricted and a restricted
// caller, against the relations computed here from each member's own
// objects (read with client-go, not through fleetview's relations
// package).
package related
