package apierr

import (
	"context"
	"fmt"
	"net/http"
	"testing"

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

// TestOfStatus: a code two rows share (INVALID_ARGUMENT: 400 BadRequest or
// 413 RequestEntityTooLarge) is told apart by the ErrorInfo reason; the
// limit refusals are 429 TooManyRequests.
func TestOfStatus(t *testing.T) {
	withReason := func(c codes.Code, reason string) *status.Status {
		st, err := status.New(c, "x").WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "fleetview.io"})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, tc := range []struct {
		name   string
		st     *status.Status
		http   int
		reason string
	}{
		{"too large", withReason(codes.InvalidArgument, "RequestEntityTooLarge"), http.StatusRequestEntityTooLarge, "RequestEntityTooLarge"},
		{"bad request", withReason(codes.InvalidArgument, "BadRequest"), http.StatusBadRequest, "BadRequest"},
		{"invalid argument without detail", status.New(codes.InvalidArgument, "x"), http.StatusBadRequest, "BadRequest"},
		{"too many requests", withReason(codes.ResourceExhausted, "TooManyRequests"), http.StatusTooManyRequests, "TooManyRequests"},
		{"grpc's own resource exhausted", status.New(codes.ResourceExhausted, "x"), http.StatusTooManyRequests, "TooManyRequests"},
		{"unknown reason falls back to the code", withReason(codes.NotFound, "Whatever"), http.StatusNotFound, "NotFound"},
		{"slow body", withReason(codes.DeadlineExceeded, "RequestTimeout"), http.StatusRequestTimeout, "RequestTimeout"},
		{"deadline without detail", status.New(codes.DeadlineExceeded, "x"), http.StatusGatewayTimeout, "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m := OfStatus(tc.st); m.HTTP != tc.http || m.Reason != tc.reason {
				t.Fatalf("OfStatus = %+v, want %d %s", m, tc.http, tc.reason)
			}
		})
	}
	for _, tc := range []struct {
		err  error
		want Mapping
	}{
		{fmt.Errorf("%w: 101 watches", query.ErrTooManyRequests), Mapping{codes.ResourceExhausted, http.StatusTooManyRequests, "TooManyRequests"}},
		{fmt.Errorf("%w: body over 1 MiB", query.ErrRequestTooLarge), Mapping{codes.InvalidArgument, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge"}},
		{fmt.Errorf("%w: 10 held", connlimit.ErrServerFull), Mapping{codes.Unavailable, http.StatusServiceUnavailable, "ServiceUnavailable"}},
		{fmt.Errorf("%w: 5 held", connlimit.ErrClientFull), Mapping{codes.ResourceExhausted, http.StatusTooManyRequests, "TooManyRequests"}},
		{fmt.Errorf("%w: body", connlimit.ErrRequestTimeout), Mapping{codes.DeadlineExceeded, http.StatusRequestTimeout, "RequestTimeout"}},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("Of(%v) = %+v, want %+v", tc.err, got, tc.want)
		}
	}
}
