package badger

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/fleetview/fleetview/internal/query"
)

// asOfScan is what an as-of list tells the List scan it runs (list.go):
// the objects changed since the as-of time, which the scan leaves out
// because their current record is not their state then, and the keys of
// the objects the scan returned, for the merge with those rebuilt. Keys
// are tails: namespace, name and cluster, \x00-separated, the end of
// every object's key in o/, l/, v/ and p/ alike.
type asOfScan struct {
	changed map[string]bool
	tails   [][]byte
}

// returned records the tail of a key the scan returned.
func (a *asOfScan) returned(key []byte) {
	ns, name, cluster, _ := tailBytes(key) // parsed before: it has a tail
	a.tails = append(a.tails, bytes.Clone(keyTail(key, ns, name, cluster)))
}

// keyTail is the namespace, name and cluster at the end of key, which
// tailBytes found as ns, name and cluster.
func keyTail(key, ns, name, cluster []byte) []byte {
	return key[len(key)-len(ns)-len(name)-len(cluster)-2:]
}

// listAsOf is List at o.AsOf. An object whose resource's change index
// (H/, history_changed.go) holds no change after the as-of time is what
// its current record says: those are read by List's own scan (its label,
// value or cluster index, its parallel reads, the record's labels), so an
// as-of list costs today's list plus one pass over the resource's changes
// made since (not the fleet's), and a rebuild of each object those
// changes name: deleted since (its last state), changed since (its state
// then, from its revisions), created since (left out). The two sequences
// are merged in key order. Every revision after the window's start has
// its H/ entry (retention removes it with the change, oldest first, and
// moves the start past them), so the index misses no change after an
// as-of time in the window.
//
// Its pages are read from the Badger read transaction of the first page,
// like a List's (page.go): every page sees the same state, whatever the
// materializer and retention write meanwhile (the window is checked on
// the first page: the snapshot keeps what retention removes later). The
// cursor carries the as-of time beside the snapshot and the last
// object's key (o/); the snapshot carries the changed set the first page
// read (the same snapshot gives the same set), so a later page reads no
// change index.
func (r *Reader) listAsOf(ctx context.Context, o query.ListOptions) (query.Page, error) {
	t := o.AsOf.UnixNano()
	if rfs := o.Fields.Relations(); len(rfs) > 0 {
		return query.Page{}, fmt.Errorf("%w: field selector %s: relation fields are answered for now, not as of a past time", query.ErrInvalid, rfs[0].Field)
	}
	if o.Continue == "" {
		if err := r.inWindow(ctx, o.AsOf); err != nil {
			return query.Page{}, err
		}
	}
	p, err := r.openPage(o.Continue, o.Clusters, o.Client)
	if err != nil {
		return query.Page{}, err
	}
	defer p.close()
	if o.Continue != "" && p.cur.AsOf != t {
		return query.Page{}, fmt.Errorf("%w: continue: the token belongs to an as-of list of another time", query.ErrInvalid)
	}
	p.cur.AsOf = t
	objBase := objPrefix(o.GVR)
	prefix := objBase
	if o.Namespace != "" {
		prefix = append(append(bytes.Clone(prefix), o.Namespace...), sep)
	}
	var after []byte // the previous page's last tail
	if a := p.cur.After; a != nil {
		if !bytes.HasPrefix(a, prefix) {
			return query.Page{}, fmt.Errorf("%w: continue token belongs to another list", query.ErrInvalid)
		}
		after = a[len(objBase):]
	}
	l := listScan{o: o, txn: p.snap.txn, clusters: clusterSet(o.Clusters), vi: r.vindex}
	l.page.Version = p.snap.version.Clone()
	if !l.resolve() {
		p.last = true
		return l.page, nil
	}
	cs, err := changedAfter(ctx, p.snap, o, l.clusters, t)
	if err != nil {
		return query.Page{}, err
	}
	changed := cs.after(after)
	l.asOf = &asOfScan{changed: cs.set}
	start := l.prefix
	if after != nil {
		base := objBase
		if l.indexed {
			base = l.base
		}
		if s := append(append(bytes.Clone(base), after...), sep); bytes.Compare(s, start) > 0 {
			start = s
		}
	}
	more, err := l.scan(start)
	if err != nil {
		return query.Page{}, err
	}
	kept := l.page.Items
	m := asOfMerge{o: o, txn: p.snap.txn, t: t, sel: l.sel, changed: changed, clusters: l.clusters, need: len(changed)}
	if more && len(kept) > 0 {
		last := l.asOf.tails[len(kept)-1]
		m.need, _ = slices.BinarySearchFunc(changed, last, bytes.Compare)
	}
	defer m.close()
	// Room for every changed object the page may take: with every object
	// changed since, the page is nearly all of them, and growing it by
	// doubling copied it about twice.
	room := len(kept) + min(len(changed), m.need+1)
	if o.Limit > 0 {
		room = min(room, int(o.Limit))
	}
	page := query.Page{Version: l.page.Version, Items: make([]query.Object, 0, room)}
	var lastTail []byte
	for i := 0; ; {
		room := 0
		if o.Limit > 0 {
			room = int(o.Limit) - len(page.Items) + 1
		}
		next, err := m.peek(room)
		if err != nil {
			return query.Page{}, err
		}
		fromScan := i < len(kept)
		if o.Limit > 0 && int64(len(page.Items)) == o.Limit {
			if !fromScan && next == nil && !more {
				p.last = true
				return page, nil
			}
			break // only a match proves a next page
		}
		if !fromScan && next == nil {
			p.last = true
			return page, nil
		}
		if fromScan && (next == nil || bytes.Compare(l.asOf.tails[i], next.tail) < 0) {
			page.Items, lastTail = append(page.Items, kept[i]), l.asOf.tails[i]
			i++
			continue
		}
		page.Items, lastTail = append(page.Items, next.obj), next.tail
		m.next = nil
	}
	returned := p.cur.N + int64(len(page.Items))
	page.Continue, err = p.token(append(bytes.Clone(objBase), lastTail...), returned)
	return page, err
}
