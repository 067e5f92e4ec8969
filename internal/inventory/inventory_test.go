package inventory

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fleetview/fleetview/internal/natsserver/natstest"
	"github.com/fleetview/fleetview/internal/stream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestPutGetList(t *testing.T) {
	_, _, js := natstest.Start(t, -1)
	ctx := context.Background()
	kv, err := Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := &Cluster{Name: "member2", Labels: map[string]string{"env": "prod"}, Provider: "aws", Region: "eu", Zone: "eu-1a",
		KubernetesVersion: "v1.37.2", ServedAPIs: []string{"apps/v1", "v1"}, Ready: true, Heartbeat: time.Now().UTC().Truncate(time.Second),
		Resources: []ResourceState{{Version: "v1", Resource: "pods", Kind: "Pod", Synced: true, ObjectCount: 3, RefusedObjects: 1, Message: "1 object(s) refused as too large",
			Columns: []Column{{Name: "Name", Type: "string", Format: "name"}, {Name: "IP", Type: "string", Priority: 1}}}},
		Counters: &Counters{Upserts: 4, Refused: 1}, Authorization: AuthorizationRBACAndOthers}
	a := &Cluster{Name: "member1", Heartbeat: time.Now().UTC().Truncate(time.Second), Authorization: AuthorizationRBAC}
	for _, c := range []*Cluster{b, a} {
		if err := Put(ctx, kv, c); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Get(ctx, kv, "member2")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, b)
	}
	if got.Info().Provider != "aws" || got.Info().Labels["env"] != "prod" {
		t.Fatalf("Info %+v", got.Info())
	}
	list, err := List(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "member1" || list[1].Name != "member2" {
		t.Fatalf("List not sorted by name: %v", list)
	}
	if _, err := Get(ctx, kv, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing = %v, want ErrNotFound", err)
	}
}

// A record is validated again when read: one its key does not name, or
// with an invalid name or labels, is ErrCorrupt from Get and left out of
// List, so one cluster's collector can neither pass for another nor hide
// the other clusters.
func TestCorruptRecordIsRefusedOnRead(t *testing.T) {
	_, _, js := natstest.Start(t, -1)
	ctx := context.Background()
	kv, err := Bucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Put(ctx, kv, &Cluster{Name: "good", Labels: map[string]string{"env": "prod"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, value string
	}{
		{"another cluster's name", "edge-a", `{"name":"edge-b","labels":{"env":"prod"}}`},
		{"no name", "edge-c", `{"labels":{"env":"prod"}}`},
		{"invalid cluster name", "Edge_D", `{"name":"Edge_D"}`},
		{"invalid label", "edge-e", `{"name":"edge-e","labels":{"bad key!":"x"}}`},
		{"invalid label value", "edge-f", `{"name":"edge-f","labels":{"env":"not a value"}}`},
		{"not JSON", "edge-g", `{"name":`},
		{"a column without name", "edge-h", `{"name":"edge-h","resources":[{"version":"v1","resource":"pods","columns":[{"name":"","type":"string"}]}]}`},
		{"a column name too long", "edge-i", `{"name":"edge-i","resources":[{"version":"v1","resource":"pods","columns":[{"name":"` + strings.Repeat("n", MaxColumnName+1) + `","type":"string"}]}]}`},
		{"a column description too long", "edge-j", `{"name":"edge-j","resources":[{"version":"v1","resource":"pods","columns":[{"name":"Name","type":"string","description":"` + strings.Repeat("d", MaxColumnDescription+1) + `"}]}]}`},
		{"a column type too long", "edge-k", `{"name":"edge-k","resources":[{"version":"v1","resource":"pods","columns":[{"name":"Name","type":"` + strings.Repeat("t", MaxColumnType+1) + `"}]}]}`},
		{"an unknown authorization", "edge-m", `{"name":"edge-m","authorization":"webhook"}`},
		{"authorization in another case", "edge-n", `{"name":"edge-n","authorization":"RBAC"}`},
		{"too many columns", "edge-l", `{"name":"edge-l","resources":[{"version":"v1","resource":"pods","columns":[` + strings.TrimSuffix(strings.Repeat(`{"name":"c","type":"string"},`, stream.MaxColumns+1), ",") + `]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := kv.Put(ctx, tc.key, []byte(tc.value)); err != nil {
				t.Fatal(err)
			}
			if c, err := Get(ctx, kv, tc.key); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Get = %+v, %v; want ErrCorrupt", c, err)
			}
			list, err := List(ctx, kv)
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].Name != "good" {
				t.Fatalf("List = %v, want only the valid record", list)
			}
		})
	}
}
