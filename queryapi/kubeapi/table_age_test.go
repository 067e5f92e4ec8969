package kubeapi

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// TestAgeOfStored: the Age read from the stored creationTimestamp's
// bytes is the Age of the decoded string, for Kubernetes' form (read
// without decoding) and for every other (decoded as before), and a
// string that is not JSON is an error, as before.
func TestAgeOfStored(t *testing.T) {
	c := cached{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod", namespaced: true}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, raw string
		fast      bool // read from the bytes, without decoding
		bad       bool
	}{
		{name: "Kubernetes' form", raw: `"2026-11-01T10:02:03Z"`, fast: true},
		{name: "leap day", raw: `"2024-02-29T00:00:00Z"`, fast: true},
		{name: "last second of a day", raw: `"2026-12-05T23:59:59Z"`, fast: true},
		{name: "in the future", raw: `"2027-01-01T00:00:00Z"`, fast: true},
		{name: "no leap day", raw: `"2026-02-29T00:00:00Z"`},
		{name: "day 31 of a 30-day month", raw: `"2026-11-31T00:00:00Z"`},
		{name: "day 0", raw: `"2026-11-00T00:00:00Z"`},
		{name: "month 13", raw: `"2026-13-01T00:00:00Z"`},
		{name: "hour 24", raw: `"2026-11-01T24:00:00Z"`},
		{name: "second 60", raw: `"2026-11-01T10:00:60Z"`},
		{name: "an offset", raw: `"2026-11-01T10:02:03+02:00"`},
		{name: "fractional seconds", raw: `"2026-11-01T10:02:03.5Z"`},
		{name: "escaped", raw: `"2026-11-01T10:02:03\u005a"`},
		{name: "not a digit", raw: `"2026-1a-01T10:02:03Z"`},
		{name: "lower-case t", raw: `"2026-11-01t10:02:03Z"`},
		{name: "not a time", raw: `"yesterday"`},
		{name: "not a string", raw: `1762000000`, bad: true},
		{name: "null", raw: `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := parseStoredUTC([]byte(tc.raw)); ok != tc.fast {
				t.Errorf("read from the bytes: %v, want %v", ok, tc.fast)
			}
			tw := newTableWriter(c, metav1.IncludeNone)
			tw.now = now
			got, err := tw.ageOfStored([]byte(tc.raw))
			if (err != nil) != tc.bad {
				t.Fatalf("error %v, want one: %v", err, tc.bad)
			}
			if tc.bad {
				return
			}
			s, err := rawjson.String([]byte(tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			old := newTableWriter(c, metav1.IncludeNone)
			old.now = now
			if want := old.ageOf(s); got != want {
				t.Errorf("age %q, want %q (decoded)", got, want)
			}
			if p, ok := parseStoredUTC([]byte(tc.raw)); ok {
				if want, err := time.Parse(time.RFC3339, s); err != nil || !p.Equal(want) {
					t.Errorf("read %v, time.Parse %v (%v)", p, want, err)
				}
			}
		})
	}
}
