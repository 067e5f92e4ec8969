package badger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// Search matches text case-insensitively as a substring of the name,
// namespace, label keys and values and annotation keys and values of every
// object of the selected resources and clusters, ordered by resource,
// namespace, name, cluster, with snapshot-pinned paging like List.
func (r *Reader) Search(_ context.Context, o query.SearchOptions) (query.Page, error) {
	needle := strings.ToLower(strings.TrimSpace(o.Text))
	if needle == "" {
		return query.Page{}, fmt.Errorf("%w: search text is required", query.ErrInvalid)
	}
	p, err := r.openPage(o.Continue, o.Clusters, o.Client)
	if err != nil {
		return query.Page{}, err
	}
	defer p.close()
	sc := searchScan{o: o, txn: p.snap.txn, clusters: clusterSet(o.Clusters), needle: needle, bneedle: []byte(needle)}
	sc.page.Version = p.snap.version.Clone()
	more := false
	for _, prefix := range searchPrefixes(o.Resources) {
		if more, err = sc.scan(prefix, p.cur.After); err != nil {
			return sc.page, err
		} else if more {
			break
		}
	}
	if !more {
		p.last = true
		return sc.page, nil
	}
	sc.page.Continue, err = p.token(sc.lastKey, p.cur.N+int64(len(sc.page.Items)))
	return sc.page, err
}

// searchPrefixes are the ranges of the searched resources in key order, so
// a page resumes by comparing its cursor with them.
func searchPrefixes(gvrs []schema.GroupVersionResource) [][]byte {
	if len(gvrs) == 0 {
		return [][]byte{{'s', sep}}
	}
	var prefixes [][]byte
	for _, g := range gvrs {
		prefixes = append(prefixes, searchPrefix(g))
	}
	slices.SortFunc(prefixes, bytes.Compare)
	return slices.CompactFunc(prefixes, bytes.Equal)
}

// searchScan is one Search page and the filters of its hits.
type searchScan struct {
	o        query.SearchOptions
	txn      *bdg.Txn
	clusters map[string]bool // nil: every cluster
	needle   string          // lower case
	bneedle  []byte
	page     query.Page
	lastKey  []byte
	objKey   []byte
}

// scan fills the page from one resource's range of the search index; true
// when a hit beyond a full page proves there is a next one.
func (s *searchScan) scan(prefix, after []byte) (bool, error) {
	if after != nil && bytes.Compare(after, prefix) > 0 && !bytes.HasPrefix(after, prefix) {
		return false, nil // an earlier resource, done on previous pages
	}
	start := prefix
	if bytes.HasPrefix(after, prefix) {
		start = append(bytes.Clone(after), sep)
	}
	// Not prefetched: prefetching starts a goroutine per item to read what
	// is one small copy out of the page cache (the texts are in the value
	// log, writer.setSearch).
	it := s.txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(start); it.Valid(); it.Next() {
		if more, err := s.visit(it.Item()); err != nil || more {
			return more, err
		}
	}
	return false, nil
}

func (s *searchScan) visit(item *bdg.Item) (more bool, err error) {
	key := item.Key()
	parts, ok := splitObjectKey(key)
	if !ok {
		return false, fmt.Errorf("malformed search key %q", key)
	}
	// Compared as bytes: every object is visited, few are hits.
	if s.clusters != nil && !s.clusters[string(parts[6])] || s.o.Namespace != "" && string(parts[4]) != s.o.Namespace {
		return false, nil
	}
	// Before the limit: a hidden object neither fills the page nor
	// becomes the cursor's position.
	if s.o.Visible != nil && !s.o.Visible.Allows(schema.GroupResource{Group: string(parts[1]), Resource: string(parts[3])}, string(parts[6]), string(parts[4])) {
		return false, nil
	}
	// The text is each label and annotation field lower-cased as the
	// needle is: a field contains the needle exactly when the text does
	// (the 0 bytes between fields are in neither, unless the needle has
	// one: the object decides). The name, namespace and cluster (the value
	// of the cluster annotations) are the key's.
	candidate := lowerContains(parts[4], s.bneedle) || lowerContains(parts[5], s.bneedle) || lowerContains(parts[6], s.bneedle)
	if !candidate {
		if err := item.Value(func(text []byte) error {
			candidate = bytes.Contains(text, s.bneedle)
			return nil
		}); err != nil || !candidate {
			return false, err
		}
	}
	hit, err := s.hit(key, parts)
	if err != nil || hit == nil {
		return false, err
	}
	if s.o.Limit > 0 && int64(len(s.page.Items)) == s.o.Limit {
		return true, nil
	}
	s.page.Items = append(s.page.Items, *hit)
	s.lastKey = item.KeyCopy(s.lastKey[:0])
	return false, nil
}

// lowerContains reports whether b, lower-cased as bytes.ToLower would,
// contains needle. Names are mostly lower-case ASCII already: those are
// searched as they are.
func lowerContains(b, needle []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return bytes.Contains(bytes.ToLower(b), needle)
		}
	}
	return bytes.Contains(b, needle)
}

// hit reads the object a search key names, from the same snapshot, and
// checks its metadata against the needle; nil when it does not match.
func (s *searchScan) hit(key []byte, parts [7][]byte) (*query.Object, error) {
	s.objKey = retag(s.objKey, key, 'o')
	item, err := s.txn.Get(s.objKey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, fmt.Errorf("search index names a missing object %s/%s in %s: %w", parts[4], parts[5], parts[6], errCorrupt)
	}
	if err != nil {
		return nil, err
	}
	var hit *query.Object
	err = item.Value(func(b []byte) error {
		rec, err := decodeRecord(b, false)
		if err != nil {
			return err
		}
		if !metaMatches(rec.json, s.needle) {
			return nil
		}
		hit = &query.Object{Cluster: string(parts[6]), JSON: bytes.Clone(rec.json), Checked: true,
			GVR: schema.GroupVersionResource{Group: string(parts[1]), Version: string(parts[2]), Resource: string(parts[3])}}
		return nil
	})
	return hit, err
}

// splitObjectKey cuts an object key into its seven parts (o, group,
// version, resource, namespace, name, cluster) without allocating.
func splitObjectKey(key []byte) (parts [7][]byte, ok bool) {
	for i := range 6 {
		j := bytes.IndexByte(key, sep)
		if j < 0 {
			return parts, false
		}
		parts[i], key = key[:j], key[j+1:]
	}
	parts[6] = key
	return parts, bytes.IndexByte(key, sep) < 0
}

func metaMatches(obj []byte, needle string) bool {
	var m struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if json.Unmarshal(obj, &m) != nil {
		return false
	}
	in := func(s string) bool { return strings.Contains(strings.ToLower(s), needle) }
	md := m.Metadata
	if in(md.Name) || in(md.Namespace) {
		return true
	}
	for k, v := range md.Labels {
		if in(k) || in(v) {
			return true
		}
	}
	for k, v := range md.Annotations {
		// Every object carries the cache-source annotations: their keys
		// would match everything ("cache", "cluster"); their values (the
		// cluster name) stay searchable.
		if in(v) || k != "fleetview.io/cluster" && k != "resource.karmada.io/cached-from-cluster" && in(k) {
			return true
		}
	}
	return false
}
