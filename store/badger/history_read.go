package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// HistoryWindow is what the history holds (query.HistoryWindow): from
// the later of the time history began and the time through which
// retention removed changes; per cluster, after the later of the sequence
// before its first recorded change and the last one retention removed.
func (r *Reader) HistoryWindow(_ context.Context) (query.HistoryWindow, error) {
	w := query.HistoryWindow{Seq: map[string]uint64{}}
	err := r.db.View(func(txn *bdg.Txn) error {
		began, err := readInt(txn, beganKey)
		if err != nil {
			return err
		}
		expired, err := readInt(txn, expiredKey)
		if err != nil {
			return err
		}
		if began == 0 {
			return nil
		}
		w.Start = time.Unix(0, max(began, expired+1))
		for _, fam := range []string{"a", "m"} {
			prefix := []byte{fam[0], sep}
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: true})
			for it.Rewind(); it.Valid(); it.Next() {
				c := string(it.Item().Key()[len(prefix):])
				err := it.Item().Value(func(v []byte) error {
					if len(v) != 8 {
						return errCorrupt
					}
					w.Seq[c] = max(w.Seq[c], binary.BigEndian.Uint64(v))
					return nil
				})
				if err != nil {
					it.Close()
					return err
				}
			}
			it.Close()
		}
		return nil
	})
	return w, err
}

// inWindow is ErrOutsideWindow for a time before the window.
func (r *Reader) inWindow(ctx context.Context, t time.Time) error {
	w, err := r.HistoryWindow(ctx)
	if err != nil {
		return err
	}
	if w.Start.IsZero() || t.Before(w.Start) {
		return fmt.Errorf("%w: %s is before the window's start %s", query.ErrOutsideWindow, t.UTC().Format(time.RFC3339Nano), w.Start.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// seqRev is a stored revision and its stream sequence.
type seqRev struct {
	seq uint64
	r   revision
}

// stateAt is the object's JSON after revision seq and that revision:
// forward from it to the first newer revision that holds the state
// before it whole (or its own), or to the newest (whose state is the
// object the store holds), then back through the reverse patches (at
// most SnapshotEvery-1 of them, fewer when they are large: chainCost),
// applied in one walk (resolveFirst).
func stateAt(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, seq uint64) ([]byte, revision, error) {
	var revs []seqRev
	newest := true
	err := scanRevisions(txn, cluster, gvr, uid, seq, true, func(at uint64, item *bdg.Item) (bool, error) {
		if len(revs) == 0 && at != seq {
			return false, nil
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return false, err
		}
		r, err := decodeRevision(v)
		if err != nil {
			return false, err
		}
		revs = append(revs, seqRev{at, r})
		if (len(revs) == 1 && r.own != nil) || (len(revs) > 1 && r.prevWhole) {
			newest = false
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil, revision{}, err
	}
	if len(revs) == 0 {
		return nil, revision{}, fmt.Errorf("revision %s/%d: %w", uid, seq, errNoRevision)
	}
	state, err := resolveFirst(txn, cluster, gvr, uid, revs, newest, nil, rawjson.Span{})
	if err != nil {
		return nil, revision{}, err
	}
	return state, revs[0].r, nil
}

// resolveStates are the states after revs, consecutive revisions of the
// uid, oldest first: from the newest back, each patched back from its
// successor. newest says revs ends with the uid's newest revision; else
// the last one's state is not needed (it holds its predecessor's whole).
func resolveStates(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, revs []seqRev, newest bool) ([][]byte, error) {
	return resolveStatesFrom(txn, cluster, gvr, uid, revs, newest, nil, rawjson.Span{})
}

// resolveStatesFrom is resolveStates given the newest revision's state
// (cur, when not nil: the caller read the object's record already, and
// curMeta, when not zero, is where the record's row spans put cur's
// metadata: applyReverseIn); a state it returns may be cur itself.
func resolveStatesFrom(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, revs []seqRev, newest bool, cur []byte, curMeta rawjson.Span) ([][]byte, error) {
	states := make([][]byte, len(revs))
	for i := len(revs) - 1; i >= 0; i-- {
		r := revs[i].r
		switch {
		case r.own != nil:
			states[i] = r.own
		case i == len(revs)-1:
			if newest && cur != nil {
				states[i] = cur
			} else if newest {
				cur, err := currentState(txn, cluster, gvr, uid, revs[i].seq)
				if err != nil {
					return nil, err
				}
				states[i] = cur
			}
		default:
			nx := revs[i+1].r
			switch {
			case nx.prev == nil:
				return nil, fmt.Errorf("revision %s/%d: no state before %d: %w", uid, revs[i].seq, revs[i+1].seq, errCorrupt)
			case nx.prevWhole:
				states[i] = nx.prev
			case states[i+1] == nil:
				return nil, fmt.Errorf("revision %s/%d: no state: %w", uid, revs[i+1].seq, errCorrupt)
			case string(nx.prev) == "{}":
				states[i] = states[i+1]
			default:
				var md rawjson.Span
				if i+1 == len(revs)-1 && newest && cur != nil {
					md = curMeta // states[i+1] is cur
				}
				st, err := applyReverseIn(states[i+1], nx.prev, md)
				if err != nil {
					return nil, fmt.Errorf("revision %s/%d: %w", uid, revs[i].seq, err)
				}
				states[i] = st
			}
		}
	}
	return states, nil
}

// resolveFirst is resolveStatesFrom's first state alone, the one a read
// as of a time or of one revision wants: the reverse patches from the
// nearest state known whole (a revision's own, a whole previous state,
// or the newest) back to it applied in one walk of that state
// (applyReverseChain), not one copy and walk of the object per patch:
// with whole states kept by the chain's cost (chainCost) that chain is
// up to SnapshotEvery-1 patches long. The same bytes as
// resolveStatesFrom's states[0] (TestResolveFirst), its errors too: a
// chain applyReverseChain refuses is resolved patch by patch, which
// names the revision at fault.
func resolveFirst(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, revs []seqRev, newest bool, cur []byte, curMeta rawjson.Span) ([]byte, error) {
	var base []byte
	var md rawjson.Span
	// Newest first: the order they apply in. A revision is a large
	// struct: read in place, not copied, 128 a chain.
	patches := make([][]byte, 0, len(revs))
	for i := len(revs) - 1; i >= 0; i-- {
		r := &revs[i].r
		switch {
		case r.own != nil:
			base, md, patches = r.own, rawjson.Span{}, patches[:0]
		case i == len(revs)-1:
			if newest && cur != nil {
				base, md = cur, curMeta
			} else if newest {
				st, err := currentState(txn, cluster, gvr, uid, revs[i].seq)
				if err != nil {
					return nil, err
				}
				base = st
			}
		default:
			nx := &revs[i+1].r
			switch {
			case nx.prev == nil:
				return nil, fmt.Errorf("revision %s/%d: no state before %d: %w", uid, revs[i].seq, revs[i+1].seq, errCorrupt)
			case nx.prevWhole:
				base, md, patches = nx.prev, rawjson.Span{}, patches[:0]
			case base == nil:
				return nil, fmt.Errorf("revision %s/%d: no state: %w", uid, revs[i+1].seq, errCorrupt)
			case string(nx.prev) == "{}":
			default:
				patches = append(patches, nx.prev)
			}
		}
	}
	st, err := applyReverseChain(base, patches, md)
	if err != nil {
		states, err := resolveStatesFrom(txn, cluster, gvr, uid, revs, newest, cur, curMeta)
		if err != nil {
			return nil, err
		}
		return states[0], nil
	}
	return st, nil
}

// currentState is the state of the uid's newest revision seq, which
// stores none: the object the store holds, while the uid's head is seq.
func currentState(txn *bdg.Txn, cluster string, gvr schema.GroupVersionResource, uid string, seq uint64) ([]byte, error) {
	item, err := txn.Get(uidKey(cluster, gvr, uid))
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, fmt.Errorf("revision %s/%d: the object is gone and its state with it: %w", uid, seq, errCorrupt)
	}
	if err != nil {
		return nil, err
	}
	var u uidState
	if err := item.Value(func(v []byte) (err error) {
		u, err = decodeUIDEntry(v, gvr, cluster)
		return err
	}); err != nil {
		return nil, err
	}
	if u.head.seq != seq {
		return nil, fmt.Errorf("revision %s/%d: not the newest (%d) and no state: %w", uid, seq, u.head.seq, errCorrupt)
	}
	if item, err = txn.Get(u.obj); err != nil {
		return nil, fmt.Errorf("revision %s/%d: object: %w", uid, seq, err)
	}
	var out []byte
	err = item.Value(func(v []byte) error {
		r, err := decodeRecord(v, false)
		out = bytes.Clone(r.json)
		return err
	})
	return out, err
}

var errNoRevision = errors.New("revision not in the history")

// toRevision fills a query.Revision from a stored revision and the state.
// name, when set, is the object's namespace and name as the caller asked
// for them (an object's revisions), which the revision reports.
func toRevision(cluster string, gvr schema.GroupVersionResource, uid string, seq uint64, rv revision, state []byte, name *[2]string) (query.Revision, error) {
	out := query.Revision{Change: query.Change{Cluster: cluster, GVR: gvr, UID: uid, Seq: seq, Time: time.Unix(0, rv.time),
		Type: rv.typ, ResourceVersion: rv.rv, Manager: rv.manager, Operation: rv.op, Subresource: rv.sub}, Object: state}
	if p := forwardPatch(rv, state); p != nil {
		out.Patch = bytes.Clone(p)
	}
	lbls, ns, n, err := objectMeta(state)
	out.Labels, out.Namespace, out.Name = lbls, ns, n
	if name != nil {
		out.Namespace, out.Name = name[0], name[1]
	}
	return out, err
}

// errMetaRead stops objectMeta's scan once the metadata is read.
var errMetaRead = errors.New("metadata read")

// objectMeta reads an object's labels, namespace and name from the raw
// bytes, scanning the object only up to its metadata (the states are the
// store's own, checked when written): a revisions read does it for every
// revision, and decoding the whole object with encoding/json was most of
// that read's time (BenchmarkHistoryRevisions).
func objectMeta(obj []byte) (map[string]string, string, string, error) {
	var lbls map[string]string
	var ns, name string
	found := false
	_, err := rawjson.EachMember(obj, 0, func(m rawjson.Member) (int, error) {
		if string(m.Key) != "metadata" {
			return rawjson.SkipValue(obj, m.ValueStart)
		}
		found = true
		var buf [16]rawjson.Member
		ms, _, err := rawjson.Members(obj, m.ValueStart, buf[:0])
		if err != nil {
			return 0, err
		}
		for _, f := range ms {
			v := obj[f.ValueStart:f.ValueEnd]
			switch string(f.Key) {
			case "namespace":
				ns, err = rawjson.String(v)
			case "name":
				name, err = rawjson.String(v)
			case "labels":
				if string(v) != "null" {
					err = json.Unmarshal(v, &lbls)
				}
			}
			if err != nil {
				return 0, err
			}
		}
		return 0, errMetaRead // the rest of the object is not needed
	})
	if found && errors.Is(err, errMetaRead) {
		return lbls, ns, name, nil
	}
	if err == nil {
		err = errCorrupt
	}
	return nil, "", "", err
}

// ChangesAfter calls fn with each change of the cluster's resource whose
// stream sequence is in (from, to], in stream order, each with the object
// after it (for a delete, its last state): what a watch resumed from
// sequence from replays. Check HistoryWindow first: changes at or before
// its Seq[cluster] are not recorded.
func (r *Reader) ChangesAfter(ctx context.Context, cluster string, gvr schema.GroupVersionResource, from, to uint64, fn func(query.Revision) error) error {
	return r.db.View(func(txn *bdg.Txn) error {
		prefix := feedPrefix(cluster, gvr)
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(feedKey(cluster, gvr, from+1)); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			seq := binary.BigEndian.Uint64(it.Item().Key()[len(prefix):])
			if seq > to {
				return nil
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			uid, err := feedUID(txn, cluster, seq, v)
			if err != nil {
				return err
			}
			state, rv, err := stateAt(txn, cluster, gvr, uid, seq)
			if err != nil {
				return err
			}
			rev, err := toRevision(cluster, gvr, uid, seq, rv, state, nil)
			if err != nil {
				return err
			}
			if err := fn(rev); err != nil {
				return err
			}
		}
		return nil
	})
}

// feedUID is the uid of the change an f/ value (v) names: in it (an
// older binary's, uid and time), else in the change's t/ entry.
func feedUID(txn *bdg.Txn, cluster string, seq uint64, v []byte) (string, error) {
	if len(v) < 8 {
		return "", errCorrupt
	}
	if len(v) > 8 {
		return string(v[:len(v)-8]), nil
	}
	c, err := changeAt(txn, timeKey('t', int64(binary.BigEndian.Uint64(v)), cluster, seq), false, nil)
	return c.uid, err
}

// changeAt is the change at a t/ key; withLabels, with its labels (read
// through cache).
func changeAt(txn *bdg.Txn, tkey []byte, withLabels bool, cache map[string]map[string]string) (changeEntry, error) {
	var c changeEntry
	item, err := txn.Get(tkey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return c, fmt.Errorf("change %x: %w", tkey, errCorrupt)
	}
	if err != nil {
		return c, err
	}
	err = item.Value(func(v []byte) (err error) {
		c, err = decodeChange(v, withLabels)
		return err
	})
	if err != nil || !withLabels {
		return c, err
	}
	t, cluster, _, err := splitTimeKey(tkey)
	if err != nil {
		return c, err
	}
	return c, resolveLabels(txn, &c, t, cluster, cache)
}

// Changes is one page of the fleet's change feed, oldest first. Its
// cursor is the hex of the last feed key returned.
func (r *Reader) Changes(ctx context.Context, o query.ChangesOptions) (query.ChangePage, error) {
	var page query.ChangePage
	family := byte('t')
	if len(o.Types) == 1 && o.Types[0] == query.ChangeDeleted {
		family = 'x' // the deletes' own index: no scan of every change
	}
	since, until := o.Since.UnixNano(), o.Until.UnixNano()
	if o.Since.IsZero() {
		since = 0
	}
	if o.Until.IsZero() {
		until = time.Now().UnixNano()
	}
	start := timeKey(family, since, "", 0)[:10]
	if o.Continue != "" {
		k, err := hex.DecodeString(o.Continue)
		if err != nil || len(k) < 20 || k[0] != family {
			return page, fmt.Errorf("%w: change feed cursor", query.ErrInvalid)
		}
		start = append(k, 0) // just past it
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 500
	}
	sel := o.Labels
	var lastKey []byte
	labelSets := map[string]map[string]string{} // J/ entries read, by key
	err := r.db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: []byte{family, sep}, PrefetchValues: true})
		defer it.Close()
		for it.Seek(start); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := it.Item().Key()
			t, cluster, seq, err := splitTimeKey(k)
			if err != nil {
				return err
			}
			if t >= until {
				return nil
			}
			if int64(len(page.Changes)) == limit {
				page.Continue = hex.EncodeToString(lastKey)
				return nil
			}
			if o.Clusters != nil && !slices.Contains(o.Clusters, cluster) {
				continue
			}
			var c changeEntry
			if it.Item().ValueSize() == 0 {
				// A delete's x/ entry is its key (an older binary's held
				// the change too): the t/ entry has it.
				tk := append([]byte{'t'}, k[1:]...)
				if c, err = changeAt(txn, tk, true, labelSets); err != nil {
					return err
				}
			} else if err := it.Item().Value(func(v []byte) (err error) {
				c, err = decodeChange(v, true)
				return err
			}); err != nil {
				return err
			}
			if err := resolveLabels(txn, &c, t, cluster, labelSets); err != nil {
				return err
			}
			if !changeSelected(o, c, cluster, sel) {
				continue
			}
			rev := query.Revision{Change: query.Change{Cluster: cluster, GVR: c.gvr, Namespace: c.ns, Name: c.name, UID: c.uid, Seq: seq,
				Time: time.Unix(0, t), Type: c.typ, ResourceVersion: c.rv, Manager: c.manager, Operation: c.op, Subresource: c.sub, Labels: c.labels}}
			if o.Objects {
				state, sr, err := stateAt(txn, cluster, c.gvr, c.uid, seq)
				if err != nil && !errors.Is(err, errNoRevision) {
					return err
				}
				rev.Object = state
				if p := forwardPatch(sr, state); p != nil {
					rev.Patch = bytes.Clone(p)
				}
			}
			page.Changes = append(page.Changes, rev)
			lastKey = append(lastKey[:0], k...)
		}
		return nil
	})
	return page, err
}

// changeSelected applies a change feed's filters and the caller's
// visibility to one change.
func changeSelected(o query.ChangesOptions, c changeEntry, cluster string, sel labels.Selector) bool {
	if o.Namespace != "" && c.ns != o.Namespace {
		return false
	}
	if o.Resources != nil && !slices.Contains(o.Resources, c.gvr.GroupResource()) {
		return false
	}
	if o.Types != nil && !slices.Contains(o.Types, c.typ) {
		return false
	}
	if !o.Visible.Allows(c.gvr.GroupResource(), cluster, c.ns) {
		return false
	}
	return sel == nil || sel.Matches(labels.Set(c.labels))
}
