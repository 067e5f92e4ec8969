package query

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestRelationFields(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for _, tc := range []struct {
		sel     string
		want    []RelationField
		wantErr string
	}{
		{sel: "fleetview.io/ownedBy=Deployment.apps/web", want: []RelationField{{Field: FieldOwnedBy, Group: "apps", Kind: "Deployment", Name: "web"}}},
		{sel: "fleetview.io/selectedBy==Service/web,status.phase=Running", want: []RelationField{{Field: FieldSelectedBy, Kind: "Service", Name: "web"}}},
		{sel: "fleetview.io/references=Secret/db", want: []RelationField{{Field: FieldReferences, Kind: "Secret", Name: "db"}}},
		{sel: "fleetview.io/ownedBy!=Deployment/web", wantErr: `field "fleetview.io/ownedBy": only = and == are supported`},
		{sel: "fleetview.io/ownedBy=web", wantErr: `value "web": want Kind/name or Kind.group/name`},
		{sel: "fleetview.io/ownedBy=Deployment/a/b", wantErr: `value "Deployment/a/b"`},
		{sel: "fleetview.io/parentOf=Pod/x", wantErr: `unknown relation field "fleetview.io/parentOf"`},
	} {
		t.Run(tc.sel, func(t *testing.T) {
			f, err := CompileFields(pods, tc.sel)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want ErrInvalid with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := f.Relations()
			if len(got) != len(tc.want) || got[0] != tc.want[0] {
				t.Fatalf("Relations = %+v, want %+v", got, tc.want)
			}
			// Unresolved, matching refuses: a backend that cannot answer
			// relation fields must not answer everything.
			if _, err := f.Matches("ns", "p", []byte(`{"status":{"phase":"Running"}}`)); !errors.Is(err, ErrInvalid) {
				t.Fatalf("unresolved Matches: %v", err)
			}
			ok, err := f.RelationsResolved().Matches("ns", "p", []byte(`{"status":{"phase":"Running"}}`))
			if err != nil || !ok {
				t.Fatalf("resolved Matches = %v %v", ok, err)
			}
		})
	}
}
