package watchhub

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ksel "k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Hub fans the materializer's committed batches out to the watches. It is
// the materializer's Observer: it never blocks (a watcher whose buffer is
// full is cut, not waited for), and it knows, per cluster, the last
// sequence it has passed on.
//
// Watches whose label selector has an equality requirement (k=v) are
// indexed by it: an event reaches such a watch only when the object's new
// or previous labels carry k=v (or its previous labels are unknown), so a
// thousand selective watches do not each wake up for every event. The
// previous labels, and whether the object existed, come with the event
// (feed.Prior): the hub keeps no objects.
//
// Watches of some clusters (a per-cluster path, a clusters parameter) are
// indexed by cluster instead: a batch reaches only the watches of its own
// cluster and the fleet-wide ones, so an informer per cluster over a
// fleet of 2,000 does not make every event visit 2,000 watches.
type Hub struct {
	buffer int

	mu      sync.Mutex
	applied query.Version
	// all are the watches of a resource without an indexable requirement;
	// byLabel indexes the others by resource, key and value.
	all     map[schema.GroupVersionResource]map[*Subscription]struct{}
	byLabel map[schema.GroupVersionResource]map[string]map[string]map[*Subscription]struct{}
	// byCluster indexes the watches of some clusters by resource and
	// cluster.
	byCluster map[schema.GroupVersionResource]map[string]map[*Subscription]struct{}
}

// Options configure a Hub.
type Options struct {
	// Buffer is how many batches a watch may fall behind before it is cut
	// with RESOURCE_EXHAUSTED (default 1024).
	Buffer int
}

// New returns a hub; pass Observe to materializer.Config.Observer.
func New(o Options) *Hub {
	if o.Buffer <= 0 {
		o.Buffer = 1024
	}
	return &Hub{buffer: o.Buffer, applied: query.Version{},
		all:       map[schema.GroupVersionResource]map[*Subscription]struct{}{},
		byLabel:   map[schema.GroupVersionResource]map[string]map[string]map[*Subscription]struct{}{},
		byCluster: map[schema.GroupVersionResource]map[string]map[*Subscription]struct{}{}}
}

// Event is one stream event as watches see it; the object is decoded
// once, however many watches send it.
type Event struct {
	Cluster string
	Seq     uint64
	Event   *fleetviewv1.ResourceEvent
	GVR     schema.GroupVersionResource
	// IsNew: the object was not in the cache before this event.
	IsNew bool

	once   sync.Once
	labels labels.Set
	err    error

	// The Struct form, built once for the watches that ask for it
	// (WatchRequest.structured); the others send the stored bytes.
	structOnce sync.Once
	obj        *structpb.Struct
	structErr  error

	// applied is, for an event from the live feed, the hub's version
	// before its batch (shared by the batch's events, never changed): with
	// this event's sequence it is the resourceVersion of the event for
	// every watch that sends it, sealed once (Token).
	applied query.Version
	rvOnce  sync.Once
	rv      string
	rvBook  Sealer
	rvErr   error
}

// NewEvent is a stream event of cluster at seq, for watches; one read
// back from the stream (not from the live feed) has no shared Token.
func NewEvent(cluster string, seq uint64, ev *fleetviewv1.ResourceEvent) *Event {
	return &Event{Cluster: cluster, Seq: seq, Event: ev, GVR: stream.GVR(ev.GetGvr())}
}

// Sealer seals a version into a resourceVersion (the query API's version
// book).
type Sealer interface {
	Seal(ctx context.Context, v query.Version, now time.Time) (string, error)
}

// Token is the resourceVersion of a live event, the same for every watch
// that sends it; false for an event read back from the stream, whose
// watch seals its own. A watch following the feed has judged every event
// up to the hub's version before this batch, and the feed skips a watch
// only for events its selector cannot concern, so it may resume from
// there; sealing once instead of once per watch took a fifth of a
// thousand watchers' allocations (docs/benchmarks/query.md).
func (e *Event) Token(b Sealer) (string, bool) {
	if e.applied == nil {
		return "", false
	}
	e.rvOnce.Do(func() {
		v := maps.Clone(e.applied)
		v[e.Cluster] = e.Seq
		e.rv, e.rvErr = b.Seal(context.Background(), v, time.Now())
		e.rvBook = b
	})
	return e.rv, e.rvBook == b && e.rvErr == nil
}

// Labels reads the object's labels once (and checks the JSON as far as
// rawjson does); the object itself is sent as its stored bytes.
func (e *Event) Labels() (labels.Set, error) {
	e.once.Do(func() {
		if len(e.Event.GetObject()) == 0 {
			return
		}
		var l map[string]string
		if l, e.err = rawjson.Labels(e.Event.GetObject()); l != nil {
			e.labels = l
		}
	})
	return e.labels, e.err
}

// Structured is the object as a Struct, built once for every watch that
// asks for that form.
func (e *Event) Structured() (*structpb.Struct, error) {
	e.structOnce.Do(func() { e.obj, e.structErr = toStruct(e.Event.GetObject()) })
	return e.obj, e.structErr
}

// toStruct is a stored object as a Struct (the query service has its own
// for the answers it builds).
func toStruct(b []byte) (*structpb.Struct, error) {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("stored object is not a JSON object: %w", err)
	}
	return structpb.NewStruct(m)
}

// Batch is what one committed batch of a cluster holds for one watch.
type Batch struct {
	Cluster string
	Events  []*Event
}

// Subscription is one watch's registration with the hub.
type Subscription struct {
	gvr      schema.GroupVersionResource
	clusters []string // the clusters it is indexed by; nil: every cluster
	key, val string   // the indexed equality requirement; key "" = none
	q        *Queue[Batch]
	overflow chan struct{}
	once     sync.Once
}

// Batches are the subscription's batches, in the order committed.
func (s *Subscription) Batches() *Queue[Batch] { return s.q }

// Overflow is closed when the watch fell more than the hub's buffer
// behind: it must end (RESOURCE_EXHAUSTED).
func (s *Subscription) Overflow() <-chan struct{} { return s.overflow }

// indexable picks an equality requirement of a selector to route by.
func indexable(sel labels.Selector) (string, string) {
	if sel == nil {
		return "", ""
	}
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		switch r.Operator() {
		case ksel.Equals, ksel.DoubleEquals, ksel.In:
			if r.Values().Len() == 1 {
				return r.Key(), r.Values().List()[0]
			}
		}
	}
	return "", ""
}

// Subscribe registers a watch of one resource and returns, atomically with
// the registration, the last sequence per cluster already passed on: every
// later event the watch may need arrives on the subscription.
// A watch of some clusters (clusters not nil) gets their batches only;
// its labels are left to the watch to judge.
func (h *Hub) Subscribe(gvr schema.GroupVersionResource, sel labels.Selector, clusters []string) (*Subscription, query.Version) {
	s := &Subscription{gvr: gvr, clusters: clusters, q: NewQueue[Batch](h.buffer), overflow: make(chan struct{})}
	if clusters == nil {
		s.key, s.val = indexable(sel)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if clusters != nil {
		byC := h.byCluster[gvr]
		if byC == nil {
			byC = map[string]map[*Subscription]struct{}{}
			h.byCluster[gvr] = byC
		}
		for _, c := range clusters {
			if byC[c] == nil {
				byC[c] = map[*Subscription]struct{}{}
			}
			byC[c][s] = struct{}{}
		}
	} else if s.key == "" {
		if h.all[gvr] == nil {
			h.all[gvr] = map[*Subscription]struct{}{}
		}
		h.all[gvr][s] = struct{}{}
	} else {
		byKey := h.byLabel[gvr]
		if byKey == nil {
			byKey = map[string]map[string]map[*Subscription]struct{}{}
			h.byLabel[gvr] = byKey
		}
		if byKey[s.key] == nil {
			byKey[s.key] = map[string]map[*Subscription]struct{}{}
		}
		if byKey[s.key][s.val] == nil {
			byKey[s.key][s.val] = map[*Subscription]struct{}{}
		}
		byKey[s.key][s.val][s] = struct{}{}
	}
	return s, h.applied.Clone()
}

// AppliedNow is a copy of the last sequence per cluster passed on.
func (h *Hub) AppliedNow() query.Version {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.applied.Clone()
}

// Unsubscribe ends a subscription.
func (h *Hub) Unsubscribe(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.clusters != nil {
		for _, c := range s.clusters {
			m := h.byCluster[s.gvr][c]
			delete(m, s)
			if len(m) == 0 {
				delete(h.byCluster[s.gvr], c)
			}
		}
		return
	}
	if s.key == "" {
		delete(h.all[s.gvr], s)
		return
	}
	m := h.byLabel[s.gvr][s.key][s.val]
	delete(m, s)
	if len(m) == 0 {
		delete(h.byLabel[s.gvr][s.key], s.val)
	}
}

// Observe implements materializer.Config.Observer.
func (h *Hub) Observe(b feed.Batch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[*Subscription][]*Event{}
	var routed []*Event
	for i := range b.Events {
		if he := h.route(b.Cluster, &b.Events[i], out); he != nil {
			routed = append(routed, he)
		}
	}
	if len(routed) > 0 {
		// The version before this batch, copied only for events some
		// watch takes: a copy per batch is O(clusters), and during a
		// fleet's sync, with nobody watching, it was a large share of the
		// 2,000-cluster hub's heap (measured: docs/benchmarks/fleet.md#2000-clusters-x-500-pods-the-issues-scale-2026-12-04).
		applied := h.applied.Clone()
		for _, he := range routed {
			he.applied = applied
		}
	}
	if h.applied[b.Cluster] < b.LastSeq {
		h.applied[b.Cluster] = b.LastSeq
	}
	for s, evs := range out {
		if !s.q.TryPush(Batch{Cluster: b.Cluster, Events: evs}) {
			s.once.Do(func() { close(s.overflow) })
		}
	}
}

// route adds e to the events of each watch that may need it, and returns
// its Event if any watch took it.
func (h *Hub) route(cluster string, e *feed.Event, out map[*Subscription][]*Event) *Event {
	he := NewEvent(cluster, e.Seq, e.Event)
	taken := false
	add := func(s *Subscription) {
		out[s] = append(out[s], he)
		taken = true
	}
	var cur map[string]string
	if e.Event.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
		// The materializer extracted the labels already; decoding the
		// whole object here (for watchers only) would halve ingest.
		cur = e.Labels
		if !e.Labeled {
			cur, _ = he.Labels()
		}
	}
	control := !stream.IsObjectEvent(e.Event)
	prior := e.Prior
	if !prior.Told && !control {
		// Nobody said (the materializer always does): take the object as
		// one never seen, new, with labels that may have been anything.
		prior = feed.Prior{Told: true, LabelsUnknown: true}
	}
	he.IsNew = !prior.Exists
	for s := range h.all[he.GVR] {
		add(s)
	}
	for s := range h.byCluster[he.GVR][cluster] {
		add(s)
	}
	for key, byVal := range h.byLabel[he.GVR] {
		if control || prior.LabelsUnknown {
			for _, subs := range byVal {
				for s := range subs {
					add(s)
				}
			}
			continue
		}
		// Route by the value the object has now and the one it had.
		nv, nok := cur[key]
		ov, ook := prior.Label(key)
		if nok {
			for s := range byVal[nv] {
				add(s)
			}
		}
		if ook && (!nok || ov != nv) {
			for s := range byVal[ov] {
				add(s)
			}
		}
	}
	if !taken {
		return nil
	}
	return he
}
