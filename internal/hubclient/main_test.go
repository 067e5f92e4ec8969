package hubclient

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start httptest servers and HTTP clients.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
