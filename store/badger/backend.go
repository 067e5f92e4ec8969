package badger

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/store"
)

// Backend is the Badger store as the backend set sees it (store.Backend):
// the Store writes, a Reader over it reads. Its Prepare makes it a
// materializer.PipelinedSink.
type Backend struct {
	*Store
	reader *Reader
}

// OpenBackend opens the store in o.Dir with a reader keeping the list
// snapshots r allows.
func OpenBackend(o Options, r ReaderOptions) (*Backend, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	return &Backend{Store: s, reader: s.Reader(r)}, nil
}

// Get implements store.Backend.
func (b *Backend) Get(ctx context.Context, o query.GetOptions) (query.Object, error) {
	return b.reader.Get(ctx, o)
}

// List implements store.Backend.
func (b *Backend) List(ctx context.Context, o query.ListOptions) (query.Page, error) {
	return b.reader.List(ctx, o)
}

// Versions implements store.Backend.
func (b *Backend) Versions(ctx context.Context) (query.Version, error) {
	return b.reader.Versions(ctx)
}

// Search implements store.Backend.
func (b *Backend) Search(ctx context.Context, o query.SearchOptions) (query.Page, error) {
	return b.reader.Search(ctx, o)
}

// Ping implements store.Backend: a local store is always there.
func (b *Backend) Ping(context.Context) error { return nil }

// Capabilities implements store.Backend: local, and a write replaces an
// object whatever its sequence.
func (b *Backend) Capabilities() store.Capabilities { return store.Capabilities{} }

// Close releases the reader's snapshots, then the store.
func (b *Backend) Close() error { return errors.Join(b.reader.Close(), b.Store.Close()) }

// KindOptions configure Badger as the default store.
type KindOptions struct {
	KeepPageCache bool
	// NoRelations, ValueIndex and NoCounters are the optional indexes
	// (Options).
	NoRelations bool
	ValueIndex  []IndexedValue
	NoCounters  bool
	// Snapshots bound the list snapshots the reader keeps for continue
	// tokens (in all and per client).
	Snapshots ReaderOptions
	// BatchSize is its materializer's batch (one transaction);
	// FlushInterval the longest a partial batch waits (zero: the
	// materializer's defaults).
	BatchSize     int
	FlushInterval time.Duration
	// History is the history of changes the store keeps (history.go).
	History HistoryOptions
}

// Kind registers Badger as the default store (store.Config.Default): it
// holds every resource no registry routes elsewhere, in the state
// directory.
func Kind(o KindOptions) store.Kind {
	return store.Kind{
		Name: "badger",
		Open: func(_ context.Context, t store.Target, log *slog.Logger) (store.Backend, error) {
			return OpenBackend(Options{Dir: t.Dir, Logger: log, KeepPageCache: o.KeepPageCache, History: o.History,
				NoRelations: o.NoRelations, ValueIndex: o.ValueIndex, NoCounters: o.NoCounters}, o.Snapshots)
		},
		BatchSize:     o.BatchSize,
		FlushInterval: o.FlushInterval,
	}
}

// RebuildOpener opens the fresh store `fleetview rebuild` replays into
// (store.RebuildConfig.Open), tuned for bulk loading, with the optional
// indexes of o
// (NoRelations, ValueIndex): a rebuilt store keeps what the hub that
// serves it keeps.
func RebuildOpener(o Options) func(dir string, log *slog.Logger) (store.RebuildStore, error) {
	return func(dir string, log *slog.Logger) (store.RebuildStore, error) {
		return openRebuild(Options{Dir: dir, Logger: log, BulkLoad: true, NoRelations: o.NoRelations, ValueIndex: o.ValueIndex, NoCounters: o.NoCounters})
	}
}

func openRebuild(o Options) (store.RebuildStore, error) {
	s, err := Open(o)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Related implements the store set's relater.
func (b *Backend) Related(ctx context.Context, o query.RelatedOptions) (query.Graph, error) {
	return b.reader.Related(ctx, o)
}

var _ store.History = (*Backend)(nil)

// Changes implements store.History.
func (b *Backend) Changes(ctx context.Context, o query.ChangesOptions) (query.ChangePage, error) {
	return b.reader.Changes(ctx, o)
}

// Revisions implements store.History.
func (b *Backend) Revisions(ctx context.Context, o query.RevisionsOptions) (query.RevisionPage, error) {
	return b.reader.Revisions(ctx, o)
}

// ChangesAfter implements store.History.
func (b *Backend) ChangesAfter(ctx context.Context, cluster string, gvr schema.GroupVersionResource, from, to uint64, fn func(query.Revision) error) error {
	return b.reader.ChangesAfter(ctx, cluster, gvr, from, to, fn)
}

// HistoryWindow implements store.History.
func (b *Backend) HistoryWindow(ctx context.Context) (query.HistoryWindow, error) {
	return b.reader.HistoryWindow(ctx)
}
