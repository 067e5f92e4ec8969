package queryapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
)

// errorDomain names fleetview in gRPC ErrorInfo details.
const errorDomain = "fleetview.io"

// errorTable is the one place lower-layer errors become API errors: the
// gRPC code, the HTTP status and the Kubernetes Status reason. A gRPC error
// arriving at the REST boundary is mapped back through the same table by
// its code (the first row with that code wins).
var errorTable = []struct {
	err    error
	code   codes.Code
	http   int
	reason string
}{
	{query.ErrNotFound, codes.NotFound, http.StatusNotFound, "NotFound"},
	{regstore.ErrNotFound, codes.NotFound, http.StatusNotFound, "NotFound"},
	{inventory.ErrNotFound, codes.NotFound, http.StatusNotFound, "NotFound"},
	{query.ErrConflict, codes.Aborted, http.StatusConflict, "Conflict"},
	{query.ErrInvalid, codes.InvalidArgument, http.StatusBadRequest, "BadRequest"},
	{registry.ErrInvalid, codes.InvalidArgument, http.StatusBadRequest, "BadRequest"},
	{query.ErrExpired, codes.OutOfRange, http.StatusGone, "Expired"},
	{query.ErrTooSlow, codes.ResourceExhausted, http.StatusTooManyRequests, "TooManyRequests"},
	{query.ErrTooLargeVersion, codes.DeadlineExceeded, http.StatusGatewayTimeout, "Timeout"},
	{query.ErrNotReady, codes.Unavailable, http.StatusServiceUnavailable, "ServiceUnavailable"},
	{auth.ErrUnauthenticated, codes.Unauthenticated, http.StatusUnauthorized, "Unauthorized"},
	{auth.ErrForbidden, codes.PermissionDenied, http.StatusForbidden, "Forbidden"},
	{context.DeadlineExceeded, codes.DeadlineExceeded, http.StatusGatewayTimeout, "Timeout"},
	{context.Canceled, codes.Canceled, 499, "Canceled"},
	// Rows without a sentinel fix the HTTP mapping of a code.
	{nil, codes.Unimplemented, http.StatusNotImplemented, "NotImplemented"},
}

// toStatus translates an error for the wire.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code, reason := codes.Internal, "InternalError"
	for _, e := range errorTable {
		if e.err != nil && errors.Is(err, e.err) {
			code, reason = e.code, e.reason
			break
		}
	}
	st := status.New(code, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: errorDomain}); derr == nil {
		st = d
	}
	return st.Err()
}

// httpMapping is the HTTP status and reason of a gRPC code.
func httpMapping(c codes.Code) (int, string) {
	if c == codes.Internal || c == codes.Unknown {
		return http.StatusInternalServerError, "InternalError"
	}
	for _, e := range errorTable {
		if e.code == c {
			return e.http, e.reason
		}
	}
	h := runtime.HTTPStatusFromCode(c)
	return h, http.StatusText(h)
}

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
	code, reason := httpMapping(st.Code())
	return code, k8sStatus{Kind: "Status", APIVersion: "v1", Status: "Failure", Message: st.Message(), Reason: reason, Code: code}
}

// writeError answers a REST request with a Kubernetes Status.
func writeError(w http.ResponseWriter, err error) {
	code, body := statusBody(toStatus(err))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func gatewayErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	writeError(w, err)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
