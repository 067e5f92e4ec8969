package apierr

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
)

func TestOfAndForCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Mapping
	}{
		{fmt.Errorf("get: %w", query.ErrNotFound), Mapping{codes.NotFound, http.StatusNotFound, "NotFound"}},
		{fmt.Errorf("%w: in member1, member2", query.ErrConflict), Mapping{codes.Aborted, http.StatusConflict, "Conflict"}},
		{query.ErrExpired, Mapping{codes.OutOfRange, http.StatusGone, "Expired"}},
		{auth.ErrForbidden, Mapping{codes.PermissionDenied, http.StatusForbidden, "Forbidden"}},
		{context.Canceled, Mapping{codes.Canceled, 499, "Canceled"}},
		{fmt.Errorf("disk on fire"), Mapping{codes.Internal, http.StatusInternalServerError, "InternalError"}},
		// A stored registry that fails validation is not the caller's
		// invalid input, even though it wraps the validation errors.
		{fmt.Errorf("%w: key x: %v", regstore.ErrCorrupt, registry.ErrInvalid), Mapping{codes.Internal, http.StatusInternalServerError, "InternalError"}},
		{fmt.Errorf("%w: key x", inventory.ErrCorrupt), Mapping{codes.Internal, http.StatusInternalServerError, "InternalError"}},
	} {
		got := Of(tc.err)
		if got != tc.want {
			t.Errorf("Of(%v) = %+v, want %+v", tc.err, got, tc.want)
		}
		// Every code a sentinel produces maps back to the same status.
		if back := ForCode(got.Code); back.HTTP != tc.want.HTTP || back.Reason != tc.want.Reason {
			t.Errorf("ForCode(%v) = %+v, want %d %s", got.Code, back, tc.want.HTTP, tc.want.Reason)
		}
	}
	for _, tc := range []struct {
		code   codes.Code
		http   int
		reason string
	}{
		{codes.FailedPrecondition, http.StatusConflict, "Conflict"},
		{codes.Unimplemented, http.StatusNotImplemented, "NotImplemented"},
		{codes.Unknown, http.StatusInternalServerError, "InternalError"},
		{codes.DataLoss, http.StatusInternalServerError, "Internal Server Error"},
	} {
		if m := ForCode(tc.code); m.HTTP != tc.http || m.Reason != tc.reason {
			t.Errorf("ForCode(%v) = %+v, want %d %s", tc.code, m, tc.http, tc.reason)
		}
	}
}
