package stream

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// eventCases are wire forms the generic decoder and ours must agree on,
// including inputs proto accepts in unusual ways (repeated fields, wrong
// wire types, unknown fields) and inputs it refuses.
func eventCases() map[string][]byte {
	full, _ := proto.Marshal(&fleetviewv1.ResourceEvent{
		Cluster: "c1", Gvr: &fleetviewv1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		Kind: "Deployment", Uid: "u-1", Namespace: "ns", Name: "web", ResourceVersion: "42",
		Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{"a":1}`), ObservedUnixNano: -5, Namespaced: true,
		Cells: []byte(`["web","1/1",3]`), Manager: "kubectl", Operation: "Update", Subresource: "status",
	})
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	str := func(b []byte, num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(b, num, protowire.BytesType), s)
	}
	varint := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	gvr := func(b []byte, inner []byte) []byte {
		return protowire.AppendBytes(tag(b, 2, protowire.BytesType), inner)
	}
	return map[string][]byte{
		"empty":                     nil,
		"full":                      full,
		"repeated scalar last wins": str(str(nil, 6, "a"), 6, "b"),
		"gvr merges":                gvr(gvr(nil, str(nil, 1, "apps")), str(nil, 3, "pods")),
		"gvr unknown field":         gvr(nil, varint(str(nil, 2, "v1"), 9, 7)),
		"gvr wrong wire type":       gvr(nil, varint(nil, 1, 3)),
		"unknown fields skipped":    varint(protowire.AppendFixed64(tag(str(nil, 99, "x"), 100, protowire.Fixed64Type), 1), 101, 5),
		"string as varint":          varint(nil, 1, 7),
		"type as bytes":             str(nil, 8, "x"),
		"enum out of range":         varint(nil, 8, 1234),
		"negative enum":             varint(nil, 8, uint64(1<<64-1)),
		"bool large varint":         varint(nil, 11, 300),
		"empty object":              str(nil, 9, ""),
		"invalid utf8 name":         str(nil, 6, "\xff"),
		"invalid utf8 in gvr":       gvr(nil, str(nil, 3, "\xfe")),
		"invalid utf8 in object ok": str(nil, 9, "\xff"),
		"truncated bytes":           full[:len(full)-3],
		"truncated tag":             {0x80},
		"field zero":                {0x00, 0x01},
		"end group at top":          tag(nil, 5, protowire.EndGroupType),
		"group skipped":             tag(tag(nil, 50, protowire.StartGroupType), 50, protowire.EndGroupType),
		"length past end":           {0x4a, 0x10, 'a'},
		"truncated varint":          {0x40, 0xff},
		"gvr truncated inside":      gvr(nil, []byte{0x0a, 0x05, 'a'}),
	}
}

func checkSameAsProto(t *testing.T, data []byte) {
	t.Helper()
	want := &fleetviewv1.ResourceEvent{}
	werr := proto.Unmarshal(data, want)
	got := &fleetviewv1.ResourceEvent{}
	gerr := unmarshalEvent(data, got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("input %x: proto.Unmarshal error %v, unmarshalEvent error %v", data, werr, gerr)
	}
	// Unknown fields are skipped, not kept: nothing re-encodes a decoded
	// event.
	want.ProtoReflect().SetUnknown(nil)
	if want.Gvr != nil {
		want.Gvr.ProtoReflect().SetUnknown(nil)
	}
	if werr == nil && !proto.Equal(want, got) {
		t.Fatalf("input %x: proto.Unmarshal gives %v, unmarshalEvent %v", data, want, got)
	}
}

func TestUnmarshalEventMatchesProto(t *testing.T) {
	for name, data := range eventCases() {
		t.Run(name, func(t *testing.T) { checkSameAsProto(t, data) })
	}
}

func TestUnmarshalEventAliasesObject(t *testing.T) {
	data, err := proto.Marshal(&fleetviewv1.ResourceEvent{Object: []byte(`{"kind":"Pod"}`)})
	if err != nil {
		t.Fatal(err)
	}
	ev := &fleetviewv1.ResourceEvent{}
	if err := unmarshalEvent(data, ev); err != nil {
		t.Fatal(err)
	}
	if &ev.Object[0] != &data[len(data)-len(ev.Object)] {
		t.Fatal("object was copied, not aliased")
	}
}

func FuzzUnmarshalEvent(f *testing.F) {
	for _, data := range eventCases() {
		f.Add(data)
	}
	f.Fuzz(checkSameAsProto)
}

// BenchmarkDecode compares the event decoder with proto.Unmarshal on a Pod
// event of about 3 KB.
func BenchmarkDecode(b *testing.B) {
	obj := make([]byte, 3200)
	for i := range obj {
		obj[i] = 'a' + byte(i%26)
	}
	data, err := proto.Marshal(&fleetviewv1.ResourceEvent{
		Cluster: "c1", Gvr: &fleetviewv1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Kind: "Pod", Uid: "0b6e7c4e-2d7a-4d7e-9d8e-1f2a3b4c5d6e", Namespace: "team-a", Name: "web-7d9f8c-abcde",
		ResourceVersion: "123456", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: obj, ObservedUnixNano: 1, Namespaced: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto.Unmarshal", func(b *testing.B) {
		for b.Loop() {
			if err := proto.Unmarshal(data, &fleetviewv1.ResourceEvent{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshalEvent", func(b *testing.B) {
		for b.Loop() {
			if err := unmarshalEvent(data, &fleetviewv1.ResourceEvent{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
