package natsserver

import (
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/stream"
)

func TestAPISubject(t *testing.T) {
	if got := APISubject("CONSUMER.CREATE", "FV_a", "fvc_a_x", "fv.obj.a.>"); got != "$JS.API.CONSUMER.CREATE.FV_a.fvc_a_x.fv.obj.a.>" {
		t.Errorf("APISubject = %q", got)
	}
	if got := APISubject("STREAM.INFO.FV_a"); got != "$JS.API.STREAM.INFO.FV_a" {
		t.Errorf("APISubject = %q", got)
	}
	for _, tc := range []struct {
		subject string
		op      string
		args    []string
		ok      bool
	}{
		{"$JS.API.CONSUMER.CREATE.FV_a.c.fv.obj.a.>", "CONSUMER.CREATE", []string{"FV_a", "c", "fv", "obj", "a", ">"}, true},
		{"$JS.API.STREAM.INFO.KV_fv_clusters", "STREAM.INFO", []string{"KV_fv_clusters"}, true},
		{"$JS.API.INFO", "", nil, false},
		{"$JS.hub.API.STREAM.INFO.FV_a", "", nil, false},
		{"fv.obj.a.core.v1.pods.u", "", nil, false},
	} {
		op, args, ok := ParseAPISubject(tc.subject)
		if op != tc.op || ok != tc.ok || strings.Join(args, ".") != strings.Join(tc.args, ".") {
			t.Errorf("ParseAPISubject(%q) = %q, %v, %v; want %q, %v, %v", tc.subject, op, args, ok, tc.op, tc.args, tc.ok)
		}
	}
}

// The spellings a member cluster's account and the hub's guard use.
func TestHubSubjects(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{HubAPISubject(APISubject("STREAM.INFO", stream.StreamName("edge-a"))), "$JS.hub.API.STREAM.INFO.FV_edge_a"},
		{HubAPISubject(APISubject("CONSUMER.CREATE", stream.StreamName("edge-a"), natsnames.FullWildcard)), "$JS.hub.API.CONSUMER.CREATE.FV_edge_a.>"},
		{HubAPISubject(natsnames.KVSubject(natsnames.ClusterBucket, "edge-a")), "$JS.hub.API.$KV.fv_clusters.edge-a"},
		{InboxPrefix("edge-a"), "_INBOX_edge-a"},
		{Inboxes("edge-a"), "_INBOX_edge-a.>"},
		{GuardPrefix("edge-a") + APISubject("STREAM.INFO", "KV_fv_clusters"), "_FV_GUARD.edge-a.$JS.API.STREAM.INFO.KV_fv_clusters"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
