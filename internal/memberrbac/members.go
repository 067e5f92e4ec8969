package memberrbac

import (
	"slices"
	"sync"
)

// Members holds one Authorizer per member cluster, by cluster name. The
// zero value is ready to use; safe for concurrent use.
type Members struct {
	mu sync.RWMutex
	m  map[string]*Authorizer
}

// Cluster returns the cluster's Authorizer, creating an empty one (which
// allows only system:masters) when there is none yet.
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
	defer m.mu.Unlock()
	delete(m.m, name)
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
