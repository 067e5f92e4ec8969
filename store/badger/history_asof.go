package badger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// objectUID reads metadata.uid without decoding the object.
func objectUID(obj []byte) (string, error) {
	vs, err := rawjson.PathValues(obj, []string{"metadata", "uid"}, nil)
	if err != nil || len(vs) == 0 {
		return "", err
	}
	return rawjson.String(vs[0])
}

// uidsOf are the uids the history knows under the object's name.
func uidsOf(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, ns, name string) []string {
	prefix := namePrefix(cluster, gvr, ns, name)
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	defer it.Close()
	var uids []string
	for it.Rewind(); it.Valid(); it.Next() {
		uids = append(uids, string(it.Item().Key()[len(prefix):]))
	}
	return uids
}

// eachRevision calls fn with each kept revision of the uid, oldest first,
// and the object's state after it.
func eachRevision(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, fn func(seq uint64, r revision, state []byte) (bool, error)) error {
	var revs []seqRev
	err := scanRevisions(txn, cluster, gvr, uid, 0, true, func(seq uint64, item *bdg.Item) (bool, error) {
		v, err := item.ValueCopy(nil)
		if err != nil {
			return false, err
		}
		r, err := decodeRevision(v)
		if err != nil {
			return false, err
		}
		revs = append(revs, seqRev{seq, r})
		return true, nil
	})
	if err != nil {
		return err
	}
	if len(revs) == 0 {
		return nil
	}
	states, err := resolveStates(txn, cluster, gvr, uid, revs, true)
	if err != nil {
		return err
	}
	for i, sr := range revs {
		if more, err := fn(sr.seq, sr.r, states[i]); err != nil || !more {
			return err
		}
	}
	return nil
}

// uidAt is the uid's state at t from its revisions: the state after the
// last revision observed at or before t; nil when it did not exist then.
func uidAt(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, t int64) ([]byte, error) {
	var at []byte
	err := eachRevision(txn, cluster, gvr, uid, func(_ uint64, r revision, state []byte) (bool, error) {
		if r.time > t {
			return false, nil
		}
		at = state
		if r.typ == query.ChangeDeleted {
			at = nil
		}
		return true, nil
	})
	return at, err
}

// objectAt is the object named (cluster, namespace, name) as it was at t,
// with its Table cells when the stored object is that state (unchanged
// since t: the member printed them for it); a state rebuilt from the
// history has none (the history keeps objects, not printed cells).
func objectAt(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, ns, name string, t int64) (obj, cells []byte, err error) {
	key := objKey(gvr, ns, name, cluster)
	var cur []byte
	var curUID string
	if item, err := txn.Get(key); err == nil {
		if err := item.Value(func(v []byte) error {
			r, err := decodeRecord(v, false)
			cur, cells = bytes.Clone(r.json), bytes.Clone(r.cells)
			return err
		}); err != nil {
			return nil, nil, err
		}
		if curUID, err = objectUID(cur); err != nil {
			return nil, nil, err
		}
		head, err := headOf(txn, cluster, gvr, curUID)
		if err != nil {
			return nil, nil, err
		}
		if head.seq == 0 || head.time <= t {
			return cur, cells, nil // unchanged since before t
		}
	} else if !errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil, err
	}
	for _, uid := range uidsOf(txn, cluster, gvr, ns, name) {
		st, err := uidAt(txn, cluster, gvr, uid, t)
		if err != nil || st != nil {
			return st, nil, err
		}
	}
	return nil, nil, nil
}

// headOf is the history's head of a live uid.
func headOf(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string) (histHead, error) {
	item, err := txn.Get(uidKey(cluster, gvr, uid))
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return histHead{}, nil
	}
	if err != nil {
		return histHead{}, err
	}
	var u uidState
	err = item.Value(func(v []byte) (err error) {
		u, err = decodeUIDEntry(v, gvr, cluster)
		return err
	})
	return u.head, err
}

// getAsOf is Get at o.AsOf.
func (r *Reader) getAsOf(ctx context.Context, o query.GetOptions) (query.Object, error) {
	if err := r.inWindow(ctx, o.AsOf); err != nil {
		return query.Object{}, err
	}
	clusters, err := r.clustersFor(ctx, o)
	if err != nil {
		return query.Object{}, err
	}
	out := query.Object{GVR: o.GVR, Checked: true}
	var found []string
	err = r.db.View(func(txn *bdg.Txn) error {
		for _, c := range clusters {
			st, cells, err := objectAt(txn, c, o.GVR, o.Namespace, o.Name, o.AsOf.UnixNano())
			if err != nil {
				return err
			}
			if st != nil {
				found = append(found, c)
				if len(found) == 1 {
					out.Cluster, out.JSON, out.Cells = c, st, cells
				}
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return query.Object{}, err
	case len(found) == 0:
		return query.Object{}, o.NotFound()
	case len(found) > 1:
		return query.Object{}, o.Conflict(found)
	}
	return out, nil
}

// clustersFor is where a Get may look: its cluster, or every visible
// cluster the store holds a checkpoint of.
func (r *Reader) clustersFor(ctx context.Context, o query.GetOptions) ([]string, error) {
	cs, all := o.Clusters()
	if !all {
		return cs, nil
	}
	v, err := r.Versions(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range v.Clusters() {
		if o.Sees(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// Revisions is one page of an object's revisions, oldest first, each with
// its object and its patch (for a revision stored as a snapshot after
// another kept one, the patch is computed). The cursor is the number of
// revisions already returned.
func (r *Reader) Revisions(ctx context.Context, o query.RevisionsOptions) (query.RevisionPage, error) {
	var page query.RevisionPage
	skip := 0
	if o.Continue != "" {
		n, err := strconv.Atoi(o.Continue)
		if err != nil || n < 0 {
			return page, fmt.Errorf("%w: revisions cursor", query.ErrInvalid)
		}
		skip = n
	}
	g := o.Object
	clusters, err := r.clustersFor(ctx, g)
	if err != nil {
		return page, err
	}
	var all []query.Revision
	err = r.db.View(func(txn *bdg.Txn) error {
		for _, c := range clusters {
			for _, uid := range uidsOf(txn, c, g.GVR, g.Namespace, g.Name) {
				if o.UID != "" && uid != o.UID {
					continue
				}
				var prev []byte
				err := eachRevision(txn, c, g.GVR, uid, func(seq uint64, rv revision, state []byte) (bool, error) {
					defer func() { prev = state }()
					t := time.Unix(0, rv.time)
					if (!o.Since.IsZero() && t.Before(o.Since)) || (!o.Until.IsZero() && !t.Before(o.Until)) {
						return true, nil
					}
					rev, err := toRevision(c, g.GVR, uid, seq, rv, state, &[2]string{g.Namespace, g.Name})
					if err != nil {
						return false, err
					}
					if rev.Patch == nil && prev != nil && rv.typ != query.ChangeDeleted {
						// Stored whole (a snapshot's turn, or a change no
						// exact patch expresses): the patch is made now, by
						// the library when the store's own cannot.
						if rev.Patch, err = rawMergePatch(prev, state); err != nil {
							if rev.Patch, err = jsonpatch.CreateMergePatch(prev, state); err != nil {
								return false, err
							}
						}
					}
					all = append(all, rev)
					return true, nil
				})
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return page, err
	}
	slices.SortStableFunc(all, func(a, b query.Revision) int { return a.Time.Compare(b.Time) })
	if skip > len(all) {
		skip = len(all)
	}
	all = all[skip:]
	if o.Limit > 0 && int64(len(all)) > o.Limit {
		all = all[:o.Limit]
		page.Continue = strconv.Itoa(skip + len(all))
	}
	page.Revisions = all
	return page, nil
}
