package store

import "errors"

// ErrMoveIncomplete is returned when a backend does not hold a resource as
// the stream does after the resource was copied into it; the move is tried
// again.
var ErrMoveIncomplete = errors.New("resource not fully copied into its new backend")

// ErrRouteState is returned when the route table serve keeps across
// restarts cannot be read or written.
var ErrRouteState = errors.New("saved backend routes")

// ErrReplicaID is returned when the replica name in the state directory
// cannot be read or created.
var ErrReplicaID = errors.New("replica id")

// ErrNoDefaultStore is returned by New when Config.Default names no store
// to open (or names one a registry would choose).
var ErrNoDefaultStore = errors.New("no default store registered")

// ErrCountUnindexed is returned by a backend's Count when its indexes do
// not answer the count asked (a field path it does not index, a field
// selector on the object): the count is then made by listing.
var ErrCountUnindexed = errors.New("count not answered by the backend's indexes")
