package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/natsnames"
	"github.com/fleetview/fleetview/internal/natsserver"
	"github.com/fleetview/fleetview/internal/registry"
)

// A registry is validated again when read. Apply never stores an invalid
// one, so these are written past it, as a stolen hub credential or a bug
// would: each is ErrCorrupt (a server fault, not the client's ErrInvalid)
// from Get, Specs and List.
func TestStoredRegistryIsValidatedOnRead(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	good, err := s.Apply(ctx, seed(t))
	if err != nil {
		t.Fatal(err)
	}
	marshal := func(edit func(r *registry.ResourceRegistry)) string {
		r := seed(t)
		edit(r)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, key, value string
	}{
		{"under another name's key", "other", marshal(func(*registry.ResourceRegistry) {})},
		{"no resource selectors", good.Name, marshal(func(r *registry.ResourceRegistry) { r.Spec.ResourceSelectors = nil })},
		{"invalid cluster name in the affinity", good.Name, marshal(func(r *registry.ResourceRegistry) {
			r.Spec.TargetCluster.ClusterNames = []string{"Not_A_Cluster"}
		})},
		{"not JSON", good.Name, `{"spec":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.kv.Put(ctx, tc.key, []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = s.kv.Delete(ctx, "other")
				if _, err := s.Apply(ctx, seed(t)); err != nil {
					t.Fatal(err)
				}
			}()
			if _, err := s.Get(ctx, tc.key); !errors.Is(err, ErrCorrupt) || errors.Is(err, registry.ErrInvalid) {
				t.Fatalf("Get = %v, want ErrCorrupt and not ErrInvalid", err)
			}
			if _, err := s.Specs(ctx); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Specs = %v, want ErrCorrupt", err)
			}
			if _, err := s.List(ctx); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("List = %v, want ErrCorrupt", err)
			}
		})
	}
	if list, err := s.Specs(ctx); err != nil || len(list) != 1 || list[0].Name != good.Name {
		t.Fatalf("Specs after repair = %v, %v", list, err)
	}
}

// A cluster's conditions are validated when read; a bad one is left out,
// and the registry and the other clusters' conditions are read as usual.
func TestBadClusterStatusIsLeftOut(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	r, err := s.Apply(ctx, seed(t))
	if err != nil {
		t.Fatal(err)
	}
	ok := []metav1.Condition{{Type: registry.ClusterMatched, Status: metav1.ConditionTrue, Reason: registry.ReasonClusterMatched, Message: "ok"}}
	if err := s.SetClusterStatus(ctx, r, "member1", ok); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, cluster, value string
	}{
		{"condition named as another cluster's", "member2", `{"conditions":[{"type":"member1/ClusterMatched","status":"False","reason":"Forged","message":"x","lastTransitionTime":"` + now + `"}]}`},
		{"invalid status value", "member3", `{"conditions":[{"type":"ClusterMatched","status":"Maybe","reason":"R","message":"x","lastTransitionTime":"` + now + `"}]}`},
		{"invalid reason", "member4", `{"conditions":[{"type":"ClusterMatched","status":"True","reason":"not a reason","message":"x","lastTransitionTime":"` + now + `"}]}`},
		{"invalid cluster name in the key", "Member_5", `{"conditions":[]}`},
		{"not JSON", "member6", `{"conditions":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.status.Put(ctx, natsnames.StatusKey(tc.cluster, r.Name), []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, r.Name)
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, c := range got.Status.Conditions {
				types = append(types, c.Type)
				if strings.HasPrefix(c.Type, tc.cluster+"/") || strings.HasPrefix(c.Type, "member1/member1") {
					t.Fatalf("bad status read: %+v", c)
				}
			}
			c := findCondition(got.Status.Conditions, registry.ClusterConditionType("member1", registry.ClusterMatched))
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != registry.ReasonClusterMatched {
				t.Fatalf("member1's condition: %+v in %v", c, types)
			}
		})
	}
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

// Watch reports the registries as jetstream.KeyValue's WatchAll does: the
// current ones, nil, then each change; Stop closes the updates.
func TestWatch(t *testing.T) {
	ctx := context.Background()
	s := open(t)
	if _, err := s.Apply(ctx, seed(t)); err != nil {
		t.Fatal(err)
	}
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func() jetstream.KeyValueEntry {
		t.Helper()
		select {
		case e, ok := <-w.Updates():
			if !ok {
				t.Fatal("updates closed")
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
		}
		return nil
	}
	if e := next(); e == nil || e.Key() != "clustercache-sample" || e.Operation() != jetstream.KeyValuePut || e.Bucket() != "fv_registries" {
		t.Fatalf("initial entry %v", e)
	}
	if e := next(); e != nil {
		t.Fatalf("want nil after the initial entries, got %s", e.Key())
	}
	again := seed(t)
	again.Spec.IncludeSecretData = true
	if _, err := s.Apply(ctx, again); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Operation() != jetstream.KeyValuePut || e.Revision() < 2 {
		t.Fatalf("update entry %v", e)
	}
	if err := s.Delete(ctx, "clustercache-sample"); err != nil {
		t.Fatal(err)
	}
	if e := next(); e == nil || e.Operation() != jetstream.KeyValueDelete {
		t.Fatalf("delete entry %v", e)
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	for range w.Updates() {
	}

	// An empty bucket: nil at once.
	empty, err := open(t).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Stop()
	select {
	case e := <-empty.Updates():
		if e != nil {
			t.Fatalf("want nil first, got %s", e.Key())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no nil on an empty bucket")
	}
}

// A collector with per-cluster credentials reads, follows (Watch, and a
// Follower on the republish) and writes the registries through Bind, on the real server with the hub's guard, which
// refuses push consumers and consumers not named for the cluster.
func TestBoundStoreWithClusterCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const hubPass, aPass = "hub-password-0123456789", "edge-a-password-0123456789"
	srv, err := natsserver.Start(natsserver.Options{StoreDir: t.TempDir(), Port: -1, HubPassword: hubPass,
		Clusters: []natsserver.ClusterUser{{Cluster: "edge-a", Password: aPass}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	hub, err := nats.Connect(srv.ClientURL(), nats.UserInfo(natsserver.HubUser, hubPass))
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	hjs, _ := jetstream.New(hub)
	hs, err := Open(ctx, hjs, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := hs.Apply(ctx, seed(t))
	if err != nil {
		t.Fatal(err)
	}
	a, err := nats.Connect(srv.ClientURL(), nats.UserInfo("edge-a", aPass), nats.CustomInboxPrefix(natsserver.InboxPrefix("edge-a")))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ajs, _ := jetstream.NewWithAPIPrefix(a, natsserver.APIPrefix)
	s, err := Bind(ctx, ajs, "edge-a")
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.Specs(ctx)
	if err != nil || len(list) != 1 || list[0].Name != r.Name {
		t.Fatalf("Specs with edge-a's credentials: %v %v", list, err)
	}
	w, err := s.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch with edge-a's credentials: %v", err)
	}
	defer w.Stop()
	for _, want := range []string{r.Name, ""} {
		select {
		case e := <-w.Updates():
			if (e == nil) != (want == "") || (e != nil && e.Key() != want) {
				t.Fatalf("watch: %v, want %q", e, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
		}
	}
	// Following: a snapshot through its consumer, then the hub's change
	// through the republish its account imports.
	f, snapshots := follower(t, s, FollowConfig{})
	reason(t, snapshots, SnapshotStart)
	until(t, f, r.Name+":member1,member2,member3")
	changed := seed(t)
	changed.Spec.TargetCluster.ClusterNames = []string{"edge-a"}
	if _, err := hs.Apply(ctx, changed); err != nil {
		t.Fatal(err)
	}
	until(t, f, r.Name+":edge-a")
	noSnapshot(t, snapshots)
	conds := []metav1.Condition{{Type: registry.ClusterMatched, Status: metav1.ConditionTrue, Reason: registry.ReasonClusterMatched, Message: "edge-a"}}
	if err := s.SetClusterStatus(ctx, r, "edge-a", conds); err != nil {
		t.Fatalf("edge-a's own status: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if err := s.SetClusterStatus(short, r, "edge-b", conds); err == nil {
		t.Fatal("edge-a wrote edge-b's status")
	}
	got, err := hs.Get(ctx, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if findCondition(got.Status.Conditions, registry.ClusterConditionType("edge-a", registry.ClusterMatched)) == nil {
		t.Fatalf("edge-a's condition not merged: %+v", got.Status.Conditions)
	}
	// Specs deleted its consumer; the watch's is the only one of edge-a's.
	info, err := hjs.Stream(ctx, natsnames.KVStream(natsnames.RegistryBucket))
	if err != nil {
		t.Fatal(err)
	}
	names := info.ConsumerNames(ctx)
	n := 0
	for name := range names.Name() {
		if !strings.HasPrefix(name, "fvc_edge-a_") {
			t.Fatalf("consumer %q on the registries, not named for edge-a", name)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d consumers of edge-a on the registries, want 1 (the watch's)", n)
	}
}
