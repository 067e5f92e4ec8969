package plugin

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start fake hubs (httptest) and the commands' HTTP clients.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
