package inventory

import "errors"

// ErrNotFound is returned for a cluster that has no inventory record.
var ErrNotFound = errors.New("cluster not found")

// ErrCorrupt is returned for a record that fails validation when read: a
// name other than its key's, an invalid cluster name or invalid labels.
// Each record is written by its own cluster's collector, so one is never
// trusted to describe another cluster.
var ErrCorrupt = errors.New("invalid inventory record")
