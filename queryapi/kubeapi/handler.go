package kubeapi

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// QueryClient is the part of fleetview's QueryService this package reads
// through (the generated gRPC client satisfies it).
type QueryClient interface {
	Get(ctx context.Context, in *fleetviewv1.GetRequest, opts ...grpc.CallOption) (*fleetviewv1.GetResponse, error)
	List(ctx context.Context, in *fleetviewv1.ListRequest, opts ...grpc.CallOption) (*fleetviewv1.ListResponse, error)
	Watch(ctx context.Context, in *fleetviewv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[fleetviewv1.WatchEvent], error)
}

// ClusterClient is the part of fleetview's ClusterService discovery reads.
type ClusterClient interface {
	ListClusters(ctx context.Context, in *fleetviewv1.ListClustersRequest, opts ...grpc.CallOption) (*fleetviewv1.ListClustersResponse, error)
}

// Paths are the mux patterns the Handler serves.
func Paths() []string {
	return []string{"/api", "/api/", "/apis", "/apis/", "/version", "/clusters/"}
}

// catalogTTL is how long one caller's inventory answer is reused: every
// Kubernetes request needs the resource's kind and scope, and asking the
// inventory (KV reads plus a stream lookup per cluster) each time would
// cost more than small gets.
const catalogTTL = time.Second

// Handler serves the Kubernetes read API.
type Handler struct {
	query    QueryClient
	clusters ClusterClient
	log      *slog.Logger
	// skipped is told of every stored object left out of an answer.
	skipped func(cluster string, err error)

	mu sync.Mutex
	// inventory answers by the caller's Authorization header, so a cached
	// answer is only reused for the credentials that obtained it.
	inventory map[string]inventoryEntry
}

type inventoryEntry struct {
	at       time.Time
	clusters []*fleetviewv1.Cluster
}

// Option configures a Handler.
type Option func(*Handler)

// OnSkipped has f told of every stored object a fleet-wide answer (a
// Table's rows, a watch's events) leaves out because it cannot be decoded
// or encoded, with the cluster that wrote it (empty when unreadable).
func OnSkipped(f func(cluster string, err error)) Option {
	return func(h *Handler) { h.skipped = f }
}

// New returns a Handler reading through the given clients.
func New(q QueryClient, c ClusterClient, log *slog.Logger, opts ...Option) *Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{query: q, clusters: c, log: log, inventory: map[string]inventoryEntry{}}
	for _, o := range opts {
		o(h)
	}
	return h
}

// skip reports one stored object left out of an answer: the answer is for
// every cluster it spans, and one object a collector wrote must not make it
// a 500 or invalid JSON for all of them.
func (h *Handler) skip(raw []byte, what string, err error) {
	cluster := objectCluster(raw)
	h.log.Warn("kubeapi: stored object left out of "+what, "cluster", cluster, "err", err)
	if h.skipped != nil {
		h.skipped(cluster, err)
	}
}

// listClusters asks the inventory with the caller's credentials, reusing
// an answer younger than catalogTTL.
func (h *Handler) listClusters(ctx context.Context) ([]*fleetviewv1.Cluster, error) {
	key := ""
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		key = strings.Join(md.Get("authorization"), ",")
	}
	now := time.Now()
	h.mu.Lock()
	e, ok := h.inventory[key]
	h.mu.Unlock()
	if ok && now.Sub(e.at) < catalogTTL {
		return e.clusters, nil
	}
	resp, err := h.clusters.ListClusters(ctx, &fleetviewv1.ListClustersRequest{})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	for k, old := range h.inventory {
		if now.Sub(old.at) >= catalogTTL {
			delete(h.inventory, k)
		}
	}
	h.inventory[key] = inventoryEntry{at: now, clusters: resp.GetClusters()}
	h.mu.Unlock()
	return resp.GetClusters(), nil
}

// request is one parsed Kubernetes API request.
type request struct {
	r         *http.Request
	cluster   string // per-cluster view; "" = fleet
	gv        schema.GroupVersion
	resource  string
	namespace string
	name      string
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	req := &request{r: r}
	if rest, ok := strings.CutPrefix(path, "/clusters/"); ok {
		name, sub, _ := strings.Cut(rest, "/")
		if name == "" {
			writeStatus(w, toKubeStatus(fmt.Errorf("%w: /clusters/{name}/...", ErrUnknownResource), schema.GroupResource{}, ""))
			return
		}
		req.cluster, path = name, "/"+sub
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeStatus(w, toKubeStatus(ErrMethodNotAllowed, schema.GroupResource{}, ""))
		return
	}
	ctx := r.Context()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case path == "/version" || path == "/version/":
		h.serveVersion(ctx, w, req)
		return
	case segs[0] == "api":
		if len(segs) == 1 {
			h.serveDiscoveryRoot(ctx, w, req, true)
			return
		}
		req.gv = schema.GroupVersion{Version: segs[1]}
		segs = segs[2:]
	case segs[0] == "apis":
		if len(segs) == 1 {
			h.serveDiscoveryRoot(ctx, w, req, false)
			return
		}
		if len(segs) == 2 {
			h.serveGroup(ctx, w, req, segs[1])
			return
		}
		req.gv = schema.GroupVersion{Group: segs[1], Version: segs[2]}
		segs = segs[3:]
	default:
		writeStatus(w, toKubeStatus(fmt.Errorf("%w: %s", ErrUnknownResource, path), schema.GroupResource{}, ""))
		return
	}
	if len(segs) == 0 {
		h.serveResourceList(ctx, w, req)
		return
	}
	// {resource}[/{name}] or namespaces/{ns}/{resource}[/{name}]; the
	// namespaces resource itself is namespaces[/{name}].
	if segs[0] == "namespaces" && len(segs) >= 3 {
		req.namespace, segs = segs[1], segs[2:]
	}
	req.resource = segs[0]
	if len(segs) > 1 {
		req.name = segs[1]
	}
	if len(segs) > 2 {
		writeStatus(w, toKubeStatus(fmt.Errorf("%w: subresource %s", ErrUnknownResource, segs[2]), schema.GroupResource{Group: req.gv.Group, Resource: req.resource}, req.name))
		return
	}
	h.serveResource(ctx, w, req)
}

// cached is one resource some cluster caches.
type cached struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	// names are the short names and categories discovery lists.
	names apiNames
}

// catalog reads which resources are cached (in cluster, or anywhere),
// from the inventory the collectors maintain. A resource's short names and
// categories are the union of what its clusters report, in the order they
// report them (clusters by name); a resource no cluster reports any for
// (inventories of older collectors) gets those of builtinNames.
func (h *Handler) catalog(ctx context.Context, cluster string) ([]cached, []*fleetviewv1.Cluster, error) {
	all, err := h.listClusters(ctx)
	if err != nil {
		return nil, nil, err
	}
	at := map[schema.GroupVersionResource]int{}
	var out []cached
	var cls []*fleetviewv1.Cluster
	for _, c := range all {
		if cluster != "" && c.GetName() != cluster {
			continue
		}
		cls = append(cls, c)
		for _, r := range c.GetResources() {
			g := r.GetGvr()
			if g.GetResource() == "" || r.GetKind() == "" {
				continue // not served by that cluster
			}
			gvr := schema.GroupVersionResource{Group: g.GetGroup(), Version: g.GetVersion(), Resource: g.GetResource()}
			i, ok := at[gvr]
			if !ok {
				i = len(out)
				at[gvr] = i
				out = append(out, cached{gvr: gvr, kind: r.GetKind(), namespaced: r.GetNamespaced()})
			}
			out[i].names.short = union(out[i].names.short, r.GetShortNames())
			out[i].names.categories = union(out[i].names.categories, r.GetCategories())
		}
	}
	for i := range out {
		b := builtinNames[out[i].gvr.GroupResource()]
		if len(out[i].names.short) == 0 {
			out[i].names.short = b.short
		}
		if len(out[i].names.categories) == 0 {
			out[i].names.categories = b.categories
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gvr.String() < out[j].gvr.String() })
	return out, cls, nil
}

// union appends to a the elements of b it lacks.
func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

func (h *Handler) lookup(ctx context.Context, req *request) (cached, error) {
	cat, cls, err := h.catalog(ctx, req.cluster)
	if err != nil {
		return cached{}, err
	}
	if req.cluster != "" && len(cls) == 0 {
		return cached{}, fmt.Errorf("%w: cluster %q is not known", ErrUnknownResource, req.cluster)
	}
	want := req.gv.WithResource(req.resource)
	for _, c := range cat {
		if c.gvr == want {
			return c, nil
		}
	}
	return cached{}, fmt.Errorf("%w: %s is not cached", ErrUnknownResource, want.GroupResource())
}

func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	writeJSON(w, int(st.Code), "application/json", st)
}

func writeJSON(w http.ResponseWriter, code int, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
