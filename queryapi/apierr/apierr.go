package apierr

import (
	"context"
	"errors"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/connlimit"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
)

// Mapping is how one kind of error shows at each boundary.
type Mapping struct {
	Code codes.Code
	HTTP int
	// Reason is the Kubernetes Status reason kubectl and client-go act on
	// (client-go lists again on Expired; kubectl prints "Error from server
	// (Reason)").
	Reason string
}

// table: the first row with a code gives that code's HTTP status and
// reason. Rows without a sentinel fix the mapping of codes no sentinel
// produces.
var table = []struct {
	err error
	Mapping
}{
	{query.ErrNotFound, Mapping{codes.NotFound, http.StatusNotFound, "NotFound"}},
	{regstore.ErrNotFound, Mapping{codes.NotFound, http.StatusNotFound, "NotFound"}},
	{inventory.ErrNotFound, Mapping{codes.NotFound, http.StatusNotFound, "NotFound"}},
	{query.ErrConflict, Mapping{codes.Aborted, http.StatusConflict, "Conflict"}},
	{query.ErrInvalid, Mapping{codes.InvalidArgument, http.StatusBadRequest, "BadRequest"}},
	{registry.ErrInvalid, Mapping{codes.InvalidArgument, http.StatusBadRequest, "BadRequest"}},
	// After the BadRequest rows, so INVALID_ARGUMENT alone still means
	// 400: the reason (carried in the gRPC status's ErrorInfo) picks 413.
	{query.ErrRequestTooLarge, Mapping{codes.InvalidArgument, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge"}},
	{query.ErrExpired, Mapping{codes.OutOfRange, http.StatusGone, "Expired"}},
	// A history read before the retention window: 410 like an expired
	// version, told apart by its reason (Gone: the moment is no longer
	// kept; Expired, which client-go relists on, stays the watch's and the
	// token's). A watch resumed past the window is ErrExpired.
	{query.ErrOutsideWindow, Mapping{codes.OutOfRange, http.StatusGone, "Gone"}},
	{query.ErrTooSlow, Mapping{codes.ResourceExhausted, http.StatusTooManyRequests, "TooManyRequests"}},
	{query.ErrTooManyRequests, Mapping{codes.ResourceExhausted, http.StatusTooManyRequests, "TooManyRequests"}},
	{query.ErrTooLargeVersion, Mapping{codes.DeadlineExceeded, http.StatusGatewayTimeout, "Timeout"}},
	{query.ErrNotReady, Mapping{codes.Unavailable, http.StatusServiceUnavailable, "ServiceUnavailable"}},
	{auth.ErrUnauthenticated, Mapping{codes.Unauthenticated, http.StatusUnauthorized, "Unauthorized"}},
	{auth.ErrForbidden, Mapping{codes.PermissionDenied, http.StatusForbidden, "Forbidden"}},
	// Stored state that fails validation when read back is the server's
	// fault, never the caller's.
	{regstore.ErrCorrupt, Mapping{codes.Internal, http.StatusInternalServerError, "InternalError"}},
	{inventory.ErrCorrupt, Mapping{codes.Internal, http.StatusInternalServerError, "InternalError"}},
	{query.ErrCorrupt, Mapping{codes.Internal, http.StatusInternalServerError, "InternalError"}},
	{context.DeadlineExceeded, Mapping{codes.DeadlineExceeded, http.StatusGatewayTimeout, "Timeout"}},
	// Connection bounds: the server's cap is the server's state (503), a
	// client's cap is that client's doing (429), a body that did not
	// arrive in time is 408 (told from 504 by its reason).
	{connlimit.ErrServerFull, Mapping{codes.Unavailable, http.StatusServiceUnavailable, "ServiceUnavailable"}},
	{connlimit.ErrClientFull, Mapping{codes.ResourceExhausted, http.StatusTooManyRequests, "TooManyRequests"}},
	{connlimit.ErrRequestTimeout, Mapping{codes.DeadlineExceeded, http.StatusRequestTimeout, "RequestTimeout"}},
	{context.Canceled, Mapping{codes.Canceled, 499, "Canceled"}},
	{query.ErrNotKept, Mapping{codes.Unimplemented, http.StatusNotImplemented, "NotImplemented"}},
	{nil, Mapping{codes.FailedPrecondition, http.StatusConflict, "Conflict"}},
	{nil, Mapping{codes.AlreadyExists, http.StatusConflict, "AlreadyExists"}},
	{nil, Mapping{codes.Unimplemented, http.StatusNotImplemented, "NotImplemented"}},
}

// internal is every error no row names.
var internal = Mapping{codes.Internal, http.StatusInternalServerError, "InternalError"}

// Of is the mapping of a lower-layer error: its sentinel's row, else
// Internal.
func Of(err error) Mapping {
	for _, e := range table {
		if e.err != nil && errors.Is(err, e.err) {
			return e.Mapping
		}
	}
	return internal
}

// ForStatus is the mapping of a gRPC status whose ErrorInfo carries
// reason (toStatus in queryapi adds it): the row with both, else the
// code's. A code shared by two rows (INVALID_ARGUMENT: 400 or 413) is told
// apart by the reason.
func ForStatus(c codes.Code, reason string) Mapping {
	if reason != "" {
		for _, e := range table {
			if e.Code == c && e.Reason == reason {
				return e.Mapping
			}
		}
	}
	return ForCode(c)
}

// OfStatus is the mapping of a gRPC status: ForStatus with the reason of
// its ErrorInfo detail, if any.
func OfStatus(st *status.Status) Mapping {
	reason := ""
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reason = ei.GetReason()
			break
		}
	}
	return ForStatus(st.Code(), reason)
}

// ForCode is the HTTP status and reason of a gRPC code.
func ForCode(c codes.Code) Mapping {
	if c == codes.Internal || c == codes.Unknown {
		return Mapping{c, internal.HTTP, internal.Reason}
	}
	for _, e := range table {
		if e.Code == c {
			return e.Mapping
		}
	}
	h := runtime.HTTPStatusFromCode(c)
	return Mapping{c, h, http.StatusText(h)}
}

// errorDomain names fleetview in gRPC ErrorInfo details.
const errorDomain = "fleetview.io"

// ToStatus translates an error for the wire, once (the table above); an
// error that is a status already passes unchanged.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	m := Of(err)
	st := status.New(m.Code, err.Error())
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: m.Reason, Domain: errorDomain}); derr == nil {
		st = d
	}
	return st.Err()
}
