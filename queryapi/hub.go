package queryapi

import (
	"encoding/json"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Hub fans the materializer's committed batches out to the watches. It is
// the materializer's Observer: it never blocks (a watcher whose buffer is
// full is cut, not waited for), and it knows, per cluster, the last
// sequence it has passed on, which is where a new watch switches from
// replaying the stream to the live feed.
type Hub struct {
	buffer int

	mu      sync.Mutex
	applied query.Version
	// known holds every object the cache holds (cluster/resource/uid), so
	// a live upsert can be told ADDED or MODIFIED.
	known map[string]struct{}
	subs  map[*subscription]struct{}
}

// HubOptions configure a Hub.
type HubOptions struct {
	// Buffer is how many batches a watch may fall behind before it is cut
	// with RESOURCE_EXHAUSTED (default 1024).
	Buffer int
}

// NewHub returns a hub; pass Observe to materializer.Config.Observer.
func NewHub(o HubOptions) *Hub {
	if o.Buffer <= 0 {
		o.Buffer = 1024
	}
	return &Hub{buffer: o.Buffer, applied: query.Version{}, known: map[string]struct{}{}, subs: map[*subscription]struct{}{}}
}

func knownKey(cluster string, gvr schema.GroupVersionResource, uid string) string {
	return cluster + "/" + stream.ResourceToken(gvr) + "/" + uid
}

// seed records the objects the store holds before the first batch is
// observed.
func (h *Hub) seed(uids func(fn func(cluster string, gvr schema.GroupVersionResource, uid string)) error) error {
	known := map[string]struct{}{}
	if err := uids(func(c string, g schema.GroupVersionResource, u string) { known[knownKey(c, g, u)] = struct{}{} }); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range known {
		h.known[k] = struct{}{}
	}
	return nil
}

// hubEvent is one stream event as watches see it; the object is decoded
// once, however many watches send it.
type hubEvent struct {
	cluster string
	seq     uint64
	ev      *fleetviewv1.ResourceEvent
	gvr     schema.GroupVersionResource
	// isNew: the object was not in the cache before this event.
	isNew bool

	once   sync.Once
	labels labels.Set
	obj    *structpb.Struct
	uid    string
	err    error
}

func newHubEvent(cluster string, seq uint64, ev *fleetviewv1.ResourceEvent) *hubEvent {
	return &hubEvent{cluster: cluster, seq: seq, ev: ev, gvr: stream.GVR(ev.GetGvr())}
}

// decode parses the object JSON once.
func (e *hubEvent) decode() (labels.Set, *structpb.Struct, error) {
	e.once.Do(func() {
		if len(e.ev.GetObject()) == 0 {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(e.ev.GetObject(), &m); err != nil {
			e.err = err
			return
		}
		if md, ok := m["metadata"].(map[string]any); ok {
			if ls, ok := md["labels"].(map[string]any); ok {
				e.labels = labels.Set{}
				for k, v := range ls {
					s, _ := v.(string)
					e.labels[k] = s
				}
			}
		}
		e.obj, e.err = structpb.NewStruct(m)
	})
	return e.labels, e.obj, e.err
}

type hubBatch struct {
	cluster string
	events  []*hubEvent
}

type subscription struct {
	gvr      schema.GroupVersionResource
	ch       chan hubBatch
	overflow chan struct{}
	once     sync.Once
}

// subscribe registers a watch of one resource and returns, atomically with
// the registration, the last sequence per cluster already passed on: every
// later event arrives on the subscription.
func (h *Hub) subscribe(gvr schema.GroupVersionResource) (*subscription, query.Version) {
	s := &subscription{gvr: gvr, ch: make(chan hubBatch, h.buffer), overflow: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[s] = struct{}{}
	return s, h.applied.Clone()
}

func (h *Hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
}

// Observe implements materializer.Config.Observer.
func (h *Hub) Observe(cluster string, events []materializer.Event, lastSeq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	byGVR := map[schema.GroupVersionResource][]*hubEvent{}
	for _, e := range events {
		he := newHubEvent(cluster, e.Seq, e.Event)
		switch e.Event.GetType() {
		case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
			k := knownKey(cluster, he.gvr, e.Event.GetUid())
			if _, ok := h.known[k]; !ok {
				he.isNew = true
				h.known[k] = struct{}{}
			}
		case fleetviewv1.EventType_EVENT_TYPE_DELETE:
			delete(h.known, knownKey(cluster, he.gvr, e.Event.GetUid()))
		case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
			prefix := cluster + "/" + stream.ResourceToken(he.gvr) + "/"
			for k := range h.known {
				if len(k) > len(prefix) && k[:len(prefix)] == prefix {
					delete(h.known, k)
				}
			}
		}
		byGVR[he.gvr] = append(byGVR[he.gvr], he)
	}
	if h.applied[cluster] < lastSeq {
		h.applied[cluster] = lastSeq
	}
	for s := range h.subs {
		evs := byGVR[s.gvr]
		if len(evs) == 0 {
			continue
		}
		select {
		case s.ch <- hubBatch{cluster: cluster, events: evs}:
		default:
			s.once.Do(func() { close(s.overflow) })
		}
	}
}

// watchers is the number of open watches (for tests and metrics).
func (h *Hub) watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}
