package badger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
)

// maxOwnerDepth bounds the walk down owner references (a Deployment owns
// ReplicaSets that own Pods: 2).
const maxOwnerDepth = 8

// relatedMembers resolves the relation requirements of a list's field
// selector (query.FieldOwnedBy, ...) to the objects of gvr that satisfy
// them all, keyed by memberKey. Every requirement starts from the objects
// its value names (the kind index gives their resources; their names are
// found in the o/ range of each resource, narrowed to ns when the list
// is) and reads the relationship index: the reverse owner edges down to
// maxOwnerDepth, the named objects' selectors on the label index, or the
// reverse reference edges, per cluster for a target no cluster sent. Only
// the list's clusters (nil: all) are walked.
// Only what vis allows is a start or a step: a relation through an object
// the caller cannot read selects nothing, so the answer tells nothing of
// that object.
func relatedMembers(txn *bdg.Txn, vi *valueIndex, gvr schema.GroupVersionResource, ns string, clusters map[string]bool, rfs []query.RelationField, vis allower) (map[string]bool, error) {
	kinds, err := readKinds(txn)
	if err != nil {
		return nil, err
	}
	var out map[string]bool
	for _, rf := range rfs {
		set := map[string]bool{}
		gks := kinds.named(rf.Group, rf.Kind)
		switch rf.Field {
		case query.FieldOwnedBy:
			for _, gk := range gks {
				g := kinds.byKind[gk].gvr
				roots, err := namedObjects(txn, vi, g, ns, rf.Name, clusters)
				if err != nil {
					return nil, err
				}
				for _, r := range roots {
					if !vis.Allows(g.GroupResource(), r.cluster, r.ns) || (clusters != nil && !clusters[r.cluster]) {
						continue
					}
					if err := ownedBelow(txn, kinds, gvr.GroupResource(), r.cluster, relations.Target{Group: gk.Group, Kind: gk.Kind, Namespace: r.ns, Name: r.name}, set, vis); err != nil {
						return nil, err
					}
				}
			}
		case query.FieldSelectedBy:
			rw := newRelWalk(txn)
			defer rw.close()
			for _, gk := range gks {
				g := kinds.byKind[gk].gvr
				roots, err := namedObjects(txn, vi, g, ns, rf.Name, clusters)
				if err != nil {
					return nil, err
				}
				for _, r := range roots {
					if !vis.Allows(g.GroupResource(), r.cluster, r.ns) || (clusters != nil && !clusters[r.cluster]) {
						continue
					}
					v, err := get(txn, selectorKey(r.cluster, r.ns, g, r.name))
					if err != nil || v == nil || gvr != podsGVR {
						if err != nil {
							return nil, err
						}
						continue
					}
					var sel relations.Selector
					if err := json.Unmarshal(v, &sel); err != nil {
						return nil, fmt.Errorf("%w: selector of %s %s/%s: %v", errCorrupt, g, r.ns, r.name, err)
					}
					pods, err := rw.selected(r.cluster, &sel)
					if err != nil {
						return nil, err
					}
					for _, p := range pods {
						set[memberKey(p.Cluster, p.Namespace, p.Name)] = true
					}
				}
			}
		case query.FieldReferences:
			held := query.Version{}
			if err := versions(txn, held); err != nil {
				return nil, err
			}
			for _, gk := range gks {
				tgr := kinds.byKind[gk].gvr.GroupResource()
				for c := range held {
					if clusters != nil && !clusters[c] {
						continue
					}
					if err := referrers(txn, gvr.GroupResource(), c, gk, ns, rf.Name, set, func(tns string) bool { return vis.Allows(tgr, c, tns) }); err != nil {
						return nil, err
					}
				}
			}
		}
		if out == nil {
			out = set
		} else {
			for k := range out {
				if !set[k] {
					delete(out, k)
				}
			}
		}
	}
	return out, nil
}

func memberKey(cluster, ns, name string) string { return cluster + "\x00" + ns + "\x00" + name }

// kindTable is the kind index (K/), read once per list, with the
// built-in kinds a reference may name though no cluster sent one.
type kindTable struct {
	byKind map[schema.GroupKind]kindInfo
	byGR   map[schema.GroupResource]string // -> kind
}

func readKinds(txn *bdg.Txn) (kindTable, error) {
	t := kindTable{byKind: map[schema.GroupKind]kindInfo{}, byGR: map[schema.GroupResource]string{}}
	pre := []byte{'K', sep}
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: pre, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		group, kind, ok := bytes.Cut(it.Item().Key()[len(pre):], []byte{sep})
		if !ok {
			return t, fmt.Errorf("%w: kind key %q", errCorrupt, it.Item().Key())
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return t, err
		}
		g, clustered, err := decodeKind(string(group), v)
		if err != nil {
			return t, err
		}
		t.byKind[schema.GroupKind{Group: string(group), Kind: string(kind)}] = kindInfo{gvr: g, clustered: clustered, known: true}
		t.byGR[g.GroupResource()] = string(kind)
	}
	return t, nil
}

// named are the kinds a relation value names: kind case-insensitively, in
// group or (none given) any group; built-in kinds count without a cached
// object (a Secret no registry caches is still referenced).
func (t kindTable) named(group, kind string) []schema.GroupKind {
	var out []schema.GroupKind
	for gk := range t.byKind {
		if strings.EqualFold(gk.Kind, kind) && (group == "" || gk.Group == group) {
			out = append(out, gk)
		}
	}
	for _, gk := range relations.BuiltinKinds(group, kind) {
		if _, ok := t.byKind[gk]; !ok {
			res, _ := relations.BuiltinResource(gk.Group, gk.Kind)
			t.byKind[gk] = kindInfo{gvr: schema.GroupVersionResource{Group: gk.Group, Resource: res}, clustered: relations.ClusterScoped(gk.Group, gk.Kind)}
			out = append(out, gk)
		}
	}
	return out
}

type located struct{ cluster, ns, name string }

// namedObjects are the cached objects of g named name, in ns when set,
// in clusters (nil: all). The value index's names (nameIndexed) give
// them in one range; else, without a namespace, every key of the
// resource in those clusters is read: the per-cluster index (p/) when
// clusters are given, so a one-cluster list reads its cluster's keys, not
// the fleet's.
func namedObjects(txn *bdg.Txn, vi *valueIndex, g schema.GroupVersionResource, ns, name string, clusters map[string]bool) ([]located, error) {
	if g.Version == "" {
		return nil, nil // a built-in kind no cluster sent
	}
	byName := vi.answers(g.GroupResource(), nameDimension)
	var pres [][]byte
	switch {
	case ns != "":
		pres = [][]byte{append(join("o", g.Group, g.Version, g.Resource, ns, name), sep)}
	case byName:
		// <namespace>/<name>/<cluster> after the name.
		pres = [][]byte{append(append(valuePrefix(g, nameDimension.IndexName()), name...), sep)}
	case clusters != nil:
		for c := range clusters {
			pres = append(pres, clusterPrefix(c, g))
		}
	default:
		pres = [][]byte{objPrefix(g)}
	}
	var out []located
	for _, pre := range pres {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: pre})
		for it.Rewind(); it.Valid(); it.Next() {
			n, m, c, err := tailBytes(it.Item().Key())
			if err != nil {
				it.Close()
				return nil, err
			}
			if string(m) == name && (clusters == nil || clusters[string(c)]) {
				out = append(out, located{string(c), string(n), string(m)})
			}
		}
		it.Close()
	}
	return out, nil
}

// ownedBelow adds to set the objects of gr that t owns, directly or
// through owned objects.
func ownedBelow(txn *bdg.Txn, kinds kindTable, gr schema.GroupResource, cluster string, t relations.Target, set map[string]bool, vis allower) error {
	it := newSeeker(txn)
	defer it.close()
	seen := map[relations.Target]bool{t: true}
	frontier := []relations.Target{t}
	strs := map[string]string{}
	intern := func(b []byte) string {
		if s, ok := strs[string(b)]; ok {
			return s
		}
		s := string(b)
		strs[s] = s
		return s
	}
	for d := 0; d < maxOwnerDepth && len(frontier) > 0; d++ {
		var next []relations.Target
		for _, o := range frontier {
			pre := reversePrefix(cluster, o)
			tns := []byte(o.Namespace)
			// One iterator, sought to each owner: creating one per owner
			// (a Deployment's hundred Pods are owners too) cost more than
			// the scans. The owners of one level of one kind come in key
			// order (an owner's R/ keys are), and so do their prefixes:
			// the seeker passes the many that own nothing (a ReplicaSet's
			// Pods) without a seek each. The owner keys of both forms
			// (cutReverseKey) are under the owner's prefix, with its
			// few references.
			if err := it.each(pre, func(key []byte, _ *bdg.Item) error {
				p, ok := cutReverseKey(key[len(pre):], tns)
				if !ok {
					return fmt.Errorf("%w: reverse key %q", errCorrupt, key)
				}
				if p.typ != relations.Owner {
					return nil
				}
				// A level's children share group, resource and namespace.
				cgr := schema.GroupResource{Group: intern(p.group), Resource: intern(p.resource)}
				ns := intern(p.ns)
				if !vis.Allows(cgr, cluster, ns) {
					return nil // neither answered nor followed
				}
				name := string(p.name)
				if cgr == gr {
					set[memberKey(cluster, ns, name)] = true
				}
				if kind, ok := kinds.byGR[cgr]; ok {
					c := relations.Target{Group: cgr.Group, Kind: kind, Namespace: ns, Name: name}
					if !seen[c] {
						seen[c] = true
						next = append(next, c)
					}
				}
				return nil
			}); err != nil {
				return err
			}
		}
		frontier = next
	}
	return nil
}

// referrers adds to set the objects of gr in cluster whose spec names the
// object of gk called name (in ns when set).
func referrers(txn *bdg.Txn, gr schema.GroupResource, cluster string, gk schema.GroupKind, ns, name string, set map[string]bool, targetVisible func(ns string) bool) error {
	kindPre := append(join("R", cluster, gk.Group, gk.Kind), sep)
	pre := kindPre
	if ns != "" || relations.ClusterScoped(gk.Group, gk.Kind) {
		pre = reversePrefix(cluster, relations.Target{Group: gk.Group, Kind: gk.Kind, Namespace: ns, Name: name})
	}
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: pre})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		// <tns>/<tname>/ after the kind, then the source (cutReverseKey).
		k := it.Item().Key()
		var t [3][]byte
		if !splitFirst(k[len(kindPre):], t[:]) {
			return fmt.Errorf("%w: reverse key %q", errCorrupt, k)
		}
		if string(t[1]) != name || !targetVisible(string(t[0])) {
			continue
		}
		p, ok := cutReverseKey(t[2], t[0])
		if !ok {
			return fmt.Errorf("%w: reverse key %q", errCorrupt, k)
		}
		if p.typ == relations.References && (schema.GroupResource{Group: string(p.group), Resource: string(p.resource)}) == gr {
			set[memberKey(cluster, string(p.ns), string(p.name))] = true
		}
	}
	if gr == podsGVR.GroupResource() && relations.Shared(gk.Group, gk.Kind, name) {
		return sharedReferrers(txn, cluster, gk, ns, name, set, targetVisible)
	}
	return nil
}

// sharedReferrers adds to set the Pods of cluster (in ns when set) whose
// E/ entries name the shared object of gk called name in their own
// namespace: a Pod's reference to it has no R/ key (unkeyed).
func sharedReferrers(txn *bdg.Txn, cluster string, gk schema.GroupKind, ns, name string, set map[string]bool, targetVisible func(ns string) bool) error {
	pre := append(join("E", cluster, podsGVR.Group, podsGVR.Version, podsGVR.Resource), sep)
	base := len(pre) // <ns>/<name> follow
	if ns != "" {
		pre = append(append(pre, ns...), sep)
	}
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: pre})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		var p [2][]byte
		if !splitN(k[base:], p[:]) || (ns != "" && string(p[0]) != ns) {
			return fmt.Errorf("%w: relations key %q", errCorrupt, k)
		}
		pns := string(p[0])
		if !targetVisible(pns) {
			continue
		}
		t := relations.Ref{Type: relations.References, Target: relations.Target{Group: gk.Group, Kind: gk.Kind, Namespace: pns, Name: name}}
		err := it.Item().Value(func(v []byte) error {
			_, rest, err := cutRelHeader(v, false)
			if err != nil {
				return err
			}
			refs, _, _, err := cutRefs(rest)
			if err == nil && slices.Contains(refs, t) {
				set[memberKey(cluster, pns, string(p[1]))] = true
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("relations key %q: %w", k, err)
		}
	}
	return nil
}

// splitFirst cuts b at its first len(parts)-1 seps, in place: the last
// part is the rest; false when b has fewer.
func splitFirst(b []byte, parts [][]byte) bool {
	for i := range len(parts) - 1 {
		j := bytes.IndexByte(b, sep)
		if j < 0 {
			return false
		}
		parts[i], b = b[:j], b[j+1:]
	}
	parts[len(parts)-1] = b
	return true
}

// relations resolves the list's relation field requirements, if any, to
// the members its scan keeps; its field filter then skips them.
func (l *listScan) relations() error {
	rfs := l.o.Fields.Relations()
	if len(rfs) == 0 {
		return nil
	}
	ns := l.o.Namespace
	if fns, ok := l.o.Fields.Namespace(); ok && ns == "" {
		ns = fns
	}
	// Through the caller's visibility over every resource (the query API
	// sets it), and the list's own too: a relation through an object of
	// the listed resource the caller cannot see selects nothing either.
	vis := l.o.Fields.RelationVisibility()
	m, err := relatedMembers(l.txn, l.vi, l.o.GVR, ns, l.clusters, rfs, both{vis, l.o.Visible})
	if err != nil {
		return err
	}
	l.members, l.o.Fields = m, l.o.Fields.RelationsResolved()
	return nil
}

// allower is what a relation may go through.
type allower interface {
	Allows(gr schema.GroupResource, cluster, namespace string) bool
}

// both allows what each of two visibilities allows (nil: everything).
type both [2]*query.Visibility

func (b both) Allows(gr schema.GroupResource, cluster, namespace string) bool {
	return b[0].Allows(gr, cluster, namespace) && b[1].Allows(gr, cluster, namespace)
}

// membersRange makes a list whose relation fields selected its candidates
// read the object range (of its namespace, if any) by their keys: the
// Pods one Deployment owns are read, not the resource's range around them.
func (l *listScan) membersRange() {
	if l.members == nil {
		return
	}
	ns := l.o.Namespace
	if fns, ok := l.o.Fields.Namespace(); ok && ns == "" {
		ns = fns
	}
	// Nothing an index decided holds for the members: a label selector or
	// a field equality the range would have implied is matched on each.
	l.indexed, l.base, l.objBase = false, nil, nil
	l.implied, l.fieldImplied = false, false
	l.prefix = objPrefix(l.o.GVR)
	if ns != "" {
		l.prefix = append(append(l.prefix, ns...), sep)
	}
}

// scanMembers is scan over the members' primary keys from start, in key
// order (the order of every list, which continue tokens rely on).
func (l *listScan) scanMembers(start []byte) (bool, error) {
	keys := make([][]byte, 0, len(l.members))
	for m := range l.members {
		c, rest, _ := strings.Cut(m, "\x00")
		ns, name, _ := strings.Cut(rest, "\x00")
		k := objKey(l.o.GVR, ns, name, c)
		if bytes.HasPrefix(k, l.prefix) && bytes.Compare(k, start) >= 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, bytes.Compare)
	// The members' objects are read as a label-indexed list reads its
	// candidates' (drain): in batches, by parallel workers each seeking
	// its share in key order. Read one by one, a hundred Pods took twice
	// the label-selected list's time on two cores. A member's key is its
	// object's own.
	l.indexed, l.base, l.objBase = true, objPrefix(l.o.GVR), objPrefix(l.o.GVR)
	defer l.closeFetchers()
	for _, k := range keys {
		if more, err := l.visitKey(k, nil); err != nil || more {
			return more, err
		}
	}
	return l.drain()
}
