package badger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var countPhases = []string{"Running", "Pending", "Succeeded", "Failed"}

// countPod is benchdata's Pod i with a phase and a second image that
// vary with i and rv, so counts by them have several rows.
func countPod(cluster string, i, rv int) *fleetviewv1.ResourceEvent {
	e := benchdata.Event(cluster, i, rv)
	obj := bytes.Replace(e.Object, []byte(`"phase":"Running"`), fmt.Appendf(nil, `"phase":%q`, countPhases[(i+rv)%len(countPhases)]), 1)
	if i%3 == 0 {
		obj = bytes.Replace(obj, []byte(`"containers":[`), []byte(`"initContainers":[{"name":"init","image":"busybox:1.36"}],"containers":[`), 1)
	}
	e.Object = obj
	return e
}

// countOracle is what the counts must be, from the objects' JSON alone.
type countOracle map[string]oraclePod // by cluster/namespace/name

type oraclePod struct {
	cluster, ns string
	labels      map[string]string
	phase, node string
	images      []string
}

func (m countOracle) put(e *fleetviewv1.ResourceEvent) {
	var p struct {
		Metadata struct {
			Labels map[string]string
		}
		Spec struct {
			NodeName                   string
			Containers, InitContainers []struct{ Image string }
		}
		Status struct{ Phase string }
	}
	if err := json.Unmarshal(e.Object, &p); err != nil {
		panic(err)
	}
	op := oraclePod{cluster: e.Cluster, ns: e.Namespace, labels: p.Metadata.Labels, phase: p.Status.Phase, node: p.Spec.NodeName}
	for _, c := range append(p.Spec.Containers, p.Spec.InitContainers...) {
		op.images = append(op.images, c.Image)
	}
	slices.Sort(op.images)
	op.images = slices.Compact(op.images)
	m[e.Cluster+"/"+e.Namespace+"/"+e.Name] = op
}

func (m countOracle) counts(o query.CountOptions) query.Counts {
	t := query.NewTally()
	for _, p := range m {
		sel := o.LabelSelector()
		if (o.Clusters != nil && !slices.Contains(o.Clusters, p.cluster)) || (o.Namespace != "" && p.ns != o.Namespace) ||
			!sel.Matches(labels.Set(p.labels)) || !o.Visible.Allows(o.GVR.GroupResource(), p.cluster, p.ns) {
			continue
		}
		if o.Fields != nil {
			obj := fmt.Appendf(nil, `{"status":{"phase":%q},"spec":{"nodeName":%q}}`, p.phase, p.node)
			if ok, _ := o.Fields.Matches(p.ns, "", obj); !ok {
				continue
			}
		}
		rows := [][]string{{}}
		for _, d := range o.By {
			var vals []string
			switch d.String() {
			case "cluster":
				vals = []string{p.cluster}
			case "namespace":
				vals = []string{p.ns}
			case "kind":
				vals = []string{"pods"}
			case "image":
				vals = p.images
			case "field:status.phase":
				vals = []string{p.phase}
			case "field:spec.nodeName":
				vals = []string{p.node}
			default:
				vals = []string{p.labels[d.Key]}
			}
			var next [][]string
			for _, r := range rows {
				for _, v := range vals {
					next = append(next, append(slices.Clone(r), v))
				}
			}
			rows = next
		}
		for _, r := range rows {
			if len(o.By) > 0 {
				t.AddRow(query.CountRow{Values: r, Count: 1})
			}
		}
		t.Total++
	}
	return t.Counts("")
}

func dims(t testing.TB, by ...string) []query.Dimension {
	t.Helper()
	out := make([]query.Dimension, len(by))
	for i, b := range by {
		d, err := query.ParseDimension(b)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = d
	}
	return out
}

func rowsText(c query.Counts) string {
	var b strings.Builder
	for _, r := range c.Rows {
		fmt.Fprintf(&b, "%s=%d\n", strings.Join(r.Values, "|"), r.Count)
	}
	fmt.Fprintf(&b, "total=%d", c.Total)
	return b.String()
}

// TestCounts: counts from the counters (no selector), the indexes (and
// from objects, with a field selector or an unkept field) equal the
// oracle's, computed from the
// objects' JSON, after creates, updates that change phases and images,
// and deletes, for every selector and for a restricted caller.
func TestCounts(t *testing.T) {
	s, r := openReader(t)
	oracle := countOracle{}
	var seq uint64
	apply := func(cluster string, evs []*fleetviewv1.ResourceEvent) {
		t.Helper()
		fe := make([]feed.Event, len(evs))
		for i, e := range evs {
			seq++
			fe[i] = ev(seq, e)
			if e.Type == fleetviewv1.EventType_EVENT_TYPE_DELETE {
				delete(oracle, e.Cluster+"/"+e.Namespace+"/"+e.Name)
			} else {
				oracle.put(e)
			}
		}
		if err := s.Apply(context.Background(), cluster, fe, seq); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"a", "b", "c"} {
		var evs []*fleetviewv1.ResourceEvent
		for i := range 300 {
			evs = append(evs, countPod(c, i, 1))
		}
		apply(c, evs)
	}
	// Updates: phases move (rv 2), some Pods lose their init container
	// (i%3 == 0 keeps it: the same i), and some go.
	var upd []*fleetviewv1.ResourceEvent
	for i := 0; i < 300; i += 2 {
		upd = append(upd, countPod("a", i, 2))
	}
	for i := 1; i < 300; i += 7 {
		upd = append(upd, benchdata.Delete("a", i, 3))
	}
	apply("a", upd)
	selectors := func(s string) labels.Selector {
		sel, err := labels.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return sel
	}
	fields := func(s string) *query.FieldFilter {
		f, err := query.CompileFields(benchdata.PodGVR, s)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	restricted := &query.Visibility{Grants: []query.Grant{{Clusters: []string{"a"}}, {Clusters: []string{"b"}, Namespaces: []string{"team-01", "team-02"}}}}
	cases := []struct {
		name    string
		o       query.CountOptions
		scanned string
	}{
		{"cluster", query.CountOptions{By: dims(t, "cluster")}, "counters"},
		{"cluster x phase", query.CountOptions{By: dims(t, "cluster", "field:status.phase")}, "counters"},
		{"phase x cluster", query.CountOptions{By: dims(t, "field:status.phase", "cluster")}, "counters"},
		{"image", query.CountOptions{By: dims(t, "image")}, "counters"},
		{"image x phase", query.CountOptions{By: dims(t, "image", "field:status.phase")}, "index"},
		{"namespace x label", query.CountOptions{By: dims(t, "namespace", "label:app")}, "index"},
		{"label absent", query.CountOptions{By: dims(t, "label:missing", "kind")}, "index"},
		{"node", query.CountOptions{By: dims(t, "field:spec.nodeName"), Namespace: "team-03"}, "counters"},
		{"selector equal", query.CountOptions{By: dims(t, "cluster", "field:status.phase"), Labels: selectors("app=web")}, "index"},
		{"selector set", query.CountOptions{By: dims(t, "image"), Labels: selectors("app in (web,db),tier!=backend,shard")}, "index"},
		{"selector not exists", query.CountOptions{By: dims(t, "cluster"), Labels: selectors("!missing,shard notin (s1,s2)")}, "index"},
		{"selector one value", query.CountOptions{By: dims(t, "cluster"), Labels: selectors("app=api")}, "index"},
		{"clusters", query.CountOptions{By: dims(t, "cluster", "image"), Clusters: []string{"b", "c"}}, "counters"},
		{"no clusters", query.CountOptions{By: dims(t, "cluster"), Clusters: []string{}}, "index"},
		{"restricted", query.CountOptions{By: dims(t, "cluster", "namespace", "field:status.phase"), Visible: restricted}, "counters"},
		{"restricted by kind, one namespace", query.CountOptions{By: dims(t, "kind", "cluster"), Visible: restricted, Namespace: "team-02"}, "counters"},
		{"total alone", query.CountOptions{}, "counters"},
		{"restricted image", query.CountOptions{By: dims(t, "image"), Visible: restricted, Labels: selectors("tier=backend")}, "index"},
		{"nothing visible", query.CountOptions{By: dims(t, "cluster"), Visible: &query.Visibility{}}, "counters"},
		{"field selector", query.CountOptions{By: dims(t, "cluster"), Fields: fields("status.phase!=Running")}, "objects"},
		{"field selector restricted", query.CountOptions{By: dims(t, "image", "label:app"), Fields: fields("status.phase=Pending"), Visible: restricted}, "objects"},
		{"unkept field", query.CountOptions{By: dims(t, "field:metadata.labels.tier", "cluster")}, "objects"},
		{"no dimension", query.CountOptions{Labels: selectors("app=web")}, "index"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.GVR = benchdata.PodGVR
			got, err := r.Count(context.Background(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.o
			if tc.name == "unkept field" {
				// The oracle reads the tier label for the field.
				want.By = dims(t, "label:tier", "cluster")
			}
			if g, w := rowsText(got), rowsText(countOracleCounts(oracle, want)); g != w {
				t.Errorf("counts:\n%s\nwant:\n%s", g, w)
			}
			if got.Scanned != tc.scanned {
				t.Errorf("scanned %q, want %q", got.Scanned, tc.scanned)
			}
			if got.Total == 0 && tc.name != "no clusters" && tc.name != "nothing visible" {
				t.Errorf("no object counted")
			}
		})
	}
}

func countOracleCounts(m countOracle, o query.CountOptions) query.Counts { return m.counts(o) }

// TestValueIndexKeepsUp: the value index holds exactly one entry per
// object and value after updates and deletes, and none for resources it
// does not index; a store reopened with a dimension it did not keep
// answers counts by it from the objects.
func TestValueIndexKeepsUp(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	for rv := 1; rv <= 3; rv++ {
		var fe []feed.Event
		for i := range 50 {
			seq++
			fe = append(fe, ev(seq, countPod("a", i, rv)))
		}
		if rv == 3 {
			for i := 1; i <= 3; i++ {
				seq++
				fe = append(fe, ev(seq, benchdata.Delete("a", i, rv)))
			}
		}
		if err := s.Apply(context.Background(), "a", fe, seq); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(s *Store, family string) int {
		n := 0
		_ = s.db.View(func(txn *bdg.Txn) error {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{family[0], sep}})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		})
		return n
	}
	// 47 Pods: a phase, a node, one or two images each.
	withInit := 0
	for i := range 50 {
		if i%3 == 0 && i != 1 && i != 2 && i != 3 {
			withInit++
		}
	}
	if got, want := keys(s, "v"), 47*3+withInit; got != want {
		t.Errorf("value index entries %d, want %d", got, want)
	}
	if got := keys(s, "X"); got != 47 {
		t.Errorf("x entries %d, want 47", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	more := append(DefaultValueIndex(), IndexedValue{Resource: schema.GroupResource{Resource: "pods"}, Dimension: "field:spec.serviceAccountName", Scalar: true})
	s, err = Open(Options{Dir: dir, ValueIndex: more})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	for _, tc := range []struct {
		by, scanned string
	}{{"field:status.phase", "counters"}, {"field:spec.serviceAccountName", "objects"}} {
		c, err := r.Count(context.Background(), query.CountOptions{GVR: benchdata.PodGVR, By: dims(t, tc.by)})
		if err != nil {
			t.Fatal(err)
		}
		if c.Scanned != tc.scanned || c.Total != 47 {
			t.Errorf("by %s: scanned %q total %d, want %q 47", tc.by, c.Scanned, c.Total, tc.scanned)
		}
	}
}
