package query

import "time"

// BackendProblem is a backend a serve process cannot use: unreachable,
// unhealthy or not configured. Readiness, /v1/clusters and the registries'
// conditions all tell it.
type BackendProblem struct {
	// Backend is the backend's id in routes ("" is Badger).
	Backend string
	// Name is how people know it: "opensearch" and its addresses.
	Name string
	Err  string
	// Since is when the problem started.
	Since time.Time
}
