package app

import (
	"github.com/fleetview/fleetview/store"
	"github.com/fleetview/fleetview/store/badger"
	"github.com/fleetview/fleetview/store/opensearch"
)

// The stores fleetview holds, registered here and nowhere else: the
// backend set (store.Set) knows them only as store.Backend and store.Kind.
// A new store is a package under store/ implementing store.Backend, with a
// Kind constructor, and one line in namedStores.

// defaultStore is the store that holds every resource no registry routes
// elsewhere: Badger, in the state directory.
func (c ServeConfig) defaultStore() store.Kind {
	noRel, values := c.Indexes.badger()
	return badger.Kind(badger.KindOptions{KeepPageCache: c.KeepPageCache, Snapshots: c.Limits.snapshots(), BatchSize: c.BatchSize,
		History: c.History.badger(), NoRelations: noRel, ValueIndex: values,
		NoCounters: len(values) == 0}) // counters come with --count-index
}

// namedStores are the kinds of store a registry's backendStore can name,
// in the order they are asked: the first that finds one in a registry
// holds its resources. rebuild calls it too, to leave their resources out
// of the default store; it needs only their names, not their options.
func namedStores(os opensearch.Config) []store.Kind {
	return []store.Kind{opensearch.Kind(os)}
}
