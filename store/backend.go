package store

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	"github.com/fleetview/fleetview/materializer"
)

// Backend is one store the set writes to and reads from. The set, the
// router, the merging reader and the mover see every store through it
// alone, so a new store is a package implementing it plus one Kind.
type Backend interface {
	// Write: the materializer's sink. A store that can build a batch while
	// the previous one is written also implements
	// materializer.PipelinedSink, and the materializer uses that.
	materializer.Sink
	// Read and search: what the query API asks, answered from the
	// store's own copy of the streams.
	Get(ctx context.Context, o query.GetOptions) (query.Object, error)
	List(ctx context.Context, o query.ListOptions) (query.Page, error)
	Versions(ctx context.Context) (query.Version, error)
	Search(ctx context.Context, o query.SearchOptions) (query.Page, error)
	// Ping is the store's health: nil when it can be used now. Called
	// every 2 seconds for a store whose Capabilities say Remote.
	Ping(ctx context.Context) error
	Capabilities() Capabilities
	// Close releases the store; the set calls it once, after its
	// materializer stopped.
	Close() error
}

// Capabilities are what the set must know about a store beyond the
// interface.
type Capabilities struct {
	// Versioned: the store keeps each object's stream sequence as its
	// version and refuses a write that does not exceed it (OpenSearch's
	// external versions), so the mover deletes at the stream's end, not
	// at the store's checkpoint.
	Versioned bool
	// Remote: the store is reached over the network and may be
	// unreachable; its health is probed and reported (readiness, the
	// inventory, the registries' BackendReachable condition). A local
	// store (Badger) is never listed unreachable.
	Remote bool
}

// Kind is the registration of one kind of store: how a registry names a
// backend of it, and how one is opened. The composition root
// (cmd/fleetview/app/stores.go) lists the kinds; the set knows no
// other.
type Kind struct {
	// Name names the kind's backends in logs and in their materializers'
	// names ("opensearch" -> materializer "opensearch-<id>"); the default
	// store's materializer is called Name ("badger").
	Name string
	// Named is the backend of this kind a registry routes its resources
	// to (its backendStore), or false. Nil for the default store, which
	// holds what no registry routes elsewhere.
	Named func(r *registry.ResourceRegistry) (Target, bool)
	// Open opens the store of a target: for the default store, Target.Dir
	// is its directory in the state directory (BadgerDir); for a named
	// one, Target is what Named returned.
	Open func(ctx context.Context, t Target, log *slog.Logger) (Backend, error)
	// BatchSize and FlushInterval are its materializer's (zero: the
	// materializer's defaults).
	BatchSize     int
	FlushInterval time.Duration
}

// Target is one backend a registry names, or the default store's
// directory.
type Target struct {
	// ID identifies the backend in routes (saved across restarts) and in
	// its durable consumers' names: unique over every backend, stable
	// for the same configuration. Empty for the default store.
	ID string
	// Addresses name it for people and in problems before it is open.
	Addresses []string
	// Registry is the (first) registry that names it.
	Registry *registry.ResourceRegistry
	// Dir is the default store's directory.
	Dir string
}

// backendName is a backend's name for people: "badger", or the kind and
// the addresses ("opensearch a,b").
func backendName(kind string, addresses []string) string {
	if len(addresses) == 0 {
		return kind
	}
	return kind + " " + strings.Join(addresses, ",")
}

// named is the backend a registry names among kinds, and its kind; ok
// false for the default store.
func named(kinds []Kind, r *registry.ResourceRegistry) (Target, Kind, bool) {
	for _, k := range kinds {
		if k.Named == nil {
			continue
		}
		if t, ok := k.Named(r); ok {
			return t, k, true
		}
	}
	return Target{}, Kind{}, false
}

// backendIDs is the route table's view of kinds: a registry's backend id,
// defaultBackend when it names none.
func backendIDs(kinds []Kind) func(*registry.ResourceRegistry) string {
	return func(r *registry.ResourceRegistry) string {
		t, _, ok := named(kinds, r)
		if !ok {
			return defaultBackend
		}
		return t.ID
	}
}
