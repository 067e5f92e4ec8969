package collector

import "errors"

var (
	// ErrNotServed is recorded for a selected resource the member cluster
	// does not serve (CRD absent, other version).
	ErrNotServed = errors.New("resource not served by the member cluster")
	// ErrInvalidOptions wraps every option error.
	ErrInvalidOptions = errors.New("invalid collector options")
)

// ErrInvalidClusterInfo is reported for a cluster-info ConfigMap value that
// cannot be used; the valid values still apply.
var ErrInvalidClusterInfo = errors.New("invalid cluster info")

// ErrBadJSON is returned for an object or list the apiserver sent that the
// collector's JSON scanner cannot read.
var ErrBadJSON = errors.New("malformed JSON from the member apiserver")
