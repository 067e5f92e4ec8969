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
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/registry"
	regstore "github.com/fleetview/fleetview/internal/registry/store"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/catalog"
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
	reader           Reader
	searcher         Searcher
	hub              *Hub
	js               jetstream.JetStream
	inv              jetstream.KeyValue
	sealer           *query.Sealer
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

func requestGVR(group, version, resource string) (schema.GroupVersionResource, error) {
	if group == stream.CoreGroupToken {
		group = ""
	}
	var missing []string
	if version == "" {
		missing = append(missing, "version")
	}
	if resource == "" {
		missing = append(missing, "resource")
	}
	if len(missing) > 0 {
		return schema.GroupVersionResource{}, fmt.Errorf("%w: %s required", query.ErrInvalid, strings.Join(missing, " and "))
	}
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, nil
}

func toStruct(b []byte) (*structpb.Struct, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("stored object is not a JSON object: %w", err)
	}
	return structpb.NewStruct(m)
}

func status501(what string) error { return status.Error(codes.Unimplemented, what) }

// resolveClusters combines explicit cluster names and a cluster label
// selector (evaluated against the inventory). nil means every cluster; an
// empty slice, none.
func (q *queryService) resolveClusters(ctx context.Context, names []string, selector string) ([]string, error) {
	for _, c := range names {
		if err := stream.ValidateCluster(c); err != nil {
			return nil, fmt.Errorf("%w: clusters: %v", query.ErrInvalid, err)
		}
	}
	out := names
	if len(out) == 0 {
		out = nil
	}
	sel, err := parseClusterSelector(selector)
	if err != nil {
		return nil, err
	}
	if sel == nil {
		return out, nil
	}
	recs, err := inventory.List(ctx, q.inv)
	if err != nil {
		return nil, err
	}
	matched := []string{}
	for _, r := range recs {
		if sel.Matches(labels.Set(r.Labels)) && (out == nil || slices.Contains(out, r.Name)) {
			matched = append(matched, r.Name)
		}
	}
	return matched, nil
}

// parseClusterSelector parses a request's cluster label selector; nil
// when blank (no selection). It touches nothing but its argument, so the
// network-facing parsing is fuzzed apart from the inventory.
func parseClusterSelector(selector string) (labels.Selector, error) {
	if strings.TrimSpace(selector) == "" {
		return nil, nil
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("%w: clusterSelector: %v", query.ErrInvalid, err)
	}
	return sel, nil
}

// selection validates and compiles the filters List and Watch share.
func (q *queryService) selection(ctx context.Context, group, version, resource, namespace, labelSel, fieldSel string, clusters []string, clusterSel string) (*selection, error) {
	gvr, err := requestGVR(group, version, resource)
	if err != nil {
		return nil, err
	}
	sel, err := labels.Parse(labelSel)
	if err != nil {
		return nil, fmt.Errorf("%w: labelSelector: %v", query.ErrInvalid, err)
	}
	fs, err := query.CompileFields(gvr, fieldSel)
	if err != nil {
		return nil, err
	}
	cs, err := q.resolveClusters(ctx, clusters, clusterSel)
	if err != nil {
		return nil, err
	}
	// The caller's visibility (set by the Guard) is part of the
	// selection, for lists and watches alike: hidden objects are neither
	// listed nor judged, sealed or queued for a watch.
	f := &selection{gvr: gvr, namespace: namespace, labels: sel, fields: fs, clusters: cs, visible: visibleFrom(ctx)}
	if cs != nil {
		f.inCluster = map[string]bool{}
		for _, c := range cs {
			f.inCluster[c] = true
		}
	}
	return f, nil
}

func (f *selection) hash() string {
	return requestHash(f.gvr.String(), f.namespace, f.labels.String(), f.fields.String(), clustersPart(f.clusters))
}

func (q *queryService) Get(ctx context.Context, req *fleetviewv1.GetRequest) (*fleetviewv1.GetResponse, error) {
	gvr, err := requestGVR(req.GetGroup(), req.GetVersion(), req.GetResource())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetName() == "" {
		return nil, toStatus(fmt.Errorf("%w: name required", query.ErrInvalid))
	}
	// The caller's visibility (set by the Guard) narrows the read itself:
	// what is out of sight neither answers nor makes the Get ambiguous.
	obj, err := q.reader.Get(ctx, query.GetOptions{GVR: gvr, Namespace: req.GetNamespace(), Name: req.GetName(),
		Cluster: req.GetCluster(), Visible: visibleFrom(ctx)})
	if err != nil {
		return nil, toStatus(err)
	}
	if err := q.checkObject(ctx, obj); err != nil {
		return nil, toStatus(err)
	}
	if !req.GetStructured() {
		return &fleetviewv1.GetResponse{RawObject: obj.JSON, Cluster: obj.Cluster}, nil
	}
	s, err := toStruct(obj.JSON)
	if err != nil {
		return nil, toStatus(err)
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
		behind := have.Covers(want)
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
	return resp, toStatus(err)
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
	var want query.Version // with exact: the state to serve, in the selected clusters
	if rv := req.GetResourceVersion(); rv != "" && rv != "0" {
		if req.GetContinue() != "" {
			return nil, fmt.Errorf("%w: resourceVersion and continue are exclusive (the continue token pins its snapshot)", query.ErrInvalid)
		}
		t, err := q.sealer.OpenVersion(rv)
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
	o.Limit, o.Continue, o.Visible, o.Client = q.limits.pageLimit(req.GetLimit()), cur, vis, clientOf(ctx)
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
	resp := &fleetviewv1.ListResponse{
		ResourceVersion: q.sealer.SealVersion(page.Version, time.Now()),
		Continue:        sealContinue(q.sealer, page.Continue, h),
	}
	if page.Continue != "" {
		resp.RemainingItemCount = page.Remaining
	}
	if !req.GetStructured() {
		resp.RawItems = make([][]byte, len(page.Items))
		for i, it := range page.Items {
			resp.RawItems[i] = it.JSON
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
	return resp, toStatus(err)
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
		g, err := requestGVR(p[0], p[1], p[2])
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
	vis := visibleFrom(ctx)
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
	resp := &fleetviewv1.SearchResponse{ResourceVersion: q.sealer.SealVersion(page.Version, time.Now()), Continue: sealContinue(q.sealer, page.Continue, h)}
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

type clusterService struct {
	fleetviewv1.UnimplementedClusterServiceServer
	kv   jetstream.KeyValue
	js   jetstream.JetStream
	sync *syncChecker
}

func (c *clusterService) toProto(ctx context.Context, rec *inventory.Cluster) *fleetviewv1.Cluster {
	out := &fleetviewv1.Cluster{
		Name: rec.Name, Labels: rec.Labels, Provider: rec.Provider, Region: rec.Region, Zone: rec.Zone,
		KubernetesVersion: rec.KubernetesVersion, Ready: rec.Ready, Message: rec.Message,
		LastHeartbeat: timestamppb.New(rec.Heartbeat), ServedApis: rec.ServedAPIs,
	}
	b := c.sync.backends
	ps := problems(b)
	backendDown, marked := false, false
	var snap *catalog.Snapshot
	if c.sync.catalog != nil {
		snap = c.sync.catalog.Current()
	}
	for _, r := range rec.Resources {
		rs := &fleetviewv1.ResourceSyncState{
			Gvr:  &fleetviewv1.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource},
			Kind: r.Kind, Namespaces: r.Namespaces, Synced: r.Synced, ObjectCount: r.ObjectCount, Message: r.Message,
			RefusedObjects: r.RefusedObjects, SecretData: r.SecretData, Namespaced: r.Namespaced,
			ShortNames: r.ShortNames, Categories: r.Categories,
		}
		if snap != nil {
			if why := snap.Mark(rec.Name, schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource}); why != "" {
				// What the record says is shown, and why the hub does not
				// believe it.
				rs.Message, marked = "not followed: "+why, true
			}
		}
		if b != nil {
			var id string
			id, rs.Backend = b.BackendOf(rec.Name, schema.GroupVersionResource{Group: r.Group, Version: r.Version, Resource: r.Resource})
			if p, ok := ps[id]; ok {
				rs.BackendError, backendDown = problemText(p), true
			}
		}
		out.Resources = append(out.Resources, rs)
		out.ObjectCount += r.ObjectCount
	}
	if st, err := c.js.Stream(ctx, stream.StreamName(rec.Name)); err == nil {
		if info, err := st.Info(ctx); err == nil {
			out.StreamSequence = info.State.LastSeq
		}
	}
	var applied map[string]uint64
	if c.sync.applied != nil {
		applied = c.sync.applied()
		out.AppliedSequence = applied[rec.Name]
	}
	if out.StreamSequence > out.AppliedSequence {
		out.Lag = out.StreamSequence - out.AppliedSequence
	}
	if ok, _, err := c.sync.clusterSynced(ctx, rec, applied); err == nil {
		out.CacheSynced = ok && !backendDown && !marked
	}
	return out
}

func (c *clusterService) ListClusters(ctx context.Context, _ *fleetviewv1.ListClustersRequest) (*fleetviewv1.ListClustersResponse, error) {
	var recs []*inventory.Cluster
	if c.sync.catalog != nil && c.sync.catalog.Loaded() {
		// The catalog follows the inventory: no read per cluster.
		recs = c.sync.catalog.Current().Records()
	} else {
		var err error
		if recs, err = inventory.List(ctx, c.kv); err != nil {
			return nil, toStatus(err)
		}
	}
	resp := &fleetviewv1.ListClustersResponse{}
	for _, r := range recs {
		resp.Clusters = append(resp.Clusters, c.toProto(ctx, r))
	}
	return resp, nil
}

func (c *clusterService) GetCluster(ctx context.Context, req *fleetviewv1.GetClusterRequest) (*fleetviewv1.Cluster, error) {
	rec, err := inventory.Get(ctx, c.kv, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return c.toProto(ctx, rec), nil
}

type registryService struct {
	fleetviewv1.UnimplementedRegistryServiceServer
	store    *regstore.Store
	backends BackendHealth
}

func registryProto(r *registry.ResourceRegistry) (*fleetviewv1.Registry, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	s, err := toStruct(b)
	if err != nil {
		return nil, err
	}
	return &fleetviewv1.Registry{Registry: s}, nil
}

func (s *registryService) ApplyRegistry(ctx context.Context, req *fleetviewv1.ApplyRegistryRequest) (*fleetviewv1.Registry, error) {
	if req.GetRegistry() == nil {
		return nil, toStatus(fmt.Errorf("%w: registry: required", registry.ErrInvalid))
	}
	b, err := protojson.Marshal(req.GetRegistry())
	if err != nil {
		return nil, toStatus(err)
	}
	r, err := registry.Decode(b)
	if err != nil {
		return nil, toStatus(err)
	}
	stored, err := s.store.Apply(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := registryProto(stored)
	return out, toStatus(err)
}

func (s *registryService) GetRegistry(ctx context.Context, req *fleetviewv1.GetRegistryRequest) (*fleetviewv1.Registry, error) {
	r, err := s.store.Get(ctx, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	withBackendCondition(r, s.backends, problems(s.backends))
	out, err := registryProto(r)
	return out, toStatus(err)
}

func (s *registryService) ListRegistries(ctx context.Context, _ *fleetviewv1.ListRegistriesRequest) (*fleetviewv1.ListRegistriesResponse, error) {
	rs, err := s.store.List(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &fleetviewv1.ListRegistriesResponse{}
	ps := problems(s.backends)
	for _, r := range rs {
		withBackendCondition(r, s.backends, ps)
		p, err := registryProto(r)
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Registries = append(resp.Registries, p)
	}
	return resp, nil
}

func (s *registryService) DeleteRegistry(ctx context.Context, req *fleetviewv1.DeleteRegistryRequest) (*fleetviewv1.DeleteRegistryResponse, error) {
	if err := s.store.Delete(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &fleetviewv1.DeleteRegistryResponse{}, nil
}
