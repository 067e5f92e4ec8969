package opensearch

import (
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/relations"
)

// maxOwnerDepth bounds the walk down owner references, as on Badger.
const maxOwnerDepth = 8

// allower is what a relation may go through: the caller's visibility over
// every resource and the list's own (nil: everything).
type allower [2]*query.Visibility

func (a allower) Allows(gr schema.GroupResource, cluster, ns string) bool {
	return a[0].Allows(gr, cluster, ns) && a[1].Allows(gr, cluster, ns)
}

// relationMembers resolves the relation requirements of a list's field
// selector to the ids of the documents of o.GVR that satisfy them all,
// as the Badger store resolves them (store/badger/relfilter.go): the
// objects a value names (in ns when set, in the list's clusters), then
// the documents naming them as owner down to maxOwnerDepth (one query per
// level), the Pods their selectors select, or the documents whose
// references name them. Only what vis allows is a start or a step: a
// relation through an object the caller cannot read selects nothing.
func (s *Store) relationMembers(ctx context.Context, o query.ListOptions, ns string) (map[string]bool, error) {
	if ok, err := s.current(ctx); err != nil || !ok {
		if err == nil {
			err = errOldDocuments
		}
		return nil, err
	}
	vis := allower{o.Fields.RelationVisibility(), o.Visible}
	gr := o.GVR.GroupResource()
	var out map[string]bool
	for _, rf := range o.Fields.Relations() {
		set := map[string]bool{}
		var roots []osNode
		if rf.Field != query.FieldReferences {
			filter := []any{map[string]any{"term": map[string]any{"kind": map[string]any{"value": rf.Kind, "case_insensitive": true}}},
				term("metadata.name.keyword", rf.Name)}
			if ns != "" {
				filter = append(filter, term("metadata.namespace.keyword", ns))
			}
			if rf.Group != "" {
				filter = append(filter, term("fleetview.group", rf.Group))
			}
			if o.Clusters != nil {
				filter = append(filter, terms("fleetview.cluster", o.Clusters))
			}
			hits, _, err := s.relSearch(ctx, filter)
			if err != nil {
				return nil, err
			}
			for i := range hits {
				n := nodeOf(&hits[i])
				if vis.Allows(schema.GroupResource{Group: n.Group, Resource: n.Resource}, n.Cluster, n.Namespace) {
					roots = append(roots, n)
				}
			}
		}
		var err error
		switch rf.Field {
		case query.FieldOwnedBy:
			err = s.ownedBelow(ctx, gr, roots, set, vis)
		case query.FieldSelectedBy:
			if gr != podsGVR.GroupResource() {
				break
			}
			for _, r := range roots {
				if r.sel == nil || r.sel.Kind != "Pod" || r.sel.Group != "" {
					continue
				}
				pods, _, err := s.selectedPods(ctx, r.Cluster, []osNode{r})
				if err != nil {
					return nil, err
				}
				for _, p := range pods {
					if p.Namespace == r.sel.Namespace && r.sel.Matches(p.labels) {
						set[p.docID] = true
					}
				}
			}
		case query.FieldReferences:
			err = s.referrers(ctx, o, ns, rf, set, vis)
		}
		if err != nil {
			return nil, err
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

// ownedBelow adds to set the documents of gr the roots own, directly or
// through owned objects.
func (s *Store) ownedBelow(ctx context.Context, gr schema.GroupResource, roots []osNode, set map[string]bool, vis allower) error {
	seen := map[string]bool{}
	frontier := roots
	for d := 0; d < maxOwnerDepth && len(frontier) > 0; d++ {
		keys := make([]string, 0, len(frontier))
		for _, n := range frontier {
			seen[n.key()] = true
			keys = append(keys, refKey(relations.Owner, n.Cluster, relations.Target{Group: n.Group, Kind: n.Kind, Namespace: n.Namespace, Name: n.Name}))
		}
		hits, _, err := s.relSearch(ctx, []any{terms("fleetview.refs", keys)})
		if err != nil {
			return err
		}
		var next []osNode
		for i := range hits {
			c := nodeOf(&hits[i])
			cgr := schema.GroupResource{Group: c.Group, Resource: c.Resource}
			if !vis.Allows(cgr, c.Cluster, c.Namespace) {
				continue // neither answered nor followed
			}
			if cgr == gr {
				set[c.docID] = true
			}
			if !seen[c.key()] {
				seen[c.key()] = true
				next = append(next, c)
			}
		}
		frontier = next
	}
	return nil
}

// referrers adds to set the documents of the list's resource whose spec
// names the object rf names (any group, namespace and cluster the list
// allows; the kind case-insensitively), when the caller may read that
// object's resource there.
func (s *Store) referrers(ctx context.Context, o query.ListOptions, ns string, rf query.RelationField, set map[string]bool, vis allower) error {
	filter := []any{term("fleetview.gvr", gvrKey(o.GVR)),
		map[string]any{"prefix": map[string]any{"fleetview.refs": map[string]any{"value": string(relations.References) + "/" + rf.Kind + "/" + rf.Name + "/", "case_insensitive": true}}}}
	if ns != "" {
		filter = append(filter, term("metadata.namespace.keyword", ns))
	}
	if o.Clusters != nil {
		filter = append(filter, terms("fleetview.cluster", o.Clusters))
	}
	hits, _, err := s.relSearch(ctx, filter)
	if err != nil {
		return err
	}
	resources := map[schema.GroupKind]string{}
	for i := range hits {
		h := &hits[i]
		for _, r := range h.Source.FV.Refs {
			typ, c, t, ok := parseRef(r)
			if !ok || typ != relations.References || !strings.EqualFold(t.Kind, rf.Kind) || t.Name != rf.Name ||
				(rf.Group != "" && t.Group != rf.Group) || (ns != "" && t.Namespace != ns && !relations.ClusterScoped(t.Group, t.Kind)) {
				continue
			}
			gk := schema.GroupKind{Group: t.Group, Kind: t.Kind}
			res, ok := resources[gk]
			if !ok {
				if res, err = s.kindResource(ctx, gk); err != nil {
					return err
				}
				resources[gk] = res
			}
			if res != "" && vis.Allows(schema.GroupResource{Group: t.Group, Resource: res}, c, t.Namespace) {
				set[h.ID] = true
			}
		}
	}
	return nil
}

// kindResource is the resource of a kind: the built-in table, else a
// document of that kind; "" when neither knows it (the caller's grants
// cannot be judged: nothing goes through it).
func (s *Store) kindResource(ctx context.Context, gk schema.GroupKind) (string, error) {
	if res, ok := relations.BuiltinResource(gk.Group, gk.Kind); ok {
		return res, nil
	}
	hits, err := s.search(ctx, map[string]any{"size": 1, "_source": []string{"fleetview.resource"},
		"query": map[string]any{"bool": map[string]any{"filter": []any{term("kind", gk.Kind), term("fleetview.group", gk.Group)}}}}, "")
	if err != nil || len(hits) == 0 {
		return "", err
	}
	return hits[0].Source.FV.Resource, nil
}

// relationFilter narrows a list with relation requirements to the
// documents they select; ok false when none can match.
func (s *Store) relationFilter(ctx context.Context, o query.ListOptions) (map[string]any, bool, error) {
	ns := o.Namespace
	if fns, ok := o.Fields.Namespace(); ok && ns == "" {
		ns = fns
	}
	m, err := s.relationMembers(ctx, o, ns)
	if err != nil || len(m) == 0 {
		return nil, false, err
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return map[string]any{"ids": map[string]any{"values": ids}}, true, nil
}
