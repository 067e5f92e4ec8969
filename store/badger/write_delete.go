package badger

import (
	"sort"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/feed"
)

// deleteUID deletes the object with the uid, if the cache holds it, and
// says what it deleted; the history records it when e is the delete
// event (not for a resource removed from the cache: its objects were not
// deleted).
func (w *writer) deleteUID(gvr schema.GroupVersionResource, uid string, e *feed.Event) (feed.Prior, error) {
	ukey := uidKey(w.cluster, gvr, uid)
	u, ok, err := w.uidEntry(gvr, ukey)
	if err != nil || !ok {
		// Never materialized, already gone, or its name was taken by a new
		// uid: the labels it last had are gone with it.
		return feed.Prior{Told: true, LabelsUnknown: true}, err
	}
	cur, exists, err := w.object(u.obj, false)
	if err != nil {
		return feed.Prior{}, err
	}
	prior := feed.Prior{Told: true, LabelsUnknown: true}
	if exists && (cur.uid == "" || cur.uid == uid) {
		prior = feed.Prior{Told: true, Exists: true, Labels: cur.labels}
		if w.hist.on {
			if err := w.histDelete(gvr, e, uid, u); err != nil {
				return prior, err
			}
		}
		if err := w.deleteObject(gvr, u.obj, cur.labels); err != nil {
			return prior, err
		}
	}
	if err := w.del(ukey); err != nil {
		return prior, err
	}
	w.ov.uids[string(ukey)] = uidState{gone: true}
	return prior, nil
}

func (w *writer) deleteObject(gvr schema.GroupVersionResource, key []byte, lbls map[string]string) error {
	ns, name, cluster, err := tail(key)
	if err != nil {
		return err
	}
	for k, v := range lbls {
		if err := w.del(labelKey(gvr, k, v, ns, name, cluster)); err != nil {
			return err
		}
	}
	if err := w.unindexValues(gvr, key); err != nil {
		return err
	}
	if err := w.unrelate(gvr, ns, name); err != nil {
		return err
	}
	if err := w.del(searchKey(gvr, ns, name, cluster)); err != nil {
		return err
	}
	if err := w.del(clusterKey(gvr, ns, name, cluster)); err != nil {
		return err
	}
	if err := w.writeCounted(key, nil, true, w.objectDelta(gvr, ns, -1)); err != nil {
		return err
	}
	w.ov.objs[string(key)] = objState{gone: true}
	return nil
}

// removeResource deletes every object of the resource: those in the
// snapshot and those the batch in flight (or this one) indexed.
func (w *writer) removeResource(gvr schema.GroupVersionResource) error {
	w.fetched = nil // read before the objects it removes
	prefix := uidPrefix(w.cluster, gvr)
	uids := map[string]bool{}
	it := w.txn.NewIterator(bdg.IteratorOptions{Prefix: prefix})
	for it.Rewind(); it.Valid(); it.Next() {
		uids[string(it.Item().Key()[len(prefix):])] = true
	}
	it.Close()
	for _, o := range []*overlay{w.prev, w.ov} {
		if o == nil {
			continue
		}
		for k, st := range o.uids {
			if strings.HasPrefix(k, string(prefix)) {
				uids[k[len(prefix):]] = !st.gone
			}
		}
	}
	sorted := make([]string, 0, len(uids))
	for uid, live := range uids {
		if live {
			sorted = append(sorted, uid)
		}
	}
	sort.Strings(sorted) // a deterministic order keeps the logs and tests stable
	for _, uid := range sorted {
		if _, err := w.deleteUID(gvr, uid, nil); err != nil {
			return err
		}
	}
	return w.zeroCounters(gvr)
}
