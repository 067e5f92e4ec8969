package query

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Visibility is what one caller may see of a read that spans resources (a
// search): the union of its grants. The query API builds it from the
// authorization policy; backends apply it to each candidate object before
// counting it toward a page, so paging never depends on what the caller
// may not see.
type Visibility struct {
	Grants []Grant
}

// Grant is one allow rule's reach: objects of some resources in some
// clusters and namespaces. Kept per rule, because flattening the cluster
// and namespace restrictions of several rules into two lists would widen
// access (rule 1: cluster a; rule 2: namespace x would allow x in b).
type Grant struct {
	// Resources lists the resources granted (version does not matter); nil
	// means every resource but those in Except.
	Resources []schema.GroupResource
	// Except lists resources a nil Resources does not cover (Secrets, which
	// a "*" rule never reaches).
	Except []schema.GroupResource
	// Clusters and Namespaces restrict the grant; empty means all.
	// Cluster-scoped objects have no namespace: a grant restricted to
	// namespaces never covers them.
	Clusters   []string
	Namespaces []string
	// Sorted says Clusters and Namespaces are sorted, so they are looked
	// up by binary search: a grant from the member clusters' RBAC may name
	// hundreds of clusters or namespaces, and every object is judged.
	Sorted bool
}

// contains reports whether list holds v, by binary search when sorted.
func contains(list []string, v string, sorted bool) bool {
	if sorted {
		_, ok := slices.BinarySearch(list, v)
		return ok
	}
	return slices.Contains(list, v)
}

// Allows reports whether an object of gr in cluster and namespace is
// visible. A nil Visibility allows everything.
func (v *Visibility) Allows(gr schema.GroupResource, cluster, namespace string) bool {
	if v == nil {
		return true
	}
	for i := range v.Grants {
		if v.Grants[i].allows(gr, cluster, namespace) {
			return true
		}
	}
	return false
}

func (g *Grant) allows(gr schema.GroupResource, cluster, namespace string) bool {
	return g.reaches(gr, namespace) && (len(g.Clusters) == 0 || contains(g.Clusters, cluster, g.Sorted))
}

// reaches reports whether g covers gr in namespace in the clusters it
// names (all when none).
func (g *Grant) reaches(gr schema.GroupResource, namespace string) bool {
	if g.Resources == nil {
		if slices.Contains(g.Except, gr) {
			return false
		}
	} else if !slices.Contains(g.Resources, gr) {
		return false
	}
	return len(g.Namespaces) == 0 || contains(g.Namespaces, namespace, g.Sorted)
}

// None reports a visibility that allows nothing (a nil one allows all).
func (v *Visibility) None() bool { return v != nil && len(v.Grants) == 0 }

// Clusters is the set of clusters anything is visible in, sorted, for
// narrowing what a backend reads; all is true when some grant does not
// restrict clusters (and for a nil Visibility).
func (v *Visibility) Clusters() (clusters []string, all bool) {
	if v == nil {
		return nil, true
	}
	for _, g := range v.Grants {
		if len(g.Clusters) == 0 {
			return nil, true
		}
		clusters = append(clusters, g.Clusters...)
	}
	slices.Sort(clusters)
	return slices.Compact(clusters), false
}

// ClustersOf is the set of clusters in which objects of gr in namespace
// are visible, sorted (empty: none); all is true when every cluster is
// (and for a nil Visibility). A Get names its resource and namespace, so
// this is all it needs to narrow what it reads.
func (v *Visibility) ClustersOf(gr schema.GroupResource, namespace string) (clusters []string, all bool) {
	if v == nil {
		return nil, true
	}
	clusters = []string{}
	for i := range v.Grants {
		g := &v.Grants[i]
		if !g.reaches(gr, namespace) {
			continue
		}
		if len(g.Clusters) == 0 {
			return nil, true
		}
		clusters = append(clusters, g.Clusters...)
	}
	slices.Sort(clusters)
	return slices.Compact(clusters), false
}

// String is a canonical form of v, for binding continue tokens to the
// visibility they were issued under ("" for nil).
func (v *Visibility) String() string {
	if v == nil {
		return ""
	}
	grs := func(l []schema.GroupResource) string {
		s := make([]string, len(l))
		for i, gr := range l {
			s[i] = gr.String()
		}
		slices.Sort(s)
		return strings.Join(s, ",")
	}
	sorted := func(l []string) string {
		l = slices.Clone(l)
		slices.Sort(l)
		return strings.Join(l, ",")
	}
	parts := make([]string, len(v.Grants))
	for i, g := range v.Grants {
		res := "*"
		if g.Resources != nil {
			res = grs(g.Resources)
		}
		parts[i] = res + "-" + grs(g.Except) + "@" + sorted(g.Clusters) + "/" + sorted(g.Namespaces)
	}
	slices.Sort(parts)
	return "visible:" + strings.Join(parts, ";")
}
