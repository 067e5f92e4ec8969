package harness

import "errors"

// ErrPortTaken: another running test process handed out this port (see
// portSet); listenFree picks another.
var ErrPortTaken = errors.New("harness: port handed out by another test process")
