package stream

import (
	"testing"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func TestIsObjectEvent(t *testing.T) {
	for _, tc := range []struct {
		typ  fleetviewv1.EventType
		want bool
	}{
		{fleetviewv1.EventType_EVENT_TYPE_UPSERT, true},
		{fleetviewv1.EventType_EVENT_TYPE_DELETE, true},
		{fleetviewv1.EventType_EVENT_TYPE_SYNCED, false},
		{fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED, false},
		{fleetviewv1.EventType_EVENT_TYPE_UNSPECIFIED, false},
	} {
		if got := IsObjectEvent(&fleetviewv1.ResourceEvent{Type: tc.typ}); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.typ, got, tc.want)
		}
	}
	if IsObjectEvent(nil) {
		t.Error("a nil event is no object event")
	}
}
