// Package history tests the history's reads (issue #48) on real members
// and a real hub: the change feed with each filter, an object's revisions
// against the member's own sequence of changes (resourceVersions, field
// managers, merge patches), deleted objects with their last state, as-of
// get and list, a watch resumed from an old resourceVersion replaying
// every intermediate change and 410 once the window has passed it, and
// what a restricted user may see (policy and member RBAC), over REST and
// gRPC.
package history
