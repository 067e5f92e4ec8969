package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/integration/fixture"
	itos "github.com/fleetview/fleetview/integration/opensearch"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/store/badger"
	"github.com/fleetview/fleetview/store/opensearch"
)

// workload is the event history both backends materialize: pods in two
// clusters (the same names in both, so unqualified gets conflict), updates
// that change labels, deletes, a resource removed from one cluster, and
// three poison messages in the middle.
func workload(n int) (first, second []*fleetviewv1.ResourceEvent) {
	var evs []*fleetviewv1.ResourceEvent
	for i := range n {
		evs = append(evs, benchdata.Event("c1", i, 1))
		if i < n/2 {
			evs = append(evs, benchdata.Event("c2", i, 1))
		}
	}
	for i := range 40 {
		evs = append(evs, fixture.ConfigMap("c1", i), fixture.ConfigMap("c2", i))
	}
	first = evs
	evs = nil
	for i := 0; i < n; i += 3 {
		ev := benchdata.Event("c1", i, 2)
		ev.Object = bytes.Replace(ev.Object, []byte(`"tier":"frontend"`), []byte(`"tier":"moved"`), 1)
		evs = append(evs, ev)
	}
	for i := 0; i < n; i += 7 {
		evs = append(evs, benchdata.Delete("c1", i, 3))
	}
	for i := 1; i < n/2; i += 11 {
		evs = append(evs, benchdata.Delete("c2", i, 3))
	}
	evs = append(evs, &fleetviewv1.ResourceEvent{Cluster: "c2", Gvr: stream.ProtoGVR(fixture.CMGVR), Kind: "ConfigMap",
		Type: fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED, Namespaced: true})
	// Recreated under a new uid with the same name, tombstone of the old
	// uid after it.
	re := benchdata.Event("c1", 2, 9)
	re.Uid = "recreated-2"
	re.Object = bytes.Replace(re.Object, []byte(benchdata.UID("c1", 2)), []byte("recreated-2"), 1)
	evs = append(evs, re, benchdata.Delete("c1", 2, 10))
	for i := n; i < n+50; i++ {
		evs = append(evs, benchdata.Event("c1", i, 1))
	}
	return first, evs
}

// publishPoison puts an undecodable message, an upsert whose object is
// not JSON, one whose object is followed by another and one whose spec
// is not JSON inside matching brackets into c1's stream.
func publishPoison(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	if _, err := js.Publish(ctx, stream.ObjectSubject("c1", benchdata.PodGVR, "poison-1"), []byte("\xff\x00 not a protobuf")); err != nil {
		t.Fatal(err)
	}
	bad := benchdata.Event("c1", 999999, 1)
	bad.Uid = "poison-2"
	bad.Object = []byte(`{"metadata":{"name":"broken"`)
	data, _ := stream.Encode(bad)
	if _, err := js.Publish(ctx, stream.ObjectSubject("c1", benchdata.PodGVR, "poison-2"), data); err != nil {
		t.Fatal(err)
	}
	// An object that closes early and carries a second one, made to pass
	// for another cluster's in list responses, which concatenate objects.
	forged := benchdata.Event("c1", 999998, 1)
	forged.Uid = "poison-3"
	forged.Object = append(append([]byte(nil), forged.Object...), []byte(`,{"apiVersion":"v1","kind":"Pod","metadata":{"name":"forged","annotations":{"fleetview.io/cluster":"c2"}}}`)...)
	data, _ = stream.Encode(forged)
	if _, err := js.Publish(ctx, stream.ObjectSubject("c1", benchdata.PodGVR, "poison-3"), data); err != nil {
		t.Fatal(err)
	}
	// Brackets that match around a value that is not JSON, deep in a
	// member no reader looks into.
	deep := benchdata.Event("c1", 999997, 1)
	deep.Uid = "poison-4"
	deep.Object = bytes.Replace(deep.Object, []byte(`"spec":{`), []byte(`"spec":{"a" 1 2,`), 1)
	data, _ = stream.Encode(deep)
	if _, err := js.Publish(ctx, stream.ObjectSubject("c1", benchdata.PodGVR, "poison-4"), data); err != nil {
		t.Fatal(err)
	}
}

func onlyClusters(cs ...string) *query.Visibility {
	return &query.Visibility{Grants: []query.Grant{{Clusters: cs}}}
}

type reader interface {
	Get(ctx context.Context, o query.GetOptions) (query.Object, error)
	List(ctx context.Context, o query.ListOptions) (query.Page, error)
}

// TestMaterializerBackends materializes the same streams into Badger and
// OpenSearch (reached through a proxy that is cut during ingest), then
// checks: both equal the streams, both answer a table of Get/List queries
// identically, poison messages are dead-lettered without stopping ingest,
// and a resource removal cleared both.
func TestMaterializerBackends(t *testing.T) {
	node := itos.StartTest(t, itos.Options{JVMArgs: []string{"-XX:TieredStopAtLevel=1"}})
	_, nc, js := fixture.StartMatNATS(t, 0)
	const n = 1500
	first, second := workload(n)
	fixture.PublishEvents(t, nc, first)

	bstore, err := badger.Open(badger.Options{Dir: t.TempDir(), Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bstore.Close() })
	breader := bstore.Reader(badger.ReaderOptions{})
	t.Cleanup(func() { _ = breader.Close() })
	proxy := newTCPProxy(t, strings.TrimPrefix(node.URL(), "http://"))
	ostore, err := opensearch.Open(opensearch.Options{Addresses: []string{"http://" + proxy.Addr}, MaxBackoff: 500 * time.Millisecond, Logger: fixture.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	bm := runMaterializer(t, materializer.Config{Name: "badger", NATS: nc, Sink: bstore, DiscoverInterval: 200 * time.Millisecond, Logger: fixture.Logger(t)})
	om := runMaterializer(t, materializer.Config{Name: "opensearch", NATS: nc, Sink: ostore, BatchSize: 500, DiscoverInterval: 200 * time.Millisecond, Logger: fixture.Logger(t)})

	// OpenSearch goes away in the middle of ingest and comes back.
	fixture.Eventually(t, 2*time.Minute, func() error {
		if om.Applied()["c1"] == 0 {
			return errors.New("opensearch materializer has not applied anything yet")
		}
		return nil
	})
	proxy.Down()
	publishPoison(t, js)
	fixture.PublishEvents(t, nc, second)
	// As the collector does after RESOURCE_REMOVED: purge the subjects, so
	// a replay does not bring the objects back.
	st, err := js.Stream(context.Background(), stream.StreamName("c2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background(), jetstream.WithPurgeSubject(stream.ResourceFilter("c2", fixture.CMGVR))); err != nil {
		t.Fatal(err)
	}
	targets := fixture.LastSeqs(t, js, "c1", "c2")
	waitApplied(t, 2*time.Minute, bm.Applied, targets)
	if got := om.Applied(); got["c1"] >= targets["c1"] && got["c2"] >= targets["c2"] {
		t.Fatalf("opensearch materializer caught up (%v) while its server was unreachable", got)
	}
	if err := proxy.Up(); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, 3*time.Minute, om.Applied, targets)

	want := fixture.MatStreamState(t, js, "c1", "c2")
	for name, r := range map[string]reader{"badger": breader, "opensearch": ostore} {
		t.Run("store equals stream/"+name, func(t *testing.T) {
			var all []query.Object
			for _, gvr := range []schema.GroupVersionResource{benchdata.PodGVR, fixture.CMGVR} {
				all = append(all, fixture.ListAll(t, r, query.ListOptions{GVR: gvr})...)
			}
			fixture.CompareWithStream(t, all, want)
		})
	}

	t.Run("poison dead-lettered", func(t *testing.T) {
		for _, m := range []*materializer.Materializer{bm, om} {
			if got := m.Metrics().DeadLettered.Load(); got != 4 {
				t.Errorf("dead-letter counter = %d, want 4", got)
			}
		}
		st, err := js.Stream(context.Background(), materializer.DeadStream)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"badger", "opensearch"} {
			var reasons []string
			cons, err := st.OrderedConsumer(context.Background(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{materializer.DeadSubject(name)}})
			if err != nil {
				t.Fatal(err)
			}
			batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for msg := range batch.Messages() {
				reasons = append(reasons, msg.Headers().Get(materializer.HdrDeadSubject)+": "+msg.Headers().Get(materializer.HdrDeadReason))
			}
			if len(reasons) != 4 || !strings.Contains(reasons[0], "poison-1") || !strings.Contains(reasons[1], "poison-2") ||
				!strings.Contains(reasons[1], "poison event") || !strings.Contains(reasons[2], "poison-3") || !strings.Contains(reasons[2], "trailing data") ||
				!strings.Contains(reasons[3], "poison-4") || !strings.Contains(reasons[3], "':' expected after an object key") {
				t.Errorf("%s dead letters = %q, want poison-1 (undecodable), poison-2 (poison event: bad JSON), poison-3 (trailing data) and poison-4 (bad JSON deep in spec)", name, reasons)
			}
		}
	})

	c1only := benchdata.PodName(n - 1)
	sel := func(s string) k8slabels.Selector {
		l, err := k8slabels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	fields := func(s string) *query.FieldFilter {
		f, err := query.CompileFields(benchdata.PodGVR, s)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	gets := []struct {
		name                 string
		gvr                  schema.GroupVersionResource
		ns, podName, cluster string
		vis                  *query.Visibility
		want                 string // with vis: the answering cluster, or "not found"
	}{
		{"qualified", benchdata.PodGVR, benchdata.Namespace(4), benchdata.PodName(4), "c2", nil, ""},
		{"unqualified in two clusters", benchdata.PodGVR, benchdata.Namespace(4), benchdata.PodName(4), "", nil, ""},
		{"unqualified in one cluster", benchdata.PodGVR, benchdata.Namespace(n - 1), c1only, "", nil, ""},
		{"deleted", benchdata.PodGVR, benchdata.Namespace(7), benchdata.PodName(7), "c1", nil, ""},
		{"recreated under a new uid", benchdata.PodGVR, benchdata.Namespace(2), benchdata.PodName(2), "c1", nil, ""},
		{"removed resource", fixture.CMGVR, benchdata.Namespace(3), "cm-003", "c2", nil, ""},
		{"kept resource", fixture.CMGVR, benchdata.Namespace(3), "cm-003", "", nil, ""},
		{"wrong namespace", benchdata.PodGVR, "nope", benchdata.PodName(4), "", nil, ""},
		// The caller's scope narrows the read: one visible copy answers,
		// a hidden one reads as missing.
		{"in two clusters, one visible", benchdata.PodGVR, benchdata.Namespace(4), benchdata.PodName(4), "", onlyClusters("c2"), "c2"},
		{"in one hidden cluster", benchdata.PodGVR, benchdata.Namespace(n - 1), c1only, "", onlyClusters("c2"), "not found"},
		{"qualified, hidden cluster", benchdata.PodGVR, benchdata.Namespace(4), benchdata.PodName(4), "c1", onlyClusters("c2"), "not found"},
		{"hidden namespace", benchdata.PodGVR, benchdata.Namespace(4), benchdata.PodName(4), "", &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"elsewhere"}}}}, "not found"},
	}
	for _, g := range gets {
		t.Run("get/"+g.name, func(t *testing.T) {
			o := query.GetOptions{GVR: g.gvr, Namespace: g.ns, Name: g.podName, Cluster: g.cluster, Visible: g.vis}
			bo, berr := breader.Get(context.Background(), o)
			oo, oerr := ostore.Get(context.Background(), o)
			if fmt.Sprint(berr) != fmt.Sprint(oerr) {
				t.Fatalf("errors differ: badger %v, opensearch %v", berr, oerr)
			}
			if berr == nil && (bo.Cluster != oo.Cluster || !bytes.Equal(bo.JSON, oo.JSON)) {
				t.Fatalf("objects differ: badger %s %.80s, opensearch %s %.80s", bo.Cluster, bo.JSON, oo.Cluster, oo.JSON)
			}
			switch {
			case g.want == "not found" && (!errors.Is(berr, query.ErrNotFound) || berr.Error() != fmt.Sprintf("pods %q not found", g.podName)):
				t.Fatalf("hidden object: %v, want a missing object's not found", berr)
			case g.want != "" && g.want != "not found" && (berr != nil || bo.Cluster != g.want):
				t.Fatalf("got %s %v, want the copy in %s", bo.Cluster, berr, g.want)
			}
		})
	}
	lists := []struct {
		name string
		o    query.ListOptions
		min  int // the query must match at least this many objects
	}{
		{"all pods", query.ListOptions{GVR: benchdata.PodGVR}, n},
		{"namespace", query.ListOptions{GVR: benchdata.PodGVR, Namespace: benchdata.Namespace(3)}, 20},
		{"label equals", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("app=web")}, 100},
		{"label in", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("app in (web,db)")}, 200},
		{"label not equals", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("app!=web")}, 1000},
		{"label notin with changed labels", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("tier notin (frontend)")}, 500},
		{"changed label", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("tier=moved")}, 100},
		{"label exists", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("shard")}, n},
		{"label does not exist", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("!shard")}, 0},
		{"label greater than", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("app=web,shard!=s1")}, 50},
		{"clusters", query.ListOptions{GVR: benchdata.PodGVR, Clusters: []string{"c2"}}, n / 3},
		{"no clusters", query.ListOptions{GVR: benchdata.PodGVR, Clusters: []string{}}, 0},
		{"paged namespace", query.ListOptions{GVR: benchdata.PodGVR, Namespace: benchdata.Namespace(5), Limit: 7}, 20},
		{"paged label and clusters", query.ListOptions{GVR: benchdata.PodGVR, Labels: sel("app=db"), Clusters: []string{"c1", "c2"}, Limit: 13}, 100},
		{"paged all", query.ListOptions{GVR: benchdata.PodGVR, Limit: 250}, n},
		{"field name", query.ListOptions{GVR: benchdata.PodGVR, Fields: fields("metadata.name=" + benchdata.PodName(4))}, 2},
		{"field in object", query.ListOptions{GVR: benchdata.PodGVR, Namespace: benchdata.Namespace(8), Fields: fields("spec.nodeName=node-008")}, 1},
		{"configmaps after removal", query.ListOptions{GVR: fixture.CMGVR}, 40},
		{"unknown resource", query.ListOptions{GVR: schema.GroupVersionResource{Group: "x.io", Version: "v1", Resource: "things"}}, 0},
	}
	for _, l := range lists {
		t.Run("list/"+l.name, func(t *testing.T) {
			pages := func(r reader) (sizes []int, items []query.Object, v query.Version) {
				o := l.o
				for {
					p, err := r.List(context.Background(), o)
					if err != nil {
						t.Fatalf("list: %v", err)
					}
					if v == nil {
						v = p.Version
					}
					sizes = append(sizes, len(p.Items))
					items = append(items, p.Items...)
					if p.Continue == "" {
						return sizes, items, v
					}
					o.Continue = p.Continue
				}
			}
			bs, bi, bv := pages(breader)
			os, oi, ov := pages(ostore)
			if len(bi) < l.min {
				t.Fatalf("only %d objects match, the query is meant to match at least %d", len(bi), l.min)
			}
			if fmt.Sprint(bs) != fmt.Sprint(os) {
				t.Errorf("page sizes differ: badger %v, opensearch %v", bs, os)
			}
			if fmt.Sprint(bv) != fmt.Sprint(ov) {
				t.Errorf("versions differ: badger %v, opensearch %v", bv, ov)
			}
			if len(bi) != len(oi) {
				t.Fatalf("badger returned %d objects, opensearch %d", len(bi), len(oi))
			}
			for i := range bi {
				if bi[i].Cluster != oi[i].Cluster || !bytes.Equal(bi[i].JSON, oi[i].JSON) {
					t.Fatalf("item %d differs: badger %v, opensearch %v", i, fixture.KeyFromObject(t, bi[i]), fixture.KeyFromObject(t, oi[i]))
				}
			}
		})
	}

	t.Run("paged list reads one snapshot", func(t *testing.T) {
		o := query.ListOptions{GVR: benchdata.PodGVR, Namespace: benchdata.Namespace(5), Limit: 10}
		all := fixture.ListAll(t, breader, query.ListOptions{GVR: benchdata.PodGVR, Namespace: benchdata.Namespace(5)})
		if len(all) < 15 {
			t.Fatalf("only %d objects in the namespace", len(all))
		}
		victim := all[12]
		var meta struct {
			Metadata struct{ UID, Name, Namespace string } `json:"metadata"`
		}
		if err := json.Unmarshal(victim.JSON, &meta); err != nil {
			t.Fatal(err)
		}
		first := map[string]query.Page{}
		for name, r := range map[string]reader{"badger": breader, "opensearch": ostore} {
			p, err := r.List(context.Background(), o)
			if err != nil || p.Continue == "" {
				t.Fatalf("%s first page: %v (continue %q)", name, err, p.Continue)
			}
			first[name] = p
		}
		fixture.PublishEvents(t, nc, []*fleetviewv1.ResourceEvent{{Cluster: victim.Cluster, Gvr: stream.ProtoGVR(benchdata.PodGVR), Kind: "Pod",
			Uid: meta.Metadata.UID, Namespace: meta.Metadata.Namespace, Name: meta.Metadata.Name, ResourceVersion: "99",
			Type: fleetviewv1.EventType_EVENT_TYPE_DELETE}})
		now := fixture.LastSeqs(t, js, "c1", "c2")
		waitApplied(t, time.Minute, bm.Applied, now)
		waitApplied(t, time.Minute, om.Applied, now)
		for name, r := range map[string]reader{"badger": breader, "opensearch": ostore} {
			second, err := r.List(context.Background(), query.ListOptions{GVR: o.GVR, Namespace: o.Namespace, Limit: 10, Continue: first[name].Continue})
			if err != nil {
				t.Fatalf("%s second page: %v", name, err)
			}
			if fmt.Sprint(second.Version) != fmt.Sprint(first[name].Version) {
				t.Errorf("%s: second page version %v, first %v", name, second.Version, first[name].Version)
			}
			if len(second.Items) < 3 || !bytes.Equal(second.Items[2].JSON, victim.JSON) {
				t.Errorf("%s: the second page does not read the first page's snapshot (object deleted since is gone)", name)
			}
			if _, err := r.Get(context.Background(), query.GetOptions{GVR: benchdata.PodGVR, Namespace: meta.Metadata.Namespace, Name: meta.Metadata.Name, Cluster: victim.Cluster}); !errors.Is(err, query.ErrNotFound) {
				t.Errorf("%s: deleted object still found by Get: %v", name, err)
			}
		}
	})

	t.Run("search", func(t *testing.T) {
		p, err := ostore.Search(context.Background(), query.SearchOptions{Text: "cm-007", Resources: []schema.GroupVersionResource{fixture.CMGVR}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) != 1 || p.Items[0].Cluster != "c1" || !bytes.Contains(p.Items[0].JSON, []byte(`"needle-7"`)) {
			t.Fatalf("full-text search for cm-007 returned %d items", len(p.Items))
		}
		// Label values are searchable too, across resources.
		p, err = ostore.Search(context.Background(), query.SearchOptions{Text: "metrics", Namespace: benchdata.Namespace(7), Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var pods, cms int
		for _, it := range p.Items {
			switch it.GVR {
			case benchdata.PodGVR:
				pods++
			case fixture.CMGVR:
				cms++
			}
			if !bytes.Contains(it.JSON, []byte(`"app":"metrics"`)) {
				t.Fatalf("search hit without the label: %.200s", it.JSON)
			}
		}
		if pods == 0 || cms == 0 {
			t.Fatalf("search for label value metrics in %s: %d pods, %d configmaps", benchdata.Namespace(7), pods, cms)
		}
	})
}
