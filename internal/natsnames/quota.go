package natsnames

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// HubQuotaError returns err wrapped in ErrHubQuota if it is the hub
// refusing a request over the cluster's per-cluster quota, else nil.
func HubQuotaError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrHubQuota) {
		return err
	}
	var apiErr *jetstream.APIError
	if (errors.As(err, &apiErr) && strings.Contains(apiErr.Description, ErrHubQuota.Error())) || strings.Contains(err.Error(), ErrHubQuota.Error()) {
		return hubQuotaErr{err}
	}
	return nil
}

// hubQuotaErr is a refusal over the hub quota: errors.Is ErrHubQuota, and
// its text is the refusal's own, which already says so.
type hubQuotaErr struct{ err error }

func (e hubQuotaErr) Error() string        { return e.err.Error() }
func (e hubQuotaErr) Unwrap() error        { return e.err }
func (e hubQuotaErr) Is(target error) bool { return target == ErrHubQuota }
