package badger

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
)

// Versions is the checkpoint of every cluster the store holds.
func (s *Store) Versions() (query.Version, error) {
	v := query.Version{}
	err := s.db.View(func(txn *bdg.Txn) error { return versions(txn, v) })
	return v, err
}

func versions(txn *bdg.Txn, v query.Version) error {
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: ckptPrefix, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		cluster := string(it.Item().Key()[len(ckptPrefix):])
		if err := it.Item().Value(func(b []byte) error {
			if len(b) != 8 {
				return errCorrupt
			}
			v[cluster] = binary.BigEndian.Uint64(b)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// Get returns one object. With cluster empty, the object must be in exactly
// one cluster.
func (s *Store) Get(_ context.Context, gvr schema.GroupVersionResource, namespace, name, cluster string) (query.Object, error) {
	var out query.Object
	err := s.db.View(func(txn *bdg.Txn) error {
		if cluster != "" {
			it, err := txn.Get(objKey(gvr, namespace, name, cluster))
			if errors.Is(err, bdg.ErrKeyNotFound) {
				return notFound(gvr, namespace, name, cluster)
			}
			if err != nil {
				return err
			}
			out.Cluster = cluster
			return it.Value(func(v []byte) error {
				r, err := decodeRecord(v, false)
				out.JSON = append([]byte(nil), r.json...)
				return err
			})
		}
		prefix := append(join("o", gvr.Group, gvr.Version, gvr.Resource, namespace, name), sep)
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		var clusters []string
		for it.Rewind(); it.Valid(); it.Next() {
			c := string(it.Item().Key()[len(prefix):])
			clusters = append(clusters, c)
			if len(clusters) == 1 {
				out.Cluster = c
				if err := it.Item().Value(func(v []byte) error {
					r, err := decodeRecord(v, false)
					out.JSON = append([]byte(nil), r.json...)
					return err
				}); err != nil {
					return err
				}
			}
		}
		switch len(clusters) {
		case 0:
			return notFound(gvr, namespace, name, "")
		case 1:
			return nil
		}
		return fmt.Errorf("%w: %s %q found in clusters [%s]", query.ErrConflict, gvr.GroupResource(), qualified(namespace, name), strings.Join(clusters, ", "))
	})
	return out, err
}

func qualified(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func notFound(gvr schema.GroupVersionResource, ns, name, cluster string) error {
	where := "any cluster"
	if cluster != "" {
		where = "cluster " + cluster
	}
	return fmt.Errorf("%w: %s %q in %s", query.ErrNotFound, gvr.GroupResource(), qualified(ns, name), where)
}

// List returns one page of objects ordered by namespace, name, cluster.
func (s *Store) List(_ context.Context, o query.ListOptions) (query.Page, error) {
	var page query.Page
	after, err := decodeContinue(o.Continue)
	if err != nil {
		return page, err
	}
	clusters := map[string]bool{}
	for _, c := range o.Clusters {
		clusters[c] = true
	}
	sel := o.Labels
	if sel == nil {
		sel = labels.Everything()
	}
	err = s.db.View(func(txn *bdg.Txn) error {
		v := query.Version{}
		if err := versions(txn, v); err != nil {
			return err
		}
		for c := range v {
			if len(clusters) > 0 && !clusters[c] {
				delete(v, c)
			}
		}
		page.ResourceVersion = v.Encode()
		base, indexed := s.scanPrefix(o.GVR, sel)
		prefix := base
		if o.Namespace != "" {
			prefix = append(append(append([]byte{}, base...), o.Namespace...), sep)
		}
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: !indexed, PrefetchSize: 100})
		defer it.Close()
		start := prefix
		if after != "" {
			// Just past the last returned key: keys end with the cluster token.
			start = append(append(append([]byte{}, base...), after...), 1)
		}
		var lastNs, lastName, lastCluster string
		for it.Seek(start); it.Valid(); it.Next() {
			key := it.Item().Key()
			ns, name, cluster, err := tail(key)
			if err != nil {
				return err
			}
			if len(clusters) > 0 && !clusters[cluster] {
				continue
			}
			item := it.Item()
			if indexed {
				pi, err := txn.Get(objKey(o.GVR, ns, name, cluster))
				if err != nil {
					return fmt.Errorf("label index points at a missing object %s/%s in %s: %w", ns, name, cluster, err)
				}
				item = pi
			}
			var obj query.Object
			matched := false
			if err := item.Value(func(b []byte) error {
				r, err := decodeRecord(b, true)
				if err != nil {
					return err
				}
				if !sel.Matches(labels.Set(r.labels)) {
					return nil
				}
				matched = true
				obj = query.Object{Cluster: cluster, JSON: append([]byte(nil), r.json...)}
				return nil
			}); err != nil {
				return err
			}
			if !matched {
				continue
			}
			if o.Limit > 0 && int64(len(page.Items)) == o.Limit {
				page.Continue = encodeContinue(lastNs, lastName, lastCluster)
				return nil
			}
			page.Items = append(page.Items, obj)
			lastNs, lastName, lastCluster = ns, name, cluster
		}
		return nil
	})
	return page, err
}

// scanPrefix picks the label index when the selector has an equality
// requirement, else the resource's primary range.
func (s *Store) scanPrefix(gvr schema.GroupVersionResource, sel labels.Selector) ([]byte, bool) {
	reqs, _ := sel.Requirements()
	var best *labels.Requirement
	for i := range reqs {
		r := reqs[i]
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals:
		case selection.In:
			if r.Values().Len() != 1 {
				continue
			}
		default:
			continue
		}
		best = &r
		break
	}
	if best == nil {
		return objPrefix(gvr), false
	}
	vals := best.Values().List()
	sort.Strings(vals)
	return labelPrefix(gvr, best.Key(), vals[0]), true
}

func encodeContinue(ns, name, cluster string) string {
	return base64.RawURLEncoding.EncodeToString(join(ns, name, cluster))
}

func decodeContinue(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(strings.Split(string(b), "\x00")) != 3 {
		return "", fmt.Errorf("%w: continue token %q is malformed", query.ErrInvalid, s)
	}
	return string(b), nil
}
