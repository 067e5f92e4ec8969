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
	// known holds, for events whose sink does not tell what they replaced
	// (materializer.Prior; OpenSearch's does not, Badger's does), the
	// objects seen since the hub started, per cluster/resource and by a
	// 128-bit hash of the uid, with their last labels encoded. Hashed ids
	// keep the map at about 100 bytes per object, without pointers to scan
	// in its keys.
	known map[string]map[objID]string
	seeds [2]maphash.Seed
	// all are the watches of a resource without an indexable requirement;
	// byLabel indexes the others by resource, key and value.
	all     map[schema.GroupVersionResource]map[*subscription]struct{}
	byLabel map[schema.GroupVersionResource]map[string]map[string]map[*subscription]struct{}
}

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

// decodeLabels reverses encodeLabels.
func decodeLabels(enc string) map[string]string {
	m := map[string]string{}
	for enc != "" {
		k, rest, _ := strings.Cut(enc, "\x00")
		v, rest2, _ := strings.Cut(rest, "\x00")
		m[k] = v
		enc = rest2
	}
	return m
}

// remember is the prior state of an event whose sink does not tell it,
// from the labels the hub keeps. An object the hub has not seen is taken
// as new, with its previous labels unknown: it may be one the sink held
// before the hub started.
func (h *Hub) remember(cluster string, gvr schema.GroupVersionResource, ev *fleetviewv1.ResourceEvent, cur map[string]string, wantLabels bool) materializer.Prior {
	objs := h.objects(cluster, gvr, ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT)
	id := h.objID(ev.GetUid())
	old, seen := objs[id]
	switch ev.GetType() {
	case fleetviewv1.EventType_EVENT_TYPE_UPSERT:
		objs[id] = encodeLabels(cur)
	case fleetviewv1.EventType_EVENT_TYPE_DELETE:
		delete(objs, id)
	}
	p := materializer.Prior{Told: true, Exists: seen, LabelsUnknown: !seen}
	if seen && wantLabels {
		p.Labels = decodeLabels(old)
	}
	return p
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
		typ := e.Event.GetType()
		var cur map[string]string
		if typ == fleetviewv1.EventType_EVENT_TYPE_UPSERT {
			// The materializer extracted the labels already; decoding the
			// whole object here (for watchers only) would halve ingest.
			cur = e.Labels
			if !e.Labeled {
				cur, _, _ = he.decode()
			}
		}
		byLabel := h.byLabel[he.gvr]
		control := typ != fleetviewv1.EventType_EVENT_TYPE_UPSERT && typ != fleetviewv1.EventType_EVENT_TYPE_DELETE
		prior := e.Prior
		if !prior.Told && !control {
			prior = h.remember(cluster, he.gvr, e.Event, cur, len(byLabel) > 0)
		}
		he.isNew = !prior.Exists
		if typ == fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED {
			delete(h.known, resKey(cluster, he.gvr))
		}
		for s := range h.all[he.gvr] {
			out[s] = append(out[s], he)
		}
		for key, byVal := range byLabel {
			if control || prior.LabelsUnknown {
				for _, subs := range byVal {
					for s := range subs {
						out[s] = append(out[s], he)
					}
				}
				continue
			}
			// Route by the value the object has now and the one it had.
			nv, nok := cur[key]
			ov, ook := prior.Labels[key]
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
