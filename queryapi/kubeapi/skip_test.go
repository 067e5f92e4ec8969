package kubeapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// undecodable are stored objects, valid JSON, whose Table row cannot be
// written (their metadata is not Kubernetes metadata): one member
// cluster's collector can write them, and each once made the Table
// `kubectl get pods -A` asks for a 500 for every cluster.
//
// cluster is the cluster the skip is reported for: the object's own
// cache-source annotation, "" when it has none to read.
var undecodable = []struct{ name, obj, cluster string }{
	{"name not a string", `{"metadata":{"name":7,"namespace":"shop","annotations":{"fleetview.io/cluster":"member1"}}}`, "member1"},
	{"creationTimestamp not a string", `{"metadata":{"name":"bad","namespace":"shop","annotations":{"fleetview.io/cluster":"member1"},"creationTimestamp":{"seconds":1}}}`, "member1"},
	{"metadata not an object", `{"metadata":["name","bad"],"kind":"Pod"}`, ""},
	{"no metadata", `{"kind":"Pod","spec":{"containers":[]}}`, ""},
	{"annotations not an object", `{"metadata":{"name":"bad","namespace":"shop","annotations":"fleetview.io/cluster=member1"}}`, ""},
}

type skips struct {
	mu       sync.Mutex
	clusters []string
}

func (s *skips) opt() Option {
	return OnSkipped(func(c string, _ error) { s.mu.Lock(); s.clusters = append(s.clusters, c); s.mu.Unlock() })
}

// TestTableSkipsUndecodable: a Table of several clusters' Pods with one
// object it cannot decode is a 200 with every other row; the one left out
// is reported with its cluster.
func TestTableSkipsUndecodable(t *testing.T) {
	const accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
	good2 := strings.ReplaceAll(podJSON, "member1", "member2")
	for _, tc := range undecodable {
		t.Run(tc.name, func(t *testing.T) {
			var s skips
			q := &fakeQuery{items: [][]byte{[]byte(podJSON), []byte(tc.obj), []byte(good2)}}
			h := New(q, fakeCatalog(), nil, nil, s.opt())
			r := httptest.NewRequest("GET", "/api/v1/pods", nil)
			r.Header.Set("Accept", accept)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			var tbl metav1.Table
			if err := json.Unmarshal(w.Body.Bytes(), &tbl); err != nil {
				t.Fatalf("%v: %s", err, w.Body)
			}
			var got []string
			for _, row := range tbl.Rows {
				got = append(got, row.Cells[0].(string)+"/"+row.Cells[1].(string))
			}
			if strings.Join(got, ",") != "member1/web,member2/web" {
				t.Fatalf("rows %v", got)
			}
			if len(s.clusters) != 1 || s.clusters[0] != tc.cluster {
				t.Fatalf("reported %q, want [%q]", s.clusters, tc.cluster)
			}
		})
	}
}

// TestWatchSkipsUnencodable: a watch (plain and as Table rows) leaves out
// an event it cannot encode and goes on with the next; every line is JSON.
func TestWatchSkipsUnencodable(t *testing.T) {
	for _, tc := range []struct{ name, accept, bad string }{
		{"table row undecodable", "application/json;as=Table;v=v1;g=meta.k8s.io", undecodable[0].obj},
		{"not JSON", "", `{"metadata":{"name":"bad","annotations":{"fleetview.io/cluster":"member1"}},"spec":{"a" 1 2}}`},
		{"closed early", "", `{"metadata":{"name":"bad","annotations":{"fleetview.io/cluster":"member1"}}},{"kind":"Injected"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s skips
			good2 := strings.ReplaceAll(podJSON, "member1", "member2")
			q := &fakeQuery{events: []*fleetviewv1.WatchEvent{
				{Type: "ADDED", RawObject: []byte(podJSON), ResourceVersion: "t1"},
				{Type: "ADDED", RawObject: []byte(tc.bad), ResourceVersion: "t2"},
				{Type: "ADDED", RawObject: []byte(good2), ResourceVersion: "t3"},
			}}
			h := New(q, fakeCatalog(), nil, nil, s.opt())
			r := httptest.NewRequest("GET", "/api/v1/pods?watch=true", nil)
			if tc.accept != "" {
				r.Header.Set("Accept", tc.accept)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			var n int
			sc := bufio.NewScanner(bytes.NewReader(w.Body.Bytes()))
			for sc.Scan() {
				var ev struct {
					Type   string          `json:"type"`
					Object json.RawMessage `json:"object"`
				}
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type != "ADDED" {
					t.Fatalf("line %q: %v", sc.Bytes(), err)
				}
				if bytes.Contains(ev.Object, []byte("Injected")) || bytes.Contains(ev.Object, []byte(`"bad"`)) {
					t.Fatalf("the bad event was sent: %s", sc.Bytes())
				}
				n++
			}
			if n != 2 || strings.Join(s.clusters, ",") != "member1" {
				t.Fatalf("%d lines (want 2), reported %v: %s", n, s.clusters, w.Body)
			}
		})
	}
}
