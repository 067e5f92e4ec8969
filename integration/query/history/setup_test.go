package history

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetview/fleetview/cmd/fleetview/app"
)

func grpcInsecure() grpc.DialOption { return grpc.WithTransportCredentials(insecure.NewCredentials()) }

// enableHistory turns the hub's history on (the flags' defaults; the
// in-process options start at zero, history off) with a window longer
// than the test.
func enableHistory(o *app.UpOptions) {
	o.History = app.HistoryOptions{Enabled: true, Retention: 24 * time.Hour, MaxBytes: 1 << 30}
}
