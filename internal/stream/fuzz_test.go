package stream

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// rendered is the subject ObjectSubject or ControlSubject gives ps.
func rendered(ps ParsedSubject) string {
	if ps.Control {
		return ControlSubject(ps.Cluster, ps.GVR)
	}
	return ObjectSubject(ps.Cluster, ps.GVR, ps.UID)
}

// FuzzParseSubject checks the subject parser every consumer of a cluster's
// stream applies. For any subject, ParseSubject either fails with
// ErrBadSubject or reverses ObjectSubject or ControlSubject exactly: the
// parts render back to the same subject, so no two subjects (each one
// message in the compacted stream) name the same object.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{
		"fv.obj.member1.core.v1.pods.u-1",
		"fv.obj.member1.networking_k8s_io.v1.ingresses.u-1",
		"fv.ctl.member1.apps.v1.deployments",
		"fv.obj.member1..v1.pods.u-1",
		"fv.obj.member1.core.v1.pods.",
		"fv.ctl..core.v1.pods",
		"fv.obj.member1.core.v1.pods.u.x",
		"fv.obj.*.core.v1.pods.>",
		"fv.ctl.a.b.c",
		"",
		".......",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		ps, err := ParseSubject(subj)
		if err != nil {
			if !errors.Is(err, ErrBadSubject) {
				t.Fatalf("ParseSubject(%q) = %v: want ErrBadSubject", subj, err)
			}
			return
		}
		if got := rendered(ps); got != subj {
			t.Fatalf("ParseSubject(%q) = %+v, which renders as %q", subj, ps, got)
		}
	})
}

// FuzzDecode checks the decoding of every stream message (materializers,
// the watch hub, the mover, a collector's own hydration). For any subject
// and payload, Decode either fails with ErrBadSubject or ErrBadEvent, or
// gives an event that:
//
//  1. is at its own subject (cluster, resource and, for an object, uid);
//  2. re-encodes (Encode) to a payload that decodes on the same subject to
//     an event proto.Equal to it.
func FuzzDecode(f *testing.F) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	upsert := &fleetviewv1.ResourceEvent{
		Cluster: "c1", Gvr: ProtoGVR(pods), Kind: "Pod", Uid: "u-1", Namespace: "ns", Name: "web",
		ResourceVersion: "42", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{"a":1}`), ObservedUnixNano: 7, Namespaced: true,
		Cells: []byte(`["web",1]`),
	}
	del := proto.CloneOf(upsert)
	del.Type, del.Object = fleetviewv1.EventType_EVENT_TYPE_DELETE, nil
	synced := &fleetviewv1.ResourceEvent{Cluster: "c1", Gvr: ProtoGVR(pods), Type: fleetviewv1.EventType_EVENT_TYPE_SYNCED}
	removed := proto.CloneOf(synced)
	removed.Type = fleetviewv1.EventType_EVENT_TYPE_RESOURCE_REMOVED
	noName := proto.CloneOf(upsert)
	noName.Name = ""
	for _, tc := range []struct {
		subj string
		ev   *fleetviewv1.ResourceEvent
	}{
		{ObjectSubject("c1", pods, "u-1"), upsert},
		{ObjectSubject("c1", pods, "u-1"), del},
		{ObjectSubject("c1", pods, "u-2"), upsert},
		{ObjectSubject("c2", pods, "u-1"), upsert},
		{ObjectSubject("c1", pods, "u-1"), synced},
		{ObjectSubject("c1", pods, "u-1"), noName},
		{ControlSubject("c1", pods), synced},
		{ControlSubject("c1", pods), removed},
		{ControlSubject("c1", pods), upsert},
		{ControlSubject("c1", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "pods"}), synced},
		{"fv.obj.c1..v1.pods.u-1", upsert},
	} {
		b, err := Encode(tc.ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tc.subj, b)
	}
	for _, data := range eventCases() {
		f.Add(ObjectSubject("c1", pods, "u-1"), data)
	}
	f.Fuzz(func(t *testing.T, subj string, data []byte) {
		ev, err := Decode(subj, data)
		if err != nil {
			if !errors.Is(err, ErrBadSubject) && !errors.Is(err, ErrBadEvent) {
				t.Fatalf("Decode(%q, %x) = %v: want ErrBadSubject or ErrBadEvent", subj, data, err)
			}
			return
		}
		ps := ParsedSubject{Control: !IsObjectEvent(ev), Cluster: ev.GetCluster(), GVR: GVR(ev.GetGvr())}
		if !ps.Control {
			ps.UID = ev.GetUid()
		}
		if got := rendered(ps); got != subj {
			t.Fatalf("Decode(%q, %x) = %v, whose subject is %q", subj, data, ev, got)
		}
		enc, err := Encode(ev)
		if err != nil {
			t.Fatalf("Decode(%q, %x) = %v, which does not encode: %v", subj, data, ev, err)
		}
		again, err := Decode(subj, enc)
		if err != nil || !proto.Equal(again, ev) {
			t.Fatalf("Decode(%q, %x) = %v, which re-encoded decodes to %v, %v", subj, data, ev, again, err)
		}
	})
}
