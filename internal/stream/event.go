package stream

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// MsgID is the Nats-Msg-Id of an event: the same change published twice is
// stored once. It does not name the cluster: the duplicate window is the
// stream's, and only the cluster's collector and the hub can put messages
// into a cluster's stream (natsserver), so no other cluster can spend an ID
// there; one that could would forge a cluster-scoped ID as easily.
func MsgID(ev *fleetviewv1.ResourceEvent) string {
	if !IsObjectEvent(ev) {
		// Control records are meant to be appended every time.
		return ""
	}
	return ev.GetUid() + "/" + ev.GetResourceVersion() + "/" + ev.GetType().String()
}

// IsObjectEvent is whether ev changes an object (an upsert or a delete), as
// opposed to a control record (a sync marker, a resource's removal), which
// every backend receives whatever it is routed. An object event travels on
// an object subject (ObjectSubject), a control record on a control subject
// (ControlSubject).
func IsObjectEvent(ev *fleetviewv1.ResourceEvent) bool {
	t := ev.GetType()
	return t == fleetviewv1.EventType_EVENT_TYPE_UPSERT || t == fleetviewv1.EventType_EVENT_TYPE_DELETE
}

// Encode marshals an event.
func Encode(ev *fleetviewv1.ResourceEvent) ([]byte, error) {
	return proto.Marshal(ev)
}

// Decode unmarshals and checks an event against the subject it arrived on.
// The event's Object aliases data, which the caller must not modify after.
func Decode(subj string, data []byte) (*fleetviewv1.ResourceEvent, error) {
	ps, err := ParseSubject(subj)
	if err != nil {
		return nil, err
	}
	ev := &fleetviewv1.ResourceEvent{}
	if err := unmarshalEvent(data, ev); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadEvent, err)
	}
	g := ev.GetGvr()
	switch {
	case ev.GetCluster() != ps.Cluster:
		return nil, fmt.Errorf("%w: cluster %q does not match subject %q", ErrBadEvent, ev.GetCluster(), subj)
	case g.GetGroup() != ps.GVR.Group || g.GetVersion() != ps.GVR.Version || g.GetResource() != ps.GVR.Resource:
		return nil, fmt.Errorf("%w: resource %s/%s/%s does not match subject %q", ErrBadEvent, g.GetGroup(), g.GetVersion(), g.GetResource(), subj)
	case !ps.Control && ev.GetUid() != ps.UID:
		return nil, fmt.Errorf("%w: uid %q does not match subject %q", ErrBadEvent, ev.GetUid(), subj)
	case !ps.Control && !IsObjectEvent(ev):
		return nil, fmt.Errorf("%w: type %s on object subject", ErrBadEvent, ev.GetType())
	case ps.Control && ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_SYNCED && ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED:
		return nil, fmt.Errorf("%w: type %s on control subject", ErrBadEvent, ev.GetType())
	case ev.GetType() == fleetviewv1.EventType_EVENT_TYPE_UPSERT && len(ev.GetObject()) == 0:
		return nil, fmt.Errorf("%w: upsert without object", ErrBadEvent)
	case !ps.Control && ev.GetName() == "":
		return nil, fmt.Errorf("%w: object without name", ErrBadEvent)
	}
	if err := checkCells(ev); err != nil {
		return nil, err
	}
	return ev, nil
}

// Bounds of an event's Table cells (ResourceEvent.cells). A member's
// printers write a few short strings per object (a Pod's nine cells are
// about 100 bytes); a CRD's printer columns are JSONPath results, which a
// member cluster's owner controls. Past these bounds the event is refused
// like any other malformed event: the hub answers no cell a member wrote
// unchecked.
const (
	// MaxCellsBytes bounds the cells of one object.
	MaxCellsBytes = 16 << 10
	// MaxColumns bounds a resource's columns (and an object's cells).
	MaxColumns = 64
)

// checkCells refuses cells on anything but an upsert, and cells that are
// not one JSON array of at most MaxColumns values in MaxCellsBytes.
func checkCells(ev *fleetviewv1.ResourceEvent) error {
	c := ev.GetCells()
	if len(c) == 0 {
		return nil
	}
	if ev.GetType() != fleetviewv1.EventType_EVENT_TYPE_UPSERT {
		return fmt.Errorf("%w: cells on a %s event", ErrBadEvent, ev.GetType())
	}
	if len(c) > MaxCellsBytes {
		return fmt.Errorf("%w: cells of %d bytes, more than %d", ErrBadEvent, len(c), MaxCellsBytes)
	}
	var arr [16]rawjson.Span
	spans, err := rawjson.Elements(c, arr[:0])
	if err != nil {
		return fmt.Errorf("%w: cells: %v", ErrBadEvent, err)
	}
	if len(spans) > MaxColumns {
		return fmt.Errorf("%w: %d cells, more than %d", ErrBadEvent, len(spans), MaxColumns)
	}
	return nil
}

// GVR converts the proto form.
func GVR(g *fleetviewv1.GroupVersionResource) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: g.GetGroup(), Version: g.GetVersion(), Resource: g.GetResource()}
}

// ProtoGVR converts to the proto form.
func ProtoGVR(g schema.GroupVersionResource) *fleetviewv1.GroupVersionResource {
	return &fleetviewv1.GroupVersionResource{Group: g.Group, Version: g.Version, Resource: g.Resource}
}
