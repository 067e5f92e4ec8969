package feed

import (
	"strings"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Batch is what a materializer publishes after committing a batch of one
// cluster stream.
type Batch struct {
	Cluster string
	// Events are the events the sink applied, in stream order. The slice is
	// the one the sink was handed: observers must not keep or modify it
	// after they return.
	Events []Event
	// LastSeq is the sink's checkpoint for the cluster stream after the
	// batch; it may be past the last event (skipped or dead-lettered
	// messages still move it).
	LastSeq uint64
}

// Event is one decoded stream message and its stream sequence.
type Event struct {
	Seq   uint64
	Event *fleetviewv1.ResourceEvent
	// Labels are the object's metadata.labels, extracted (and the object's
	// JSON checked) by the materializer while the previous batch is being
	// applied; valid when Labeled. Upserts from a materializer are always
	// labeled; sinks fall back to extracting them for events built elsewhere.
	Labels map[string]string
	// Search is what a free-text search matches in the object
	// (materializer.LabelsAndSearchText), extracted with the labels; valid when
	// Labeled.
	Search  []byte
	Labeled bool
	// Prior is set by the sink when it applies the event, or by a Tracker
	// for a sink that does not.
	Prior Prior
}

// Prior is the object an event replaced or deleted, as the write side
// found it when it applied the event. With it an observer (the watch hub)
// tells an added object from a modified one, and routes an event by the
// labels the object had, without keeping every object's labels itself: a
// sink that reads the previous state anyway (Badger's, to update its label
// index) tells it for free, and a Tracker tells it for the others. The zero
// Prior means nobody said.
type Prior struct {
	Told bool
	// Exists: the cache held the object (by name) before the event.
	Exists bool
	// Labels are that object's labels, unless LabelsUnknown. Read them
	// with Label: a Tracker keeps them encoded, not in Labels.
	Labels        map[string]string
	LabelsUnknown bool
	// encoded holds the labels as a Tracker keeps them (see encodeLabels),
	// decoded only by the lookups that need them: most events reach no
	// watch routed by label.
	encoded string
}

// Label is the value the object had for label key, and whether it had it.
func (p *Prior) Label(key string) (string, bool) {
	if p.Labels != nil {
		v, ok := p.Labels[key]
		return v, ok
	}
	return lookupLabel(p.encoded, key)
}

// lookupLabel finds key in labels encoded by encodeLabels without decoding
// them.
func lookupLabel(enc, key string) (string, bool) {
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
