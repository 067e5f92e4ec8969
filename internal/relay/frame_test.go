package relay

import "testing"

func TestRequestID(t *testing.T) {
	for _, tc := range []struct {
		cluster, subject, id string
		ok                   bool
	}{
		{"a", "fv.act.a.req.x1", "x1", true},
		{"a", "fv.act.b.req.x1", "", false},
		{"a", "fv.act.a.req.", "", false},
		{"a", "fv.act.a.req.x.y", "", false},
		{"a", "fv.act.a.resp.x", "", false},
		{"ab", "fv.act.a.req.x", "", false},
	} {
		id, ok := requestID(tc.cluster, tc.subject)
		if id != tc.id || ok != tc.ok {
			t.Errorf("requestID(%q, %q) = %q, %v; want %q, %v", tc.cluster, tc.subject, id, ok, tc.id, tc.ok)
		}
	}
}
