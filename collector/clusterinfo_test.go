package collector

import (
	"errors"
	"maps"
	"testing"

	"go.uber.org/goleak"

	"github.com/fleetview/fleetview/internal/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMergeClusterInfo(t *testing.T) {
	cases := []struct {
		name    string
		base    registry.ClusterInfo
		data    map[string]string
		want    registry.ClusterInfo
		wantErr bool
	}{
		{"configmap fills what flags left empty",
			registry.ClusterInfo{Name: "m1"},
			map[string]string{"provider": "aws", "region": " eu-west-1 ", "zone": "eu-west-1a", "labels": "env=prod, team=a"},
			registry.ClusterInfo{Name: "m1", Provider: "aws", Region: "eu-west-1", Zone: "eu-west-1a", Labels: map[string]string{"env": "prod", "team": "a"}}, false},
		{"flags win, labels merge per key",
			registry.ClusterInfo{Name: "m1", Provider: "gcp", Labels: map[string]string{"env": "dev"}},
			map[string]string{"provider": "aws", "labels": "env=prod,tier=gold"},
			registry.ClusterInfo{Name: "m1", Provider: "gcp", Labels: map[string]string{"env": "dev", "tier": "gold"}}, false},
		{"bad labels are reported, good ones apply",
			registry.ClusterInfo{Name: "m1"},
			map[string]string{"labels": "ok=yes,novalue,bad key=x,k=in valid"},
			registry.ClusterInfo{Name: "m1", Labels: map[string]string{"ok": "yes"}}, true},
		{"empty configmap",
			registry.ClusterInfo{Name: "m1", Zone: "z"}, nil,
			registry.ClusterInfo{Name: "m1", Zone: "z"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mergeClusterInfo(tc.base, tc.data)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalidClusterInfo) {
				t.Fatalf("err %v does not wrap ErrInvalidClusterInfo", err)
			}
			if !sameInfo(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestMergeDoesNotMutateFlags(t *testing.T) {
	c := &Collector{cfg: Config{Cluster: "m1", Labels: map[string]string{"a": "1"}}}
	base := c.baseInfo()
	if _, err := mergeClusterInfo(base, map[string]string{"labels": "b=2"}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(c.cfg.Labels, map[string]string{"a": "1"}) {
		t.Fatalf("flag labels changed: %v", c.cfg.Labels)
	}
}

func TestWantScope(t *testing.T) {
	all := want{namespaced: true}
	some := want{namespaced: true, namespaces: []string{"a", "c"}}
	cluster := want{namespaced: false, namespaces: []string{"a"}}
	cases := []struct {
		w    want
		ns   string
		want bool
	}{
		{all, "x", true}, {some, "a", true}, {some, "b", false}, {some, "c", true}, {cluster, "", true},
	}
	for _, tc := range cases {
		if got := tc.w.inScope(tc.ns); got != tc.want {
			t.Errorf("%+v.inScope(%q) = %v, want %v", tc.w, tc.ns, got, tc.want)
		}
	}
	if !some.equal(want{namespaced: true, namespaces: []string{"a", "c"}}) || some.equal(all) || all.equal(want{namespaced: true, namespaces: []string{}}) {
		t.Fatal("want.equal")
	}
}

func TestParseClusterInfoConfigMap(t *testing.T) {
	for _, tc := range []struct {
		ref, ns, name string
		ok            bool
	}{
		{"kube-system/fleetview-cluster-info", "kube-system", "fleetview-cluster-info", true},
		{"ns/a.b", "ns", "a.b", true},
		{"just-a-name", "", "", false},
		{"/name", "", "", false},
		{"ns/", "", "", false},
		{"Kube_System/x", "", "", false},
		{"ns/a/b", "", "", false},
		{"", "", "", false},
	} {
		ns, name, err := ParseClusterInfoConfigMap(tc.ref)
		if (err == nil) != tc.ok || ns != tc.ns || name != tc.name {
			t.Errorf("ParseClusterInfoConfigMap(%q) = %q, %q, %v; want %q, %q, ok %v", tc.ref, ns, name, err, tc.ns, tc.name, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ParseClusterInfoConfigMap(%q) error %v is not ErrInvalidOptions", tc.ref, err)
		}
	}
}
