package queryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/authz"
	"github.com/fleetview/fleetview/queryapi/catalog"
	"github.com/fleetview/fleetview/queryapi/watchhub"
)

// Reader is what the query API needs from a backend (Badger and
// OpenSearch both implement it). Continue values reach a backend only
// after the query API verified their seal, so a backend's cursor format is
// its own business.
type Reader interface {
	// Get reads one object, considering only the copies the caller may
	// see (GetOptions.Visible).
	Get(ctx context.Context, o query.GetOptions) (query.Object, error)
	// List returns one page; every page of a list carries the Version of
	// the first one.
	List(ctx context.Context, o query.ListOptions) (query.Page, error)
	// Versions is the backend's applied stream sequence per cluster.
	Versions(ctx context.Context) (query.Version, error)
}

// Searcher answers free-text search (Badger: substring on names, labels and
// annotations; OpenSearch: full text).
type Searcher interface {
	Search(ctx context.Context, o query.SearchOptions) (query.Page, error)
}

type queryService struct {
	fleetviewv1.UnimplementedQueryServiceServer
	reader   Reader
	searcher Searcher
	history  HistoryReader
	// replayer, when set, is what a resumed watch replays (nil: the
	// compacted stream).
	replayer HistoryReplayer
	// backends tells which backend serves a cluster's resource: the
	// history keeps the default one's only (nil: every resource is).
	backends BackendHealth
	hub      *watchhub.Hub
	js       jetstream.JetStream
	inv      jetstream.KeyValue
	// catalog, once loaded, answers which clusters a cluster selector
	// picks without a read per cluster (nil: read the inventory).
	catalog          *catalog.Catalog
	sealer           *query.Sealer
	versions         *versionBook
	maxResumeAge     time.Duration
	watchBuffer      int
	bookmarkInterval time.Duration
	versionWait      time.Duration
	// stopping is closed at shutdown: watches end with UNAVAILABLE so
	// clients resume elsewhere.
	stopping chan struct{}
	limits   Limits
	watches  *watchLimiter
	// metrics counts watches; nil: off.
	metrics *Metrics
	log     *slog.Logger
}

func toStruct(b []byte) (*structpb.Struct, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("stored object is not a JSON object: %w", err)
	}
	return structpb.NewStruct(m)
}

func status501(what string) error { return status.Error(codes.Unimplemented, what) }

func (q *queryService) Get(ctx context.Context, req *fleetviewv1.GetRequest) (*fleetviewv1.GetResponse, error) {
	gvr, err := authz.RequestGVR(req.GetGroup(), req.GetVersion(), req.GetResource())
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	if req.GetName() == "" {
		return nil, apierr.ToStatus(fmt.Errorf("%w: name required", query.ErrInvalid))
	}
	asOf, err := parseAsOf(req.GetAsOf(), time.Now())
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	// The caller's visibility (set by the Guard) narrows the read itself:
	// what is out of sight neither answers nor makes the Get ambiguous.
	obj, err := q.reader.Get(ctx, query.GetOptions{GVR: gvr, Namespace: req.GetNamespace(), Name: req.GetName(),
		Cluster: req.GetCluster(), Visible: authz.VisibleFrom(ctx), AsOf: asOf})
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	if err := q.checkObject(ctx, obj); err != nil {
		return nil, apierr.ToStatus(err)
	}
	if !req.GetStructured() {
		return &fleetviewv1.GetResponse{RawObject: obj.JSON, RawCells: obj.Cells, Cluster: obj.Cluster}, nil
	}
	s, err := toStruct(obj.JSON)
	if err != nil {
		return nil, apierr.ToStatus(err)
	}
	return &fleetviewv1.GetResponse{Object: s, Cluster: obj.Cluster}, nil
}

// awaitVersion waits until the backend has applied at least want, like
// Kubernetes does for a resourceVersion newer than its watch cache.
func (q *queryService) awaitVersion(ctx context.Context, want query.Version) error {
	deadline := time.Now().Add(q.versionWait)
	for {
		have, err := q.reader.Versions(ctx)
		if err != nil {
			return err
		}
		behind := have.Behind(want)
		if len(behind) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the cache has not reached the requested resourceVersion in clusters [%s] within %s", query.ErrTooLargeVersion, strings.Join(behind, ", "), q.versionWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (q *queryService) List(ctx context.Context, req *fleetviewv1.ListRequest) (*fleetviewv1.ListResponse, error) {
	resp, err := q.list(ctx, req)
	return resp, apierr.ToStatus(err)
}

func (q *queryService) list(ctx context.Context, req *fleetviewv1.ListRequest) (*fleetviewv1.ListResponse, error) {
	f, err := q.selection(ctx, req.GetGroup(), req.GetVersion(), req.GetResource(), req.GetNamespace(), req.GetLabelSelector(), req.GetFieldSelector(), req.GetClusters(), req.GetClusterSelector())
	if err != nil {
		return nil, err
	}
	if req.GetLimit() < 0 {
		return nil, fmt.Errorf("%w: limit must not be negative", query.ErrInvalid)
	}
	exact, err := exactMatch(req)
	if err != nil {
		return nil, err
	}
	asOf, err := parseAsOf(req.GetAsOf(), time.Now())
	if err != nil {
		return nil, err
	}
	if rv := req.GetResourceVersion(); !asOf.IsZero() && rv != "" && rv != "0" {
		return nil, fmt.Errorf("%w: asOf and resourceVersion are exclusive (asOf names the state)", query.ErrInvalid)
	}
	var want query.Version // with exact: the state to serve, in the selected clusters
	if rv := req.GetResourceVersion(); rv != "" && rv != "0" {
		if req.GetContinue() != "" {
			return nil, fmt.Errorf("%w: resourceVersion and continue are exclusive (the continue token pins its snapshot)", query.ErrInvalid)
		}
		t, err := q.versions.open(ctx, rv)
		if err != nil {
			return nil, err
		}
		if exact {
			want = t.Seqs.Clone()
			want.Keep(f.clusters)
			if err := q.awaitExact(ctx, rv, want, f.clusters); err != nil {
				return nil, err
			}
		} else if err := q.awaitVersion(ctx, t.Seqs); err != nil {
			return nil, err
		}
	}
	h := f.hash()
	if !asOf.IsZero() {
		h = requestHash(h, "asOf", asOf.UTC().Format(time.RFC3339Nano))
	}
	// The caller's visibility (set by the Guard) binds the token, as in
	// search: a page is never continued under another scope.
	vis := f.visible
	if vis != nil {
		h = requestHash(h, vis.String())
	}
	cur, err := openContinue(q.sealer, req.GetContinue(), h)
	if err != nil {
		return nil, err
	}
	o := f.listOptions()
	o.Limit, o.Continue, o.Visible, o.Client, o.AsOf = q.limits.pageLimit(req.GetLimit()), cur, vis, clientOf(ctx), asOf
	// An in-process caller that writes each page before it reads the
	// next (the Kubernetes API's streamed list) lends the store its
	// written pages' memory; the answer built here shares the objects.
	o.Reuse = query.ReuseFrom(ctx)
	page, err := q.reader.List(ctx, o)
	if err != nil {
		return nil, err
	}
	page.Items = q.dropMalformed(ctx, "list", page.Items)
	if exact {
		// The snapshot is the truth: the state may have moved since.
		have := page.Version.Clone()
		have.Keep(f.clusters)
		if err := exactState(req.GetResourceVersion(), want, have); err != nil {
			return nil, err
		}
	}
	rvOut, err := q.versions.Seal(ctx, page.Version, time.Now())
	if err != nil {
		return nil, err
	}
	resp := &fleetviewv1.ListResponse{
		ResourceVersion: rvOut,
		Continue:        sealContinue(q.sealer, page.Continue, h),
	}
	if page.Continue != "" {
		resp.RemainingItemCount = page.Remaining
	}
	if !req.GetStructured() {
		resp.RawItems = make([][]byte, len(page.Items))
		resp.RawCells = make([][]byte, len(page.Items))
		spans, any := make([]uint32, 0, 8*len(page.Items)), false
		for i, it := range page.Items {
			resp.RawItems[i], resp.RawCells[i] = it.JSON, it.Cells
			spans, any = it.Row.Offsets(spans), any || it.Row != (rawjson.RowSpans{})
		}
		if any {
			resp.RawRowSpans = spans
		}
		return resp, nil
	}
	resp.Items = make([]*structpb.Struct, 0, len(page.Items))
	for _, it := range page.Items {
		s, err := toStruct(it.JSON)
		if err != nil {
			return nil, err
		}
		resp.Items = append(resp.Items, s)
	}
	return resp, nil
}

func (q *queryService) Search(ctx context.Context, req *fleetviewv1.SearchRequest) (*fleetviewv1.SearchResponse, error) {
	resp, err := q.search(ctx, req)
	return resp, apierr.ToStatus(err)
}

func (q *queryService) search(ctx context.Context, req *fleetviewv1.SearchRequest) (*fleetviewv1.SearchResponse, error) {
	if q.searcher == nil {
		return nil, status501("the backend does not support search")
	}
	if strings.TrimSpace(req.GetText()) == "" {
		return nil, fmt.Errorf("%w: text is required", query.ErrInvalid)
	}
	if req.GetLimit() < 0 {
		return nil, fmt.Errorf("%w: limit must not be negative", query.ErrInvalid)
	}
	var gvrs []schema.GroupVersionResource
	for _, r := range req.GetResources() {
		p := strings.Split(r, "/")
		if len(p) != 3 {
			return nil, fmt.Errorf("%w: resources: %q is not group/version/resource (core group: core/v1/pods)", query.ErrInvalid, r)
		}
		g, err := authz.RequestGVR(p[0], p[1], p[2])
		if err != nil {
			return nil, fmt.Errorf("resources: %q: %w", r, err)
		}
		gvrs = append(gvrs, g)
	}
	cs, err := q.resolveClusters(ctx, req.GetClusters(), req.GetClusterSelector())
	if err != nil {
		return nil, err
	}
	rs := slices.Clone(req.GetResources())
	slices.Sort(rs)
	hashed := []string{"search", req.GetText(), strings.Join(rs, ","), req.GetNamespace(), clustersPart(cs)}
	// The caller's visibility (set by the Guard) is part of the query: a
	// token binds to it, so a page is never continued under another scope.
	vis := authz.VisibleFrom(ctx)
	if vis != nil {
		hashed = append(hashed, vis.String())
	}
	h := requestHash(hashed...)
	cur, err := openContinue(q.sealer, req.GetContinue(), h)
	if err != nil {
		return nil, err
	}
	page, err := q.searcher.Search(ctx, query.SearchOptions{Text: req.GetText(), Resources: gvrs, Namespace: req.GetNamespace(),
		Clusters: cs, Visible: vis, Limit: q.limits.pageLimit(req.GetLimit()), Continue: cur, Client: clientOf(ctx)})
	if err != nil {
		return nil, err
	}
	page.Items = q.dropMalformed(ctx, "search", page.Items)
	rvOut, err := q.versions.Seal(ctx, page.Version, time.Now())
	if err != nil {
		return nil, err
	}
	resp := &fleetviewv1.SearchResponse{ResourceVersion: rvOut, Continue: sealContinue(q.sealer, page.Continue, h)}
	for _, it := range page.Items {
		hit := &fleetviewv1.SearchHit{Gvr: stream.ProtoGVR(it.GVR), Cluster: it.Cluster}
		if !req.GetStructured() {
			hit.RawObject = it.JSON
		} else if hit.Object, err = toStruct(it.JSON); err != nil {
			return nil, err
		}
		resp.Items = append(resp.Items, hit)
	}
	return resp, nil
}
