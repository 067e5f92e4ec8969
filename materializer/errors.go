package materializer

import (
	"errors"
	"fmt"
)

// ErrPoison marks an event that can never be applied (undecodable or
// invalid); it goes to the dead-letter stream instead of blocking the stream.
var ErrPoison = errors.New("poison event")

// ErrInvalidConfig marks a configuration that cannot work (MetricsConfig).
var ErrInvalidConfig = errors.New("materializer: invalid configuration")

// PoisonError is returned by a Sink whose batch holds an event it can never
// apply. The materializer dead-letters that event and applies the batch
// again without it, so one bad event never blocks a stream.
type PoisonError struct {
	Seq uint64
	Err error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("%v: seq %d: %v", ErrPoison, e.Seq, e.Err)
}

// Unwrap makes errors.Is(err, ErrPoison) hold.
func (e *PoisonError) Unwrap() []error { return []error{ErrPoison, e.Err} }

// Poison builds the error a Sink returns for an event it cannot apply.
func Poison(seq uint64, format string, a ...any) error {
	return &PoisonError{Seq: seq, Err: fmt.Errorf(format, a...)}
}

// errBadJSON wraps a rawjson error for an object that is not a JSON object
// the backends can store.
var errBadJSON = errors.New("malformed JSON object")

// errWrongCluster marks an event whose subject, payload, stream and cluster
// annotations do not all name the same cluster.
var errWrongCluster = errors.New("event of another cluster")

// errDeliveryGap marks a delivery whose consumer sequence does not follow
// the one before: a message the consumer counts as delivered never arrived
// (lost in flight when the consumer's leader changed). With AckAll,
// acknowledging a later one would acknowledge it, so it would never come
// again: the consumer is made afresh from the sink's checkpoint instead.
var errDeliveryGap = errors.New("a delivery is missing")
