package store

import (
	"context"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
)

// healthInterval is how often every OpenSearch backend is asked for its
// health; healthTimeout bounds one answer.
const (
	healthInterval = 2 * time.Second
	healthTimeout  = 2 * time.Second
)

// Unreachable lists the backends this process cannot use now, by id:
// OpenSearch backends that do not answer or are red, and those that could
// not be opened (their credentials, say). Badger is local and never listed.
func (s *Set) Unreachable() []query.BackendProblem {
	s.mu.Lock()
	out := make([]query.BackendProblem, 0, len(s.problems))
	for _, p := range s.problems {
		out = append(out, p)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Backend < out[j].Backend })
	return out
}

// BackendOf is the id of the backend serving a cluster's resource, and
// its name for people.
func (s *Set) BackendOf(cluster string, gvr schema.GroupVersionResource) (id, name string) {
	id = s.router.backendOf(gvr, cluster)
	if id == defaultBackend {
		return id, "badger"
	}
	s.mu.Lock()
	st := s.osStores[id]
	s.mu.Unlock()
	if st == nil {
		return id, "opensearch " + id
	}
	return id, osName(st.Addresses())
}

func osName(addresses []string) string { return "opensearch " + strings.Join(addresses, ",") }

// RegistryBackend is the id of the backend a registry's resources go to.
func (s *Set) RegistryBackend(r *registry.ResourceRegistry) string {
	if r.Spec.BackendStore == nil || r.Spec.BackendStore.OpenSearch == nil {
		return defaultBackend
	}
	return OpenSearchID(r.Spec.BackendStore.OpenSearch)
}

// setProblem records (err != nil) or clears a backend's problem, keeping
// the time it started, and logs each change.
func (s *Set) setProblem(id string, addresses []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, had := s.problems[id]
	if err == nil {
		if had {
			delete(s.problems, id)
			s.log.Info("backend reachable again", "backend", p.Name, "unreachable_for", time.Since(p.Since).Round(time.Millisecond))
		}
		return
	}
	if !had {
		p = query.BackendProblem{Backend: id, Name: osName(addresses), Since: time.Now()}
		s.log.Warn("backend unreachable", "backend", p.Name, "err", err)
	}
	p.Err = err.Error()
	s.problems[id] = p
}

// probe asks every connected OpenSearch backend for its health until ctx
// ends.
func (s *Set) probe(ctx context.Context) error {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		s.mu.Lock()
		stores := make(map[string]pinger, len(s.osStores))
		for id, st := range s.osStores {
			stores[id] = st
		}
		s.mu.Unlock()
		for id, st := range stores {
			pctx, cancel := context.WithTimeout(ctx, healthTimeout)
			err := st.Ping(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			s.setProblem(id, st.Addresses(), err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pinger is an OpenSearch store as the health probe sees it.
type pinger interface {
	Ping(ctx context.Context) error
	Addresses() []string
}
