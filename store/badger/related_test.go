package badger

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

var (
	deployGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	rsGVR     = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	svcGVR    = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	cmGVR     = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// relObj is an upsert of an object in namespace shop; body is the JSON
// after metadata (",\"spec\":...").
func relObj(cluster string, gvr schema.GroupVersionResource, kind, name, meta, body string) *fleetviewv1.ResourceEvent {
	uid := cluster + "-" + kind + "-" + name
	api := gvr.Version
	if gvr.Group != "" {
		api = gvr.Group + "/" + gvr.Version
	}
	obj := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":"shop","uid":%q%s}%s}`, api, kind, name, uid, meta, body)
	return &fleetviewv1.ResourceEvent{Cluster: cluster, Gvr: stream.ProtoGVR(gvr), Kind: kind, Uid: uid, Namespace: "shop", Name: name,
		ResourceVersion: "1", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(obj), Namespaced: true}
}

func owned(kind, name string) string {
	return fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"apps/v1","kind":%q,"name":%q,"uid":"x"}]`, kind, name)
}

func podObj(cluster, name, app string) *fleetviewv1.ResourceEvent {
	return relObj(cluster, podsGVR, "Pod", name, fmt.Sprintf(`,"labels":{"app":%q}`, app)+owned("ReplicaSet", "web-1"),
		`,"spec":{"nodeName":"n1","volumes":[{"name":"c","configMap":{"name":"cfg"}},{"name":"s","secret":{"secretName":"db"}}],"containers":[{"name":"a","image":"x"}]}`)
}

func applyAll(t *testing.T, s *Store, cluster string, seq *uint64, evs ...*fleetviewv1.ResourceEvent) {
	t.Helper()
	b := make([]feed.Event, len(evs))
	for i, e := range evs {
		*seq++
		b[i] = ev(*seq, e)
	}
	if err := s.Apply(context.Background(), cluster, b, *seq); err != nil {
		t.Fatal(err)
	}
}

// fmtGraph prints a graph's edges as "type from -> to" with nodes short
// (cluster/kind/name, "?" for a reference-only one), sorted.
func fmtGraph(g query.Graph) string {
	short := map[string]string{}
	for _, n := range g.Nodes {
		s := n.Cluster + "/" + n.Kind + "/" + n.Name
		if !n.Cached {
			s += "?"
		}
		short[n.ID()] = s
	}
	var out []string
	for _, e := range g.Edges {
		out = append(out, fmt.Sprintf("%s %s -> %s", e.Type, short[e.From], short[e.To]))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// TestRelated builds Deployment -> ReplicaSet -> Pods with a Service, a
// ConfigMap and a Secret the Pods mount (not cached), and a copy of the
// Deployment in another cluster, then reads the relations as objects
// change, with kinds and a visibility.
const webSelector = `,"spec":{"selector":{"matchLabels":{"app":"web"}}}`

// relFixture stores Deployment -> ReplicaSet -> two Pods with a Service,
// a ConfigMap and a Secret the Pods mount (not cached) in c1, and a copy
// of the Deployment in c2.
func relFixture(t *testing.T) (s *Store, r *Reader, seq1 *uint64) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r = s.Reader(ReaderOptions{})
	t.Cleanup(func() { r.Close() })
	return s, r, relFixtureObjects(t, s)
}

// relFixtureObjects applies relFixture's objects to s.
func relFixtureObjects(t *testing.T, s *Store) (seq1 *uint64) {
	var seq2 uint64
	seq1 = new(uint64)
	applyAll(t, s, "c1", seq1,
		relObj("c1", deployGVR, "Deployment", "web", "", webSelector),
		relObj("c1", rsGVR, "ReplicaSet", "web-1", owned("Deployment", "web"), webSelector),
		podObj("c1", "web-1-a", "web"), podObj("c1", "web-1-b", "web"),
		relObj("c1", svcGVR, "Service", "web", "", `,"spec":{"selector":{"app":"web"}}`),
		relObj("c1", cmGVR, "ConfigMap", "cfg", "", `,"data":{}`),
	)
	applyAll(t, s, "c2", &seq2, relObj("c2", deployGVR, "Deployment", "web", "", webSelector))
	return seq1
}

// relFixtureBeforeNameIndex is relFixture's store as a binary before the
// name index (nameIndexed) left it: no v/, X/ or C/ entries of names, and
// a value index record without them. Reopened, the names are not complete
// and a relation field finds its named objects by reading keys.
func relFixtureBeforeNameIndex(t *testing.T) *Reader {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	relFixtureObjects(t, s)
	err = s.db.Update(func(txn *bdg.Txn) error {
		var pres [][]byte
		for _, gr := range nameIndexed {
			g := gr.WithVersion("v1")
			pres = append(pres, valuePrefix(g, nameDimension.IndexName()), counterPrefix(g, nameDimension.IndexName()), resourcePrefix("X", g))
		}
		for _, pre := range pres {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: pre})
			var keys [][]byte
			for it.Rewind(); it.Valid(); it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			it.Close()
			for _, k := range keys {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
		}
		kept, err := keptIndexes(txn)
		if err != nil {
			return err
		}
		var old []string
		for _, n := range kept {
			if !strings.HasSuffix(n, "/"+nameDimension.IndexName()) {
				old = append(old, n)
			}
		}
		return txn.Set(valueIndexKey, []byte(strings.Join(old, "\n")))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := s.Reader(ReaderOptions{})
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRelated(t *testing.T) {
	s, r, seq := relFixture(t)
	seq1 := *seq
	sel := webSelector

	related := func(gvr schema.GroupVersionResource, name string, depth int, kinds []string, vis *query.Visibility) string {
		t.Helper()
		g, err := r.Related(context.Background(), query.RelatedOptions{GVR: gvr, Namespace: "shop", Name: name, Cluster: "c1", Depth: depth, Kinds: kinds, Visible: vis})
		if err != nil {
			t.Fatal(err)
		}
		return fmtGraph(g)
	}
	noSecrets := &query.Visibility{Grants: []query.Grant{{Except: []schema.GroupResource{{Resource: "secrets"}}}}}
	podsOnly := &query.Visibility{Grants: []query.Grant{{Resources: []schema.GroupResource{{Resource: "pods"}}}}}
	for _, tc := range []struct {
		name  string
		gvr   schema.GroupVersionResource
		obj   string
		depth int
		kinds []string
		vis   *query.Visibility
		want  []string
	}{
		{"deployment depth 1", deployGVR, "web", 1, nil, nil, []string{
			"copy c1/Deployment/web -> c2/Deployment/web",
			"owner c1/ReplicaSet/web-1 -> c1/Deployment/web",
			"selects c1/Deployment/web -> c1/Pod/web-1-a",
			"selects c1/Deployment/web -> c1/Pod/web-1-b",
		}},
		{"pod depth 1", podsGVR, "web-1-a", 1, nil, nil, []string{
			"owner c1/Pod/web-1-a -> c1/ReplicaSet/web-1",
			"references c1/Pod/web-1-a -> c1/ConfigMap/cfg",
			"references c1/Pod/web-1-a -> c1/Node/n1?",
			"references c1/Pod/web-1-a -> c1/Secret/db?",
			"selects c1/Deployment/web -> c1/Pod/web-1-a",
			"selects c1/ReplicaSet/web-1 -> c1/Pod/web-1-a",
			"selects c1/Service/web -> c1/Pod/web-1-a",
		}},
		{"configmap depth 1: who mounts it", cmGVR, "cfg", 1, nil, nil, []string{
			"references c1/Pod/web-1-a -> c1/ConfigMap/cfg",
			"references c1/Pod/web-1-b -> c1/ConfigMap/cfg",
		}},
		{"configmap depth 2 kinds pod,replicaset", cmGVR, "cfg", 2, []string{"pod", "replicasets"}, nil, []string{
			"owner c1/Pod/web-1-a -> c1/ReplicaSet/web-1",
			"owner c1/Pod/web-1-b -> c1/ReplicaSet/web-1",
			"references c1/Pod/web-1-a -> c1/ConfigMap/cfg",
			"references c1/Pod/web-1-b -> c1/ConfigMap/cfg",
			"selects c1/ReplicaSet/web-1 -> c1/Pod/web-1-a",
			"selects c1/ReplicaSet/web-1 -> c1/Pod/web-1-b",
		}},
		{"pod without secrets visible", podsGVR, "web-1-a", 1, nil, noSecrets, []string{
			"owner c1/Pod/web-1-a -> c1/ReplicaSet/web-1",
			"references c1/Pod/web-1-a -> c1/ConfigMap/cfg",
			"references c1/Pod/web-1-a -> c1/Node/n1?",
			"selects c1/Deployment/web -> c1/Pod/web-1-a",
			"selects c1/ReplicaSet/web-1 -> c1/Pod/web-1-a",
			"selects c1/Service/web -> c1/Pod/web-1-a",
		}},
		{"pod, only pods visible", podsGVR, "web-1-a", 3, nil, podsOnly, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := related(tc.gvr, tc.obj, tc.depth, tc.kinds, tc.vis), strings.Join(tc.want, "\n"); got != want {
				t.Errorf("related:\n%s\nwant\n%s", got, want)
			}
		})
	}

	// Depth 3 from the Deployment reaches the ConfigMap through the Pods.
	if got := related(deployGVR, "web", 3, nil, nil); !strings.Contains(got, "references c1/Pod/web-1-b -> c1/ConfigMap/cfg") {
		t.Errorf("depth 3 misses the ConfigMap:\n%s", got)
	}
	// Hidden from a caller who sees no Deployments: not found, like a
	// missing object.
	if _, err := r.Related(context.Background(), query.RelatedOptions{GVR: deployGVR, Namespace: "shop", Name: "web", Cluster: "c1", Depth: 1, Visible: podsOnly}); err == nil {
		t.Error("a hidden starting object answered")
	}

	// Relabeled out of the selectors, a Pod is selected by nothing; deleted,
	// it leaves its owner and its ConfigMap.
	applyAll(t, s, "c1", &seq1, podObj("c1", "web-1-a", "other"))
	if got := related(podsGVR, "web-1-a", 1, []string{"service", "deployment"}, nil); got != "" {
		t.Errorf("a relabeled Pod is still selected:\n%s", got)
	}
	del := relObj("c1", podsGVR, "Pod", "web-1-b", "", "")
	del.Type, del.Object = fleetviewv1.EventType_EVENT_TYPE_DELETE, nil
	applyAll(t, s, "c1", &seq1, del)
	if got, want := related(cmGVR, "cfg", 1, nil, nil), "references c1/Pod/web-1-a -> c1/ConfigMap/cfg"; got != want {
		t.Errorf("after a delete:\n%s\nwant\n%s", got, want)
	}
	// An owner reference removed by an update goes from the reverse index.
	applyAll(t, s, "c1", &seq1, relObj("c1", rsGVR, "ReplicaSet", "web-1", "", sel))
	if got := related(deployGVR, "web", 1, []string{"replicaset"}, nil); got != "" {
		t.Errorf("an orphaned ReplicaSet is still owned:\n%s", got)
	}
}

func TestRelatedOptionsInvalid(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	for _, tc := range []struct {
		o    query.RelatedOptions
		want string
	}{
		{query.RelatedOptions{GVR: podsGVR, Name: "a", Depth: 1}, "needs cluster"},
		{query.RelatedOptions{GVR: podsGVR, Cluster: "c1", Depth: 1}, "needs name"},
		{query.RelatedOptions{GVR: podsGVR, Name: "a", Cluster: "c1", Depth: 9}, "depth 9"},
	} {
		if _, err := r.Related(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.o, err, tc.want)
		}
	}
}

// TestRelationFieldList lists with the relation field selectors.
// TestRelationFieldList lists by relation field selectors on a store
// that keeps the names of nameIndexed (found in one range) and on one
// written before it did (found by reading keys): the same answers.
func TestRelationFieldList(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reader func(t *testing.T) *Reader
		byName bool
	}{
		{"name index", func(t *testing.T) *Reader { _, r, _ := relFixture(t); return r }, true},
		{"store written before the name index", relFixtureBeforeNameIndex, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.reader(t)
			for _, gr := range nameIndexed {
				if got := r.vindex.answers(gr, nameDimension); got != tc.byName {
					t.Fatalf("names of %s indexed: %v, want %v", gr, got, tc.byName)
				}
			}
			checkRelationFieldList(t, r)
		})
	}
}

func checkRelationFieldList(t *testing.T, r *Reader) {
	list := func(gvr schema.GroupVersionResource, fs string, vis *query.Visibility) string {
		t.Helper()
		f, err := query.CompileFields(gvr, fs)
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.List(context.Background(), query.ListOptions{GVR: gvr, Fields: f, Visible: vis})
		if err != nil {
			t.Fatalf("%s: %v", fs, err)
		}
		var out []string
		for _, o := range p.Items {
			_, name, _ := strings.Cut(string(o.JSON), `"name":"`)
			name, _, _ = strings.Cut(name, `"`)
			out = append(out, o.Cluster+"/"+name)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		gvr       schema.GroupVersionResource
		sel, want string
	}{
		{podsGVR, "fleetview.io/ownedBy=Deployment/web", "c1/web-1-a c1/web-1-b"},
		{podsGVR, "fleetview.io/ownedBy=deployment.apps/web", "c1/web-1-a c1/web-1-b"},
		{rsGVR, "fleetview.io/ownedBy=Deployment/web", "c1/web-1"},
		{podsGVR, "fleetview.io/ownedBy=ReplicaSet/web-1,metadata.name=web-1-b", "c1/web-1-b"},
		{podsGVR, "fleetview.io/ownedBy=Deployment/other", ""},
		{podsGVR, "fleetview.io/selectedBy=Service/web", "c1/web-1-a c1/web-1-b"},
		{podsGVR, "fleetview.io/references=Secret/db", "c1/web-1-a c1/web-1-b"},
		{podsGVR, "fleetview.io/references=ConfigMap/cfg,fleetview.io/ownedBy=Deployment/web", "c1/web-1-a c1/web-1-b"},
		{podsGVR, "fleetview.io/references=Secret/other", ""},
		// A name field selector on a resource whose names the value
		// index keeps reads that index on the first store.
		{deployGVR, "metadata.name=web", "c1/web c2/web"},
		{deployGVR, "metadata.name=other", ""},
		{svcGVR, "metadata.name!=web", ""},
	} {
		if got := list(tc.gvr, tc.sel, nil); got != tc.want {
			t.Errorf("list %s %s = %q, want %q", tc.gvr.Resource, tc.sel, got, tc.want)
		}
	}
	// With a label selector or a field equality an index could decide
	// alone: the relation's members are still checked against them.
	for _, tc := range []struct{ fs, ls, want string }{
		{"fleetview.io/ownedBy=Deployment/web", "app=web", "c1/web-1-a c1/web-1-b"},
		{"fleetview.io/ownedBy=Deployment/web", "app=other", ""},
		{"fleetview.io/ownedBy=Deployment/web,spec.nodeName=n1", "", "c1/web-1-a c1/web-1-b"},
		{"fleetview.io/ownedBy=Deployment/web,spec.nodeName=n2", "", ""},
		{"fleetview.io/ownedBy=Deployment/web,metadata.name=web-1-a", "app=web", "c1/web-1-a"},
	} {
		f, err := query.CompileFields(podsGVR, tc.fs)
		if err != nil {
			t.Fatal(err)
		}
		ls, err := labels.Parse(tc.ls)
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.List(context.Background(), query.ListOptions{GVR: podsGVR, Fields: f, Labels: ls})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, o := range p.Items {
			_, name, _ := strings.Cut(string(o.JSON), `"name":"`)
			name, _, _ = strings.Cut(name, `"`)
			got = append(got, o.Cluster+"/"+name)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("list pods %s with labels %q = %q, want %q", tc.fs, tc.ls, got, tc.want)
		}
	}
	// Another cluster's list: the relation is walked in its clusters only.
	for _, cs := range []struct {
		clusters []string
		want     int
	}{{[]string{"c2"}, 0}, {[]string{"c1", "c2"}, 2}} {
		f, err := query.CompileFields(podsGVR, "fleetview.io/ownedBy=Deployment/web")
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.List(context.Background(), query.ListOptions{GVR: podsGVR, Fields: f, Clusters: cs.clusters})
		if err != nil || len(p.Items) != cs.want {
			t.Errorf("ownedBy in %v: %d Pods %v, want %d", cs.clusters, len(p.Items), err, cs.want)
		}
	}
	// Paged: one Pod a page, the second page from the first's token.
	f, err := query.CompileFields(podsGVR, "fleetview.io/ownedBy=Deployment/web")
	if err != nil {
		t.Fatal(err)
	}
	var paged []string
	cont := ""
	for range 3 {
		p, err := r.List(context.Background(), query.ListOptions{GVR: podsGVR, Fields: f, Limit: 1, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Items {
			_, name, _ := strings.Cut(string(o.JSON), `"name":"`)
			name, _, _ = strings.Cut(name, `"`)
			paged = append(paged, name)
		}
		if cont = p.Continue; cont == "" {
			break
		}
	}
	if got := strings.Join(paged, " "); got != "web-1-a web-1-b" {
		t.Errorf("paged ownedBy list = %q", got)
	}
	// A caller who reads Pods, ReplicaSets and ConfigMaps only: a relation
	// through anything else selects nothing.
	some := &query.Visibility{Grants: []query.Grant{{Resources: []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "replicasets"}, {Resource: "configmaps"}}}}}
	for _, tc := range []struct{ sel, want string }{
		{"fleetview.io/ownedBy=Deployment/web", ""},
		{"fleetview.io/ownedBy=ReplicaSet/web-1", "c1/web-1-a c1/web-1-b"},
		{"fleetview.io/selectedBy=Service/web", ""},
		{"fleetview.io/references=Secret/db", ""},
		{"fleetview.io/references=ConfigMap/cfg", "c1/web-1-a c1/web-1-b"},
	} {
		if got := list(podsGVR, tc.sel, some); got != tc.want {
			t.Errorf("restricted list pods %s = %q, want %q", tc.sel, got, tc.want)
		}
	}
}

// TestRelatedSharedObjects: the objects every Pod of a namespace names
// (relations.Shared: kube-root-ca.crt, the default ServiceAccount) are
// answered as related to the Pods that name them, and not walked
// through to every other Pod of the namespace; from one of them, what
// names it is answered as for any object.
func TestRelatedSharedObjects(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	pod := func(name, app, sa, cm string) *fleetviewv1.ResourceEvent {
		return relObj("c1", podsGVR, "Pod", name, fmt.Sprintf(`,"labels":{"app":%q}`, app),
			fmt.Sprintf(`,"spec":{"serviceAccountName":%q,"volumes":[{"name":"t","projected":{"sources":[{"configMap":{"name":"kube-root-ca.crt"}}]}},{"name":"c","configMap":{"name":%q}}],"containers":[{"name":"a","image":"x"}]}`, sa, cm))
	}
	var seq uint64
	applyAll(t, s, "c1", &seq,
		relObj("c1", deployGVR, "Deployment", "web", "", `,"spec":{"selector":{"matchLabels":{"app":"web"}}}`),
		relObj("c1", cmGVR, "ConfigMap", "kube-root-ca.crt", "", ""),
		pod("web-0", "web", "default", "web-config"),
		pod("api-0", "api", "default", "api-config"),
		pod("db-0", "db", "db", "web-config"))
	for _, c := range []struct {
		name  string
		gvr   schema.GroupVersionResource
		obj   string
		depth int
		want  string
	}{
		{"from the Deployment, kube-root-ca.crt and default shown, not walked through", deployGVR, "web", 3,
			"references c1/Pod/db-0 -> c1/ConfigMap/web-config?\n" +
				"references c1/Pod/web-0 -> c1/ConfigMap/kube-root-ca.crt\n" +
				"references c1/Pod/web-0 -> c1/ConfigMap/web-config?\n" +
				"references c1/Pod/web-0 -> c1/ServiceAccount/default?\n" +
				"selects c1/Deployment/web -> c1/Pod/web-0"},
		{"from kube-root-ca.crt, every Pod naming it", cmGVR, "kube-root-ca.crt", 1,
			"references c1/Pod/api-0 -> c1/ConfigMap/kube-root-ca.crt\n" +
				"references c1/Pod/db-0 -> c1/ConfigMap/kube-root-ca.crt\n" +
				"references c1/Pod/web-0 -> c1/ConfigMap/kube-root-ca.crt"},
		{"from a Pod, depth 2: the other Pods of web-config, not of kube-root-ca.crt", podsGVR, "web-0", 2,
			"references c1/Pod/db-0 -> c1/ConfigMap/web-config?\n" +
				"references c1/Pod/web-0 -> c1/ConfigMap/kube-root-ca.crt\n" +
				"references c1/Pod/web-0 -> c1/ConfigMap/web-config?\n" +
				"references c1/Pod/web-0 -> c1/ServiceAccount/default?\n" +
				"selects c1/Deployment/web -> c1/Pod/web-0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := query.RelatedOptions{GVR: c.gvr, Namespace: "shop", Name: c.obj, Cluster: "c1", Depth: c.depth}
			g, err := r.Related(context.Background(), opt)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmtGraph(g); got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
			ref, err := refRelated(r, opt)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := fmtGraph(g), fmtGraph(ref); got != want {
				t.Errorf("reference differs:\n%s", want)
			}
		})
	}
	// The relation field selector finds the Pods naming a shared object
	// though they have no R/ key for it (sharedReferrers), in a namespace
	// or in all, and only those a caller may see.
	for _, c := range []struct {
		fields string
		vis    *query.Visibility
		want   string
	}{
		{"fleetview.io/references=ConfigMap/kube-root-ca.crt", nil, "api-0 db-0 web-0"},
		{"fleetview.io/references=ServiceAccount/default", nil, "api-0 web-0"},
		{"fleetview.io/references=ServiceAccount/default", &query.Visibility{Grants: []query.Grant{{Namespaces: []string{"other"}}}}, ""},
		{"fleetview.io/references=ConfigMap/web-config", nil, "db-0 web-0"},
	} {
		f, err := query.CompileFields(podsGVR, c.fields)
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range []string{"", "shop"} {
			p, err := r.List(context.Background(), query.ListOptions{GVR: podsGVR, Namespace: ns, Fields: f, Visible: c.vis})
			if err != nil {
				t.Fatalf("%s: %v", c.fields, err)
			}
			var got []string
			for _, o := range p.Items {
				_, name, _ := strings.Cut(string(o.JSON), `"name":"`)
				name, _, _ = strings.Cut(name, `"`)
				got = append(got, name)
			}
			slices.Sort(got)
			if g := strings.Join(got, " "); g != c.want {
				t.Errorf("%s in %q: %q, want %q", c.fields, ns, g, c.want)
			}
		}
	}
}

// TestRelatedTruncatedAndReused: a walk that passes query.MaxRelatedNodes
// at its last hop (the sources of one R/ run, added from their keys)
// stops there as the reference does, says so, and the walks a Reader
// keeps between calls (Reader.walks) answer every later call, a large
// or a small one, as a walk of its own would.
func TestRelatedTruncatedAndReused(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := s.Reader(ReaderOptions{})
	defer r.Close()
	var seq uint64
	// Every Pod names ConfigMap cfg and runs on node n1: one R/ run of
	// 2,100 sources for each.
	pods := make([]*fleetviewv1.ResourceEvent, 2100)
	for i := range pods {
		pods[i] = podObj("c1", fmt.Sprintf("p%04d", i), "web")
	}
	applyAll(t, s, "c1", &seq, pods...)
	applyAll(t, s, "c1", &seq, relObj("c1", cmGVR, "ConfigMap", "cfg", "", ""),
		relObj("c1", deployGVR, "Deployment", "web", "", `,"spec":{"selector":{"matchLabels":{"app":"web"}}}`))
	for _, c := range []struct {
		name      string
		gvr       schema.GroupVersionResource
		obj       string
		depth     int
		kinds     []string
		truncated bool
	}{
		{"from the ConfigMap, depth 1: past the bound at the last hop", cmGVR, "cfg", 1, nil, true},
		{"from a Pod, depth 2: past the bound at the last hop", podsGVR, "p0007", 2, nil, true},
		{"from the Deployment, depth 1: its 2,100 Pods selected", deployGVR, "web", 1, nil, true},
		{"the same walk again, on a kept walk", cmGVR, "cfg", 1, nil, true},
		{"a small walk after the large ones", podsGVR, "p0001", 1, nil, false},
		{"kinds that leave the Pods out", cmGVR, "cfg", 2, []string{"configmaps"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := query.RelatedOptions{GVR: c.gvr, Namespace: "shop", Name: c.obj, Cluster: "c1", Depth: c.depth, Kinds: c.kinds}
			g, err := r.Related(context.Background(), opt)
			if err != nil {
				t.Fatal(err)
			}
			want, err := refRelated(r, opt)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, want) {
				t.Fatalf("Related differs from the reference:\n%s\nreference:\n%s", fmtGraph(g), fmtGraph(want))
			}
			if g.Truncated != c.truncated {
				t.Errorf("truncated %v, want %v", g.Truncated, c.truncated)
			}
			if c.truncated && len(g.Nodes) != query.MaxRelatedNodes {
				t.Errorf("%d nodes, want %d", len(g.Nodes), query.MaxRelatedNodes)
			}
		})
	}
}
