package relations

import "errors"

// ErrInvalid is an object or a reference whose fields cannot be read.
var ErrInvalid = errors.New("invalid")
