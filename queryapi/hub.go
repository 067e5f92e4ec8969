package queryapi

import (
	"encoding/json"
	"hash/maphash"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ksel "k8s.io/apimachinery/pkg/selection"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/materializer"
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
// thousand selective watches do not each wake up for every event.
type Hub struct {
	buffer int

	mu      sync.Mutex
	applied query.Version
	// known holds every object the cache holds, per cluster/resource and
	// by a 128-bit hash of its uid, with its last labels (encoded;
	// unknownLabels when only the uid is known), so a live upsert can be
	// told ADDED or MODIFIED and routed by the labels it had. Hashed ids
	// keep the map at about 100 bytes per object, without pointers to scan
	// in its keys, for millions of objects.
	known map[string]map[objID]string
	seeds [2]maphash.Seed
	// all are the watches of a resource without an indexable requirement;
	// byLabel indexes the others by resource, key and value.
	all     map[schema.GroupVersionResource]map[*subscription]struct{}
	byLabel map[schema.GroupVersionResource]map[string]map[string]map[*subscription]struct{}
}

const unknownLabels = "\x01"

// objID identifies an object of one cluster and resource: a hash of its
// uid, 128 bits so that a collision among millions of objects is
// practically impossible.
type objID [2]uint64

func (h *Hub) objID(uid string) objID {
	return objID{maphash.String(h.seeds[0], uid), maphash.String(h.seeds[1], uid)}
}

// resKey names a cluster's resource in known.
func resKey(cluster string, gvr schema.GroupVersionResource) string {
	return cluster + "/" + stream.ResourceToken(gvr)
}

// objects is the known map of a cluster's resource, created if asked.
func (h *Hub) objects(cluster string, gvr schema.GroupVersionResource, create bool) map[objID]string {
	k := resKey(cluster, gvr)
	m := h.known[k]
	if m == nil && create {
		m = map[objID]string{}
		h.known[k] = m
	}
	return m
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
	return &Hub{buffer: o.Buffer, applied: query.Version{}, known: map[string]map[objID]string{},
		seeds:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		all:     map[schema.GroupVersionResource]map[*subscription]struct{}{},
		byLabel: map[schema.GroupVersionResource]map[string]map[string]map[*subscription]struct{}{}}
}

func encodeLabels(l labels.Set) string {
	if len(l) == 0 {
		return ""
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(l[k])
		b.WriteByte(0)
	}
	return b.String()
}

// labelValue reads one label of an encoded set.
func labelValue(enc, key string) (string, bool) {
	for enc != "" {
		k, rest, _ := strings.Cut(enc, "\x00")
		v, rest2, _ := strings.Cut(rest, "\x00")
		if k == key {
			return v, true
		}
		enc = rest2
	}
	return "", false
}

// seed records the objects the store holds before the first batch is
// observed (their labels unknown).
func (h *Hub) seed(uids func(fn func(cluster string, gvr schema.GroupVersionResource, uid string)) error) error {
	type obj struct {
		cluster string
		gvr     schema.GroupVersionResource
		id      objID
	}
	var found []obj
	if err := uids(func(c string, g schema.GroupVersionResource, u string) { found = append(found, obj{c, g, h.objID(u)}) }); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range found {
		m := h.objects(o.cluster, o.gvr, true)
		if _, ok := m[o.id]; !ok {
			m[o.id] = unknownLabels
		}
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
	key, val string // the indexed equality requirement; key "" = none
	ch       chan hubBatch
	overflow chan struct{}
	once     sync.Once
}

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

// subscribe registers a watch of one resource and returns, atomically with
// the registration, the last sequence per cluster already passed on: every
// later event the watch may need arrives on the subscription.
func (h *Hub) subscribe(gvr schema.GroupVersionResource, sel labels.Selector) (*subscription, query.Version) {
	s := &subscription{gvr: gvr, ch: make(chan hubBatch, h.buffer), overflow: make(chan struct{})}
	s.key, s.val = indexable(sel)
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.key == "" {
		if h.all[gvr] == nil {
			h.all[gvr] = map[*subscription]struct{}{}
		}
		h.all[gvr][s] = struct{}{}
	} else {
		byKey := h.byLabel[gvr]
		if byKey == nil {
			byKey = map[string]map[string]map[*subscription]struct{}{}
			h.byLabel[gvr] = byKey
		}
		if byKey[s.key] == nil {
			byKey[s.key] = map[string]map[*subscription]struct{}{}
		}
		if byKey[s.key][s.val] == nil {
			byKey[s.key][s.val] = map[*subscription]struct{}{}
		}
		byKey[s.key][s.val][s] = struct{}{}
	}
	return s, h.applied.Clone()
}

func (h *Hub) unsubscribe(s *subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
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
func (h *Hub) Observe(cluster string, events []materializer.Event, lastSeq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[*subscription][]*hubEvent{}
	for _, e := range events {
		he := newHubEvent(cluster, e.Seq, e.Event)
		objs := h.objects(cluster, he.gvr, e.Event.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT)
		id := h.objID(e.Event.GetUid())
		old, seen := objs[id]
		// A new object had no labels; a seeded one had labels unknown.
		oldKnown := !seen || old != unknownLabels
		var cur string
		switch e.Event.GetType() {
		case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
			he.isNew = !seen
			// The materializer extracted the labels already; decoding the
			// whole object here (for watchers only) would halve ingest.
			l := labels.Set(e.Labels)
			if !e.Labeled {
				l, _, _ = he.decode()
			}
			cur = encodeLabels(l)
			objs[id] = cur
		case fleetviewv1.EventType_EVENT_TYPE_DELETE:
			delete(objs, id)
		case fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
			delete(h.known, resKey(cluster, he.gvr))
		}
		for s := range h.all[he.gvr] {
			out[s] = append(out[s], he)
		}
		control := e.Event.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT && e.Event.GetType() != fleetviewv1.EventType_EVENT_TYPE_DELETE
		for key, byVal := range h.byLabel[he.gvr] {
			if control || !oldKnown {
				for _, subs := range byVal {
					for s := range subs {
						out[s] = append(out[s], he)
					}
				}
				continue
			}
			// Route by the value the object has now and the one it had.
			nv, nok := labelValue(cur, key)
			ov, ook := labelValue(old, key)
			if nok {
				for s := range byVal[nv] {
					out[s] = append(out[s], he)
				}
			}
			if ook && (!nok || ov != nv) {
				for s := range byVal[ov] {
					out[s] = append(out[s], he)
				}
			}
		}
	}
	if h.applied[cluster] < lastSeq {
		h.applied[cluster] = lastSeq
	}
	for s, evs := range out {
		select {
		case s.ch <- hubBatch{cluster: cluster, events: evs}:
		default:
			s.once.Do(func() { close(s.overflow) })
		}
	}
}
