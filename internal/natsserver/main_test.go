package natsserver

import (
	"testing"

	"go.uber.org/goleak"
)

// The server, its guard and TLS handshakes run goroutines; Shutdown must
// end them all.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
