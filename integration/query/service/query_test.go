package service

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetview/fleetview/integration/fixture"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi"
)

// hubSealer is the hub's token sealer, with its sealing key read from the
// fv_query bucket (the hub's NATS may read it; clients cannot), and a
// JetStream connection to the hub closed when the test ends.
func hubSealer(t *testing.T, ctx context.Context, natsPort int) (*query.Sealer, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, "fv_query")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "token-key")
	if err != nil {
		t.Fatal(err)
	}
	return query.NewSealer(e.Value()), js
}

// tokenVersion is the version vector a resourceVersion the hub issued
// stands for (not when it was issued).
func tokenVersion(t *testing.T, ctx context.Context, natsPort int, tok string) string {
	t.Helper()
	sealer, js := hubSealer(t, ctx, natsPort)
	et, err := sealer.OpenEpoch(tok)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", tok, err)
	}
	// The epoch is a message of the versions stream (its sequence the
	// id): the vector the delta applies to, so two tokens of one version
	// compare equal whichever epoch each was sealed against.
	base := query.Version{}
	if et.Epoch != 0 {
		st, err := js.Stream(ctx, queryapi.VersionStream)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := st.GetMsg(ctx, et.Epoch)
		if err != nil {
			t.Fatalf("epoch %d of %q: %v", et.Epoch, tok, err)
		}
		if base, err = query.DecodeVector(msg.Data); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprint(query.ApplyDelta(base, et.Delta))
}

func podsReq(mod func(*fleetviewv1.ListRequest)) *fleetviewv1.ListRequest {
	r := &fleetviewv1.ListRequest{Version: "v1", Resource: "pods"}
	mod(r)
	return r
}

// TestQueryAPI runs the query API against three real member clusters: every
// List filter over gRPC and REST, readiness, bad input, snapshot paging
// under churn, watch resume without gap or duplicate, search and the
// cluster inventory.
func TestQueryAPI(t *testing.T) {
	ctx := context.Background()
	fleet := fixture.StartFleet(t, fixture.Members...)
	fixture.CreateNS(t, ctx, fleet, "qa", "qb", "churn", "w")
	must := fixture.MustOK(t)
	c1, c2, c3 := fleet.Cluster("member1").Clientset(), fleet.Cluster("member2").Clientset(), fleet.Cluster("member3").Clientset()
	must(c1.CoreV1().Pods("qa").Create(ctx, fixture.QPod("qa", "web", "web", "node-a"), metav1.CreateOptions{}))
	must(c1.CoreV1().Pods("qb").Create(ctx, fixture.QPod("qb", "db", "db", "node-b"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("qa").Create(ctx, fixture.QPod("qa", "web", "web", "node-b"), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("qa").Create(ctx, fixture.QPod("qa", "api", "api", "node-a"), metav1.CreateOptions{}))
	must(c3.CoreV1().Pods("qb").Create(ctx, fixture.QPod("qb", "cache", "cache", ""), metav1.CreateOptions{}))
	const churnPods = 40
	for i := range churnPods {
		must(c1.CoreV1().Pods("churn").Create(ctx, fixture.QPod("churn", fmt.Sprintf("c-%03d", i), "churn", ""), metav1.CreateOptions{}))
	}

	fv := fixture.StartUp(t, fixture.UpOptions(t, fleet, t.TempDir()))
	defer fv.Stop(t)

	t.Run("readiness flips only after sync", func(t *testing.T) {
		// The hub is ready once its materializer caught up with the
		// streams as they were at its start (StartUp waits for the API
		// only); from then on a cluster's sync is the cluster's, never
		// the hub's readiness.
		fv.AwaitOK(t, "/readyz", time.Minute)
		// Pods of every member, in the default (Badger) backend.
		reg, err := structpb.NewStruct(map[string]any{
			"apiVersion": "search.karmada.io/v1alpha1", "kind": "ResourceRegistry", "metadata": map[string]any{"name": "query-test"},
			"spec": map[string]any{"targetCluster": map[string]any{"clusterNames": []any{"member1", "member2", "member3"}},
				"resourceSelectors": []any{map[string]any{"apiVersion": "v1", "kind": "Pod"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fv.Registries.ApplyRegistry(ctx, &fleetviewv1.ApplyRegistryRequest{Registry: reg}); err != nil {
			t.Fatal(err)
		}
		// The registry selects resources no collector has reported yet:
		// the clusters are not synced, the hub itself serves.
		code, body := fv.RESTStatus(t, "/readyz/clusters")
		if code != http.StatusServiceUnavailable || body["synced"] != false {
			t.Fatalf("readyz/clusters right after the registry: %d %v, want 503 and synced false", code, body)
		}
		if code, body := fv.RESTStatus(t, "/readyz"); code != http.StatusOK {
			t.Fatalf("readyz while clusters sync: %d %v, want 200", code, body)
		}
		fixture.Eventually(t, 120*time.Second, func() error {
			if code, body := fv.RESTStatus(t, "/readyz/clusters"); code != http.StatusOK {
				return fmt.Errorf("readyz/clusters %d %v", code, body["clusters"])
			}
			return nil
		})
		// gRPC health follows readiness.
		hc := healthpb.NewHealthClient(fv.Conn)
		fixture.Eventually(t, 30*time.Second, func() error {
			for _, svc := range []string{"", "fleetview.v1.QueryService"} {
				r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
				if err != nil {
					return err
				}
				if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
					return fmt.Errorf("health of %q: %v", svc, r.GetStatus())
				}
			}
			return nil
		})
		// Ready means complete: every pod is there at once.
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "churn"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != churnPods {
			t.Fatalf("ready, but %d of %d churn pods listed", len(got), churnPods)
		}
	})

	t.Run("filters over gRPC and REST", func(t *testing.T) {
		all := []fixture.Ref{{Cluster: "member1", Namespace: "qa", Name: "web"}, {Cluster: "member1", Namespace: "qb", Name: "db"}, {Cluster: "member2", Namespace: "qa", Name: "web"}, {Cluster: "member2", Namespace: "qa", Name: "api"}, {Cluster: "member3", Namespace: "qb", Name: "cache"}}
		pick := func(keep func(fixture.Ref) bool) []string {
			var out []fixture.Ref
			for _, r := range all {
				if keep(r) {
					out = append(out, r)
				}
			}
			return fixture.Refs(out...)
		}
		inQ := func(r fixture.Ref) bool { return r.Namespace == "qa" || r.Namespace == "qb" }
		cases := []struct {
			name  string
			mod   func(*fleetviewv1.ListRequest)
			query string
			want  []string
		}{
			{"namespace", func(r *fleetviewv1.ListRequest) { r.Namespace = "qa" }, "namespace=qa",
				pick(func(r fixture.Ref) bool { return r.Namespace == "qa" })},
			{"label equality", func(r *fleetviewv1.ListRequest) { r.LabelSelector = "app=web" }, "labelSelector=app%3Dweb",
				pick(func(r fixture.Ref) bool { return r.Name == "web" })},
			{"label set", func(r *fleetviewv1.ListRequest) { r.LabelSelector = "app in (db,cache)" }, "labelSelector=" + url.QueryEscape("app in (db,cache)"),
				pick(func(r fixture.Ref) bool { return r.Name == "db" || r.Name == "cache" })},
			{"field metadata.name", func(r *fleetviewv1.ListRequest) { r.FieldSelector = "metadata.name=api" }, "fieldSelector=metadata.name%3Dapi",
				pick(func(r fixture.Ref) bool { return r.Name == "api" })},
			{"field metadata.namespace", func(r *fleetviewv1.ListRequest) { r.FieldSelector = "metadata.namespace=qb" }, "fieldSelector=metadata.namespace%3Dqb",
				pick(func(r fixture.Ref) bool { return r.Namespace == "qb" })},
			{"field spec.nodeName", func(r *fleetviewv1.ListRequest) { r.FieldSelector = "spec.nodeName=node-a" }, "fieldSelector=spec.nodeName%3Dnode-a",
				pick(func(r fixture.Ref) bool {
					return r == fixture.Ref{Cluster: "member1", Namespace: "qa", Name: "web"} || r.Name == "api"
				})},
			{"field status.phase and namespace", func(r *fleetviewv1.ListRequest) {
				r.FieldSelector = "status.phase=Pending,metadata.namespace!=churn,metadata.namespace!=w"
			}, "fieldSelector=" + url.QueryEscape("status.phase=Pending,metadata.namespace!=churn,metadata.namespace!=w"), pick(inQ)},
			{"clusters", func(r *fleetviewv1.ListRequest) {
				r.Clusters = []string{"member2", "member3"}
				r.LabelSelector = "app!=churn"
			},
				"clusters=member2&clusters=member3&labelSelector=app%21%3Dchurn", pick(func(r fixture.Ref) bool { return r.Cluster != "member1" })},
			{"cluster selector matching all", func(r *fleetviewv1.ListRequest) { r.ClusterSelector = "!env"; r.LabelSelector = "app!=churn" },
				"clusterSelector=%21env&labelSelector=app%21%3Dchurn", fixture.Refs(all...)},
			{"cluster selector matching none", func(r *fleetviewv1.ListRequest) { r.ClusterSelector = "env=prod" }, "clusterSelector=env%3Dprod", fixture.Refs()},
			{"everything combined", func(r *fleetviewv1.ListRequest) {
				r.Namespace, r.LabelSelector, r.FieldSelector, r.Clusters = "qa", "app", "spec.nodeName!=node-b", []string{"member1", "member2"}
			}, "namespace=qa&labelSelector=app&fieldSelector=" + url.QueryEscape("spec.nodeName!=node-b") + "&clusters=member1&clusters=member2",
				pick(func(r fixture.Ref) bool {
					return r == fixture.Ref{Cluster: "member1", Namespace: "qa", Name: "web"} || r.Name == "api"
				})},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got, err := fixture.GRPCList(ctx, fv, podsReq(tc.mod))
				if err != nil {
					t.Fatalf("grpc: %v", err)
				}
				if err := fixture.SameSet(got, tc.want); err != nil {
					t.Fatalf("grpc: %v", err)
				}
				got, err = fixture.RESTList(fv, "/v1/resources/core/v1/pods?"+tc.query)
				if err != nil {
					t.Fatalf("rest: %v", err)
				}
				if err := fixture.SameSet(got, tc.want); err != nil {
					t.Fatalf("rest: %v", err)
				}
			})
		}
	})

	t.Run("bad input is 400 with the reason", func(t *testing.T) {
		first, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 2})
		if err != nil || first.GetContinue() == "" {
			t.Fatalf("first page: %v", err)
		}
		tampered := func(tok string) string {
			b := []byte(tok)
			i := len("fv1.") + 3
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
			return string(b)
		}
		cases := []struct {
			name, path, want string
			req              *fleetviewv1.ListRequest
		}{
			{"label selector", "/v1/resources/core/v1/pods?labelSelector=" + url.QueryEscape("app in ("), "labelSelector",
				&fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "app in ("}},
			{"field path", "/v1/resources/core/v1/pods?fieldSelector=spec..bogus%3D1", `field "spec..bogus"`,
				&fleetviewv1.ListRequest{Version: "v1", Resource: "pods", FieldSelector: "spec..bogus=1"}},
			{"field operator", "/v1/resources/apps/v1/deployments?fieldSelector=" + url.QueryEscape("spec.replicas>1"), `"spec.replicas>1": operator > is not supported`,
				&fleetviewv1.ListRequest{Group: "apps", Version: "v1", Resource: "deployments", FieldSelector: "spec.replicas>1"}},
			{"tampered continue", "/v1/resources/core/v1/pods?limit=2&continue=" + url.QueryEscape(tampered(first.GetContinue())), "signature mismatch",
				&fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 2, Continue: tampered(first.GetContinue())}},
			{"continue with other filters", "/v1/resources/core/v1/pods?namespace=qa&continue=" + url.QueryEscape(first.GetContinue()), "other filters",
				&fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "qa", Continue: first.GetContinue()}},
			{"tampered resourceVersion", "/v1/resources/core/v1/pods?resourceVersion=" + url.QueryEscape(tampered(first.GetResourceVersion())), "signature mismatch",
				&fleetviewv1.ListRequest{Version: "v1", Resource: "pods", ResourceVersion: tampered(first.GetResourceVersion())}},
			{"continue as resourceVersion", "/v1/resources/core/v1/pods?resourceVersion=" + url.QueryEscape(first.GetContinue()), "signature mismatch",
				&fleetviewv1.ListRequest{Version: "v1", Resource: "pods", ResourceVersion: first.GetContinue()}},
			{"garbage resourceVersion", "/v1/resources/core/v1/pods?resourceVersion=12345", "not a valid fleetview token",
				&fleetviewv1.ListRequest{Version: "v1", Resource: "pods", ResourceVersion: "12345"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := fv.Query.List(ctx, tc.req)
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("grpc: %v, want InvalidArgument containing %q", err, tc.want)
				}
				code, body := fv.RESTStatus(t, tc.path)
				if code != http.StatusBadRequest || body["kind"] != "Status" || body["reason"] != "BadRequest" || body["code"] != float64(400) ||
					!strings.Contains(fmt.Sprint(body["message"]), tc.want) {
					t.Fatalf("rest: %d %v, want a 400 BadRequest Status containing %q", code, body, tc.want)
				}
			})
		}
		// The same checks guard Watch.
		code, body := fv.RESTStatus(t, "/v1/watch/core/v1/pods?resourceVersion="+url.QueryEscape(tampered(first.GetResourceVersion())))
		if code != http.StatusBadRequest || body["reason"] != "BadRequest" {
			t.Fatalf("watch with a tampered resourceVersion: %d %v", code, body)
		}
		code, body = fv.RESTStatus(t, "/v1/watch/core/v1/pods?fieldSelector=spec..bogus%3D1")
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), "spec..bogus") {
			t.Fatalf("watch with a malformed field path: %d %v", code, body)
		}
	})

	t.Run("paging under churn is one snapshot", func(t *testing.T) {
		// Churn in member1 runs in a known order: op i deletes c-i and
		// creates n-i. Any consistent snapshot is the state after some
		// prefix of those operations.
		defer orderedChurn(t, ctx, c1, churnPods)()
		pc := &pagedChurn{fv: fv, churnPods: churnPods}
		if !t.Run("every page carries the first page's version", pc.pagesMidChurn) {
			t.FailNow()
		}
		t.Run("the pages are one snapshot of the churn", pc.oneSnapshot)
	})

	t.Run("watch resumes without gap or duplicate", func(t *testing.T) {
		wr := &watchResume{fv: fv, c1: c1, c2: c2, c3: c3}
		if !t.Run("a watch from a list's version follows the live feed", wr.followsLiveFeed) {
			t.FailNow()
		}
		if !t.Run("live events come once each", wr.liveEventsOnce) {
			t.FailNow()
		}
		if !t.Run("changes while no watch is open reach the cache", wr.changesWhileClosed) {
			t.FailNow()
		}
		t.Run("a REST watch resumed from the last event gets exactly what it missed", wr.resumedOverREST)
	})

	t.Run("label-selected watch reports objects leaving and entering", func(t *testing.T) {
		must(c2.CoreV1().Pods("w").Create(ctx, fixture.QPod("w", "sel", "sel", ""), metav1.CreateOptions{}))
		fixture.Eventually(t, 60*time.Second, func() error {
			got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", LabelSelector: "app=sel"})
			if err != nil || len(got) != 1 {
				return fmt.Errorf("%v %v", got, err)
			}
			return nil
		})
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ws, err := fv.Query.Watch(wctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", LabelSelector: "app=sel", SendInitialEvents: true, AllowBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		next := func() *fleetviewv1.WatchEvent {
			ev, err := ws.Recv()
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}
		if ev := next(); ev.GetType() != "ADDED" || ev.GetCluster() != "member2" {
			t.Fatalf("initial event %v", ev)
		}
		if ev := next(); ev.GetType() != "BOOKMARK" || !ev.GetInitialEventsEnd() {
			t.Fatalf("want the initial-events-end bookmark, got %v", ev)
		}
		relabel := func(app string) {
			p, err := c2.CoreV1().Pods("w").Get(ctx, "sel", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Labels["app"] = app
			must(c2.CoreV1().Pods("w").Update(ctx, p, metav1.UpdateOptions{}))
		}
		relabel("other")
		for ev := next(); ; ev = next() {
			if ev.GetType() == "BOOKMARK" {
				continue
			}
			if ev.GetType() != "DELETED" {
				t.Fatalf("object leaving the selection: %v, want DELETED", ev.GetType())
			}
			break
		}
		relabel("sel")
		for ev := next(); ; ev = next() {
			if ev.GetType() == "BOOKMARK" {
				continue
			}
			if ev.GetType() != "ADDED" {
				t.Fatalf("object entering the selection: %v, want ADDED", ev.GetType())
			}
			break
		}
	})

	t.Run("versions the streams cannot serve are 410 Expired", func(t *testing.T) {
		// Forge validly sealed tokens with the installation's key (a test
		// may read it; clients cannot) to reach the expiry checks.
		sealer, _ := hubSealer(t, ctx, fv.Opts.NATSPort)
		// Versions of one cluster need no stored epoch (SealDelta).
		seal := func(v query.Version, at time.Time) string { s, _ := sealer.SealDelta(v, at); return s }
		cases := []struct{ name, rv, want string }{
			{"older than the tombstone TTL", seal(query.Version{"member1": 1}, time.Now().Add(-48*time.Hour)), "deletes older than"},
			{"beyond the stream (reset)", seal(query.Version{"member1": 1 << 40}, time.Now()), "was reset"},
			{"cluster no longer cached", seal(query.Version{"gone": 3}, time.Now()), "cluster gone is no longer cached"},
			{"issued by an earlier fleetview (the whole vector)", sealer.SealVersion(query.Version{"member1": 1}, time.Now()), "issued before resourceVersions were epoch references"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ws, err := fv.Query.Watch(ctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", ResourceVersion: tc.rv})
				if err == nil {
					_, err = ws.Recv()
				}
				if status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("grpc: %v, want OutOfRange with %q", err, tc.want)
				}
				code, body := fv.RESTStatus(t, "/v1/watch/core/v1/pods?resourceVersion="+url.QueryEscape(tc.rv))
				if code != http.StatusGone || body["reason"] != "Expired" || !strings.Contains(fmt.Sprint(body["message"]), tc.want) {
					t.Fatalf("rest: %d %v, want 410 Expired", code, body)
				}
			})
		}
		// A continue token whose snapshot is gone (the server restarted or
		// the snapshot aged out) is 410 too: forge one for a snapshot id
		// that never existed.
		first, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		var tok struct {
			C string `json:"c"`
			Q string `json:"q"`
		}
		if err := sealer.Open(query.KindContinue, "continue", first.GetContinue(), &tok); err != nil {
			t.Fatal(err)
		}
		// The backend set's cursor names the backend that answers
		// ("one:badger:") before Badger's own JSON cursor.
		backend, raw, ok := strings.Cut(tok.C, "{")
		if !ok || !strings.HasPrefix(backend, "one:") {
			t.Fatalf("continue cursor %q: want one backend's", tok.C)
		}
		var cur map[string]any
		if err := json.Unmarshal([]byte("{"+raw), &cur); err != nil {
			t.Fatal(err)
		}
		cur["s"] = "no-such-snapshot"
		b, _ := json.Marshal(cur)
		tok.C = backend + string(b)
		gone := sealer.Seal(query.KindContinue, tok)
		_, err = fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Limit: 1, Continue: gone})
		if status.Code(err) != codes.OutOfRange {
			t.Fatalf("continue of a vanished snapshot: %v, want OutOfRange", err)
		}
		if code, body := fv.RESTStatus(t, "/v1/resources/core/v1/pods?limit=1&continue="+url.QueryEscape(gone)); code != http.StatusGone || body["reason"] != "Expired" {
			t.Fatalf("REST continue of a vanished snapshot: %d %v", code, body)
		}
	})

	t.Run("watchers converge when the topology changes", func(t *testing.T) {
		// A cluster that appears after the watch's version: its objects
		// arrive as ADDED; its resource removed: the watch ends with 410
		// instead of going silently stale. The new cluster's stream is fed
		// directly (as its collector would).
		list, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "topo"})
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ws, err := fv.Query.Watch(wctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: "topo", ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", fv.Opts.NATSPort))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		const late = "member9"
		if _, err := js.CreateStream(ctx, stream.StreamConfig(late, 1, 0)); err != nil {
			t.Fatal(err)
		}
		pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		publish := func(ev *fleetviewv1.ResourceEvent, subject string) {
			t.Helper()
			b, err := stream.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.Publish(ctx, subject, b); err != nil {
				t.Fatal(err)
			}
		}
		obj := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x","namespace":"topo","uid":"u-x","labels":{"app":"x"},` +
			`"annotations":{"fleetview.io/cluster":"member9","resource.karmada.io/cached-from-cluster":"member9"}}}`
		publish(&fleetviewv1.ResourceEvent{Cluster: late, Gvr: stream.ProtoGVR(pods), Kind: "Pod", Uid: "u-x", Namespace: "topo", Name: "x",
			ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(obj), Namespaced: true}, stream.ObjectSubject(late, pods, "u-x"))
		ev, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetType() != "ADDED" || ev.GetCluster() != late {
			t.Fatalf("object of a new cluster: %s from %s, want ADDED from %s", ev.GetType(), ev.GetCluster(), late)
		}
		publish(&fleetviewv1.ResourceEvent{Cluster: late, Gvr: stream.ProtoGVR(pods), Kind: "Pod", Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED},
			stream.ControlSubject(late, pods))
		_, err = ws.Recv()
		if status.Code(err) != codes.OutOfRange || !strings.Contains(err.Error(), "no longer cached from cluster member9") {
			t.Fatalf("resource removed from a cluster: %v, want OutOfRange naming it", err)
		}
		fixture.Eventually(t, 30*time.Second, func() error {
			got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "topo"})
			if err != nil || len(got) != 0 {
				return fmt.Errorf("removed objects still listed: %v %v", got, err)
			}
			return nil
		})
	})

	t.Run("search", func(t *testing.T) {
		resp, err := fv.Query.Search(ctx, &fleetviewv1.SearchRequest{Text: "OWNER-WEB", Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			for _, h := range resp.GetItems() {
				r, err := fixture.ObjectRef(fixture.RawMap(h.GetRawObject()))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, h.GetGvr().GetResource()+"@"+r.String())
			}
			if resp.GetContinue() == "" {
				break
			}
			if resp, err = fv.Query.Search(ctx, &fleetviewv1.SearchRequest{Text: "OWNER-WEB", Limit: 1, Continue: resp.GetContinue()}); err != nil {
				t.Fatal(err)
			}
		}
		if err := fixture.SameSet(got, []string{"pods@member1:qa/web", "pods@member2:qa/web"}); err != nil {
			t.Fatal(err)
		}
		var body struct {
			Items []struct {
				Gvr     map[string]string `json:"gvr"`
				Cluster string            `json:"cluster"`
				Object  map[string]any    `json:"object"`
			} `json:"items"`
		}
		if _, err := fv.RESTGet("/v1/search?text=cache&resources=core/v1/pods&clusters=member3", &body); err != nil || len(body.Items) != 1 {
			t.Fatalf("REST search: %+v %v", body, err)
		}
		// The object is JSON written from the stored bytes, with its
		// cache-source annotations.
		if h := body.Items[0]; h.Cluster != "member3" || h.Gvr["resource"] != "pods" || h.Gvr["version"] != "v1" {
			t.Fatalf("REST search hit %+v", h)
		} else if r, err := fixture.ObjectRef(h.Object); err != nil || r.Cluster != "member3" {
			t.Fatalf("REST search object: %v %v", r, err)
		}
	})

	t.Run("cluster inventory", func(t *testing.T) {
		fixture.Eventually(t, 60*time.Second, func() error {
			resp, err := fv.Clusters.ListClusters(ctx, &fleetviewv1.ListClustersRequest{})
			if err != nil {
				return err
			}
			for _, c := range resp.GetClusters() {
				if c.GetLag() != 0 || !c.GetCacheSynced() || c.GetObjectCount() == 0 {
					return fmt.Errorf("%s: lag %d synced %v objects %d", c.GetName(), c.GetLag(), c.GetCacheSynced(), c.GetObjectCount())
				}
			}
			return nil
		})
	})
}

// orderedChurn churns member1's namespace churn in a known order until the
// func it returns is called: op i deletes c-i and creates n-i.
func orderedChurn(t *testing.T, ctx context.Context, c1 kubernetes.Interface, churnPods int) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < churnPods; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := c1.CoreV1().Pods("churn").Delete(ctx, fmt.Sprintf("c-%03d", i), metav1.DeleteOptions{}); err != nil {
				t.Errorf("churn delete: %v", err)
				return
			}
			if _, err := c1.CoreV1().Pods("churn").Create(ctx, fixture.QPod("churn", fmt.Sprintf("n-%03d", i), "churn", ""), metav1.CreateOptions{}); err != nil {
				t.Errorf("churn create: %v", err)
				return
			}
		}
	}()
	return func() { close(stop); wg.Wait() }
}

// pagedChurn is what the phases of TestQueryAPI's "paging under churn is
// one snapshot" hand on: the list paged while orderedChurn runs, and how
// many pages saw the cache change before them.
type pagedChurn struct {
	fv        *fixture.Fleetview
	churnPods int
	got       []string
	changed   int
}

// state is the churn namespace after ops operations (halfway: and the
// delete of the next one).
func (pc *pagedChurn) state(ops int, halfway bool) []string {
	churnPods := pc.churnPods
	var out []string
	for i := 0; i < churnPods; i++ {
		deleted := i < ops || (halfway && i == ops)
		if !deleted {
			out = append(out, "member1:churn/"+fmt.Sprintf("c-%03d", i))
		}
		if i < ops {
			out = append(out, "member1:churn/"+fmt.Sprintf("n-%03d", i))
		}
	}
	sort.Strings(out)
	return out
}

// live is the churn namespace's size and version in the cache now.
func (pc *pagedChurn) live(t *testing.T, ctx context.Context) string {
	fv := pc.fv
	resp, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "churn"})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(len(resp.GetRawItems()), resp.GetResourceVersion())
}

// pagesMidChurn pages through the churn namespace, 7 a page, letting the
// cache move on before each next page: every page carries the first page's
// version.
func (pc *pagedChurn) pagesMidChurn(t *testing.T) {
	ctx := context.Background()
	fv := pc.fv
	// Start paging mid-churn.
	fixture.Eventually(t, 60*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "churn", FieldSelector: "metadata.name=n-000"})
		if err != nil || len(got) != 1 {
			return fmt.Errorf("churn not visible yet: %v %v", got, err)
		}
		return nil
	})
	var got []string
	cont, rv := "", ""
	changed := 0
	for page := 0; ; page++ {
		before := pc.live(t, ctx)
		resp, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "churn", Limit: 7, Continue: cont})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		// Every page carries the version of the first one.
		if rv == "" {
			rv = tokenVersion(t, ctx, fv.Opts.NATSPort, resp.GetResourceVersion())
		} else if got := tokenVersion(t, ctx, fv.Opts.NATSPort, resp.GetResourceVersion()); got != rv {
			t.Fatalf("page %d reflects %s, the first page %s", page, got, rv)
		}
		for _, it := range resp.GetRawItems() {
			r, err := fixture.ObjectRef(fixture.RawMap(it))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r.String())
		}
		if cont = resp.GetContinue(); cont == "" {
			break
		}
		if page == 0 && resp.RemainingItemCount == nil {
			t.Errorf("first page without remainingItemCount")
		}
		// Let the cache move on before the next page.
		deadline := time.Now().Add(10 * time.Second)
		for pc.live(t, ctx) == before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if pc.live(t, ctx) != before {
			changed++
		}
	}
	pc.got, pc.changed = got, changed
}

// oneSnapshot checks the paged list: the cache changed while it was paged,
// and it is sorted, without duplicates, and the state after some prefix of
// the churn.
func (pc *pagedChurn) oneSnapshot(t *testing.T) {
	got, changed, churnPods := pc.got, pc.changed, pc.churnPods
	if changed == 0 {
		t.Fatal("the cache never changed while paging: the test proves nothing")
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Fatalf("pages out of order or with duplicates: %v", got)
	}
	for ops := 0; ops <= churnPods; ops++ {
		for _, half := range []bool{false, true} {
			if slices.Equal(got, pc.state(ops, half)) {
				t.Logf("paged list equals the state after %d churn operations (half=%v), %d pages saw the cache change", ops, half, changed)
				return
			}
		}
	}
	t.Fatalf("paged list is no consistent snapshot: %v", got)
}

// watchResume is what the phases of TestQueryAPI's "watch resumes without
// gap or duplicate" hand on: a gRPC watch on namespace w (ws, and cancel to
// drop it) and the version of the last event it delivered.
type watchResume struct {
	fv         *fixture.Fleetview
	c1, c2, c3 kubernetes.Interface
	ws         grpc.ServerStreamingClient[fleetviewv1.WatchEvent]
	cancel     context.CancelFunc
	last       string
}

// followsLiveFeed lists namespace w, watches from the list's version and
// changes a sentinel Pod that was in the list: its change arrives.
func (wr *watchResume) followsLiveFeed(t *testing.T) {
	ctx := context.Background()
	must := fixture.MustOK(t)
	fv, c1 := wr.fv, wr.c1
	// A sentinel in the listed state: its change, once received, shows
	// the server follows the live feed. Watch returns before the server
	// has subscribed, and a change applied before that reaches the
	// watch replayed from the stream, where ADDED and MODIFIED cannot
	// be told apart.
	must(c1.CoreV1().Pods("w").Create(ctx, fixture.QPod("w", "sentinel", "w", ""), metav1.CreateOptions{}))
	fixture.Eventually(t, 60*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "w"})
		if err != nil {
			return err
		}
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "w", Name: "sentinel"}))
	})
	list, err := fv.Query.List(ctx, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "w"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ws, err := fv.Query.Watch(wctx, &fleetviewv1.WatchRequest{Version: "v1", Resource: "pods", Namespace: "w", ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	sentinel, err := c1.CoreV1().Pods("w").Get(ctx, "sentinel", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sentinel.Labels["seen"] = "yes"
	must(c1.CoreV1().Pods("w").Update(ctx, sentinel, metav1.UpdateOptions{}))
	for {
		ev, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r, err := fixture.ObjectRef(fixture.RawMap(ev.GetRawObject())); err == nil && r.String() == "member1:w/sentinel" {
			break
		}
	}
	wr.ws, wr.cancel = ws, cancel
}

// liveEventsOnce deletes the sentinel and creates p1 in member1 and p2 in
// member2: each comes once, as ADDED.
func (wr *watchResume) liveEventsOnce(t *testing.T) {
	ctx := context.Background()
	must := fixture.MustOK(t)
	c1, c2, ws := wr.c1, wr.c2, wr.ws
	// Gone before p1 in member1's ordered stream: its events come
	// before p1's ADDED, and are passed over below.
	if err := c1.CoreV1().Pods("w").Delete(ctx, "sentinel", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	must(c1.CoreV1().Pods("w").Create(ctx, fixture.QPod("w", "p1", "w", ""), metav1.CreateOptions{}))
	must(c2.CoreV1().Pods("w").Create(ctx, fixture.QPod("w", "p2", "w", ""), metav1.CreateOptions{}))
	var last string
	seen := map[string]string{}
	for len(seen) < 2 {
		ev, err := ws.Recv()
		if err != nil {
			t.Fatal(err)
		}
		r, err := fixture.ObjectRef(fixture.RawMap(ev.GetRawObject()))
		if err != nil {
			t.Fatal(err)
		}
		if r.String() == "member1:w/sentinel" {
			continue // its deletion (a pod's may come as MODIFIED, then DELETED)
		}
		if _, dup := seen[r.String()]; dup {
			t.Fatalf("duplicate event for %s", r)
		}
		seen[r.String()] = ev.GetType()
		last = ev.GetResourceVersion()
	}
	if seen["member1:w/p1"] != "ADDED" || seen["member2:w/p2"] != "ADDED" {
		t.Fatalf("live events: %v, want two ADDED", seen)
	}
	wr.last = last
}

// changesWhileClosed drops the watch, then updates p1, deletes p2 and
// creates p3 in member3: the cache has them.
func (wr *watchResume) changesWhileClosed(t *testing.T) {
	ctx := context.Background()
	must := fixture.MustOK(t)
	fv, c1, c2, c3 := wr.fv, wr.c1, wr.c2, wr.c3
	wr.cancel() // the connection drops
	// Mutations while no watch is open.
	p1, err := c1.CoreV1().Pods("w").Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p1.Labels["v"] = "2"
	must(c1.CoreV1().Pods("w").Update(ctx, p1, metav1.UpdateOptions{}))
	if err := c2.CoreV1().Pods("w").Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	must(c3.CoreV1().Pods("w").Create(ctx, fixture.QPod("w", "p3", "w", ""), metav1.CreateOptions{}))
	fixture.Eventually(t, 60*time.Second, func() error {
		got, err := fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "w", LabelSelector: "v=2"})
		if err != nil || len(got) != 1 {
			return fmt.Errorf("update not cached yet: %v %v", got, err)
		}
		got, err = fixture.GRPCList(ctx, fv, &fleetviewv1.ListRequest{Version: "v1", Resource: "pods", Namespace: "w"})
		return fixture.SameSet(got, fixture.Refs(fixture.Ref{Cluster: "member1", Namespace: "w", Name: "p1"}, fixture.Ref{Cluster: "member3", Namespace: "w", Name: "p3"}))
	})
}

// resumedOverREST resumes over REST from the last event's version: exactly
// one event for each change missed, and the live one after.
func (wr *watchResume) resumedOverREST(t *testing.T) {
	ctx := context.Background()
	must := fixture.MustOK(t)
	fv, c1, last := wr.fv, wr.c1, wr.last
	// Resume over REST from the last event's version.
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, fv.REST+"/v1/watch/core/v1/pods?namespace=w&resourceVersion="+url.QueryEscape(last), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("REST watch: %d %s", resp.StatusCode, b)
	}
	events := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
		close(events)
	}()
	// A live change after the resume, to know everything before it
	// has been delivered (member1's stream is ordered).
	must(c1.CoreV1().Pods("w").Create(ctx, fixture.QPod("w", "p4", "w", ""), metav1.CreateOptions{}))
	got := map[string][]string{}
	timeout := time.After(60 * time.Second)
	for len(got["member1:w/p4"]) == 0 || len(got["member3:w/p3"]) == 0 || len(got["member2:w/p2"]) == 0 {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("REST watch ended early; got %v", got)
			}
			obj, _ := ev["object"].(map[string]any)
			r, err := fixture.ObjectRef(obj)
			if err != nil {
				t.Fatalf("event %v: %v", ev, err)
			}
			typ, _ := ev["type"].(string)
			got[r.String()] = append(got[r.String()], typ)
		case <-timeout:
			t.Fatalf("resumed watch incomplete: %v", got)
		}
	}
	want := map[string][]string{
		"member1:w/p1": {"MODIFIED"}, "member2:w/p2": {"DELETED"}, "member3:w/p3": {"ADDED"}, "member1:w/p4": {"ADDED"},
	}
	if got["member3:w/p3"][0] == "MODIFIED" {
		// Replayed from the stream, a creation is not told apart from
		// an update (documented); what matters is one event.
		want["member3:w/p3"] = []string{"MODIFIED"}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("resumed watch: got %v, want %v (no gap, no duplicate)", got, want)
	}
}
