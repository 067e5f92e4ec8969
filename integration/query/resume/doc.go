// Package resume tests watches resumed from resourceVersions across the hub's
// lifetime: informers across kill -9 and restarts of the real binary
// (kube_restart_test.go), versions resumed across replicas and a restart,
// and a version's size over a fleet of 200 clusters (versions_test.go).
package resume
