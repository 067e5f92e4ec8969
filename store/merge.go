package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
)

// RoutingReader answers the query API from the backend that holds each
// resource and cluster; a list spanning backends is merged in the common
// order (namespace, name, cluster).
type RoutingReader struct {
	router   *Router
	mu       sync.RWMutex
	backends map[string]backendReader // "" is Badger
	// clusters lists the known clusters, for lists over every cluster.
	clusters func(ctx context.Context) ([]string, error)
}

// add makes a backend available to reads.
func (rr *RoutingReader) add(id string, r backendReader) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.backends[id] = r
}

// backend is the reader of a backend id; a backend a registry names but
// that is not connected yet reads as Badger (which holds nothing of it).
func (rr *RoutingReader) backend(id string) backendReader {
	rr.mu.RLock()
	defer rr.mu.RUnlock()
	if r, ok := rr.backends[id]; ok {
		return r
	}
	return rr.backends[defaultBackend]
}

func (rr *RoutingReader) backendIDs() []string {
	rr.mu.RLock()
	defer rr.mu.RUnlock()
	ids := make([]string, 0, len(rr.backends))
	for id := range rr.backends {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// split assigns the requested clusters (nil: all known) to backends.
func (rr *RoutingReader) split(ctx context.Context, gvr schema.GroupVersionResource, clusters []string) (map[string][]string, error) {
	if len(rr.backendIDs()) == 1 {
		return map[string][]string{defaultBackend: clusters}, nil
	}
	all := clusters == nil
	if all {
		var err error
		if clusters, err = rr.clusters(ctx); err != nil {
			return nil, err
		}
	}
	out := map[string][]string{}
	known := map[string]bool{}
	for _, id := range rr.backendIDs() {
		known[id] = true
	}
	for _, c := range clusters {
		b := rr.router.backendOf(gvr, c)
		if !known[b] {
			b = defaultBackend
		}
		out[b] = append(out[b], c)
	}
	if len(out) == 1 && all {
		for b := range out {
			out[b] = nil // every cluster: let the backend include new ones too
		}
	}
	if len(out) == 0 {
		out[defaultBackend] = clusters
	}
	return out, nil
}

// Get implements queryapi.Reader. Only the clusters the caller may see are
// read: a copy in a hidden cluster neither answers nor makes the Get
// ambiguous, and a Get with no visible copy is not found like one of an
// object that does not exist.
func (rr *RoutingReader) Get(ctx context.Context, o query.GetOptions) (query.Object, error) {
	if o.Cluster != "" {
		if !o.Sees(o.Cluster) {
			return query.Object{}, o.NotFound()
		}
		return rr.backend(rr.router.backendOf(o.GVR, o.Cluster)).Get(ctx, o)
	}
	visible, all := o.Clusters()
	if !all && len(visible) == 0 {
		return query.Object{}, o.NotFound()
	}
	if all {
		visible = nil // every cluster, new ones included
	}
	parts, err := rr.split(ctx, o.GVR, visible)
	if err != nil {
		return query.Object{}, err
	}
	if len(parts) == 1 {
		for b := range parts {
			return rr.backend(b).Get(ctx, o)
		}
	}
	var found []query.Object
	for b, cs := range parts {
		for _, c := range cs {
			one := o
			one.Cluster = c
			obj, err := rr.backend(b).Get(ctx, one)
			switch {
			case err == nil:
				found = append(found, obj)
			case errors.Is(err, query.ErrNotFound):
			default:
				return query.Object{}, err
			}
		}
	}
	switch len(found) {
	case 0:
		return query.Object{}, o.NotFound()
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, f := range found {
		names[i] = f.Cluster
	}
	sort.Strings(names)
	return query.Object{}, o.Conflict(names)
}

// Versions implements queryapi.Reader: per cluster, the lowest sequence
// any backend has applied (every backend consumes every stream).
func (rr *RoutingReader) Versions(ctx context.Context) (query.Version, error) {
	var out query.Version
	for _, id := range rr.backendIDs() {
		v, err := rr.backend(id).Versions(ctx)
		if err != nil {
			return nil, err
		}
		out = minVersion(out, v)
	}
	if out == nil {
		out = query.Version{}
	}
	return out, nil
}

func minVersion(a, b query.Version) query.Version {
	if a == nil {
		return b.Clone()
	}
	for c, s := range b {
		if cur, ok := a[c]; !ok || s < cur {
			a[c] = s
		}
	}
	return a
}

// mergeCursor is the continue state of a list merged over backends: per
// backend, the cursor of its current page and how many of that page's
// items were already returned.
type mergeCursor struct {
	Parts map[string]*partCursor `json:"p"`
	// Switches is the router's count of read switches at the first page.
	// Each backend's cursor pins its own snapshot, but which backend
	// answers for a resource is decided per page: a move's switch between
	// two pages would drop what the old backend had still to return and
	// read the new one's snapshot, taken before the copy. Such a token is
	// expired (410), never a short answer.
	Switches uint64 `json:"w,omitempty"`
}

type partCursor struct {
	Cursor string `json:"c,omitempty"`
	Skip   int    `json:"s,omitempty"`
	Done   bool   `json:"d,omitempty"`
}

// List implements queryapi.Reader.
func (rr *RoutingReader) List(ctx context.Context, o query.ListOptions) (query.Page, error) {
	parts, err := rr.split(ctx, o.GVR, o.Clusters)
	if err != nil {
		return query.Page{}, err
	}
	if len(parts) == 1 && !strings.HasPrefix(o.Continue, mergePrefix) {
		for b, cs := range parts {
			o.Clusters = cs
			return rr.single(b, o.Continue, func(cursor string) (query.Page, error) {
				o.Continue = cursor
				return rr.backend(b).List(ctx, o)
			})
		}
	}
	return rr.merge(ctx, parts, o.Continue, o.Limit, func(b string, cs []string, cursor string) (query.Page, error) {
		bo := o
		bo.Clusters, bo.Continue = cs, cursor
		return rr.backend(b).List(ctx, bo)
	})
}

// Search implements queryapi.Searcher, over every backend.
func (rr *RoutingReader) Search(ctx context.Context, o query.SearchOptions) (query.Page, error) {
	ids := rr.backendIDs()
	if len(ids) == 1 && !strings.HasPrefix(o.Continue, mergePrefix) {
		return rr.single(ids[0], o.Continue, func(cursor string) (query.Page, error) {
			o.Continue = cursor
			return rr.backend(ids[0]).Search(ctx, o)
		})
	}
	parts := map[string][]string{}
	for _, b := range ids {
		parts[b] = o.Clusters
	}
	return rr.merge(ctx, parts, o.Continue, o.Limit, func(b string, cs []string, cursor string) (query.Page, error) {
		bo := o
		bo.Clusters, bo.Continue = cs, cursor
		p, err := rr.backend(b).Search(ctx, bo)
		if err != nil {
			return p, err
		}
		// A backend a resource just moved away from holds its objects until
		// the mover drops them: only the backend that serves a resource
		// answers for it, so no object shows up twice.
		kept := p.Items[:0]
		for _, it := range p.Items {
			if it.GVR.Empty() || rr.servedBy(it.GVR, it.Cluster) == b {
				kept = append(kept, it)
			}
		}
		p.Items = kept
		return p, nil
	})
}

// servedBy is the backend whose answers about gvr in cluster count: the
// one that holds it, or Badger for a backend not connected.
func (rr *RoutingReader) servedBy(gvr schema.GroupVersionResource, cluster string) string {
	b := rr.router.backendOf(gvr, cluster)
	rr.mu.RLock()
	defer rr.mu.RUnlock()
	if _, ok := rr.backends[b]; !ok {
		return defaultBackend
	}
	return b
}

const mergePrefix = "merge:"

// singlePrefix marks the continue token of a list one backend answers:
// "one:<backend>:<its cursor>". A backend's cursor means nothing to
// another, and a move that switched the resource's reads between two
// pages would otherwise hand one backend the other's cursor (a 400) or,
// worse, a position in a list it never started.
const singlePrefix = "one:"

// single pages one backend, b: the token must be one b issued, else the
// list's reads moved since its first page and the token is expired (410).
func (rr *RoutingReader) single(b, cont string, page func(cursor string) (query.Page, error)) (query.Page, error) {
	cursor := ""
	if cont != "" {
		rest, ok := strings.CutPrefix(cont, singlePrefix)
		from, c, found := strings.Cut(rest, ":")
		if !ok || !found {
			return query.Page{}, fmt.Errorf("%w: continue: not a fleetview list cursor", query.ErrInvalid)
		}
		if from != b {
			return query.Page{}, fmt.Errorf("%w: the resource's reads moved to another backend while this list was paged; list again", query.ErrExpired)
		}
		cursor = c
	}
	p, err := page(cursor)
	if err == nil && p.Continue != "" {
		p.Continue = singlePrefix + b + ":" + p.Continue
	}
	return p, err
}

type itemKey struct{ ns, name, cluster string }

func keyOf(o query.Object) itemKey {
	var m struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(o.JSON, &m)
	return itemKey{m.Metadata.Namespace, m.Metadata.Name, o.Cluster}
}

func (k itemKey) less(o itemKey) bool {
	if k.ns != o.ns {
		return k.ns < o.ns
	}
	if k.name != o.name {
		return k.name < o.name
	}
	return k.cluster < o.cluster
}

// pageFunc reads one page of backend b's part (clusters cs) from cursor.
type pageFunc func(b string, cs []string, cursor string) (query.Page, error)

// source is one backend's current page in a merge.
type source struct {
	b     string
	items []query.Object
	keys  []itemKey
	page  query.Page
	taken int
}

// merge pages through several backends at once and returns the first
// limit items in the common order.
func (rr *RoutingReader) merge(ctx context.Context, parts map[string][]string, cont string, limit int64, page pageFunc) (query.Page, error) {
	var out query.Page
	mc := mergeCursor{Parts: map[string]*partCursor{}}
	if cont == "" {
		mc.Switches = rr.router.switches.Load()
	} else {
		if strings.HasPrefix(cont, singlePrefix) {
			return out, fmt.Errorf("%w: the list's reads now span several backends; list again", query.ErrExpired)
		}
		raw, ok := strings.CutPrefix(cont, mergePrefix)
		if !ok || json.Unmarshal([]byte(raw), &mc) != nil {
			return out, fmt.Errorf("%w: continue: not a merged-list cursor", query.ErrInvalid)
		}
		if mc.Switches != rr.router.switches.Load() {
			return out, fmt.Errorf("%w: a resource moved between backends while this list was paged; list again", query.ErrExpired)
		}
	}
	srcs, version, err := openSources(parts, mc, page)
	if err != nil {
		return out, err
	}
	out.Version = version
	out.Items = mergeItems(srcs, limit)
	if more := mc.advance(srcs); more {
		b, _ := json.Marshal(mc)
		out.Continue = mergePrefix + string(b)
	}
	if out.Version == nil {
		out.Version = query.Version{}
	}
	return out, nil
}

// openSources reads each unfinished backend's page at its cursor, past the
// items already returned, and the lowest version of them all.
func openSources(parts map[string][]string, mc mergeCursor, page pageFunc) ([]*source, query.Version, error) {
	var srcs []*source
	var version query.Version
	names := make([]string, 0, len(parts))
	for b := range parts {
		names = append(names, b)
	}
	sort.Strings(names)
	for _, b := range names {
		pc := mc.Parts[b]
		if pc == nil {
			pc = &partCursor{}
			mc.Parts[b] = pc
		}
		if pc.Done {
			continue
		}
		p, err := page(b, parts[b], pc.Cursor)
		if err != nil {
			return nil, nil, err
		}
		if version == nil {
			version = p.Version.Clone()
		} else {
			version = minVersion(version, p.Version)
		}
		// A page whose items were all returned already: go to the next.
		for pc.Skip >= len(p.Items) && p.Continue != "" {
			pc.Cursor, pc.Skip = p.Continue, 0
			if p, err = page(b, parts[b], pc.Cursor); err != nil {
				return nil, nil, err
			}
		}
		items := p.Items
		if pc.Skip <= len(items) {
			items = items[pc.Skip:]
		} else {
			items = nil
		}
		s := &source{b: b, items: items, page: p}
		for _, it := range items {
			s.keys = append(s.keys, keyOf(it))
		}
		srcs = append(srcs, s)
	}
	return srcs, version, nil
}

// mergeItems takes items in the common order until the limit, or until a
// source runs out of its page while it has more: its next page may hold
// smaller keys.
func mergeItems(srcs []*source, limit int64) []query.Object {
	var out []query.Object
	for limit <= 0 || int64(len(out)) < limit {
		var best *source
		for _, s := range srcs {
			if s.taken == len(s.items) {
				if s.page.Continue != "" {
					return out
				}
				continue
			}
			if best == nil || s.keys[s.taken].less(best.keys[best.taken]) {
				best = s
			}
		}
		if best == nil {
			break
		}
		out = append(out, best.items[best.taken])
		best.taken++
	}
	return out
}

// advance moves each source's cursor past what was taken, and says
// whether any backend has more.
func (mc mergeCursor) advance(srcs []*source) bool {
	more := false
	for _, s := range srcs {
		pc := mc.Parts[s.b]
		if s.taken == len(s.items) {
			pc.Cursor, pc.Skip, pc.Done = s.page.Continue, 0, s.page.Continue == ""
		} else {
			pc.Skip += s.taken
		}
		if !pc.Done {
			more = true
		}
	}
	return more
}
