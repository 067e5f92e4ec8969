package store

import (
	"context"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
)

// healthInterval is how often every remote backend is asked for its
// health; healthTimeout bounds one answer.
const (
	healthInterval = 2 * time.Second
	healthTimeout  = 2 * time.Second
)

// Unreachable lists the backends this process cannot use now, by id:
// remote backends that do not answer or are red, and those that could not
// be opened (their credentials, say). The default store is local and never
// listed.
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
	return id, s.nameOf(id)
}

// nameOf is a backend's name for people: the default store's kind, an open
// named backend's kind and addresses, or for one not open (yet), the named
// kind's name and the id.
func (s *Set) nameOf(id string) string {
	if id == defaultBackend {
		return s.cfg.Default.Name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.members {
		if m.id == id {
			return m.name
		}
	}
	kind := "backend"
	if len(s.cfg.Named) > 0 {
		kind = s.cfg.Named[0].Name
	}
	return kind + " " + id
}

// RegistryBackend is the id of the backend a registry's resources go to.
func (s *Set) RegistryBackend(r *registry.ResourceRegistry) string {
	return backendIDs(s.cfg.Named)(r)
}

// setProblem records (err != nil) or clears a backend's problem, keeping
// the time it started, and logs each change.
func (s *Set) setProblem(id string, err error) {
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
		p = query.BackendProblem{Backend: id, Name: s.names[id], Since: time.Now()}
		s.log.Warn("backend unreachable", "backend", p.Name, "err", err)
	}
	p.Err = err.Error()
	s.problems[id] = p
}

// probe asks every open remote backend for its health until ctx ends.
func (s *Set) probe(ctx context.Context) error {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		for _, m := range s.snapshot() {
			if !m.b.Capabilities().Remote {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, healthTimeout)
			err := m.b.Ping(pctx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			s.setProblem(m.id, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
