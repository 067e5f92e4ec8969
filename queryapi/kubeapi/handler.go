package kubeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/kubepath"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/catalog"
)

// QueryClient is the part of fleetview's QueryService this package reads
// through (the generated gRPC client satisfies it).
type QueryClient interface {
	Get(ctx context.Context, in *fleetviewv1.GetRequest, opts ...grpc.CallOption) (*fleetviewv1.GetResponse, error)
	List(ctx context.Context, in *fleetviewv1.ListRequest, opts ...grpc.CallOption) (*fleetviewv1.ListResponse, error)
	Watch(ctx context.Context, in *fleetviewv1.WatchRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[fleetviewv1.WatchEvent], error)
}

// Catalog is the resource catalog the handler reads: kind, scope, names
// and serving clusters of every resource, held by the process.
type Catalog interface {
	Current() *catalog.Snapshot
}

// Visibility says what the caller of r may see in the catalog (nil: all
// of it). Its error (unauthenticated) is the request's answer.
type Visibility func(r *http.Request) (catalog.Visible, error)

// Paths are the mux patterns the Handler serves.
func Paths() []string {
	return []string{"/api", "/api/", "/apis", "/apis/", "/version", "/clusters/"}
}

// Handler serves the Kubernetes read API.
type Handler struct {
	query   QueryClient
	catalog Catalog
	visible Visibility
	log     *slog.Logger
	// skipped is told of every stored object left out of an answer.
	skipped func(cluster string, err error)
	// proto writes the answers negotiated in protobuf.
	proto *protoCodec
	// act forwards what the cache does not serve (nil: read-only).
	act *ActThroughConfig
	// actLimits bounds each caller's forwarded requests (nil: no bound).
	actLimits *callerLimits
	// actSlots bounds the forwarded requests in flight (relaylimit.go).
	actSlots *relaySlots
	// lists says how many objects one list answer holds (listpolicy.go).
	lists ListPolicy
	// reuses holds the *query.Reuse of finished list answers, so the
	// next answer's reads copy into memory already made (serveList).
	reuses sync.Pool
}

// Option configures a Handler.
type Option func(*Handler)

// OnSkipped has f told of every stored object a fleet-wide answer (a
// Table's rows, a watch's events) leaves out because it cannot be decoded
// or encoded, with the cluster that wrote it (empty when unreadable).
func OnSkipped(f func(cluster string, err error)) Option {
	return func(h *Handler) { h.skipped = f }
}

// New returns a Handler reading objects through q and kinds and scopes
// from cat, filtered by vis (nil: every caller sees the whole catalog).
func New(q QueryClient, cat Catalog, vis Visibility, log *slog.Logger, opts ...Option) *Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{query: q, catalog: cat, visible: vis, log: log, proto: newProtoCodec(), lists: ListPolicy{}.withDefaults()}
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
	// The path is read once, from its escaped form (internal/kubepath):
	// the cache's answer, the hub's judgment of a forwarded request and
	// the member's URL all come from this one typed request, and what is
	// not a well-formed Kubernetes path is refused alike everywhere.
	t, err := kubepath.Parse(r.URL.EscapedPath())
	if err != nil {
		h.writeStatus(w, r, pathStatus(err))
		return
	}
	req := &request{r: r, cluster: t.Cluster}
	ctx := r.Context()
	if a := r.Header.Get("Authorization"); a != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", a)
	}
	if h.act != nil && h.serveAct(ctx, w, req, t) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.writeStatus(w, r, toKubeStatus(ErrMethodNotAllowed, schema.GroupResource{}, ""))
		return
	}
	switch t.Kind {
	case kubepath.KindVersion:
		h.serveVersion(w, req)
		return
	case kubepath.KindOpenAPI:
		h.writeStatus(w, r, toKubeStatus(fmt.Errorf("%w: %s", ErrUnknownResource, t.Path()), schema.GroupResource{}, ""))
		return
	case kubepath.KindDiscovery:
		switch {
		case t.Prefix == "api" && t.Version == "":
			h.serveDiscoveryRoot(w, req, true)
		case t.Prefix == "apis" && t.Group == "":
			h.serveDiscoveryRoot(w, req, false)
		case t.Version == "":
			h.serveGroup(w, req, t.Group)
		default:
			req.gv = t.GroupVersion()
			h.serveResourceList(w, req)
		}
		return
	}
	req.gv, req.namespace, req.resource, req.name = t.GroupVersion(), t.Namespace, t.Resource, t.Name
	if t.Subresource != "" {
		h.writeStatus(w, r, toKubeStatus(fmt.Errorf("%w: subresource %s", ErrUnknownResource, t.Subresource), t.GroupResource(), t.Name))
		return
	}
	h.serveResource(ctx, w, req)
}

// pathStatus is the Status of a path kubepath.Parse refused: 400 for one
// that is not well-formed, 404 for one outside the Kubernetes API.
func pathStatus(err error) *metav1.Status {
	if errors.Is(err, kubepath.ErrMalformed) {
		return toKubeStatus(fmt.Errorf("%w: %v", ErrBadRequest, err), schema.GroupResource{}, "")
	}
	return toKubeStatus(fmt.Errorf("%w: %v", ErrUnknownResource, err), schema.GroupResource{}, "")
}

// cached is one resource the catalog serves.
type cached struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	// names are the short names and categories discovery lists.
	names apiNames
	// columns are the resource's Table columns: those of the one cluster a
	// per-cluster request reads, else those most clusters report.
	columns []inventory.Column
}

// apiNames are the short names and categories discovery lists for a
// resource.
type apiNames struct {
	short, categories []string
}

// catalog is what the caller may see of the resource catalog, in cluster
// or in every cluster: no call is made, the catalog is the process's.
func (h *Handler) catalogView(r *http.Request, cluster string) ([]cached, []*catalog.Cluster, error) {
	var vis catalog.Visible
	if h.visible != nil {
		var err error
		if vis, err = h.visible(r); err != nil {
			return nil, nil, err
		}
	}
	v := h.catalog.Current().View(vis, cluster)
	out := make([]cached, 0, len(v.Resources))
	for _, c := range v.Resources {
		out = append(out, cached{gvr: c.GVR, kind: c.Kind, namespaced: c.Namespaced, names: apiNames{short: c.ShortNames, categories: c.Categories}})
	}
	return out, v.Clusters, nil
}

func (h *Handler) lookup(req *request) (cached, error) {
	want := req.gv.WithResource(req.resource)
	var vis catalog.Visible
	if h.visible != nil {
		var err error
		if vis, err = h.visible(req.r); err != nil {
			return cached{}, err
		}
	}
	// One map read (and the caller's judgment of one cluster, or of the
	// clusters serving the resource): the cost does not grow with the
	// clusters the request does not touch.
	snap := h.catalog.Current()
	c, known, ok := snap.Lookup(vis, req.cluster, want)
	if !known {
		return cached{}, fmt.Errorf("%w: cluster %q is not known", ErrUnknownResource, req.cluster)
	}
	if !ok {
		return cached{}, fmt.Errorf("%w: %s is not cached", ErrUnknownResource, want.GroupResource())
	}
	cols := c.Columns
	if req.cluster != "" {
		if cl, ok := snap.Cluster(req.cluster); ok {
			cols = cl.Columns[c.GVR]
		}
	}
	return cached{gvr: c.GVR, kind: c.Kind, namespaced: c.Namespaced, names: apiNames{short: c.ShortNames, categories: c.Categories}, columns: cols}, nil
}

// writeStatus answers st in the encoding r's Accept negotiates for a
// Status (statusFormat): protobuf when it asks for it first, else JSON.
func (h *Handler) writeStatus(w http.ResponseWriter, r *http.Request, st *metav1.Status) {
	if statusFormat(r.Header.Get("Accept")) == asProtobuf {
		if err := h.proto.writeProto(w, int(st.Code), st); err == nil {
			return
		}
		// Not written: a Status always encodes. JSON rather than nothing.
	}
	writeStatus(w, st)
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
