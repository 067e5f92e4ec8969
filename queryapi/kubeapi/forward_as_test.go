package kubeapi

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relay"
)

// TestActThroughAs: a forwarded request carries the identity As gives the
// admitted caller in the cluster it goes to (for a fleet-view write, the
// owner), never one the client sent in headers; the audit line keeps the
// subject fleetview authenticated and adds whom the member saw.
func TestActThroughAs(t *testing.T) {
	// as(m) is a map under which cluster m knows its users as corp:NAME;
	// as("") one that cannot say who anyone is anywhere.
	as := func(mapped string) func(string, relay.Caller) (relay.Caller, error) {
		return func(cluster string, c relay.Caller) (relay.Caller, error) {
			if mapped == "" {
				return relay.Caller{}, status.Error(codes.PermissionDenied, "the map cannot say who alice is in cluster "+cluster)
			}
			if cluster != mapped {
				return c, nil
			}
			out := relay.Caller{User: "corp:" + c.User}
			for _, g := range c.Groups {
				out.Groups = append(out.Groups, "corp:"+g)
			}
			return out, nil
		}
	}
	for _, tc := range []struct {
		name, method, path string
		as                 func(string, relay.Caller) (relay.Caller, error)
		cluster            string // "": refused, not forwarded
		want               relay.Caller
		memberUser         any // the audit line's memberUser (nil: none)
	}{
		{"the map cannot say: refused", "PATCH", "/clusters/member2/api/v1/namespaces/shop/pods/web", as(""), "",
			relay.Caller{}, nil},
		{"mapped cluster", "PATCH", "/clusters/member2/api/v1/namespaces/shop/pods/web", as("member2"), "member2",
			relay.Caller{User: "corp:alice", Groups: []string{"corp:dev"}}, "corp:alice"},
		{"cluster the map leaves alone", "PATCH", "/clusters/member1/api/v1/namespaces/shop/pods/web", as("member2"), "member1",
			relay.Caller{User: "alice", Groups: []string{"dev"}}, nil},
		{"fleet-view write: the owner's mapping", "DELETE", "/api/v1/namespaces/shop/pods/web", as("member1"), "member1",
			relay.Caller{User: "corp:alice", Groups: []string{"corp:dev"}}, "corp:alice"},
		{"no map", "PATCH", "/clusters/member2/api/v1/namespaces/shop/pods/web", nil, "member2",
			relay.Caller{User: "alice", Groups: []string{"dev"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeRelay{}
			var audit bytes.Buffer
			admit := func(*http.Request, string, string, schema.GroupResource) (relay.Caller, error) {
				return relay.Caller{User: "alice", Groups: []string{"dev"}}, nil
			}
			h := New(&fakeQuery{items: [][]byte{[]byte(podJSON)}}, fakeCatalog(), nil, nil,
				ActThrough(ActThroughConfig{Relay: fr, Admit: admit, As: tc.as, Audit: slog.New(slog.NewJSONHandler(&audit, nil))}))
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{}`))
			r.Header.Set("Content-Type", "application/merge-patch+json")
			r.Header.Set("Authorization", "Bearer secret")
			// A client naming someone else: never passed on.
			r.Header.Set("Impersonate-User", "system:admin")
			r.Header.Set("Impersonate-Group", "system:masters")
			r.Header.Set("Impersonate-Extra-Scopes", "all")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if tc.cluster == "" {
				if w.Code != http.StatusForbidden || len(fr.got) != 0 || !strings.Contains(w.Body.String(), "cannot say who alice is") {
					t.Fatalf("answer %d %s, %d forwarded; want 403, none", w.Code, w.Body, len(fr.got))
				}
				return
			}
			if w.Code != http.StatusOK || len(fr.got) != 1 {
				t.Fatalf("answer %d %s, %d forwarded", w.Code, w.Body, len(fr.got))
			}
			g := fr.got[0]
			if g.Cluster != tc.cluster || g.Caller.User != tc.want.User || !slices.Equal(g.Caller.Groups, tc.want.Groups) {
				t.Errorf("forwarded to %s as %+v, want %s as %+v", g.Cluster, g.Caller, tc.cluster, tc.want)
			}
			for k := range g.Header {
				if k == "Authorization" || strings.HasPrefix(k, "Impersonate-") {
					t.Errorf("client header %s passed on: %v", k, g.Header)
				}
			}
			var line map[string]any
			if err := json.Unmarshal(audit.Bytes(), &line); err != nil {
				t.Fatalf("audit line %q: %v", audit.String(), err)
			}
			if line["subject"] != "alice" || line["memberUser"] != tc.memberUser {
				t.Errorf("audit line subject %v memberUser %v, want alice and %v", line["subject"], line["memberUser"], tc.memberUser)
			}
		})
	}
}
