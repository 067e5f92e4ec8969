package rest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/queryapi/apierr"
)

func TestErrorTable(t *testing.T) {
	cases := []struct {
		err    error
		code   int
		reason string
	}{
		{fmt.Errorf("x: %w", query.ErrNotFound), http.StatusNotFound, "NotFound"},
		{fmt.Errorf("x: %w", query.ErrConflict), http.StatusConflict, "Conflict"},
		{fmt.Errorf("x: %w", query.ErrInvalid), http.StatusBadRequest, "BadRequest"},
		{fmt.Errorf("x: %w", query.ErrExpired), http.StatusGone, "Expired"},
		{fmt.Errorf("x: %w", query.ErrTooSlow), http.StatusTooManyRequests, "TooManyRequests"},
		{fmt.Errorf("x: %w", query.ErrTooLargeVersion), http.StatusGatewayTimeout, "Timeout"},
		{fmt.Errorf("x: %w", query.ErrNotReady), http.StatusServiceUnavailable, "ServiceUnavailable"},
		{fmt.Errorf("x: %w", auth.ErrForbidden), http.StatusForbidden, "Forbidden"},
		{fmt.Errorf("x: %w", auth.ErrUnauthenticated), http.StatusUnauthorized, "Unauthorized"},
		{context.DeadlineExceeded, http.StatusGatewayTimeout, "Timeout"},
		{errors.New("boom"), http.StatusInternalServerError, "InternalError"},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			code, st := StatusBody(apierr.ToStatus(tc.err))
			if code != tc.code || st.Code != tc.code || st.Reason != tc.reason || st.Kind != "Status" || st.Status != "Failure" || st.Message == "" {
				t.Fatalf("%v -> %d %+v, want %d %s", tc.err, code, st, tc.code, tc.reason)
			}
		})
	}
}
