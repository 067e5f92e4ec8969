package memberrbac

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIdentityMap(t *testing.T) {
	m := &IdentityMap{Rules: []MapRule{
		{Clusters: []string{"prod-eu"}, UserPrefix: "oidc:", GroupPrefix: "oidc:"},
		{Clusters: []string{"prod-eu", "*"}, UserPrefix: "never-for-prod-eu:"},
	}}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	caller := Identity{User: "alice", Groups: []string{"dev"}}
	cases := []struct {
		name    string
		m       *IdentityMap
		cluster string
		want    string
	}{
		{"no map: the same user and groups", nil, "prod-eu", "alice|dev,system:authenticated"},
		{"the first rule naming the cluster", m, "prod-eu", "oidc:alice|oidc:dev,system:authenticated"},
		{"\"*\" for the others", m, "staging", "never-for-prod-eu:alice|dev,system:authenticated"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.m.In(tc.cluster, caller)
			if got := id.User + "|" + strings.Join(id.Groups, ","); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
	if caller.Groups[0] != "dev" {
		t.Fatal("mapping changed the caller's groups")
	}

	t.Run("invalid maps name the rule and field", func(t *testing.T) {
		for _, tc := range []struct {
			yaml, want string
		}{
			{"rules:\n- userPrefix: x\n", "rules[0].clusters is empty"},
			{"rules:\n- clusters: [Prod_EU]\n", `rules[0].clusters[0] "Prod_EU"`},
			{"rules:\n- clusters: [\"*\"]\n  groupPrefix: \"system:\"\n", "rules[0].groupPrefix"},
			{"rules:\n- clusters: [a]\n  user: x\n", "unknown field"},
		} {
			p := filepath.Join(t.TempDir(), "map.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadIdentityMap(p)
			if err == nil || !errors.Is(err, ErrInvalidIdentityMap) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%q: got %v, want an error naming %q", tc.yaml, err, tc.want)
			}
		}
	})

	t.Run("Reach decides each member with its mapped identity", func(t *testing.T) {
		ms := &Members{Map: &IdentityMap{Rules: []MapRule{{Clusters: []string{"c2"}, UserPrefix: "oidc:"}}}}
		reader := clusterRole("pod-reader", rule(ss("list"), ss(""), ss("pods")))
		for c, subject := range map[string]string{"c1": "alice", "c2": "oidc:alice", "c3": "alice-elsewhere"} {
			if err := ms.Upsert(c, reader); err != nil {
				t.Fatal(err)
			}
			if err := ms.Upsert(c, rb("shop", "b", "ClusterRole", "pod-reader", userSubject(subject))); err != nil {
				t.Fatal(err)
			}
		}
		r := ms.Reach(context.Background(), Identity{User: "alice"}, "list", Resource{Resource: "pods"})
		if len(r.Groups) != 1 || strings.Join(r.Groups[0].Clusters, ",") != "c1,c2" {
			t.Fatalf("reach %+v, want c1 (alice) and c2 (oidc:alice)", r)
		}
		// system:masters is every member's only where the map leaves it.
		masters := Identity{User: "root", Groups: []string{"system:masters"}}
		if ms.Reach(context.Background(), masters, "list", Resource{Resource: "pods"}).Masters {
			t.Fatal("a mapped fleet treats system:masters as every member's")
		}
	})
}
