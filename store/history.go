package store

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// History is the history of changes a backend keeps (issue #48): the
// default Badger store implements it, OpenSearch does not (the history of
// a resource routed there is not kept). Get and List with AsOf are
// answered by the same backend's Reader methods.
type History interface {
	// Changes is one page of the fleet's change feed, oldest first.
	Changes(ctx context.Context, o query.ChangesOptions) (query.ChangePage, error)
	// Revisions is one page of an object's revisions, oldest first.
	Revisions(ctx context.Context, o query.RevisionsOptions) (query.RevisionPage, error)
	// ChangesAfter calls fn with each change of the cluster's resource
	// with a stream sequence in (from, to], in stream order, each with its
	// object (a delete's last state): a resumed watch's replay.
	ChangesAfter(ctx context.Context, cluster string, gvr schema.GroupVersionResource, from, to uint64, fn func(query.Revision) error) error
	// HistoryWindow is what the history holds now.
	HistoryWindow(ctx context.Context) (query.HistoryWindow, error)
}

// History is the default backend's history, when it keeps one.
func (rr *RoutingReader) History() (History, bool) {
	h, ok := rr.backend(defaultBackend).(History)
	return h, ok
}
