package query

import (
	"maps"
	"slices"
	"time"

	"github.com/fleetview/fleetview/internal/rawjson"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Object is one cached object: its JSON already carries the cache-source
// annotations.
type Object struct {
	Cluster string
	// GVR is set by Search, whose hits span resources.
	GVR  schema.GroupVersionResource
	JSON []byte
	// Cells are the member's Table cells for the object (a JSON array,
	// checked by stream.Decode before it was stored), when its collector
	// sent them.
	Cells []byte
	// Row is where a Table row's parts lie in JSON, when the backend
	// found them as it stored the object (zero: it did not).
	Row rawjson.RowSpans
	// Checked: the backend vouches that JSON passed rawjson.Check when it
	// was stored, so the query API need not check it again on every read
	// (the Badger store, which only the materializer writes, after that
	// check). Objects of other backends (OpenSearch, which other writers
	// can reach) are checked as they are answered.
	Checked bool
}

// GetOptions names one object.
type GetOptions struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
	// Cluster is the cluster that holds the object; empty: the object must
	// be in exactly one of the clusters the caller may see.
	Cluster string
	// Visible is what the caller may see; nil means everything. A Get
	// considers only visible copies of the object: one visible copy is the
	// answer whatever hidden clusters hold, an ambiguity names only
	// visible clusters, and a hidden object is not found exactly like a
	// missing one (NotFound), so no answer tells what is out of sight.
	Visible *Visibility
	// AsOf, when set, asks for the object as it was at that time, from
	// the history (issue #48); ErrOutsideWindow before the window.
	AsOf time.Time
}

// Sees reports whether the caller may see the object's copy in cluster.
func (o GetOptions) Sees(cluster string) bool {
	return o.Visible.Allows(o.GVR.GroupResource(), cluster, o.Namespace)
}

// Clusters is where the object may be read: the visible clusters for its
// resource and namespace (sorted), or all when every cluster is visible.
// A qualified Get is its cluster when visible, else nothing.
func (o GetOptions) Clusters() (clusters []string, all bool) {
	if o.Cluster != "" {
		if o.Sees(o.Cluster) {
			return []string{o.Cluster}, false
		}
		return []string{}, false
	}
	return o.Visible.ClustersOf(o.GVR.GroupResource(), o.Namespace)
}

// NotFound is the answer when no visible copy exists.
func (o GetOptions) NotFound() error { return NotFoundError(o.GVR, o.Name) }

// Conflict is the answer when several visible clusters hold the object.
func (o GetOptions) Conflict(clusters []string) error {
	return ConflictError(o.GVR, o.Namespace, o.Name, clusters)
}

// ListOptions selects objects of one resource.
type ListOptions struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Labels    labels.Selector
	// Fields is the compiled field selector; nil matches everything.
	Fields *FieldFilter
	// Clusters restricts the answer; nil means every cluster. A non-nil
	// empty slice (a cluster selector that matched nothing) selects nothing.
	Clusters []string
	// Visible is what the caller may see; nil means everything. Applied
	// while scanning, before the limit, like SearchOptions.Visible, and
	// Remaining counts visible objects only.
	Visible *Visibility
	Limit   int64
	// Continue is the backend cursor of the previous page (already verified
	// by the query API; backends never see client-supplied bytes unchecked).
	Continue string
	// Client names who asks (the authenticated subject, or the remote
	// address without authentication). A backend that holds state for
	// later pages (Badger's list snapshots) accounts it per client, so one
	// client's paging cannot evict another's continue tokens. Empty is
	// one anonymous client.
	Client string
	// AsOf, when set, lists the objects as they were at that time, from
	// the history (issue #48): selectors apply to that state.
	AsOf time.Time
	// Reuse, when set, lends the page's object copies memory that earlier
	// pages of the same answer used (its caller has written them); nil:
	// the page's objects are the caller's to keep. A backend may ignore it.
	Reuse *Reuse
}

// LabelSelector is the label selector to apply: Labels, or everything when
// the caller set none.
func (o *ListOptions) LabelSelector() labels.Selector {
	if o.Labels == nil {
		return labels.Everything()
	}
	return o.Labels
}

// Page is one List answer.
type Page struct {
	Items []Object
	// Version is, per cluster, the stream sequence the page reflects. Every
	// page of one list carries the version of its first page.
	Version Version
	// Continue is the backend cursor of the next page; empty on the last.
	// It must be valid UTF-8: the query API seals it as a JSON string,
	// which would replace invalid bytes (every backend's cursor is JSON).
	Continue string
	// Remaining is the number of objects after this page, when the backend
	// knows it cheaply (no label or field selector), else nil.
	Remaining *int64
}

// SearchOptions is a free-text query across resources and clusters.
type SearchOptions struct {
	// Text is matched against name, namespace, label keys and values and
	// annotation keys and values (Badger: case-insensitive substring; a
	// full-text backend may do better).
	Text string
	// Resources restricts the search; empty means every resource.
	Resources []schema.GroupVersionResource
	Namespace string
	Clusters  []string
	// Visible is what the caller may see; nil means everything. Backends
	// apply it while scanning, before the limit, so a page holds only
	// visible objects and a cursor never records a hidden one's position.
	Visible  *Visibility
	Limit    int64
	Continue string
	// Client is who asks, as in ListOptions.
	Client string
}

// Version is the multi-cluster resourceVersion: per cluster, the stream
// sequence an answer reflects.
type Version map[string]uint64

// Clone copies v.
func (v Version) Clone() Version { return maps.Clone(v) }

// Clusters lists the clusters of v in order.
func (v Version) Clusters() []string { return slices.Sorted(maps.Keys(v)) }

// Keep restricts v to the selected clusters of a list; nil selects every
// cluster, so v stays whole.
func (v Version) Keep(clusters []string) {
	if clusters == nil {
		return
	}
	keep := map[string]bool{}
	for _, c := range clusters {
		keep[c] = true
	}
	for c := range v {
		if !keep[c] {
			delete(v, c)
		}
	}
}

// Behind is the clusters, sorted, whose sequence in want v has not reached
// (a cluster v does not hold is at 0): none when v covers want.
func (v Version) Behind(want Version) (behind []string) {
	for c, s := range want {
		if v[c] < s {
			behind = append(behind, c)
		}
	}
	slices.Sort(behind)
	return behind
}
