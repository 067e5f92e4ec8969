// Package related tests the relationship reads on real member clusters:
// QueryService.Related over REST and gRPC, and the fleetview.io relation
// field selectors through kubectl, for an unrestricted and a restricted
// caller, against the relations computed here from each member's own
// objects (read with client-go, not through fleetview's relations
// package); and, under member-rbac authorization (a second hub on the
// same members, memberrbac_test.go), for a user whose only grant is a
// member's RoleBinding.
package related
