// Package actthrough tests acting on members through fleetview with
// kubectl as the caller (actthrough_test.go): adversarial requests, a fair
// relay between callers, what it adds to a request's latency, and the
// identity map's reserved names as a member's audit log records them
// (memberrbac_identity_test.go).
package actthrough
