package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// randObj is one object of the randomized graph: where it is and the
// JSON it is written with now.
type randObj struct {
	gvr       schema.GroupVersionResource
	kind      string
	ns, name  string
	uid       string
	clustered bool
}

var (
	nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	saGVR    = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}
	pvcGVR   = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	pvGVR    = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	npGVR    = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"}
	ingGVR   = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}
	hpaGVR   = schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}
)

// randBody is a random JSON body for o (its metadata then spec), naming
// objects that may or may not be cached.
// randEvent is a random change, in cluster c at round, of fleet's object
// i: a delete one time in delOneIn when live (object index -> uid) holds
// it, else an upsert, under a new uid when it is absent or one time in
// six. live follows the event.
func randEvent(rng *rand.Rand, c string, fleet []randObj, live map[int]string, i, round, delOneIn int) *fleetviewv1.ResourceEvent {
	o := fleet[i]
	uid, ok := live[i]
	e := &fleetviewv1.ResourceEvent{Cluster: c, Gvr: stream.ProtoGVR(o.gvr), Kind: o.kind, Namespace: o.ns, Name: o.name,
		ResourceVersion: fmt.Sprint(round + 1), Namespaced: !o.clustered}
	if ok && rng.IntN(delOneIn) == 0 {
		e.Type, e.Uid = fleetviewv1.EventType_EVENT_TYPE_DELETE, uid
		delete(live, i)
		return e
	}
	if !ok || rng.IntN(6) == 0 {
		uid = fmt.Sprintf("%s-%s-%s-%s-%d-%d", c, o.kind, o.ns, o.name, round, rng.IntN(1000))
	}
	o.uid = uid
	e.Type, e.Uid, e.Object = fleetviewv1.EventType_EVENT_TYPE_UPSERT, uid, []byte(randBody(rng, o))
	live[i] = uid
	return e
}

func randBody(rng *rand.Rand, o randObj) string {
	pick := func(prefix string, n int) string { return fmt.Sprintf("%s%d", prefix, rng.IntN(n)) }
	lbls := fmt.Sprintf(`"labels":{"app":%q`, pick("d", 4))
	if rng.IntN(2) == 0 {
		lbls += fmt.Sprintf(`,"tier":%q`, pick("t", 2))
	}
	lbls += "}"
	meta := fmt.Sprintf(`"name":%q,"uid":%q,%s`, o.name, o.uid, lbls)
	if !o.clustered {
		meta += fmt.Sprintf(`,"namespace":%q`, o.ns)
	}
	owner := func(api, kind, name string) {
		if rng.IntN(4) > 0 {
			meta += fmt.Sprintf(`,"ownerReferences":[{"apiVersion":%q,"kind":%q,"name":%q,"uid":"x"}]`, api, kind, name)
		}
	}
	selector := func() string {
		switch rng.IntN(4) {
		case 0:
			return fmt.Sprintf(`{"matchExpressions":[{"key":"tier","operator":"In","values":[%q]}]}`, pick("t", 2))
		case 1:
			return fmt.Sprintf(`{"matchLabels":{"app":%q},"matchExpressions":[{"key":"tier","operator":"NotIn","values":["t0"]}]}`, pick("d", 4))
		}
		return fmt.Sprintf(`{"matchLabels":{"app":%q}}`, pick("d", 4))
	}
	spec := `{}`
	switch o.kind {
	case "Deployment":
		spec = `{"selector":` + selector() + `}`
	case "ReplicaSet":
		owner("apps/v1", "Deployment", pick("d", 4))
		spec = `{"selector":` + selector() + `}`
	case "Pod":
		owner("apps/v1", "ReplicaSet", pick("r", 4))
		// Most Pods name the namespace's shared objects (relations.Shared),
		// as a service-account token's volume and a Pod naming no
		// ServiceAccount do.
		sa, root := pick("sa", 2), ""
		if rng.IntN(3) > 0 {
			sa = "default"
		}
		if rng.IntN(4) > 0 {
			root = `,{"name":"t","projected":{"sources":[{"configMap":{"name":"kube-root-ca.crt"}}]}}`
		}
		spec = fmt.Sprintf(`{"nodeName":%q,"serviceAccountName":%q,"volumes":[{"name":"a","configMap":{"name":%q}},{"name":"b","secret":{"secretName":%q}},{"name":"c","persistentVolumeClaim":{"claimName":%q}}%s],"containers":[{"name":"x","image":%q,"envFrom":[{"configMapRef":{"name":%q}}]}]}`,
			pick("n", 3), sa, pick("cm", 3), pick("s", 2), pick("pvc", 2), root, pick("img", 3), pick("cm", 3))
	case "Service":
		spec = fmt.Sprintf(`{"selector":{"app":%q}}`, pick("d", 4))
	case "NetworkPolicy":
		spec = `{"podSelector":{}}`
		if rng.IntN(2) == 0 {
			spec = `{"podSelector":` + selector() + `}`
		}
	case "PersistentVolumeClaim":
		spec = fmt.Sprintf(`{"volumeName":%q}`, pick("pv", 2))
	case "Ingress":
		spec = fmt.Sprintf(`{"defaultBackend":{"service":{"name":%q}}}`, pick("svc", 3))
	case "HorizontalPodAutoscaler":
		spec = fmt.Sprintf(`{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":%q}}`, pick("d", 4))
	case "ConfigMap", "ServiceAccount":
		if rng.IntN(3) == 0 {
			owner("apps/v1", "Deployment", pick("d", 4))
		}
	}
	api := o.gvr.Version
	if o.gvr.Group != "" {
		api = o.gvr.Group + "/" + o.gvr.Version
	}
	return fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{%s},"spec":%s,"status":{"phase":%q}}`, api, o.kind, meta, spec, pick("p", 2))
}

// randFleet is every object the randomized graph may hold, per cluster.
func randFleet() []randObj {
	var out []randObj
	add := func(gvr schema.GroupVersionResource, kind, prefix string, n int, clustered bool) {
		for _, ns := range []string{"a", "b"} {
			if clustered && ns == "b" {
				return
			}
			for i := range n {
				o := randObj{gvr: gvr, kind: kind, ns: ns, name: fmt.Sprintf("%s%d", prefix, i), clustered: clustered}
				if clustered {
					o.ns = ""
				}
				out = append(out, o)
			}
		}
	}
	add(deployGVR, "Deployment", "d", 4, false)
	add(rsGVR, "ReplicaSet", "r", 4, false)
	add(podsGVR, "Pod", "p", 12, false)
	add(svcGVR, "Service", "svc", 3, false)
	add(cmGVR, "ConfigMap", "cm", 2, false) // cm2 is named, never cached
	add(saGVR, "ServiceAccount", "sa", 1, false)
	add(pvcGVR, "PersistentVolumeClaim", "pvc", 1, false)
	add(npGVR, "NetworkPolicy", "np", 1, false)
	add(ingGVR, "Ingress", "ing", 1, false)
	add(hpaGVR, "HorizontalPodAutoscaler", "hpa", 1, false)
	add(nodesGVR, "Node", "n", 2, true)
	add(pvGVR, "PersistentVolume", "pv", 1, true)
	// The shared objects (relations.Shared): cached in namespace a, only
	// named in b.
	out = append(out, randObj{gvr: cmGVR, kind: "ConfigMap", ns: "a", name: "kube-root-ca.crt"},
		randObj{gvr: saGVR, kind: "ServiceAccount", ns: "a", name: "default"})
	return out
}

// TestRelatedMatchesReference compares Related, which reads each node
// from its E/ entry, with refRelated, the walk that read every node's
// object record, on a random graph of two clusters changed over rounds
// of upserts (new labels, edges, uids) and deletes, batch by batch: from
// every object, at depths 1 or 3, with or without kinds, for callers
// who see everything, no Secrets or Pods of cluster c2, or one namespace.
func TestRelatedMatchesReference(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := s.Reader(ReaderOptions{})
	t.Cleanup(func() { r.Close() })
	rng := rand.New(rand.NewPCG(49, 3))
	fleet := randFleet()
	clusters := []string{"c1", "c2"}
	seqs := map[string]*uint64{"c1": new(uint64), "c2": new(uint64)}
	live := map[string]map[int]string{"c1": {}, "c2": {}} // object index -> uid
	visibilities := []*query.Visibility{
		nil,
		{Grants: []query.Grant{{Except: []schema.GroupResource{{Resource: "secrets"}}}, {Clusters: []string{"c1"}, Resources: []schema.GroupResource{{Resource: "secrets"}}}}},
		{Grants: []query.Grant{{Clusters: []string{"c1"}}, {Clusters: []string{"c2"}, Except: []schema.GroupResource{{Resource: "pods"}}}}},
		{Grants: []query.Grant{{Namespaces: []string{"a"}}}},
	}
	kindsOpts := [][]string{nil, {"pod", "service", "replicaset"}, {"Deployment", "configmaps", "node"}}
	compared, big := 0, 0
	// compare checks Related against refRelated from every object.
	compare := func(round int) {
		t.Helper()
		for _, c := range clusters {
			for _, o := range fleet {
				// Six of the 24 combinations of depth, kinds and visibility.
				for range 6 {
					depth, kinds, vi := 1+2*rng.IntN(2), kindsOpts[rng.IntN(len(kindsOpts))], rng.IntN(len(visibilities))
					opt := query.RelatedOptions{GVR: o.gvr, Namespace: o.ns, Name: o.name, Cluster: c, Depth: depth, Kinds: kinds, Visible: visibilities[vi]}
					got, gerr := r.Related(context.Background(), opt)
					want, werr := refRelated(r, opt)
					if !reflect.DeepEqual(got, want) || fmt.Sprint(gerr) != fmt.Sprint(werr) {
						t.Fatalf("round %d, %s %s/%s in %s, depth %d, kinds %v, visibility %d:\nRelated (%v):\n%s\nreference (%v):\n%s",
							round, o.kind, o.ns, o.name, c, depth, kinds, vi, gerr, fmtGraph(got), werr, fmtGraph(want))
					}
					compared++
					if len(want.Edges) >= 10 && strings.Contains(fmtGraph(want), "selects") {
						big++
					}
				}
			}
		}
	}
	batches := func(round int) {
		t.Helper()
		for _, c := range clusters {
			// Three batches per round; an object may change twice in one.
			for range 3 {
				var b []feed.Event
				for range 25 {
					e := randEvent(rng, c, fleet, live[c], rng.IntN(len(fleet)), round, 5)
					*seqs[c]++
					b = append(b, ev(*seqs[c], e))
				}
				if err := s.Apply(context.Background(), c, b, *seqs[c]); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkReverseValues(t, s)
	}
	for round := range 5 {
		batches(round)
		compare(round)
	}
	// A store whose R/ keys have the form before 2026-12-07 13:00 (the
	// edge type spelled out, the source's namespace repeated, the uid as
	// text) gives the same answers; changed by this binary, its old keys
	// are replaced, none left behind (checkReverseValues), and the
	// answers stay the same with both forms in the store.
	// A store written before 2026-12-07 15:00 has an R/ key of the
	// current form for every Pod's reference to a shared object, and the
	// type byte 'R': the same answers, and rewritten by this binary, the
	// keys are deleted (checkReverseValues).
	if n := toKeyedShared(t, s); n == 0 {
		t.Fatal("no unkeyed edges to key")
	}
	checkReverseValues(t, s)
	compare(5)
	batches(5)
	compare(5)
	if n := toOldReverseForm(t, s, false); n == 0 {
		t.Fatal("no R/ keys to rewrite")
	}
	checkReverseValues(t, s)
	compare(5)
	for round := 6; round < 8; round++ {
		batches(round)
		compare(round)
	}
	// A store whose R/ values were written before they carried the
	// source (empty) gives the same answers: the walk reads those sources'
	// E/ entries.
	if n := toOldReverseForm(t, s, true); n == 0 {
		t.Fatal("no R/ keys to empty")
	}
	compare(8)
	// The comparison meant something: most answers are graphs with
	// selections, owners and references.
	if big < compared/8 {
		t.Fatalf("only %d of %d answers have 10 edges or more with a selection", big, compared)
	}
	t.Logf("%d answers compared, %d with 10 edges or more", compared, big)
}

// checkReverseValues checks that every R/ key, of either form, is an
// edge its source's E/ entry holds, with the form the entry says, and
// its value the source's kind and uid as the E/ header has them (what
// the walk's last hop takes instead of reading the E/ entry); and that
// every edge of an E/ entry has its R/ key, but for a Pod's references to
// shared objects (unkeyed), which have none.
func checkReverseValues(t *testing.T, s *Store) {
	t.Helper()
	n, empty := 0, 0
	err := s.db.View(func(txn *bdg.Txn) error {
		edges := map[string]bool{} // R/ keys the E/ entries name
		it := txn.NewIterator(bdg.IteratorOptions{})
		defer it.Close()
		pre := []byte{'E', sep}
		for it.Seek(pre); it.ValidForPrefix(pre); it.Next() {
			var p [6][]byte
			if !splitN(it.Item().Key()[len(pre):], p[:]) {
				return fmt.Errorf("E/ key %q", it.Item().Key())
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			rel, err := decodeRelations(v)
			if err != nil {
				return err
			}
			gvr := schema.GroupVersionResource{Group: string(p[1]), Version: string(p[2]), Resource: string(p[3])}
			for i, r := range rel.Refs {
				if !rel.keyed(i) {
					if !unkeyed(gvr, r) {
						return fmt.Errorf("E/ key %q: edge %v unkeyed", it.Item().Key(), r)
					}
					continue
				}
				edges[string(reverseKeyOf(rel.old(i), string(p[0]), r.Target, r.Type, gvr, string(p[4]), string(p[5])))] = true
			}
		}
		err := eachReverseKey(it, func(key []byte, p *[6][]byte, src reverseParts, v []byte) error {
			if !edges[string(key)] {
				return fmt.Errorf("R/ key %q (older form %v): no E/ entry has its edge", key, src.old)
			}
			delete(edges, string(key))
			kind, uid, ok, err := cutReverseValue(v, src.old)
			if err != nil {
				return fmt.Errorf("R/ key %q: value %q: %v", key, v, err)
			}
			n++
			if !ok {
				empty++
				return nil
			}
			gvr := schema.GroupVersionResource{Group: string(src.group), Version: string(src.version), Resource: string(src.resource)}
			ev, err := get(txn, relKey(string(p[0]), gvr, string(src.ns), string(src.name)))
			if err != nil {
				return err
			}
			hd, _, err := cutRelHeader(ev, false)
			if err != nil {
				return err
			}
			if hd.kind != kind || hd.uid != uid {
				return fmt.Errorf("R/ key %q: value says %s %s, the E/ header %s %s", key, kind, uid, hd.kind, hd.uid)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for k := range edges {
			return fmt.Errorf("edge %q of an E/ entry has no R/ key", k)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == empty {
		t.Fatalf("%d R/ keys, %d with an empty value: none checked", n, empty)
	}
}

// eachReverseKey calls fn with every R/ key of it, its parts (splitFirst),
// its source (cutReverseKey) and a copy of its value.
func eachReverseKey(it *bdg.Iterator, fn func(key []byte, p *[6][]byte, src reverseParts, v []byte) error) error {
	pre := []byte{'R', sep}
	for it.Seek(pre); it.ValidForPrefix(pre); it.Next() {
		key := it.Item().KeyCopy(nil)
		var p [6][]byte
		if !splitFirst(key[len(pre):], p[:]) {
			return fmt.Errorf("R/ key %q", key)
		}
		src, ok := cutReverseKey(p[5], p[3])
		if !ok {
			return fmt.Errorf("R/ key %q: no source", key)
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return err
		}
		if err := fn(key, &p, src, v); err != nil {
			return err
		}
	}
	return nil
}

// toOldReverseForm rewrites the store's relations as a binary before
// 2026-12-07 13:00 wrote them: every R/ key of the current form in the
// older form (oldReverseKey), its value the kind and uid as text (empty
// when empty: before 2026-12-07 05:00), and each E/ entry's edges with
// the older type bytes, a Pod's reference to a shared object (unkeyed)
// with the R/ key the older binary wrote for it; it returns how many R/
// keys it rewrote or emptied.
func toOldReverseForm(t *testing.T, s *Store, empty bool) int {
	t.Helper()
	type kv struct{ k, v []byte }
	var dels [][]byte
	var sets []kv
	err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{})
		defer it.Close()
		err := eachReverseKey(it, func(key []byte, p *[6][]byte, src reverseParts, v []byte) error {
			kind, uid, known, err := cutReverseValue(v, src.old)
			if err != nil {
				return err
			}
			var ov []byte
			if known && !empty {
				ov = appendString(appendString(nil, kind), uid)
			}
			target := relations.Target{Group: string(p[1]), Kind: string(p[2]), Namespace: string(p[3]), Name: string(p[4])}
			gvr := schema.GroupVersionResource{Group: string(src.group), Version: string(src.version), Resource: string(src.resource)}
			ok2 := oldReverseKey(string(p[0]), target, src.typ, gvr, string(src.ns), string(src.name))
			if !src.old {
				dels = append(dels, key)
			}
			sets = append(sets, kv{ok2, ov})
			return nil
		})
		if err != nil {
			return err
		}
		return eachEdgeEntry(it, func(e *edgeEntry) error {
			nv := e.head
			for i, r := range e.refs {
				if !e.forms.keyed(i) {
					var ov []byte
					if !empty {
						ov = appendString(appendString(nil, e.hd.kind), e.hd.uid)
					}
					sets = append(sets, kv{oldReverseKey(string(e.p[0]), r.Target, r.Type, e.gvr(), string(e.p[4]), string(e.p[5])), ov})
				}
				nv = appendEdge(nv, map[relations.EdgeType]byte{relations.Owner: 'o', relations.References: 'r'}[r.Type], r.Target)
			}
			sets = append(sets, kv{e.key, append(nv, e.sel...)})
			return nil
		})
	})
	if err == nil {
		err = s.db.Update(func(txn *bdg.Txn) error {
			for _, k := range dels {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			for _, e := range sets {
				if err := txn.Set(e.k, e.v); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range sets {
		if e.k[0] == 'R' {
			n++
		}
	}
	return n
}

// toKeyedShared rewrites the store's unkeyed edges (a Pod's references
// to shared objects) as a binary before 2026-12-07 15:00 wrote them: the
// type byte 'R' and an R/ key of the current form (reverseKey) whose value
// is the Pod's kind and uid; it returns how many edges it rewrote.
func toKeyedShared(t *testing.T, s *Store) int {
	t.Helper()
	type kv struct{ k, v []byte }
	var sets []kv
	n := 0
	err := s.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{})
		defer it.Close()
		return eachEdgeEntry(it, func(e *edgeEntry) error {
			nv := e.head
			changed := false
			for i, r := range e.refs {
				c := edgeCodes[r.Type]
				switch {
				case e.forms.old(i):
					c = e.forms[i]
				case !e.forms.keyed(i):
					changed = true
					n++
					sets = append(sets, kv{reverseKey(string(e.p[0]), r.Target, r.Type, e.gvr(), string(e.p[4]), string(e.p[5])), reverseValue(e.hd.kind, e.hd.uid)})
				}
				nv = appendEdge(nv, c, r.Target)
			}
			if changed {
				sets = append(sets, kv{e.key, append(nv, e.sel...)})
			}
			return nil
		})
	})
	if err == nil {
		err = s.db.Update(func(txn *bdg.Txn) error {
			for _, e := range sets {
				if err := txn.Set(e.k, e.v); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// edgeEntry is one E/ entry cut into its parts, for the rewrites into
// older forms: p is the key's cluster, group, version, resource,
// namespace and name; head the value up to its edges, with their count.
type edgeEntry struct {
	key   []byte
	p     [6][]byte
	hd    relHead
	head  []byte
	refs  []relations.Ref
	forms refForms
	sel   []byte
}

func (e *edgeEntry) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: string(e.p[1]), Version: string(e.p[2]), Resource: string(e.p[3])}
}

// eachEdgeEntry calls fn with each E/ entry it walks, cut.
func eachEdgeEntry(it *bdg.Iterator, fn func(*edgeEntry) error) error {
	pre := []byte{'E', sep}
	for it.Seek(pre); it.ValidForPrefix(pre); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return err
		}
		e := edgeEntry{key: it.Item().KeyCopy(nil)}
		var rest []byte
		if e.hd, rest, err = cutRelHeader(v, false); err != nil {
			return err
		}
		if e.refs, e.forms, e.sel, err = cutRefs(rest); err != nil {
			return err
		}
		if !splitN(e.key[2:], e.p[:]) {
			return fmt.Errorf("E/ key %q", e.key)
		}
		e.head = binary.AppendUvarint(bytes.Clone(v[:len(v)-len(rest)]), uint64(len(e.refs)))
		if err := fn(&e); err != nil {
			return err
		}
	}
	return nil
}

// appendEdge appends one edge of an E/ value: its type byte and target.
func appendEdge(b []byte, code byte, t relations.Target) []byte {
	b = append(b, code)
	for _, x := range []string{t.Group, t.Kind, t.Namespace, t.Name} {
		b = appendString(b, x)
	}
	return b
}
