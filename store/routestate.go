package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/registry"
)

// Routes across restarts
//
// Pins live in the route table, in memory, and a backend's materializer
// skips what its routes do not give it. So a registry edited while serve
// is stopped, or a move cut short by a stop or a crash, would leave a
// resource served by a backend that never got (or no longer follows) its
// objects. serve therefore keeps, next to the Badger store, the route
// table that says which backend holds each resource complete: the
// registries' routes, the cluster facts they were matched against, the
// resource kinds known and the pins. It is written after every refresh
// and when a move switches reads (before the old copy goes), never ahead
// of the data. At startup that table is the previous one: every resource
// whose backend it names differs from the current routes is pinned there
// and moved, as after an edit made while serve runs.
//
// The file lives in the Badger directory so that a rebuilt store, which
// the routes in force filled, starts without it.

// routesFile is the saved route table, in the Badger directory.
const routesFile = "fleetview-routes.json"

type savedRoutes struct {
	Routes   []savedRoute                    `json:"routes"`
	Clusters map[string]registry.ClusterInfo `json:"clusters"`
	Kinds    []savedKind                     `json:"kinds"`
	Pins     []savedPin                      `json:"pins"`
}

type savedRoute struct {
	Backend  string                    `json:"backend"`
	Affinity registry.ClusterAffinity  `json:"affinity"`
	GVKs     []schema.GroupVersionKind `json:"gvks"`
}

type savedKind struct {
	GVR  schema.GroupVersionResource `json:"gvr"`
	Kind string                      `json:"kind"`
}

type savedPin struct {
	Cluster string                      `json:"cluster"`
	GVR     schema.GroupVersionResource `json:"gvr"`
	Kind    string                      `json:"kind"`
	Backend string                      `json:"backend"`
}

// save writes table t to r.state (no-op without one): the kinds learned
// from events go with it, since at the next start neither the inventory
// nor the events may name them yet.
func (r *Router) save(t *routeTable) error {
	if r.state == "" {
		return nil
	}
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	s := savedRoutes{Clusters: t.clusters}
	for _, rt := range t.routes {
		sr := savedRoute{Backend: rt.backend, Affinity: rt.affinity}
		for gvk := range rt.gvks {
			sr.GVKs = append(sr.GVKs, gvk)
		}
		s.Routes = append(s.Routes, sr)
	}
	kinds := map[schema.GroupVersionResource]string{}
	for gvr, k := range t.kinds {
		kinds[gvr] = k
	}
	r.kinds.Range(func(k, v any) bool {
		kinds[k.(schema.GroupVersionResource)] = v.(string)
		return true
	})
	for gvr, k := range kinds {
		s.Kinds = append(s.Kinds, savedKind{GVR: gvr, Kind: k})
	}
	for p, b := range t.pins {
		s.Pins = append(s.Pins, savedPin{Cluster: p.cluster, GVR: p.gvr, Kind: p.kind, Backend: b})
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	// Written aside, synced, then renamed: a crash leaves the old table or
	// the new one, never half of one.
	tmp := r.state + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRouteState, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, r.state)
	}
	if err == nil {
		err = syncDir(filepath.Dir(r.state))
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRouteState, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// loadSaved reads the table saved by the previous run (nil without one).
func (r *Router) loadSaved() (*routeTable, error) {
	data, err := os.ReadFile(r.state)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRouteState, err)
	}
	var s savedRoutes
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRouteState, r.state, err)
	}
	t := &routeTable{clusters: s.Clusters, kinds: map[schema.GroupVersionResource]string{}, pins: map[pairKey]string{}}
	if t.clusters == nil {
		t.clusters = map[string]registry.ClusterInfo{}
	}
	for _, sr := range s.Routes {
		rt := osRoute{backend: sr.Backend, affinity: sr.Affinity, gvks: map[schema.GroupVersionKind]bool{}}
		for _, gvk := range sr.GVKs {
			rt.gvks[gvk] = true
		}
		t.routes = append(t.routes, rt)
	}
	for _, k := range s.Kinds {
		t.kinds[k.GVR] = k.Kind
	}
	for _, p := range s.Pins {
		t.pins[pairKey{p.Cluster, p.GVR, p.Kind}] = p.Backend
	}
	return t, nil
}

// restore pins, in the current table, every resource that the previous
// run's table leaves in another backend than the current routes name,
// and saves the result. Without a saved table (first start, or a rebuilt
// store) the routes apply as they are.
func (r *Router) restore(ctx context.Context) error {
	prev, err := r.loadSaved()
	if err != nil {
		return err
	}
	if prev != nil {
		// Kinds are learned from events and the inventory, which may have
		// named none yet: without the saved ones a resource routed by kind
		// would be read from Badger until its next event.
		for gvr, k := range prev.kinds {
			r.kinds.LoadOrStore(gvr, k)
		}
		var streams []string
		if r.streams != nil {
			if streams, err = r.streams(ctx); err != nil {
				return err
			}
		}
		t := r.table.Load().with(nil, nil)
		r.pinChanged(prev, t, streams)
		r.table.Store(t)
		for p, b := range t.pins {
			r.log.Info("resource held by another backend than its route since the last run; it moves", "cluster", p.cluster, "resource", p.gvr.String(), "from", b, "to", t.routed(p.gvr, p.kind, p.cluster))
		}
	}
	return r.save(r.table.Load())
}
