package badger

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// The value index answers counts grouped by a field or a container image
// from keys alone, as the label index does for labels:
//
//	v/<group>/<version>/<resource>/<dimension>/<value>/<namespace>/<name>/<cluster> -> ""
//	X/<group>/<version>/<resource>/<namespace>/<name>/<cluster> -> the object's (dimension, value) pairs
//
// <dimension> is a field path (status.phase) or "image". Every object of
// an indexed resource has at least one v/ entry per dimension (an absent
// field is the value ""), so a scan of one dimension's range visits every
// object. The X/ entry is what the v/ entries of an object are, so an
// update learns which to replace from one small LSM value and writes
// nothing when they did not change (most Pod updates keep the phase).

// IndexedValue is one dimension the value index keeps for a resource.
type IndexedValue struct {
	Resource schema.GroupResource
	// Dimension is "image" or "field:<path>".
	Dimension string
	// Scalar: the dimension has exactly one value per object (the path
	// crosses no array), so a count need not deduplicate objects.
	Scalar bool
}

// DefaultValueIndex is what the store indexes unless Options.ValueIndex
// says otherwise: a Pod's phase, node and images, the dimensions fleets
// are counted by. To index another path, add it here (or pass
// Options.ValueIndex) and rebuild the store (`fleetview rebuild`):
// objects written before a dimension was indexed have no entries, so
// until then a count by it reads the objects (Store.valueIndex knows which
// dimensions are complete).
func DefaultValueIndex() []IndexedValue {
	pods := schema.GroupResource{Resource: "pods"}
	return []IndexedValue{
		{Resource: pods, Dimension: "field:status.phase", Scalar: true},
		{Resource: pods, Dimension: "field:spec.nodeName", Scalar: true},
		{Resource: pods, Dimension: "image"},
	}
}

// nameIndexed are the resources whose names the value index keeps when
// the store keeps relations: the objects a relation field selector most
// often names (fleetview.io/ownedBy=Deployment/web, selectedBy=Service/web).
// Without a namespace such a name has no key of its own (o/ and p/ keys
// are laid out namespace, then name), so finding it read every object
// key of the resource in the list's clusters: 500 Deployments at 50k Pods
// a cluster, half of the ownedBy list's extra cost over a label list
// (docs/benchmarks/relations.md). Their v/ entries under metadata.name
// give it in one seek (namedObjects). A few keys per such object, which
// are about a hundredth of a fleet's Pods.
var nameIndexed = []schema.GroupResource{
	{Group: "apps", Resource: "deployments"}, {Group: "apps", Resource: "replicasets"},
	{Group: "apps", Resource: "statefulsets"}, {Group: "apps", Resource: "daemonsets"},
	{Group: "batch", Resource: "jobs"}, {Group: "batch", Resource: "cronjobs"},
	{Resource: "services"},
}

// nameDimension is the dimension of the name index.
var nameDimension = query.Dimension{Kind: query.DimField, Key: "metadata.name"}

// withNameIndex is the value index configuration conf (nil: the default)
// with the names of nameIndexed, unless the store keeps no relations.
// Like any dimension, on a store that held objects before, they answer
// only after a rebuild (openValueIndex); until then the names are found
// by reading the keys, as before.
func withNameIndex(conf []IndexedValue, noRelations bool) []IndexedValue {
	if noRelations {
		return conf
	}
	if conf == nil {
		conf = DefaultValueIndex()
	}
	out := slices.Clip(conf)
	for _, gr := range nameIndexed {
		out = append(out, IndexedValue{Resource: gr, Dimension: "field:" + nameDimension.Key, Scalar: true})
	}
	return out
}

// valueIndex is the store's value index configuration.
type valueIndex struct {
	dims map[schema.GroupResource][]query.Dimension
	// complete names the "<group>/<resource>/<dimension>" entries kept
	// since the store was empty: only those answer counts.
	complete map[string]bool
	scalar   map[string]bool
}

func viName(gr schema.GroupResource, dim string) string {
	return gr.Group + "/" + gr.Resource + "/" + dim
}

// valueIndexKey records which value index entries were kept since the
// store was empty.
var valueIndexKey = []byte("M\x00valueindex")

// openValueIndex checks the configuration and what the store kept: a
// dimension new to a store that holds objects is not complete (its
// objects have no entries) until a rebuild, and is read from objects.
func openValueIndex(db *bdg.DB, conf []IndexedValue) (*valueIndex, []string, error) {
	if conf == nil {
		conf = DefaultValueIndex()
	}
	vi := &valueIndex{dims: map[schema.GroupResource][]query.Dimension{}, complete: map[string]bool{}, scalar: map[string]bool{}}
	var names []string
	for _, c := range conf {
		d, err := query.ParseDimension(c.Dimension)
		if err != nil || d.IndexName() == "" {
			return nil, nil, fmt.Errorf("value index %s: dimension %q: must be image or field:<path>", c.Resource, c.Dimension)
		}
		n := viName(c.Resource, d.IndexName())
		if slices.Contains(names, n) {
			continue
		}
		vi.dims[c.Resource] = append(vi.dims[c.Resource], d)
		vi.scalar[n] = c.Scalar
		names = append(names, n)
	}
	slices.Sort(names)
	var incomplete []string
	err := db.Update(func(txn *bdg.Txn) error {
		kept, err := keptIndexes(txn)
		if err != nil {
			return err
		}
		now := names
		if kept != nil || !emptyStore(txn) {
			now = nil
			for _, n := range names {
				if slices.Contains(kept, n) {
					now = append(now, n)
				} else {
					incomplete = append(incomplete, n)
				}
			}
		}
		for _, n := range now {
			vi.complete[n] = true
		}
		return txn.Set(valueIndexKey, []byte(strings.Join(now, "\n")))
	})
	return vi, incomplete, err
}

// keptIndexes reads the record of complete entries; nil when the store
// has none (it predates the value index, or is new).
func keptIndexes(txn *bdg.Txn) ([]string, error) {
	it, err := txn.Get(valueIndexKey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v, err := it.ValueCopy(nil)
	if err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return []string{}, nil
	}
	return strings.Split(string(v), "\n"), nil
}

// emptyStore reports whether the store holds no object.
func emptyStore(txn *bdg.Txn) bool {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{'o', sep}})
	defer it.Close()
	it.Rewind()
	return !it.Valid()
}

// of is the dimensions indexed for a resource (nil for most).
func (vi *valueIndex) of(gr schema.GroupResource) []query.Dimension {
	if vi == nil {
		return nil
	}
	return vi.dims[gr]
}

// answers reports whether the index can answer a count of gr by d.
func (vi *valueIndex) answers(gr schema.GroupResource, d query.Dimension) bool {
	return vi != nil && vi.complete[viName(gr, d.IndexName())]
}

// isScalar reports whether d has one value per object of gr.
func (vi *valueIndex) isScalar(gr schema.GroupResource, d query.Dimension) bool {
	return vi != nil && vi.scalar[viName(gr, d.IndexName())]
}

func valuePrefix(g schema.GroupVersionResource, dim string) []byte {
	return append(join("v", g.Group, g.Version, g.Resource, dim), sep)
}

func valueKey(g schema.GroupVersionResource, dim, value, ns, name, cluster string) []byte {
	return join("v", g.Group, g.Version, g.Resource, dim, value, ns, name, cluster)
}

// vpair is one v/ entry of an object.
type vpair struct{ dim, value string }

func encodePairs(ps []vpair) []byte {
	var b []byte
	for _, p := range ps {
		b = appendString(appendString(b, p.dim), p.value)
	}
	return b
}

func decodePairs(b []byte) ([]vpair, error) {
	var ps []vpair
	for len(b) > 0 {
		var p vpair
		var err error
		if p.dim, b, err = cutString(b); err != nil {
			return nil, err
		}
		if p.value, b, err = cutString(b); err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// objectPairs are the index entries an object of gr has, sorted.
func objectPairs(dims []query.Dimension, obj []byte) ([]vpair, error) {
	var ps []vpair
	for _, d := range dims {
		vals, err := d.ObjectValues(obj)
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			ps = append(ps, vpair{dim: d.IndexName(), value: v})
		}
	}
	return ps, nil
}

// storedPairs is the X/ entry at xkey: this batch's, the one in flight,
// else the snapshot's.
func (w *writer) storedPairs(xkey []byte) ([]vpair, error) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil || o.vals == nil {
			continue
		}
		if ps, ok := o.vals[string(xkey)]; ok {
			return ps, nil
		}
	}
	it, err := w.txn.Get(xkey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ps []vpair
	err = it.Value(func(v []byte) (err error) {
		ps, err = decodePairs(v)
		return err
	})
	return ps, err
}

func (w *writer) notePairs(xkey []byte, ps []vpair) {
	if w.ov.vals == nil {
		w.ov.vals = map[string][]vpair{}
	}
	w.ov.vals[string(xkey)] = ps
}

// indexValues keeps the value index of the object at key (an upsert):
// existed says the store may hold an earlier state of it.
func (w *writer) indexValues(gvr schema.GroupVersionResource, key []byte, obj []byte, existed bool) error {
	dims := w.s.vindex.of(gvr.GroupResource())
	if len(dims) == 0 {
		return nil
	}
	ns, name, cluster, err := tail(key)
	if err != nil {
		return err
	}
	xkey := retag(nil, key, 'X')
	var old []vpair
	if existed {
		if old, err = w.storedPairs(xkey); err != nil {
			return err
		}
	}
	now, err := objectPairs(dims, obj)
	if err != nil {
		return err
	}
	if slices.Equal(old, now) {
		return nil
	}
	for _, p := range old {
		if !slices.Contains(now, p) {
			if err := w.del(valueKey(gvr, p.dim, p.value, ns, name, cluster)); err != nil {
				return err
			}
		}
	}
	for _, p := range now {
		if !slices.Contains(old, p) {
			if err := w.set(valueKey(gvr, p.dim, p.value, ns, name, cluster), nil); err != nil {
				return err
			}
		}
	}
	// Noted once every write is in: an entry refused for the
	// transaction's size is applied again in the next one, from the store.
	if err := w.writeCounted(xkey, encodePairs(now), false, w.pairDeltas(gvr, ns, old, now)); err != nil {
		return err
	}
	w.notePairs(xkey, now)
	return nil
}

// unindexValues drops the value index entries of the object at key (a
// delete).
func (w *writer) unindexValues(gvr schema.GroupVersionResource, key []byte) error {
	if len(w.s.vindex.of(gvr.GroupResource())) == 0 {
		return nil
	}
	ns, name, cluster, err := tail(key)
	if err != nil {
		return err
	}
	xkey := retag(nil, key, 'X')
	old, err := w.storedPairs(xkey)
	if err != nil {
		return err
	}
	for _, p := range old {
		if err := w.del(valueKey(gvr, p.dim, p.value, ns, name, cluster)); err != nil {
			return err
		}
	}
	if old != nil {
		if err := w.writeCounted(xkey, nil, true, w.pairDeltas(gvr, ns, old, nil)); err != nil {
			return err
		}
	}
	w.notePairs(xkey, nil)
	return nil
}

// identityStart is where a key's namespace/name/cluster tail starts.
func identityStart(key []byte) (int, error) {
	ns, name, cluster, err := tailBytes(key)
	if err != nil {
		return 0, err
	}
	return len(key) - len(ns) - len(name) - len(cluster) - 2, nil
}

// keyValue is the value a v/ or l/ key holds between prefix and the
// object's tail.
func keyValue(key, prefix []byte, start int) []byte {
	if start-1 < len(prefix) {
		return nil
	}
	return key[len(prefix) : start-1]
}

// openValueIndex sets up the value index, saying which dimensions a count
// must read from objects until a rebuild.
func (s *Store) openValueIndex(conf []IndexedValue) error {
	vi, incomplete, err := openValueIndex(s.db, conf)
	if err != nil {
		return err
	}
	if len(incomplete) > 0 {
		s.log.Warn("value index: these dimensions were not kept for the objects already stored; counts by them read the objects until `fleetview rebuild`", "dimensions", incomplete)
	}
	s.vindex = vi
	return nil
}
