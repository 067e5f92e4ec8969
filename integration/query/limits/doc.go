// Package limits tests the hub's bounds: lists, watches, bodies and
// snapshots past their limits with the heap recorded (limits_test.go), and
// connections under slow clients (connbounds_test.go).
package limits
