package memberrbac

import (
	"maps"
	"slices"
	"sync"
)

// Members holds one Authorizer per member cluster, by cluster name, and
// tells who holds a decision about them when any of them changes
// (Generation, Changed). The zero value is ready to use; safe for
// concurrent use.
type Members struct {
	// Map is the caller's identity in each member (nil: the same
	// everywhere); set before first use, never changed after.
	Map  *IdentityMap
	memo reachMemo
	// labels are each cluster's labels (SetLabels), kept only when Map
	// selects clusters by labels.
	labelsMu sync.RWMutex
	labels   map[string]map[string]string
	mu       sync.RWMutex
	m        map[string]*Authorizer
	// gen counts the changes made through Upsert, Delete and Remove.
	gen uint64
	// changed is closed (and replaced) at each change.
	changed chan struct{}
}

// Cluster returns the cluster's Authorizer, creating an empty one (which
// allows only system:masters) when there is none yet. Changes made to it
// directly are not counted by Generation: use Members.Upsert and Delete.
func (m *Members) Cluster(name string) *Authorizer {
	if a, ok := m.Lookup(name); ok {
		return a
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.m[name]; ok {
		return a
	}
	if m.m == nil {
		m.m = map[string]*Authorizer{}
	}
	a := New()
	m.m[name] = a
	return a
}

// Upsert adds or replaces one RBAC object of a cluster (Authorizer.Upsert)
// and counts the change.
func (m *Members) Upsert(cluster string, obj any) error {
	if err := m.Cluster(cluster).Upsert(obj); err != nil {
		return err
	}
	m.bump()
	return nil
}

// Delete removes one RBAC object of a cluster (Authorizer.Delete) and
// counts the change.
func (m *Members) Delete(cluster string, obj any) error {
	a, ok := m.Lookup(cluster)
	if !ok {
		return nil
	}
	if err := a.Delete(obj); err != nil {
		return err
	}
	m.bump()
	return nil
}

func (m *Members) bump() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// Generation counts the changes so far: a decision taken at generation g
// still holds while Generation is g.
func (m *Members) Generation() uint64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gen
}

// Changed returns the generation now and a channel closed at the next
// change after it.
func (m *Members) Changed() (uint64, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
	return m.gen, m.changed
}

// Identity is the identity a fleetview caller (its user and groups as
// fleetview authenticated them) has in cluster, as that member's
// authorizer sees it (Map; system:authenticated added). ok is false when
// Map selects clusters by labels and the cluster's are not known yet
// (IdentityMap.In): that member then allows the caller nothing.
func (m *Members) Identity(cluster string, caller Identity) (Identity, bool) {
	id, ok := m.Mapped(cluster, caller)
	if !ok {
		return Identity{}, false
	}
	return Authenticated(id), true
}

// Mapped is the caller's user and groups as Map names them in cluster,
// nothing added: whom a request forwarded to that member impersonates.
// ok is false as for Identity.
func (m *Members) Mapped(cluster string, caller Identity) (Identity, bool) {
	id, err := m.Resolve(cluster, caller)
	return id, err == nil
}

// Resolve is Mapped with the reason it fails (IdentityMap.Map:
// ErrIdentityUnknown, ErrReservedName).
func (m *Members) Resolve(cluster string, caller Identity) (Identity, error) {
	if !m.Map.selects() {
		return m.Map.Map(cluster, nil, true, caller)
	}
	m.labelsMu.RLock()
	set, known := m.labels[cluster]
	m.labelsMu.RUnlock()
	return m.Map.Map(cluster, set, known, caller)
}

// SetLabels records a cluster's labels as its inventory record says them
// (present false: the cluster has no valid record). When Map selects
// clusters by labels and they changed, the cluster's remembered decisions
// are forgotten and the change counted (Generation), as an RBAC change:
// the caller may now be someone else in that member. Otherwise it does
// nothing, so a heartbeat costs a map comparison at most.
func (m *Members) SetLabels(cluster string, set map[string]string, present bool) {
	if !m.Map.selects() {
		return
	}
	m.labelsMu.Lock()
	old, had := m.labels[cluster]
	if had == present && maps.Equal(old, set) {
		m.labelsMu.Unlock()
		return
	}
	if present {
		if m.labels == nil {
			m.labels = map[string]map[string]string{}
		}
		m.labels[cluster] = maps.Clone(set)
	} else {
		delete(m.labels, cluster)
	}
	m.labelsMu.Unlock()
	if a, ok := m.Lookup(cluster); ok {
		a.gen.Add(1)
	}
	m.bump()
}

// Lookup returns the cluster's Authorizer if it has one.
func (m *Members) Lookup(name string) (*Authorizer, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	a, ok := m.m[name]
	return a, ok
}

// Remove forgets a cluster's Authorizer (a cluster that left the fleet).
func (m *Members) Remove(name string) {
	m.mu.Lock()
	delete(m.m, name)
	m.mu.Unlock()
	m.bump()
}

// Names returns the clusters held, sorted.
func (m *Members) Names() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.m))
	for n := range m.m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
