package memberrbac

import (
	"context"
	"slices"
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/authentication/user"
)

// Reach is where an identity may make one collection request (list,
// watch, or get without a name) across the fleet: in every cluster
// (Masters: system:masters, which every member allows whatever its RBAC
// objects), or per held cluster its Scope. Clusters whose Scope allows
// nothing are left out; clusters with the same Scope share an entry, so a
// fleet whose members grant alike is one or two entries however many
// clusters it has.
type Reach struct {
	Masters bool
	Groups  []ReachGroup
}

// ReachGroup is a set of clusters (sorted) where the identity has the same
// Scope.
type ReachGroup struct {
	Clusters []string
	Scope    Scope
}

// None reports a reach that allows nothing.
func (r Reach) None() bool { return !r.Masters && len(r.Groups) == 0 }

// Allows reports whether an object of the resource in cluster and
// namespace ("" for cluster-scoped) is within reach.
func (r Reach) Allows(cluster, namespace string) bool {
	if r.Masters {
		return true
	}
	for _, g := range r.Groups {
		if _, ok := slices.BinarySearch(g.Clusters, cluster); ok && g.Scope.Allows(namespace) {
			return true
		}
	}
	return false
}

// Covers reports whether r allows everything o allows: an identity whose
// reach went from o to r lost nothing.
func (r Reach) Covers(o Reach) bool {
	if r.Masters {
		return true
	}
	if o.Masters {
		return false
	}
	for _, g := range o.Groups {
		for _, c := range g.Clusters {
			if g.Scope.All {
				if !r.Allows(c, "") {
					return false
				}
				continue
			}
			for _, ns := range g.Scope.Namespaces {
				if !r.Allows(c, ns) {
					return false
				}
			}
		}
	}
	return true
}

// reachMemo remembers reaches until the next change of any member: a
// request costs a map lookup. The first request after a change (per
// identity, verb and resource) visits every cluster, but each member
// remembers its own answer too (rememberedScope), so only the members that
// changed decide again.
type reachMemo struct {
	mu  sync.Mutex
	gen uint64
	m   map[string]Reach
}

// maxMemo bounds the memo; past it, it starts again empty.
const maxMemo = 4096

// Reach returns where a fleetview caller (its user and groups, mapped per
// member by Identity) may make verb on the collection of r in each member.
// Decided with each member's Scope (upstream's evaluation); remembered
// until the next change (Generation).
func (m *Members) Reach(ctx context.Context, caller Identity, verb string, r Resource) Reach {
	if m.Map.uniform() && slices.Contains(caller.Groups, user.SystemPrivilegedGroup) {
		return Reach{Masters: true}
	}
	key := memoKey(caller, verb, r)
	gen := m.Generation()
	m.memo.mu.Lock()
	if m.memo.gen == gen {
		if v, ok := m.memo.m[key]; ok {
			m.memo.mu.Unlock()
			return v
		}
	}
	m.memo.mu.Unlock()

	byHash := map[uint64][]int{} // a Scope's hash -> indexes in out.Groups
	var out Reach
	for _, c := range m.Names() {
		a, ok := m.Lookup(c)
		if !ok {
			continue
		}
		id, known := m.Identity(c, caller)
		if !known {
			continue
		}
		s := a.rememberedScope(ctx, key, id, verb, r)
		if s.None() {
			continue
		}
		h := scopeHash(s)
		j := slices.IndexFunc(byHash[h], func(i int) bool { return sameScope(out.Groups[i].Scope, s) })
		var i int
		if j < 0 {
			i = len(out.Groups)
			byHash[h] = append(byHash[h], i)
			out.Groups = append(out.Groups, ReachGroup{Scope: s})
		} else {
			i = byHash[h][j]
		}
		out.Groups[i].Clusters = append(out.Groups[i].Clusters, c) // Names is sorted
	}

	m.memo.mu.Lock()
	defer m.memo.mu.Unlock()
	if m.memo.gen != gen || m.memo.m == nil || len(m.memo.m) >= maxMemo {
		m.memo.gen, m.memo.m = gen, map[string]Reach{}
	}
	m.memo.m[key] = out
	return out
}

// scopeMemo is one member's Scope answers by memo key, each with the
// member's generation it was decided at.
type scopeMemo struct {
	mu sync.Mutex
	m  map[string]rememberedScope
}

type rememberedScope struct {
	gen   uint64
	scope Scope
}

// rememberedScope is Scope, decided again only when this member changed
// since it was last decided for key.
func (a *Authorizer) rememberedScope(ctx context.Context, key string, id Identity, verb string, r Resource) Scope {
	gen := a.gen.Load() // before deciding: a change meanwhile is decided again next time
	a.scopes.mu.Lock()
	rs, ok := a.scopes.m[key]
	a.scopes.mu.Unlock()
	if ok && rs.gen == gen {
		return rs.scope
	}
	s := a.Scope(ctx, id, verb, r)
	a.scopes.mu.Lock()
	defer a.scopes.mu.Unlock()
	if a.scopes.m == nil || len(a.scopes.m) >= maxMemo {
		a.scopes.m = map[string]rememberedScope{}
	}
	a.scopes.m[key] = rememberedScope{gen: gen, scope: s}
	return s
}

// scopeHash is FNV-1a over a Scope, for grouping clusters that grant alike
// without joining a thousand namespaces into a key per cluster.
func scopeHash(s Scope) uint64 {
	h := uint64(14695981039346656037)
	add := func(b byte) { h = (h ^ uint64(b)) * 1099511628211 }
	if s.All {
		add(1)
	}
	for _, ns := range s.Namespaces {
		for i := 0; i < len(ns); i++ {
			add(ns[i])
		}
		add(0)
	}
	return h
}

func sameScope(a, b Scope) bool { return a.All == b.All && slices.Equal(a.Namespaces, b.Namespaces) }

func memoKey(id Identity, verb string, r Resource) string {
	groups := slices.Clone(id.Groups)
	slices.Sort(groups)
	return strings.Join([]string{id.User, strings.Join(groups, "\x01"), verb, r.APIGroup, r.Resource, r.Subresource}, "\x00")
}

// HasCluster reports whether the reach allows anything in cluster.
func (r Reach) HasCluster(cluster string) bool {
	if r.Masters {
		return true
	}
	for _, g := range r.Groups {
		if _, ok := slices.BinarySearch(g.Clusters, cluster); ok {
			return true
		}
	}
	return false
}
