package stream

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

func TestSubjectRoundTrip(t *testing.T) {
	cases := []struct {
		gvr  schema.GroupVersionResource
		want string
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "fv.obj.member1.core.v1.pods.u-1"},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "fv.obj.member1.apps.v1.deployments.u-1"},
		{schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}, "fv.obj.member1.networking_k8s_io.v1.ingresses.u-1"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			subj := ObjectSubject("member1", tc.gvr, "u-1")
			if subj != tc.want {
				t.Fatalf("ObjectSubject = %q, want %q", subj, tc.want)
			}
			ps, err := ParseSubject(subj)
			if err != nil {
				t.Fatal(err)
			}
			if ps.Control || ps.Cluster != "member1" || ps.GVR != tc.gvr || ps.UID != "u-1" {
				t.Fatalf("ParseSubject = %+v", ps)
			}
			ctl, err := ParseSubject(ControlSubject("member1", tc.gvr))
			if err != nil || !ctl.Control || ctl.GVR != tc.gvr {
				t.Fatalf("control subject: %+v %v", ctl, err)
			}
			if !strings.HasSuffix(ResourceFilter("member1", tc.gvr), ".*") || strings.Count(ResourceFilter("member1", tc.gvr), ".") != 6 {
				t.Fatalf("filter %q has the wrong token count", ResourceFilter("member1", tc.gvr))
			}
		})
	}
}

func TestStreamName(t *testing.T) {
	for _, c := range []string{"member1", "eu-west-1", "a"} {
		got, ok := ClusterFromStream(StreamName(c))
		if !ok || got != c {
			t.Errorf("ClusterFromStream(StreamName(%q)) = %q, %v", c, got, ok)
		}
	}
	if _, ok := ClusterFromStream("KV_fv_clusters"); ok {
		t.Error("a KV stream was taken for a cluster stream")
	}
}

func TestValidateCluster(t *testing.T) {
	for _, bad := range []string{"", "Member1", "a.b", "a*", "a b", "-a", strings.Repeat("a", 64)} {
		if err := ValidateCluster(bad); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateCluster(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	if err := ValidateCluster("member-1"); err != nil {
		t.Errorf("ValidateCluster(member-1) = %v", err)
	}
}

func TestDecode(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	upsert := func() *fleetviewv1.ResourceEvent {
		return &fleetviewv1.ResourceEvent{Cluster: "m1", Gvr: ProtoGVR(pods), Uid: "u1", Name: "p", Namespace: "ns",
			ResourceVersion: "7", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT, Object: []byte(`{}`)}
	}
	objSubj := ObjectSubject("m1", pods, "u1")
	cases := []struct {
		name    string
		subj    string
		mutate  func(*fleetviewv1.ResourceEvent)
		raw     []byte
		wantErr error
	}{
		{name: "valid upsert", subj: objSubj},
		{name: "valid delete", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) {
			e.Type, e.Object = fleetviewv1.EventType_EVENT_TYPE_DELETE, nil
		}},
		{name: "valid sync marker", subj: ControlSubject("m1", pods), mutate: func(e *fleetviewv1.ResourceEvent) {
			e.Type, e.Uid, e.Name, e.Object = fleetviewv1.EventType_EVENT_TYPE_SYNCED, "", "", nil
		}},
		{name: "garbage payload", subj: objSubj, raw: []byte{0xff, 0xff, 0xff}, wantErr: ErrBadEvent},
		{name: "bad subject", subj: "fv.obj.m1.core", wantErr: ErrBadSubject},
		// Found by FuzzDecode: an empty group token parsed as the core
		// group, a second subject for the same object.
		{name: "empty group token", subj: "fv.obj.m1..v1.pods.u1", wantErr: ErrBadSubject},
		{name: "empty uid token", subj: "fv.obj.m1.core.v1.pods.", mutate: func(e *fleetviewv1.ResourceEvent) { e.Uid = "" }, wantErr: ErrBadSubject},
		{name: "empty cluster token", subj: "fv.ctl..core.v1.pods", mutate: func(e *fleetviewv1.ResourceEvent) {
			e.Cluster, e.Type, e.Uid, e.Name, e.Object = "", fleetviewv1.EventType_EVENT_TYPE_SYNCED, "", "", nil
		}, wantErr: ErrBadSubject},
		{name: "cluster mismatch", subj: ObjectSubject("m2", pods, "u1"), wantErr: ErrBadEvent},
		{name: "uid mismatch", subj: ObjectSubject("m1", pods, "u2"), wantErr: ErrBadEvent},
		{name: "resource mismatch", subj: ObjectSubject("m1", schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, "u1"), wantErr: ErrBadEvent},
		{name: "upsert without object", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) { e.Object = nil }, wantErr: ErrBadEvent},
		{name: "marker on object subject", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) {
			e.Type = fleetviewv1.EventType_EVENT_TYPE_SYNCED
		}, wantErr: ErrBadEvent},
		{name: "object on control subject", subj: ControlSubject("m1", pods), wantErr: ErrBadEvent},
		{name: "no name", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) { e.Name = "" }, wantErr: ErrBadEvent},
		{name: "valid cells", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) { e.Cells = []byte(`["p","1/1","Running",0,"5m"]`) }},
		{name: "cells not an array", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) { e.Cells = []byte(`{"a":1}`) }, wantErr: ErrBadEvent},
		{name: "cells malformed", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) { e.Cells = []byte(`["p",]`) }, wantErr: ErrBadEvent},
		{name: "cells with trailing data", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) { e.Cells = []byte(`["p"]]`) }, wantErr: ErrBadEvent},
		{name: "cells too large", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) {
			e.Cells = []byte(`["` + strings.Repeat("x", MaxCellsBytes) + `"]`)
		}, wantErr: ErrBadEvent},
		{name: "too many cells", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) {
			e.Cells = []byte("[" + strings.Repeat("1,", MaxColumns) + "1]")
		}, wantErr: ErrBadEvent},
		{name: "cells on a delete", subj: objSubj, mutate: func(e *fleetviewv1.ResourceEvent) {
			e.Type, e.Object, e.Cells = fleetviewv1.EventType_EVENT_TYPE_DELETE, nil, []byte(`["p"]`)
		}, wantErr: ErrBadEvent},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.raw
			if data == nil {
				ev := upsert()
				if tc.mutate != nil {
					tc.mutate(ev)
				}
				var err error
				if data, err = Encode(ev); err != nil {
					t.Fatal(err)
				}
			}
			ev, err := Decode(tc.subj, data)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if ev.GetCluster() != "m1" {
					t.Fatalf("decoded %+v", ev)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Decode error = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestMsgID(t *testing.T) {
	ev := &fleetviewv1.ResourceEvent{Uid: "u", ResourceVersion: "5", Type: fleetviewv1.EventType_EVENT_TYPE_UPSERT}
	del := &fleetviewv1.ResourceEvent{Uid: "u", ResourceVersion: "5", Type: fleetviewv1.EventType_EVENT_TYPE_DELETE}
	if MsgID(ev) == MsgID(del) || MsgID(ev) == "" {
		t.Fatalf("upsert and delete of one version must not dedupe: %q %q", MsgID(ev), MsgID(del))
	}
	if MsgID(&fleetviewv1.ResourceEvent{Type: fleetviewv1.EventType_EVENT_TYPE_SYNCED}) != "" {
		t.Fatal("sync markers must never be deduplicated")
	}
}
