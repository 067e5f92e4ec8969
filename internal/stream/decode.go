package stream

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// unmarshalEvent decodes a ResourceEvent as proto.Unmarshal would (same
// result, same inputs refused), except that Object and Cells alias data instead of
// being copied and unknown fields are skipped rather than kept. Every materializer and the watch hub decode every message;
// the generic decoder's reflection and the copy of each object were a
// visible share of the materializer's CPU (measured:
// docs/benchmarks/materializer.md#figures-behind-code-comments).
// TestUnmarshalEventMatchesProto and
// FuzzUnmarshalEvent hold it to proto.Unmarshal.
func unmarshalEvent(data []byte, ev *fleetviewv1.ResourceEvent) error {
	return eachField(data, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		return eventField(b, num, typ, ev)
	})
}

// eachField calls f with each field's number, wire type and the bytes from
// its value on; f returns the value's length.
func eachField(data []byte, f func(protowire.Number, protowire.Type, []byte) (int, error)) error {
	for len(data) > 0 {
		num, typ, n, err := consumeTag(data)
		if err != nil {
			return err
		}
		data = data[n:]
		if n, err = f(num, typ, data); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// consumeTag is protowire.ConsumeTag refusing field numbers above the
// largest valid one, as proto.Unmarshal does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, protowire.ParseError(n)
	}
	if num > protowire.MaxValidNumber {
		return 0, 0, 0, fmt.Errorf("invalid field number %d", num)
	}
	return num, typ, n, nil
}

var errInvalidUTF8 = errors.New("string field contains invalid UTF-8")

// eventField decodes one field's value and returns its length. A known
// field with an unexpected wire type is an unknown field to proto, which
// skips it; so do we.
func eventField(b []byte, num protowire.Number, typ protowire.Type, ev *fleetviewv1.ResourceEvent) (int, error) {
	switch {
	case typ == protowire.BytesType && (num >= 1 && num <= 9 && num != 8 || num >= 12 && num <= 15):
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		switch num {
		case 2:
			if ev.Gvr == nil {
				ev.Gvr = &fleetviewv1.GroupVersionResource{}
			}
			// A repeated message field merges, as in proto.
			return n, unmarshalGVR(v, ev.Gvr)
		case 9:
			ev.Object = v
			if ev.Object == nil {
				ev.Object = []byte{}
			}
			return n, nil
		case 12:
			ev.Cells = v
			if ev.Cells == nil {
				ev.Cells = []byte{}
			}
			return n, nil
		}
		if !utf8.Valid(v) {
			return 0, fmt.Errorf("field %d: %w", num, errInvalidUTF8)
		}
		s := string(v)
		switch num {
		case 1:
			ev.Cluster = s
		case 3:
			ev.Kind = s
		case 4:
			ev.Uid = s
		case 5:
			ev.Namespace = s
		case 6:
			ev.Name = s
		case 7:
			ev.ResourceVersion = s
		case 13:
			ev.Manager = s
		case 14:
			ev.Operation = s
		case 15:
			ev.Subresource = s
		}
		return n, nil
	case typ == protowire.VarintType && (num == 8 || num == 10 || num == 11):
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		switch num {
		case 8:
			ev.Type = fleetviewv1.EventType(int32(v))
		case 10:
			ev.ObservedUnixNano = int64(v)
		case 11:
			ev.Namespaced = protowire.DecodeBool(v)
		}
		return n, nil
	}
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, protowire.ParseError(n)
	}
	return n, nil
}

func unmarshalGVR(data []byte, g *fleetviewv1.GroupVersionResource) error {
	return eachField(data, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		if typ != protowire.BytesType || num < 1 || num > 3 {
			n := protowire.ConsumeFieldValue(num, typ, b)
			return n, protowire.ParseError(n)
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		if !utf8.Valid(v) {
			return 0, fmt.Errorf("gvr field %d: %w", num, errInvalidUTF8)
		}
		switch num {
		case 1:
			g.Group = string(v)
		case 2:
			g.Version = string(v)
		case 3:
			g.Resource = string(v)
		}
		return n, nil
	})
}
