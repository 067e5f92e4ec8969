package app

import (
	"github.com/spf13/pflag"

	"github.com/fleetview/fleetview/store/badger"
)

// IndexOptions turn on the Badger store's optional indexes (issue #49):
// the relationship index (Related, the fleetview.io/ownedBy, selectedBy
// and references field selectors) and the value index (counts by Pods'
// status.phase, spec.nodeName and images from an index rather than the
// objects).
//
// Off by default: with both on, the store alone applies a Pod in 185 µs
// against 49-55 µs without them (BenchmarkApply), and serve applied a
// million Pod events at about a sixth of its rate (its 8.8 GB of RSS was
// mostly a leak since fixed)
// (relations and value-index upkeep were 2.6 s of 3.6 s of the apply's CPU;
// docs/benchmarks/relations.md, "At a million objects (2026-12-06 20:10
// UTC): why the indexes are off by default"). Counts by
// cluster, namespace and label need neither: they come from the keys.
type IndexOptions struct {
	Relations  bool
	CountIndex bool
}

// AddFlags registers the flags.
func (o *IndexOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Relations, "relations", false, "keep the relationship index (owners, selectors, references): Related and the fleetview.io/ownedBy, selectedBy and references field selectors; off, they answer 501 (docs/api.md, Relations)")
	fs.BoolVar(&o.CountIndex, "count-index", false, "keep the value index of Pods' status.phase, spec.nodeName and images, so counts by them read keys, not objects, and counters per cluster, namespace, resource and indexed value, so counts without selectors read O(groups) keys (docs/api.md, Counts)")
}

// badger is the store's configuration of them.
func (o IndexOptions) badger() (noRelations bool, values []badger.IndexedValue) {
	if o.CountIndex {
		values = badger.DefaultValueIndex()
	} else {
		values = []badger.IndexedValue{}
	}
	return !o.Relations, values
}
