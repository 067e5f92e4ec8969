package catalog

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/registry"
)

// Resource is one resource the hub serves on the Kubernetes API: its kind,
// scope and names as the hub trusts them, and the clusters whose copy of
// it the catalog follows.
type Resource struct {
	GVR        schema.GroupVersionResource
	Kind       string
	Namespaced bool
	ShortNames []string
	Categories []string
	// Builtin: kind, scope and names are the hub's own, not any record's.
	Builtin bool
	// Clusters are the clusters serving it, sorted.
	Clusters []string
	// Columns are its Table columns as most of the clusters that report
	// columns report them (their members' printers); none on a tie, so no
	// cluster can outvote another. A fleet-wide Table prints these; a row
	// whose cells do not match them is printed without its cells.
	Columns []inventory.Column
}

// Cluster is what the catalog holds of one member cluster.
type Cluster struct {
	Name              string
	KubernetesVersion string
	// Followed are the resources of the cluster the catalog serves.
	Followed []schema.GroupVersionResource
	// Marks say, per resource the cluster's record reports, why the
	// catalog does not follow it.
	Marks map[schema.GroupVersionResource]string
	// Columns are the Table columns its record reports per followed
	// resource, for a Table of that cluster alone.
	Columns map[schema.GroupVersionResource][]inventory.Column
}

// claim is what one cluster's record says of one resource.
type claim struct {
	cluster    string
	kind       string
	namespaced bool
	short      []string
	categories []string
	columns    []inventory.Column
	// columnsKey identifies columns for majorityColumns, computed once
	// per record rather than at every resolve (each resolves the whole
	// fleet's claims: formatting them was a third of its cost at
	// 2,000 clusters).
	columnsKey string
}

// variant is a claim's kind and scope, the part clusters must agree on.
type variant struct {
	kind       string
	namespaced bool
}

func (v variant) String() string {
	scope := "cluster-scoped"
	if v.namespaced {
		scope = "namespaced"
	}
	return v.kind + " " + scope
}

// clusterClaims are the claims of one record that a registry selects for
// that cluster, and the marks of the others. They depend only on that
// record and the registries, so a record's change recomputes only its own.
type clusterClaims struct {
	name, version string
	claims        map[schema.GroupVersionResource]claim
	marks         map[schema.GroupVersionResource]string
}

// claimsOf judges one record against the registries.
func claimsOf(rec *inventory.Cluster, regs []*registry.ResourceRegistry) *clusterClaims {
	cc := &clusterClaims{name: rec.Name, version: rec.KubernetesVersion,
		claims: map[schema.GroupVersionResource]claim{}, marks: map[schema.GroupVersionResource]string{}}
	var sels []registry.ResourceSelector
	for _, reg := range regs {
		sels = append(sels, reg.SelectorsFor(rec.Info())...)
	}
	for _, r := range rec.Resources {
		if r.Resource == "" || r.Kind == "" || r.Message != "" {
			continue // not served by that cluster
		}
		gvr := schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}
		c := claim{cluster: rec.Name, kind: r.Kind, namespaced: r.Namespaced, short: r.ShortNames, categories: r.Categories, columns: r.Columns, columnsKey: columnsKey(r.Columns)}
		if b, ok := builtins[gvr.GroupResource()]; ok {
			if c.kind != b.kind || c.namespaced != b.namespaced {
				cc.marks[gvr] = fmt.Sprintf("reports %s, but the built-in resource is %s", variant{c.kind, c.namespaced}, variant{b.kind, b.namespaced})
				continue
			}
		} else if owner, ok := builtinKind(gvr.Group, c.kind); ok {
			cc.marks[gvr] = fmt.Sprintf("reports kind %s, which is the built-in resource %s's", c.kind, owner)
			continue
		}
		gvk := gvr.GroupVersion().WithKind(c.kind)
		if !registry.AnySelects(sels, gvk) {
			cc.marks[gvr] = fmt.Sprintf("no registry selects %s for this cluster", gvkString(gvk))
			continue
		}
		cc.claims[gvr] = c
	}
	return cc
}

func gvkString(gvk schema.GroupVersionKind) string {
	return gvk.GroupVersion().String() + " " + gvk.Kind
}

// builtinKind reports which built-in resource of group has kind.
func builtinKind(group, kind string) (schema.GroupResource, bool) {
	for gr, b := range builtins {
		if gr.Group == group && b.kind == kind {
			return gr, true
		}
	}
	return schema.GroupResource{}, false
}

// resolve derives the served resources and every cluster's view from the
// clusters' judged claims.
//
//   - A built-in resource has the hub's kind, scope and names; every
//     cluster whose claim agrees (claimsOf) serves it.
//   - A custom resource has the kind and scope most of its clusters
//     report; the others are marked. A tie is served by no one: no
//     cluster can outvote another, so neither is believed.
//   - Its short names and categories are those every serving cluster
//     reports, less any name of a built-in resource and any short name
//     another served resource also has.
//   - Two resources of one group, version and kind: the built-in wins,
//     else the one more clusters serve; a tie serves neither.
func resolve(clusters map[string]*clusterClaims) snapshotData {
	byGVR := map[schema.GroupVersionResource][]claim{}
	marks := map[string]map[schema.GroupVersionResource]string{}
	for name, cc := range clusters {
		m := map[schema.GroupVersionResource]string{}
		for gvr, why := range cc.marks {
			m[gvr] = why
		}
		marks[name] = m
		for gvr, c := range cc.claims {
			byGVR[gvr] = append(byGVR[gvr], c)
		}
	}
	served := map[schema.GroupVersionResource]*Resource{}
	for gvr, cs := range byGVR {
		sort.Slice(cs, func(i, j int) bool { return cs[i].cluster < cs[j].cluster })
		if b, ok := builtins[gvr.GroupResource()]; ok {
			r := &Resource{GVR: gvr, Kind: b.kind, Namespaced: b.namespaced, ShortNames: b.short, Categories: b.categories, Builtin: true}
			for _, c := range cs {
				r.Clusters = append(r.Clusters, c.cluster)
			}
			r.Columns = majorityColumns(cs)
			served[gvr] = r
			continue
		}
		count := map[variant][]string{}
		for _, c := range cs {
			v := variant{c.kind, c.namespaced}
			count[v] = append(count[v], c.cluster)
		}
		win, tie := majority(count)
		if tie {
			why := "clusters disagree on its kind and scope with no majority (" + describe(count) + "): served by none"
			for _, c := range cs {
				marks[c.cluster][gvr] = why
			}
			continue
		}
		r := &Resource{GVR: gvr, Kind: win.kind, Namespaced: win.namespaced, Clusters: count[win]}
		r.Columns = majorityColumns(slices.DeleteFunc(slices.Clone(cs), func(c claim) bool { return (variant{c.kind, c.namespaced}) != win }))
		first := true
		for _, c := range cs {
			v := variant{c.kind, c.namespaced}
			if v != win {
				marks[c.cluster][gvr] = fmt.Sprintf("reports %s, but most clusters report %s", v, win)
				continue
			}
			if first {
				r.ShortNames, r.Categories, first = slices.Clone(c.short), slices.Clone(c.categories), false
				continue
			}
			r.ShortNames = intersect(r.ShortNames, c.short)
			r.Categories = intersect(r.Categories, c.categories)
		}
		served[gvr] = r
	}
	dropKindConflicts(served, marks)
	dropShortNameConflicts(served)
	out := snapshotData{resources: served, clusters: map[string]*Cluster{}}
	for name, cc := range clusters {
		c := &Cluster{Name: name, KubernetesVersion: cc.version, Marks: marks[name], Columns: map[schema.GroupVersionResource][]inventory.Column{}}
		for gvr, cl := range cc.claims {
			if _, marked := marks[name][gvr]; !marked {
				c.Followed = append(c.Followed, gvr)
				if len(cl.columns) > 0 {
					c.Columns[gvr] = cl.columns
				}
			}
		}
		sort.Slice(c.Followed, func(i, j int) bool { return c.Followed[i].String() < c.Followed[j].String() })
		out.clusters[name] = c
	}
	return out
}

// majority is the variant with strictly more clusters than any other.
func majority(count map[variant][]string) (variant, bool) {
	var win variant
	best, tie := -1, false
	for v, cs := range count {
		switch {
		case len(cs) > best:
			win, best, tie = v, len(cs), false
		case len(cs) == best:
			tie = true
		}
	}
	return win, tie
}

// majorityColumns are the columns strictly more of the claims report
// than any other columns, among claims that report any; none on a tie.
// Descriptions do not count: kubectl never prints them.
func majorityColumns(cs []claim) []inventory.Column {
	count := map[string]int{}
	first := map[string][]inventory.Column{}
	for _, c := range cs {
		if len(c.columns) == 0 {
			continue
		}
		key := c.columnsKey
		if count[key]++; count[key] == 1 {
			first[key] = c.columns
		}
	}
	var win []inventory.Column
	best, tie := 0, false
	for k, n := range count {
		switch {
		case n > best:
			win, best, tie = first[k], n, false
		case n == best:
			tie = true
		}
	}
	if tie {
		return nil
	}
	return win
}

// columnsKey is equal for columns equal but for their descriptions.
func columnsKey(cols []inventory.Column) string {
	var k strings.Builder
	for _, col := range cols {
		fmt.Fprintf(&k, "%q %q %q %d;", col.Name, col.Type, col.Format, col.Priority)
	}
	return k.String()
}

func describe(count map[variant][]string) string {
	var parts []string
	for v, cs := range count {
		parts = append(parts, fmt.Sprintf("%s: %s", v, strings.Join(cs, ", ")))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// dropKindConflicts keeps one resource per group, version and kind.
func dropKindConflicts(served map[schema.GroupVersionResource]*Resource, marks map[string]map[schema.GroupVersionResource]string) {
	byKind := map[schema.GroupVersionKind][]*Resource{}
	for _, r := range served {
		gvk := r.GVR.GroupVersion().WithKind(r.Kind)
		byKind[gvk] = append(byKind[gvk], r)
	}
	for gvk, rs := range byKind {
		if len(rs) < 2 {
			continue
		}
		sort.Slice(rs, func(i, j int) bool {
			if rs[i].Builtin != rs[j].Builtin {
				return rs[i].Builtin
			}
			return len(rs[i].Clusters) > len(rs[j].Clusters)
		})
		keep := !(rs[0].Builtin == rs[1].Builtin && len(rs[0].Clusters) == len(rs[1].Clusters))
		for i, r := range rs {
			if i == 0 && keep {
				continue
			}
			why := fmt.Sprintf("kind %s is also reported for another resource: served by none", gvkString(gvk))
			if keep {
				why = fmt.Sprintf("kind %s belongs to resource %s", gvkString(gvk), rs[0].GVR.Resource)
			}
			for _, c := range r.Clusters {
				marks[c][r.GVR] = why
			}
			delete(served, r.GVR)
		}
	}
}

// dropShortNameConflicts removes from custom resources the built-ins'
// names and the short names two served resources share, so no record can
// redirect a name kubectl users type.
func dropShortNameConflicts(served map[schema.GroupVersionResource]*Resource) {
	reserved := builtinNames()
	uses := map[string]int{}
	for _, r := range served {
		for _, s := range r.ShortNames {
			uses[s]++
		}
	}
	for _, r := range served {
		if r.Builtin {
			continue
		}
		r.ShortNames = slices.DeleteFunc(r.ShortNames, func(s string) bool { return reserved[s] || uses[s] > 1 })
	}
}

// intersect keeps the elements of a that b has, in a's order.
func intersect(a, b []string) []string {
	return slices.DeleteFunc(a, func(s string) bool { return !slices.Contains(b, s) })
}

func lower(s string) string { return strings.ToLower(s) }
