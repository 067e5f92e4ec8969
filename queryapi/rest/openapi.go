package rest

import (
	"net/http"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// OpenAPI serves the API's OpenAPI document.
func OpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(fleetviewv1.OpenAPI)
}
