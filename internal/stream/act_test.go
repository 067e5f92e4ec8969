package stream

import "testing"

func TestActSubjects(t *testing.T) {
	if got := ActRequest("edge-a", "r1"); got != "fv.act.edge-a.req.r1" {
		t.Errorf("ActRequest = %q", got)
	}
	if got := ActResponse("edge-a", "r1"); got != "fv.act.edge-a.resp.r1" {
		t.Errorf("ActResponse = %q", got)
	}
	if ActRequests("a") != "fv.act.a.req.*" || ActRequestTree("a") != "fv.act.a.req.>" || ActResponseTree("a") != "fv.act.a.resp.>" {
		t.Errorf("trees: %s %s %s", ActRequests("a"), ActRequestTree("a"), ActResponseTree("a"))
	}
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
		id, ok := ActRequestID(tc.cluster, tc.subject)
		if id != tc.id || ok != tc.ok {
			t.Errorf("ActRequestID(%q, %q) = %q, %v; want %q, %v", tc.cluster, tc.subject, id, ok, tc.id, tc.ok)
		}
	}
}
