package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/status"
)

// errNoEpochs: a resourceVersion needs a stored epoch and this server has
// no JetStream to keep one (a unit test's query service).
var errNoEpochs = errors.New("no version epochs")

// k8sStatus is a Kubernetes metav1.Status body.
type k8sStatus struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Status     string `json:"status"`
	Message    string `json:"message"`
	Reason     string `json:"reason"`
	Code       int    `json:"code"`
}

func statusBody(err error) (int, k8sStatus) {
	st := status.Convert(err)
	m := apierr.OfStatus(st)
	return m.HTTP, k8sStatus{Kind: "Status", APIVersion: "v1", Status: "Failure", Message: st.Message(), Reason: m.Reason, Code: m.HTTP}
}

// writeError answers a REST request with a Kubernetes Status.
func writeError(w http.ResponseWriter, err error) {
	code, body := statusBody(apierr.ToStatus(err))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func gatewayErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	writeError(w, err)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
