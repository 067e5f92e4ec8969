package catalog

import "errors"

// ErrConfig is a Config missing what the catalog needs.
var ErrConfig = errors.New("catalog: invalid config")
