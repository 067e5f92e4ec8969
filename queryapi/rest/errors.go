package rest

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/queryapi/apierr"
)

// Status is a Kubernetes metav1.Status body.
type Status struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Status     string `json:"status"`
	Message    string `json:"message"`
	Reason     string `json:"reason"`
	Code       int    `json:"code"`
}

// StatusBody is the HTTP status and Kubernetes Status a translated error
// (apierr.ToStatus) answers with.
func StatusBody(err error) (int, Status) {
	st := status.Convert(err)
	m := apierr.OfStatus(st)
	return m.HTTP, Status{Kind: "Status", APIVersion: "v1", Status: "Failure", Message: st.Message(), Reason: m.Reason, Code: m.HTTP}
}

// WriteError answers a REST request with a Kubernetes Status.
func WriteError(w http.ResponseWriter, err error) {
	code, body := StatusBody(apierr.ToStatus(err))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// GatewayErrorHandler answers the gateway's errors as every other REST
// error: a Kubernetes Status.
func GatewayErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	WriteError(w, err)
}
