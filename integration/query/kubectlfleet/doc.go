// Package kubectlfleet tests the kubectl plugin (cmd/kubectl-fleet, built
// as the real binary and found by Debian's kubectl on PATH) against a real
// hub serving TLS and bearer tokens with its history on, on real member
// clusters: `kubectl fleet history|diff|deleted|changes` must show the
// members' own sequence of changes (resourceVersions, field managers, the
// fields changed, deleted objects' last state), paged, and no more than a
// restricted user may read.
package kubectlfleet
