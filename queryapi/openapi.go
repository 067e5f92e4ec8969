package queryapi

import (
	"net/http"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(fleetviewv1.OpenAPI)
}
