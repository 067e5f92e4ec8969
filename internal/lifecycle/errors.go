package lifecycle

import "errors"

// ErrOrder is returned by Run, before anything starts, when the groups'
// names or the stop order are not one stage for each named group.
var ErrOrder = errors.New("lifecycle: invalid groups or stop order")
