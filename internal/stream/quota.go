package stream

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// QuotaError is err wrapped with ErrQuotaExceeded when it is JetStream
// refusing a publish because the cluster's stream reached its byte quota
// (StreamConfig's maxBytes), else nil. The server answers such a publish
// with a store failure whose description is "maximum bytes exceeded".
func QuotaError(err error) error {
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if (errors.As(err, &apiErr) && strings.Contains(apiErr.Description, maxBytesExceeded)) || strings.Contains(err.Error(), maxBytesExceeded) {
		return fmt.Errorf("%w: %v", ErrQuotaExceeded, err)
	}
	return nil
}

// maxBytesExceeded is how nats-server describes a publish refused at a
// stream's MaxBytes with Discard New.
const maxBytesExceeded = "maximum bytes exceeded"
