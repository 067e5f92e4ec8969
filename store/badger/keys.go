package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/fleetview/fleetview/internal/rawjson"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

const sep = 0

func join(parts ...string) []byte {
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, sep)
		}
		b = append(b, p...)
	}
	return b
}

// appendJoin is join appending to b: a caller that looks keys up in a
// buffer it reuses allocates none.
func appendJoin(b []byte, parts ...string) []byte {
	for i, p := range parts {
		if i > 0 {
			b = append(b, sep)
		}
		b = append(b, p...)
	}
	return b
}

func gvrParts(g schema.GroupVersionResource) []string {
	return []string{g.Group, g.Version, g.Resource}
}

func objPrefix(g schema.GroupVersionResource) []byte { return resourcePrefix("o", g) }

// resourcePrefix is the range of one resource in a key family laid out as
// <family>/<group>/<version>/<resource>/<namespace>/<name>/<cluster>.
func resourcePrefix(family string, g schema.GroupVersionResource) []byte {
	return append(join(append([]string{family}, gvrParts(g)...)...), sep)
}

// retag is key (of the object or search family) in family f, the same
// object's key there: the two families share their layout.
func retag(dst, key []byte, f byte) []byte {
	return append(append(dst[:0], f), key[1:]...)
}

func objKey(g schema.GroupVersionResource, ns, name, cluster string) []byte {
	return join("o", g.Group, g.Version, g.Resource, ns, name, cluster)
}

// clusterPrefix and clusterKey are the per-cluster index: one empty entry
// per object, under its cluster first, then resource, namespace and name,
// and the cluster again last, so the key ends as a primary key does (tail
// reads it) and an entry's object key is objPrefix + key[len(prefix):], as
// for the label index. A per-cluster list scans its cluster's entries
// instead of every cluster's objects of the resource: at 200 clusters of
// 100 Pods in one namespace, a per-cluster list read 20,000 keys for 100.
func clusterPrefix(cluster string, g schema.GroupVersionResource) []byte {
	return append(join("p", cluster, g.Group, g.Version, g.Resource), sep)
}

func clusterKey(g schema.GroupVersionResource, ns, name, cluster string) []byte {
	return join("p", cluster, g.Group, g.Version, g.Resource, ns, name, cluster)
}

func labelPrefix(g schema.GroupVersionResource, k, v string) []byte {
	return append(join("l", g.Group, g.Version, g.Resource, k, v), sep)
}

func labelKey(g schema.GroupVersionResource, k, v, ns, name, cluster string) []byte {
	return join("l", g.Group, g.Version, g.Resource, k, v, ns, name, cluster)
}

// searchPrefix and searchKey are the search index: per object, under the
// same resource, namespace, name and cluster as its primary key, what a
// free-text search matches beyond the key (materializer.LabelsAndSearchText: label
// and annotation keys and values), ~100 bytes in the value log
// (writer.setSearch). A search reads it instead of the object (3 KB for a
// Pod).
func searchPrefix(g schema.GroupVersionResource) []byte { return resourcePrefix("s", g) }

func searchKey(g schema.GroupVersionResource, ns, name, cluster string) []byte {
	return join("s", g.Group, g.Version, g.Resource, ns, name, cluster)
}

func uidPrefix(cluster string, g schema.GroupVersionResource) []byte {
	return append(join("u", cluster, g.Group, g.Version, g.Resource), sep)
}

func uidKey(cluster string, g schema.GroupVersionResource, uid string) []byte {
	return join("u", cluster, g.Group, g.Version, g.Resource, uid)
}

func ckptKey(cluster string) []byte { return join("c", cluster) }

var ckptPrefix = []byte{'c', sep}

// tail splits the last three tokens (namespace, name, cluster) off a key.
func tail(key []byte) (ns, name, cluster string, err error) {
	n, m, c, err := tailBytes(key)
	return string(n), string(m), string(c), err
}

// tailBytes is tail without copying: the parts are slices of key.
func tailBytes(key []byte) (ns, name, cluster []byte, err error) {
	// Found from the end without splitting the key: lists call this once
	// per candidate key.
	c := bytes.LastIndexByte(key, sep)
	n := -1
	if c > 0 {
		n = bytes.LastIndexByte(key[:c], sep)
	}
	if n < 0 {
		return nil, nil, nil, fmt.Errorf("malformed key %q", key)
	}
	s := bytes.LastIndexByte(key[:n], sep) // -1: the namespace starts the key
	return key[s+1 : n], key[n+1 : c], key[c+1:], nil
}

// record is the stored value of an object: its stream sequence, labels,
// the member's Table cells for it (empty when it came without) and its
// JSON.
type record struct {
	seq    uint64
	labels map[string]string
	cells  []byte
	// row is where a Table row's parts lie in json, found as the object
	// was stored (zero: not found).
	row  rawjson.RowSpans
	json []byte
}

// rowLen bounds what appendRow adds.
const rowLen = 1 + 8*binary.MaxVarintLen64

// appendRow appends the row spans: a count (0, or 8 offsets) and the
// offsets (rawjson.RowSpans.Offsets).
func appendRow(b []byte, r rawjson.RowSpans) []byte {
	if r.Metadata == (rawjson.Span{}) {
		return append(b, 0)
	}
	var buf [8]uint32
	b = append(b, 8)
	for _, o := range r.Offsets(buf[:0]) {
		b = binary.AppendUvarint(b, uint64(o))
	}
	return b
}

// cutRow reads what appendRow wrote.
func cutRow(b []byte) (rawjson.RowSpans, []byte, error) {
	if len(b) == 0 || (b[0] != 0 && b[0] != 8) {
		return rawjson.RowSpans{}, nil, errCorrupt
	}
	n, b := b[0], b[1:]
	if n == 0 {
		return rawjson.RowSpans{}, b, nil
	}
	var o [8]uint32
	for i := range o {
		x, w := binary.Uvarint(b)
		if w <= 0 || x > rawjson.MaxSize {
			return rawjson.RowSpans{}, nil, errCorrupt
		}
		o[i], b = uint32(x), b[w:]
	}
	return rawjson.RowSpansAt(o[:]), b, nil
}

// encodeRecord encodes r into memory from alloc (which returns an empty
// slice with at least the capacity asked for).
func encodeRecord(r record, alloc func(n int) []byte) []byte {
	b := binary.BigEndian.AppendUint64(alloc(8+labelsLen(r.labels)+binary.MaxVarintLen64+len(r.cells)+rowLen+len(r.json)), r.seq)
	b = appendLabels(b, r.labels)
	b = append(binary.AppendUvarint(b, uint64(len(r.cells))), r.cells...)
	b = appendRow(b, r.row)
	return append(b, r.json...)
}

// labelsLen bounds the size appendLabels adds.
func labelsLen(labels map[string]string) int {
	n := binary.MaxVarintLen64
	for k, v := range labels {
		n += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	return n
}

// appendLabels appends the labels in key order, so equal objects are equal
// bytes (a rebuilt store can be compared with the live one byte for byte).
func appendLabels(b []byte, labels map[string]string) []byte {
	var arr [16]string
	keys := arr[:0]
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, labels[k])
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errCorrupt = errors.New("corrupt record")

// cutString reads what appendString wrote.
func cutString(b []byte) (string, []byte, error) {
	l, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) < l {
		return "", nil, errCorrupt
	}
	return string(b[w : w+int(l)]), b[w+int(l):], nil
}

// cutLabels reads what appendLabels wrote (into a map when withLabels).
func cutLabels(b []byte, withLabels bool) (map[string]string, []byte, error) {
	return cutLabelsWith(b, withLabels, func(s []byte) string { return string(s) })
}

// cutLabelsWith is cutLabels making each key and value by str: a Related
// walk reads a hundred Pods whose labels mostly repeat, and interns them.
func cutLabelsWith(b []byte, withLabels bool, str func([]byte) string) (map[string]string, []byte, error) {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil, nil, errCorrupt
	}
	b = b[w:]
	var labels map[string]string
	if withLabels {
		labels = make(map[string]string, min(n, 64))
	}
	for i := uint64(0); i < n; i++ {
		if withLabels {
			var k, v []byte
			var err error
			if k, b, err = cutBytes(b); err != nil {
				return nil, nil, err
			}
			if v, b, err = cutBytes(b); err != nil {
				return nil, nil, err
			}
			labels[str(k)] = str(v)
			continue
		}
		for range 2 {
			l, w := binary.Uvarint(b)
			if w <= 0 || uint64(len(b)-w) < l {
				return nil, nil, errCorrupt
			}
			b = b[w+int(l):]
		}
	}
	return labels, b, nil
}

func decodeRecord(b []byte, withLabels bool) (record, error) {
	if len(b) < 8 {
		return record{}, errCorrupt
	}
	r := record{seq: binary.BigEndian.Uint64(b)}
	var rest []byte
	var err error
	if r.labels, rest, err = cutLabels(b[8:], withLabels); err != nil {
		return record{}, err
	}
	n, w := binary.Uvarint(rest)
	if w <= 0 || uint64(len(rest)-w) < n {
		return record{}, errCorrupt
	}
	r.cells, rest = rest[w:w+int(n)], rest[w+int(n):]
	if r.row, r.json, err = cutRow(rest); err != nil {
		return record{}, err
	}
	return r, nil
}

// uidEntryMark starts a uid index entry, which carries the object's name
// and a hash of its labels and search text.
const uidEntryMark = 0x01

// encodeUIDEntry is the uid index's value: the object's namespace and name
// (its primary key follows, with the cluster and resource of the entry's
// own key), metaHash of its labels and search text, and the history's head
// of the object (nothing when it has no revision).
func encodeUIDEntry(ns, name string, hash uint64, head histHead, alloc func(n int) []byte) []byte {
	b := append(alloc(1+len(ns)+len(name)+3*binary.MaxVarintLen64+25+len(head.rv)), uidEntryMark)
	return appendHead(binary.BigEndian.AppendUint64(appendString(appendString(b, ns), name), hash), head)
}

func decodeUIDEntry(v []byte, gvr schema.GroupVersionResource, cluster string) (uidState, error) {
	if len(v) == 0 || v[0] != uidEntryMark {
		return uidState{}, fmt.Errorf("uid index entry %q: no entry mark: %w", v, errCorrupt)
	}
	ns, rest, err := cutString(v[1:])
	if err == nil {
		var name string
		if name, rest, err = cutString(rest); err == nil && len(rest) >= 8 {
			// The history's head (history.go) follows the hash, when
			// the object has a revision.
			head, err := cutHead(rest[8:])
			if err == nil {
				return uidState{obj: objKey(gvr, ns, name, cluster), metaHash: binary.BigEndian.Uint64(rest), head: head}, nil
			}
		}
	}
	return uidState{}, fmt.Errorf("uid index entry %q: %w", v, errCorrupt)
}

// labelsHash is a 64-bit hash of a label set: FNV-1a of each key and
// value, mixed and summed, so map order does not matter and nothing is
// sorted or allocated (it runs for every upsert). Equal hashes stand for
// equal labels (a collision, 2^-64 per change, would leave the index as it
// was; lists re-check labels anyway). An entry written with another hash
// function only costs a read of the record it names: a mismatch is taken
// for a label change.
func labelsHash(labels map[string]string) uint64 {
	sum := uint64(len(labels))
	for k, v := range labels {
		sum += mix64(fnv1a(fnv1a(fnvOffset, k)*fnvPrime, v)) // the 0 byte between is the multiplication alone
	}
	return mix64(sum)
}

// metaHash is labelsHash with the object's search text mixed in: what the
// uid index keeps, so an update that changes neither (most: status) writes
// neither the label index nor the search index.
func metaHash(labels map[string]string, text []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range text {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return mix64(labelsHash(labels) ^ mix64(h))
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// mix64 is SplitMix64's finalizer: it spreads every input bit over the
// output, so sums of mixed pair hashes do not cancel out.
func mix64(h uint64) uint64 {
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return h ^ h>>31
}
