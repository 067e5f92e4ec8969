package badger

import (
	"bytes"
	"context"
	"fmt"
	"strconv"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
)

// Count groups the selected objects by o.By. It reads keys, not objects,
// when it can: a cluster or namespace is in every key, a label in the
// label index (l/), a field or image in the value index (v/, for the
// dimensions it keeps). One index range drives the scan (the first field
// or image dimension's, else the resource's primary keys), a label
// selector is resolved to the set of matching objects from the label
// index first and each scanned key looked up in it, and further label or
// value dimensions are read into a map from their ranges. A field
// selector, or a field the value index does not keep, reads every
// selected object instead. Before all of these, the counters
// (counters.go) answer a count without selectors from O(groups) keys.
// Counts.Scanned says which served: "counters", "index" or "objects"
// (the costliest, when resources differ).
func (r *Reader) Count(_ context.Context, o query.CountOptions) (query.Counts, error) {
	txn := r.db.NewTransaction(false)
	defer txn.Discard()
	t := query.NewTally()
	scanned := ""
	if o.Clusters != nil && len(o.Clusters) == 0 {
		return t.Counts("index"), nil
	}
	for _, gvr := range o.Resources() {
		c := counter{o: &o, txn: txn, gvr: gvr, gr: gvr.GroupResource(), t: t, vi: r.vindex, clusters: clusterSet(o.Clusters)}
		var err error
		switch {
		case c.fromCounters(r.counters):
			scanned = query.CostlierScan(scanned, "counters")
			err = c.counted()
		case c.fromIndex():
			scanned = query.CostlierScan(scanned, "index")
			err = c.indexed()
		default:
			scanned = query.CostlierScan(scanned, "objects")
			err = c.objects()
		}
		if err != nil {
			return query.Counts{}, err
		}
	}
	return t.Counts(scanned), nil
}

// counter counts one resource into a tally.
type counter struct {
	o        *query.CountOptions
	txn      *bdg.Txn
	gvr      schema.GroupVersionResource
	gr       schema.GroupResource
	t        *query.Tally
	vi       *valueIndex
	clusters map[string]bool
	// seen: visibility verdicts by cluster and namespace.
	seen   map[string]bool
	intern map[string]string
	// row, joined: the current object's group, reused.
	vals   [][]string
	row    []string
	joined []byte
}

// fromIndex reports whether the indexes answer the count.
func (c *counter) fromIndex() bool {
	if c.o.Fields != nil {
		return false
	}
	for _, d := range c.o.By {
		if d.IndexName() != "" && !c.vi.answers(c.gr, d) {
			return false
		}
	}
	return true
}

func (c *counter) str(b []byte) string {
	if s, ok := c.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	c.intern[s] = s
	return s
}

// visible reports whether the caller sees an object in cluster and ns.
func (c *counter) visible(cluster, ns []byte) bool {
	if c.o.Visible == nil {
		return true
	}
	k := append(append(append(c.joined[:0], cluster...), sep), ns...)
	c.joined = k
	if v, ok := c.seen[string(k)]; ok {
		return v
	}
	v := c.o.Visible.Allows(c.gr, string(cluster), string(ns))
	c.seen[string(k)] = v
	return v
}

// kindValue names the resource in the kind dimension.
func (c *counter) kindValue() string {
	if c.gvr.Group == "" {
		return c.gvr.Resource
	}
	return c.gvr.Resource + "." + c.gvr.Group
}

// selected applies the key-level filters: clusters, namespace, visibility.
func (c *counter) selected(ns, cluster []byte) bool {
	if c.clusters != nil && !c.clusters[string(cluster)] {
		return false
	}
	if c.o.Namespace != "" && string(ns) != c.o.Namespace {
		return false
	}
	return c.visible(cluster, ns)
}

// tally counts one object in every group its values make (the product of
// each dimension's values).
func (c *counter) tally(vals [][]string) {
	if len(vals) == 0 {
		return // the total alone
	}
	single := true
	for _, v := range vals {
		single = single && len(v) == 1
	}
	if single { // most objects: one group, built without the recursion
		c.joined = c.joined[:0]
		for i, v := range vals {
			if i > 0 {
				c.joined = append(c.joined, sep)
			}
			c.joined = append(c.joined, v[0]...)
			c.row[i] = v[0]
		}
		c.t.Add(c.joined, c.row, 1)
		return
	}
	var rec func(i int)
	rec = func(i int) {
		if i == len(vals) {
			c.joined = c.joined[:0]
			for j, v := range c.row {
				if j > 0 {
					c.joined = append(c.joined, sep)
				}
				c.joined = append(c.joined, v...)
			}
			c.t.Add(c.joined, c.row, 1)
			return
		}
		for _, v := range vals[i] {
			c.row[i] = v
			rec(i + 1)
		}
	}
	rec(0)
}

// indexed counts from keys alone.
func (c *counter) indexed() error {
	c.seen, c.intern = map[string]bool{}, map[string]string{}
	include, exclude, err := c.labelSets()
	if err != nil {
		return err
	}
	// The driving range: the first value dimension's, else the objects'.
	drive := -1
	for i, d := range c.o.By {
		if d.IndexName() != "" {
			drive = i
			break
		}
	}
	// Other label and value dimensions: each object's values, by its tail.
	side := make([]map[string][]string, len(c.o.By))
	for i, d := range c.o.By {
		switch {
		case i == drive:
		case d.Kind == query.DimLabel:
			side[i] = c.readRange(join("l", c.gvr.Group, c.gvr.Version, c.gvr.Resource, d.Key))
		case d.IndexName() != "":
			side[i] = c.readRange(join("v", c.gvr.Group, c.gvr.Version, c.gvr.Resource, d.IndexName()))
		}
	}
	var prefix []byte
	dedup := false
	var seenObj map[string]struct{}
	if drive >= 0 {
		prefix = valuePrefix(c.gvr, c.o.By[drive].IndexName())
		if !c.vi.isScalar(c.gr, c.o.By[drive]) {
			dedup, seenObj = true, map[string]struct{}{}
		}
	} else {
		prefix = objPrefix(c.gvr)
		if c.o.Namespace != "" {
			prefix = append(append(prefix, c.o.Namespace...), sep)
		}
	}
	c.row = make([]string, len(c.o.By))
	vals := make([][]string, len(c.o.By))
	one := make([][1]string, len(c.o.By))
	blank := []string{""}
	visit := func(k []byte) error {
		ns, name, cluster, err := tailBytes(k)
		if err != nil {
			return err
		}
		if !c.selected(ns, cluster) {
			return nil
		}
		id := k[len(k)-len(ns)-len(name)-len(cluster)-2:]
		if include != nil {
			if _, ok := include[string(id)]; !ok {
				return nil
			}
		}
		if exclude != nil {
			if _, ok := exclude[string(id)]; ok {
				return nil
			}
		}
		for i, d := range c.o.By {
			switch {
			case i == drive:
				// The range is sorted by value: a run of keys shares it.
				if v := keyValue(k, prefix, len(k)-len(id)); string(v) != one[i][0] {
					one[i][0] = c.str(v)
				}
				vals[i] = one[i][:]
			case d.Kind == query.DimCluster:
				one[i][0] = c.str(cluster)
				vals[i] = one[i][:]
			case d.Kind == query.DimNamespace:
				one[i][0] = c.str(ns)
				vals[i] = one[i][:]
			case d.Kind == query.DimKind:
				one[i][0] = c.kindValue()
				vals[i] = one[i][:]
			default:
				if v, ok := side[i][string(id)]; ok {
					vals[i] = v
				} else {
					vals[i] = blank
				}
			}
		}
		c.tally(vals)
		if dedup {
			if _, ok := seenObj[string(id)]; ok {
				return nil
			}
			seenObj[string(id)] = struct{}{}
		}
		c.t.Total++
		return nil
	}
	if drive < 0 && include != nil {
		// The label selector's objects are the count's: no range to scan
		// (a selective selector costs its own objects, not the resource's).
		for id := range include {
			if err := visit([]byte(id)); err != nil {
				return err
			}
		}
		return nil
	}
	it := c.txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		if err := visit(it.Item().Key()); err != nil {
			return err
		}
	}
	return nil
}

// readRange reads an index range laid out as <prefix>/<value>/<ns>/<name>/<cluster>
// into each object's values, by its tail (namespace, name, cluster).
func (c *counter) readRange(p []byte) map[string][]string {
	prefix := append(p, sep)
	out := map[string][]string{}
	it := c.txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		start, err := identityStart(k)
		if err != nil {
			continue
		}
		id := k[start:]
		out[string(id)] = append(out[string(id)], c.str(keyValue(k, prefix, start)))
	}
	return out
}

// labelSets resolves the label selector from the label index: the objects
// its positive requirements select (nil: every object) and those its
// negative ones exclude.
func (c *counter) labelSets() (include, exclude map[string]struct{}, err error) {
	reqs, _ := c.o.LabelSelector().Requirements()
	for _, r := range reqs {
		set := map[string]struct{}{}
		keyRange := append(join("l", c.gvr.Group, c.gvr.Version, c.gvr.Resource, r.Key()), sep)
		var keep func(v []byte) bool
		neg := false
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In, selection.Exists:
			keep = func(v []byte) bool { return r.Operator() == selection.Exists || r.Values().Has(string(v)) }
		case selection.NotEquals, selection.NotIn, selection.DoesNotExist:
			neg = true
			keep = func(v []byte) bool { return r.Operator() == selection.DoesNotExist || r.Values().Has(string(v)) }
		case selection.GreaterThan, selection.LessThan:
			bound, perr := strconv.ParseInt(r.Values().List()[0], 10, 64)
			if perr != nil {
				return nil, nil, fmt.Errorf("%w: labelSelector: %s: %v", query.ErrInvalid, r.String(), perr)
			}
			keep = func(v []byte) bool {
				n, err := strconv.ParseInt(string(v), 10, 64)
				return err == nil && ((r.Operator() == selection.GreaterThan && n > bound) || (r.Operator() == selection.LessThan && n < bound))
			}
		default:
			return nil, nil, fmt.Errorf("%w: labelSelector: operator %s", query.ErrInvalid, r.Operator())
		}
		c.scanLabels(keyRange, r, keep, set)
		switch {
		case neg && exclude == nil:
			exclude = set
		case neg:
			for k := range set {
				exclude[k] = struct{}{}
			}
		case include == nil:
			include = set
		default:
			for k := range include {
				if _, ok := set[k]; !ok {
					delete(include, k)
				}
			}
		}
	}
	return include, exclude, nil
}

// scanLabels adds to set the objects whose label (keyRange) keep accepts:
// one value's range when the requirement names values it is equal to.
func (c *counter) scanLabels(keyRange []byte, r labels.Requirement, keep func([]byte) bool, set map[string]struct{}) {
	ranges := [][]byte{keyRange}
	switch r.Operator() {
	case selection.Equals, selection.DoubleEquals, selection.In, selection.NotEquals, selection.NotIn:
		ranges = ranges[:0]
		for _, v := range r.Values().List() {
			ranges = append(ranges, append(append(bytes.Clone(keyRange), v...), sep))
		}
	}
	for _, p := range ranges {
		it := c.txn.NewIterator(bdg.IteratorOptions{Prefix: p, PrefetchValues: false})
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			start, err := identityStart(k)
			if err != nil || !keep(keyValue(k, keyRange, start)) {
				continue
			}
			set[string(k[start:])] = struct{}{}
		}
		it.Close()
	}
}

// objects counts by reading every selected object: a field selector, or
// a dimension no index keeps. It costs the objects' bytes (a Pod ~3 KB
// from the value log) where the indexes cost ~60 bytes of key.
func (c *counter) objects() error {
	c.seen, c.intern = map[string]bool{}, map[string]string{}
	prefix := objPrefix(c.gvr)
	if c.o.Namespace != "" {
		prefix = append(append(prefix, c.o.Namespace...), sep)
	}
	sel := c.o.LabelSelector()
	needLabels := !sel.Empty()
	for _, d := range c.o.By {
		needLabels = needLabels || d.Kind == query.DimLabel
	}
	c.row = make([]string, len(c.o.By))
	vals := make([][]string, len(c.o.By))
	it := c.txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		ns, name, cluster, err := tailBytes(k)
		if err != nil {
			return err
		}
		if !c.selected(ns, cluster) {
			continue
		}
		var rec record
		err = item.Value(func(v []byte) (err error) {
			rec, err = decodeRecord(v, needLabels)
			if err != nil {
				return err
			}
			if !sel.Matches(labels.Set(rec.labels)) {
				rec.json = nil
				return nil
			}
			ok, err := c.o.Fields.Matches(string(ns), string(name), rec.json)
			if err != nil || !ok {
				rec.json = nil
				return err
			}
			for i, d := range c.o.By {
				switch d.Kind {
				case query.DimCluster:
					vals[i] = []string{c.str(cluster)}
				case query.DimNamespace:
					vals[i] = []string{c.str(ns)}
				case query.DimKind:
					vals[i] = []string{c.kindValue()}
				case query.DimLabel:
					vals[i] = []string{rec.labels[d.Key]}
				default:
					if vals[i], err = d.ObjectValues(v[len(v)-len(rec.json):]); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("count %s: %s/%s in %s: %w", c.gr, ns, name, cluster, err)
		}
		if rec.json == nil {
			continue
		}
		c.tally(vals)
		c.t.Total++
	}
	return nil
}

// Count implements the store's counter.
func (b *Backend) Count(ctx context.Context, o query.CountOptions) (query.Counts, error) {
	return b.reader.Count(ctx, o)
}
