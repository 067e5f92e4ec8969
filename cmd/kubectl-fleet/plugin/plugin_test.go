package plugin

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeHub serves the hub's discovery and the history's REST paths from
// testdata/hub.json, a page of one entry at a time unless asked more,
// and records the queries it was asked.
type fakeHub struct {
	t       *testing.T
	entries []json.RawMessage
	mu      sync.Mutex
	queries []string
}

const discoveryCore = `{"kind":"APIResourceList","groupVersion":"v1","resources":[
{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list","watch"],"shortNames":["po"]},
{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["get","list","watch"],"shortNames":["cm"]},
{"name":"namespaces","singularName":"namespace","namespaced":false,"kind":"Namespace","verbs":["get","list","watch"],"shortNames":["ns"]}]}`

const discoveryApps = `{"kind":"APIResourceList","groupVersion":"apps/v1","resources":[
{"name":"deployments","singularName":"deployment","namespaced":true,"kind":"Deployment","verbs":["get","list","watch"],"shortNames":["deploy"]}]}`

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer t0ken" {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"kind":"Status","message":"Unauthorized","reason":"Unauthorized","code":401}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	disc := r.URL.Path
	if rest, ok := strings.CutPrefix(disc, "/clusters/member1"); ok {
		disc = rest // a member context's discovery
	}
	switch disc {
	case "/api":
		fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
		return
	case "/apis":
		fmt.Fprint(w, `{"kind":"APIGroupList","groups":[{"name":"apps","versions":[{"groupVersion":"apps/v1","version":"v1"}],"preferredVersion":{"groupVersion":"apps/v1","version":"v1"}}]}`)
		return
	case "/api/v1":
		fmt.Fprint(w, discoveryCore)
		return
	case "/apis/apps/v1":
		fmt.Fprint(w, discoveryApps)
		return
	}
	h.mu.Lock()
	h.queries = append(h.queries, r.URL.Path+"?"+r.URL.RawQuery)
	h.mu.Unlock()
	q := r.URL.Query()
	var key string
	var match func(e map[string]any) bool
	switch {
	case r.URL.Path == "/v1/changes":
		key = "changes"
		match = func(e map[string]any) bool {
			return (len(q["types"]) == 0 || slices.Contains(q["types"], e["type"].(string))) &&
				(q.Get("clusters") == "" || q.Get("clusters") == e["cluster"])
		}
	case r.URL.Path == "/v1/revisions/core/v1/pods/web":
		key = "revisions"
		match = func(e map[string]any) bool { return e["name"] == "web" && e["namespace"] == q.Get("namespace") }
	case strings.HasPrefix(r.URL.Path, "/v1/revisions/"):
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","message":"pods \"nope\" not found","reason":"NotFound","code":404}`)
		return
	default:
		http.NotFound(w, r)
		return
	}
	var sel []json.RawMessage
	for _, raw := range h.entries {
		var e map[string]any
		if err := json.Unmarshal(raw, &e); err != nil {
			h.t.Error(err)
		}
		if match(e) {
			if key == "changes" && q.Get("objects") != "true" {
				delete(e, "object")
				raw, _ = json.Marshal(e)
			}
			sel = append(sel, raw)
		}
	}
	from, _ := strconv.Atoi(q.Get("continue"))
	limit, _ := strconv.Atoi(q.Get("limit"))
	to := min(len(sel), from+limit)
	next := ""
	if to < len(sel) {
		next = strconv.Itoa(to)
	}
	b, _ := json.Marshal(map[string]any{key: sel[from:to], "continue": next})
	_, _ = w.Write(b)
}

func startHub(t *testing.T) (*fakeHub, *httptest.Server) {
	b, err := os.ReadFile("testdata/hub.json")
	if err != nil {
		t.Fatal(err)
	}
	var data struct{ Changes []json.RawMessage }
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	h := &fakeHub{t: t, entries: data.Changes}
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

// kubeconfig writes a kubeconfig whose context points at server.
// client-go sends a kubeconfig's credentials over TLS only, as kubectl.
func kubeconfig(t *testing.T, srv *httptest.Server) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	server := srv.URL
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fleet
  cluster: {server: %q, certificate-authority-data: %s}
- name: member1
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: u
  user: {token: t0ken}
contexts:
- name: fleet
  context: {cluster: fleet, user: u, namespace: shop}
- name: member1
  context: {cluster: member1, user: u, namespace: shop}
current-context: fleet
`, server, ca, server+"/clusters/member1", ca)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, args ...string) (string, string, error) {
	var out, errw bytes.Buffer
	now := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
	root := NewRoot(Env{Stdout: &out, Stderr: &errw, Now: func() time.Time { return now }})
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errw.String(), err
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: got\n%s\nwant\n%s", name, got, want)
	}
}

// TestCommands runs each command against the fake hub and compares its
// output with its golden file and its queries with the REST contract.
func TestCommands(t *testing.T) {
	hub, srv := startHub(t)
	kc := kubeconfig(t, srv)
	for _, tc := range []struct {
		name  string
		args  []string
		query string // a query the hub must have been asked (its first page)
	}{
		{"history", []string{"history", "po", "web"}, "/v1/revisions/core/v1/pods/web?limit=500&namespace=shop"},
		{"history-yaml", []string{"history", "pods", "web", "--cluster", "member1", "--since", "2h", "-o", "yaml"},
			"/v1/revisions/core/v1/pods/web?cluster=member1&limit=500&namespace=shop&since=2026-12-06T16%3A00%3A00Z"},
		{"diff", []string{"diff", "pod", "web"}, ""},
		{"diff-revision", []string{"diff", "pod", "web", "--revision", "2"}, ""},
		{"diff-since", []string{"diff", "pod", "web", "--since", "2026-12-06T17:05:00Z"}, ""},
		{"changes", []string{"changes", "--chunk-size", "1", "--since", "1h"}, "/v1/changes?limit=1&since=2026-12-06T17%3A00%3A00Z"},
		{"changes-filtered", []string{"changes", "--resource", "deploy,po", "--type", "deleted", "-n", "shop", "-l", "app=cart", "--context", "member1"},
			"/v1/changes?clusters=member1&labelSelector=app%3Dcart&limit=500&namespace=shop&resources=deployments.apps&resources=pods&types=DELETED"},
		{"deleted", []string{"deleted"}, "/v1/changes?limit=500&objects=true&types=DELETED"},
		{"deleted-yaml", []string{"deleted", "deployments.apps", "-o", "yaml"}, "/v1/changes?limit=500&objects=true&resources=deployments.apps&types=DELETED"},
		{"changes-json", []string{"changes", "-o", "json", "--cluster", "member2"}, "/v1/changes?clusters=member2&limit=500"},
		{"changes-json-paged", []string{"changes", "-o", "json", "--chunk-size", "1"}, ""},
		{"changes-json-empty", []string{"changes", "-o", "json", "--cluster", "member3"}, ""},
		{"changes-yaml-empty", []string{"changes", "-o", "yaml", "--cluster", "member3"}, ""},
		{"deleted-json-empty", []string{"deleted", "-o", "json", "--cluster", "member3"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hub.mu.Lock()
			hub.queries = nil
			hub.mu.Unlock()
			out, stderr, err := run(t, append(tc.args, "--kubeconfig", kc)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			golden(t, tc.name, out)
			if slices.Contains(tc.args, "json") && !json.Valid([]byte(out)) {
				t.Errorf("-o json is not JSON:\n%s", out)
			}
			if tc.query != "" {
				hub.mu.Lock()
				defer hub.mu.Unlock()
				if len(hub.queries) == 0 || hub.queries[0] != tc.query {
					t.Errorf("queries %q, want first %q", hub.queries, tc.query)
				}
			}
		})
	}
}

// TestErrors: each bad flag, argument or answer is an error naming it.
func TestErrors(t *testing.T) {
	_, srv := startHub(t)
	kc := kubeconfig(t, srv)
	for _, tc := range []struct {
		name string
		args []string
		want []string
		is   error
	}{
		{"since", []string{"changes", "--since", "yesterday"}, []string{`--since "yesterday"`}, ErrInvalidOptions},
		{"output and chunk", []string{"changes", "-o", "wide", "--chunk-size", "0"}, []string{`--output "wide"`, "--chunk-size 0"}, ErrInvalidOptions},
		{"type", []string{"changes", "--type", "CREATED"}, []string{`--type "CREATED"`}, ErrInvalidOptions},
		{"resource", []string{"history", "gizmos", "x"}, []string{`resource "gizmos"`, "kubectl api-resources"}, ErrInvalidOptions},
		{"revision", []string{"diff", "po", "web", "--revision", "9"}, []string{"--revision 9", "3 revisions"}, ErrInvalidOptions},
		{"not found", []string{"history", "po", "nope"}, []string{`pods "nope" not found`}, nil},
		{"token", []string{"changes", "--token", "wrong"}, []string{"401", "--token"}, nil},
		{"context", []string{"changes", "--context", "nowhere"}, []string{"--context nowhere", "fleetview kubeconfig"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := run(t, append(tc.args, "--kubeconfig", kc)...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("%v is not %v", err, tc.is)
			}
		})
	}
}

// TestSummary: the CHANGE column names the paths a merge patch sets.
func TestSummary(t *testing.T) {
	for _, tc := range []struct{ typ, patch, want string }{
		{"ADDED", "", "created"},
		{"DELETED", "", "deleted"},
		{"MODIFIED", "", "(no earlier revision in the window)"},
		{"MODIFIED", `{"metadata":{"resourceVersion":"2"}}`, "(resourceVersion only)"},
		{"MODIFIED", `{"spec":{"replicas":3},"metadata":{"labels":{"a":null}}}`, "-metadata.labels.a, spec.replicas"},
		{"MODIFIED", `{"metadata":{"annotations":{"x.io/y":"1"}}}`, "metadata.annotations[x.io/y]"},
		{"MODIFIED", `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":{}}`, "a, b, c, d, +2 more"},
		{"MODIFIED", `"eyJhIjoxfQ=="`, "a"}, // base64 bytes, as proto JSON writes them
	} {
		e := Entry{Type: tc.typ, Patch: json.RawMessage(tc.patch)}
		e.normalize()
		if got := summary(&e, nil, 4); got != tc.want {
			t.Errorf("summary(%s %s) = %q, want %q", tc.typ, tc.patch, got, tc.want)
		}
	}
}

// TestSummarySnapshot: a revision stored as a full snapshot (no patch)
// is summarized from its predecessor.
func TestSummarySnapshot(t *testing.T) {
	prev := Entry{Type: "MODIFIED", Object: json.RawMessage(`{"metadata":{"resourceVersion":"1","labels":{"a":"1"}},"spec":{"x":1}}`)}
	e := Entry{Type: "MODIFIED", Object: json.RawMessage(`{"metadata":{"resourceVersion":"2","labels":{}},"spec":{"x":2}}`)}
	if got, want := summary(&e, &prev, 4), "-metadata.labels.a, spec.x"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// TestMemberContextCluster: a member context's URL keeps
// its member as the default --cluster.
func TestMemberContextCluster(t *testing.T) {
	hub, srv := startHub(t)
	kc := kubeconfig(t, srv)
	if _, _, err := run(t, "changes", "--kubeconfig", kc, "--context", "member1"); err != nil {
		t.Fatal(err)
	}
	q, _ := url.ParseQuery(strings.SplitN(hub.queries[0], "?", 2)[1])
	if q.Get("clusters") != "member1" {
		t.Errorf("queries %v: want clusters=member1 from the member context", hub.queries)
	}
}

// TestClusterScoped: a cluster-scoped resource's revisions are asked
// without a namespace, whatever the context's.
func TestClusterScoped(t *testing.T) {
	hub, srv := startHub(t)
	_, _, err := run(t, "history", "ns", "shop", "--kubeconfig", kubeconfig(t, srv))
	if err == nil {
		t.Fatal("the fake hub has no namespace revisions")
	}
	if len(hub.queries) != 1 || hub.queries[0] != "/v1/revisions/core/v1/namespaces/shop?limit=500" {
		t.Errorf("queries %q", hub.queries)
	}
}
