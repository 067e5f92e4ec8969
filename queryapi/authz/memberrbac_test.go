package authz

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/fleetview/fleetview/internal/memberrbac"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// The watch event types the follower's tests send besides deleted and
// bookmark.
const (
	added    = "ADDED"
	modified = "MODIFIED"
)

// refusals counts refused objects by cluster.
type refusals map[string]int

func (r refusals) RBACObjectRefused(cluster string) { r[cluster]++ }

// TestRBACFollowerApply: the follower's handling of one resource's watch
// events, on real authorizers: the initial state, changes, a restart whose
// new initial state lacks an object (deleted), and untrusted input (a
// malformed object refused, failing closed, touching no other cluster).
func TestRBACFollowerApply(t *testing.T) {
	var logs bytes.Buffer
	m := &memberrbac.Members{}
	refused := refusals{}
	f := NewRBACFollower(nil, m, slog.New(slog.NewTextHandler(&logs, nil)), refused)
	alice := memberrbac.Authenticated(memberrbac.Identity{User: "alice"})
	pods := memberrbac.Resource{Resource: "pods"}
	role := `{"kind":"ClusterRole","metadata":{"name":"pod-reader"},"rules":[{"verbs":["list"],"apiGroups":[""],"resources":["pods"]}]}`
	binding := func(ns string) string {
		return `{"kind":"RoleBinding","metadata":{"name":"alice","namespace":"` + ns + `"},` +
			`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"pod-reader"},` +
			`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"alice"}]}`
	}
	ev := func(typ, cluster, obj string) *fleetviewv1.WatchEvent {
		return &fleetviewv1.WatchEvent{Type: typ, Cluster: cluster, RawObject: []byte(obj)}
	}
	end := &fleetviewv1.WatchEvent{Type: bookmark, InitialEventsEnd: true}
	reach := func() string {
		var parts []string
		for _, g := range m.Reach(context.Background(), alice, "list", pods).Groups {
			parts = append(parts, strings.Join(g.Clusters, ",")+":"+strings.Join(g.Scope.Namespaces, ","))
		}
		return strings.Join(parts, " ")
	}
	roles := &followRun{f: f, resource: "clusterroles", held: map[heldKey]struct{}{}, known: map[heldKey]struct{}{}, seen: map[heldKey]struct{}{}}
	roles.apply(ev(added, "a", role))
	roles.apply(ev(added, "b", role))
	roles.apply(end)
	rbHeld, rbKnown := map[heldKey]struct{}{}, map[heldKey]struct{}{}
	rbs := &followRun{f: f, resource: "rolebindings", held: rbHeld, known: rbKnown, seen: map[heldKey]struct{}{}}

	steps := []struct {
		name string
		run  func()
		want string
		log  string
		// taken in per cluster (readiness: held or refused, not gone)
		counted string
	}{
		{"initial state", func() {
			rbs.apply(ev(added, "a", binding("shop")))
			rbs.apply(ev(added, "b", binding("shop")))
			rbs.apply(ev(added, "b", binding("payments")))
			rbs.apply(end)
		}, "a:shop b:payments,shop", "", "a=1 b=2"},
		{"a delete", func() { rbs.apply(ev(deleted, "b", `{"metadata":{"name":"alice","namespace":"payments"}}`)) }, "a,b:shop", "", "a=1 b=1"},
		{"a malformed update fails closed in its own cluster only", func() {
			bad := strings.Replace(binding("shop"), `"kind":"ClusterRole","name"`, `"kind":"Evil","name"`, 1)
			rbs.apply(ev(modified, "a", bad))
		}, "b:shop", `cluster=a resource=rolebindings.rbac.authorization.k8s.io err="memberrbac: invalid RBAC object: RoleBinding \"alice\": roleRef.kind \"Evil\""`, "a=1 b=1"},
		{"garbage names nothing and changes nothing", func() { rbs.apply(ev(added, "b", `not json`)) }, "b:shop", "cluster=b", "a=1 b=1"},
		{"a restart whose state lacks an object deletes it", func() {
			rbs = &followRun{f: f, resource: "rolebindings", held: rbHeld, known: rbKnown, seen: map[heldKey]struct{}{}}
			rbs.apply(ev(added, "a", binding("payments")))
			rbs.apply(end)
		}, "a:payments", "", "a=1 b=0"},
	}
	for _, s := range steps {
		logs.Reset()
		s.run()
		if got := reach(); got != s.want {
			t.Fatalf("%s: alice lists pods in %q, want %q", s.name, got, s.want)
		}
		if s.log == "" && logs.Len() > 0 || s.log != "" && !strings.Contains(logs.String(), s.log) {
			t.Fatalf("%s: logged %q, want %q", s.name, logs.String(), s.log)
		}
		if got := fmt.Sprintf("a=%d b=%d", f.accountedFor("rolebindings", "a"), f.accountedFor("rolebindings", "b")); got != s.counted {
			t.Fatalf("%s: taken in %s, want %s", s.name, got, s.counted)
		}
	}
	for cluster, want := range map[string]int{"a": 1, "b": 1} {
		if got := refused[cluster]; got != want {
			t.Fatalf("refused objects of %s counted %v, want %v", cluster, got, want)
		}
	}
	// Readiness waits until every resource's cached state was applied once.
	if f.Loaded() {
		t.Fatal("loaded with two of the four resources' initial state")
	}
	for _, r := range []string{"clusterrolebindings", "roles"} {
		(&followRun{f: f, resource: r, held: map[heldKey]struct{}{}, known: map[heldKey]struct{}{}, seen: map[heldKey]struct{}{}}).apply(end)
	}
	if !f.Loaded() {
		t.Fatal("not loaded with every resource's initial state applied")
	}
}
