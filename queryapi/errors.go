package queryapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
)

// errorTable is the one place lower-layer errors become API errors. HTTP
// statuses follow from the gRPC code (grpc-gateway's mapping), except
// OutOfRange, which fleetview uses only for an expired resourceVersion and
// serves as 410 Gone like Kubernetes.
var errorTable = []struct {
	err  error
	code codes.Code
}{
	{query.ErrNotFound, codes.NotFound},
	{regstore.ErrNotFound, codes.NotFound},
	{inventory.ErrNotFound, codes.NotFound},
	{query.ErrConflict, codes.Aborted}, // 409
	{query.ErrInvalid, codes.InvalidArgument},
	{registry.ErrInvalid, codes.InvalidArgument},
	{query.ErrExpired, codes.OutOfRange}, // 410
	{context.Canceled, codes.Canceled},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
}

// toStatus translates an error for the wire.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return status.Error(e.code, err.Error())
		}
	}
	return status.Error(codes.Internal, err.Error())
}

// httpStatus is grpc-gateway's mapping with fleetview's exceptions.
func httpStatus(c codes.Code) int {
	if c == codes.OutOfRange {
		return http.StatusGone
	}
	return runtime.HTTPStatusFromCode(c)
}

func gatewayErrorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	st, _ := status.FromError(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(st.Code()))
	body, merr := m.Marshal(st.Proto())
	if merr != nil {
		return
	}
	_, _ = w.Write(body)
}
