package authz

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fleetview/fleetview/internal/auth"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// location is the location of an object in its Struct form.
func location(s *structpb.Struct) (cluster, namespace string) {
	md := s.GetFields()["metadata"].GetStructValue()
	namespace = md.GetFields()["namespace"].GetStringValue()
	cluster = md.GetFields()["annotations"].GetStructValue().GetFields()["fleetview.io/cluster"].GetStringValue()
	return cluster, namespace
}

// rawLocation reads the cluster annotation and namespace of stored JSON
// without decoding the rest (large lists under a policy pass every item
// through it). Anything unreadable is no location, which no scope allows.
func rawLocation(b []byte) (cluster, namespace string) {
	str := func(m rawjson.Member, dst *string) (int, error) {
		end, err := rawjson.SkipValue(b, m.ValueStart)
		if err == nil {
			*dst, err = rawjson.String(b[m.ValueStart:end])
		}
		return end, err
	}
	_, err := rawjson.EachMember(b, 0, func(m rawjson.Member) (int, error) {
		if string(m.Key) != "metadata" {
			return rawjson.SkipValue(b, m.ValueStart)
		}
		return rawjson.EachMember(b, m.ValueStart, func(m rawjson.Member) (int, error) {
			switch string(m.Key) {
			case "namespace":
				return str(m, &namespace)
			case "annotations":
				return rawjson.EachMember(b, m.ValueStart, func(m rawjson.Member) (int, error) {
					if string(m.Key) == "fleetview.io/cluster" {
						return str(m, &cluster)
					}
					return rawjson.SkipValue(b, m.ValueStart)
				})
			}
			return rawjson.SkipValue(b, m.ValueStart)
		})
	})
	if err != nil {
		return "", ""
	}
	return cluster, namespace
}

// objectLocation is the location of an object in either form.
func objectLocation(s *structpb.Struct, raw []byte) (cluster, namespace string) {
	if s != nil {
		return location(s)
	}
	return rawLocation(raw)
}

// filter drops what the scope does not allow from a response.
func filter(s *auth.Scope, resp any) error {
	switch r := resp.(type) {
	case *fleetviewv1.ListResponse:
		r.Items = slices.DeleteFunc(r.Items, func(it *structpb.Struct) bool { return !s.Allows(location(it)) })
		r.RawItems, r.RawCells, r.RawRowSpans = keepRaw(s, r.RawItems, r.RawCells, r.RawRowSpans)
	case *fleetviewv1.WatchEvent:
		if r.GetType() == "BOOKMARK" {
			return nil
		}
		_, ns := objectLocation(r.GetObject(), r.GetRawObject())
		if !s.Allows(r.GetCluster(), ns) {
			return auth.ErrForbidden
		}
	case *fleetviewv1.ListRevisionsResponse:
		r.Revisions = slices.DeleteFunc(r.Revisions, func(e *fleetviewv1.HistoryEntry) bool { return !s.Allows(e.GetCluster(), e.GetNamespace()) })
	case *fleetviewv1.GetResponse:
		if !s.Allows(objectLocation(r.GetObject(), r.GetRawObject())) {
			return fmt.Errorf("%w: object outside the caller's scope", auth.ErrForbidden)
		}
	}
	return nil
}

// keepRaw drops the raw items the scope does not allow, and their cells
// and row spans with them (each, when present, pairs with items by index).
func keepRaw(s *auth.Scope, items, cells [][]byte, spans []uint32) ([][]byte, [][]byte, []uint32) {
	n := 0
	for i, it := range items {
		if !s.Allows(rawLocation(it)) {
			continue
		}
		items[n] = it
		if len(cells) == len(items) {
			cells[n] = cells[i]
		}
		if len(spans) == 8*len(items) {
			copy(spans[8*n:8*n+8], spans[8*i:8*i+8])
		}
		n++
	}
	if len(spans) == 8*len(items) {
		spans = spans[:8*n]
	}
	clear(items[n:])
	if len(cells) == len(items) {
		clear(cells[n:])
		cells = cells[:n]
	}
	return items[:n], cells, spans
}
