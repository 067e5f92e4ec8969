package materializer

import "errors"

// ErrPoison marks an event that can never be applied (undecodable or
// invalid); it goes to the dead-letter stream instead of blocking the stream.
var ErrPoison = errors.New("poison event")
