package feed

import (
	"hash/maphash"
	"sort"
	"strings"

	"github.com/fleetview/fleetview/internal/stream"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Tracker tells the prior state of the object events of one cluster stream
// whose sink does not (OpenSearch's: it writes without reading). It
// remembers, per resource and by a 128-bit hash of the uid, the labels of
// every object it has seen since it was made. Hashed ids keep the map at
// about 100 bytes per object, without pointers to scan in its keys.
//
// An object it has not seen is taken as new, with its previous labels
// unknown: it may be one the sink held before the tracker was made, so a
// watch routed by label must hear of it whatever its selector.
//
// A Tracker is not safe for concurrent use; a materializer keeps one per
// cluster stream, which one goroutine at a time applies.
type Tracker struct {
	seeds [2]maphash.Seed
	known map[resource]map[objID]string
}

// resource names a resource in known; its strings are those of the event,
// so looking one up allocates nothing.
type resource struct{ group, version, name string }

func resourceOf(ev *fleetviewv1.ResourceEvent) resource {
	g := ev.GetGvr()
	return resource{g.GetGroup(), g.GetVersion(), g.GetResource()}
}

// objID identifies an object of one resource: a hash of its uid, 128 bits
// so that a collision among millions of objects is practically impossible.
type objID [2]uint64

// NewTracker returns a tracker that has seen nothing.
func NewTracker() *Tracker {
	return &Tracker{seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, known: map[resource]map[objID]string{}}
}

// Tell fills in the Prior of each object event of a committed batch that
// its sink left untold, in order, and forgets a removed resource's
// objects. Events the sink told about are left alone and not remembered:
// a sink tells about all its events or none.
func (t *Tracker) Tell(evs []Event) {
	for i := range evs {
		e := &evs[i]
		if e.Event.GetType() == fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED {
			delete(t.known, resourceOf(e.Event))
			continue
		}
		if e.Prior.Told || !stream.IsObjectEvent(e.Event) {
			continue
		}
		e.Prior = t.remember(e)
	}
}

// remember is the prior state of e from the labels kept, which it then
// updates with e.
func (t *Tracker) remember(e *Event) Prior {
	ev := e.Event
	res := resourceOf(ev)
	objs := t.known[res]
	upsert := ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT
	if objs == nil && upsert {
		objs = map[objID]string{}
		t.known[res] = objs
	}
	id := objID{maphash.String(t.seeds[0], ev.GetUid()), maphash.String(t.seeds[1], ev.GetUid())}
	old, seen := objs[id]
	switch {
	case !upsert:
		delete(objs, id)
	case e.Labeled:
		objs[id] = encodeLabels(e.Labels)
	default:
		// The materializer labels every upsert it applies; one built
		// elsewhere is remembered with its labels unknown rather than
		// parsed here.
		objs[id] = unknownLabels
	}
	p := Prior{Told: true, Exists: seen, LabelsUnknown: !seen || old == unknownLabels}
	if !p.LabelsUnknown {
		p.encoded = old
	}
	return p
}

// unknownLabels is kept for an object whose labels were not given; no
// encoding of labels starts with NUL, as no label key is empty.
const unknownLabels = "\x00"

// encodeLabels packs labels into one string, sorted key, NUL, value, NUL:
// one allocation per object kept instead of a map.
func encodeLabels(l map[string]string) string {
	if len(l) == 0 {
		return ""
	}
	keys := make([]string, 0, len(l))
	n := 0
	for k, v := range l {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	sort.Strings(keys)
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(l[k])
		b.WriteByte(0)
	}
	return b.String()
}
