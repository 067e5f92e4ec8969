package inventory

import "errors"

// ErrNotFound is returned for a cluster that has no inventory record.
var ErrNotFound = errors.New("cluster not found")
