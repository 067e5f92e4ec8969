package memberrbac

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestIdentityMap(t *testing.T) {
	m := &IdentityMap{Rules: []MapRule{
		{Clusters: []string{"prod-eu"}, UserPrefix: "oidc:", GroupPrefix: "oidc:"},
		{Clusters: []string{"prod-eu", "*"}, UserPrefix: "never-for-prod-eu:"},
	}}
	byLabels := &IdentityMap{Rules: []MapRule{
		{Clusters: []string{"edge-1"}, UserPrefix: "named:"},
		{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"idp": "corp"}}, UserPrefix: "corp:", GroupPrefix: "corp:"},
		{Clusters: []string{"legacy"}, ClusterSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"lab"}}}}, UserPrefix: "lab:"},
	}}
	for _, mm := range []*IdentityMap{m, byLabels} {
		if err := mm.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	caller := Identity{User: "alice", Groups: []string{"dev"}}
	corp := map[string]string{"idp": "corp", "env": "lab"}
	cases := []struct {
		name    string
		m       *IdentityMap
		cluster string
		labels  map[string]string
		known   bool
		want    string
	}{
		{"no map: the same user and groups", nil, "prod-eu", nil, false, "alice|dev,system:authenticated"},
		{"the first rule naming the cluster", m, "prod-eu", nil, false, "oidc:alice|oidc:dev,system:authenticated"},
		{"\"*\" for the others", m, "staging", nil, false, "never-for-prod-eu:alice|dev,system:authenticated"},
		{"a name before a selector needs no labels", byLabels, "edge-1", nil, false, "named:alice|dev,system:authenticated"},
		{"a selector matching the cluster's labels", byLabels, "edge-2", corp, true, "corp:alice|corp:dev,system:authenticated"},
		{"a later rule's selector", byLabels, "edge-3", map[string]string{"env": "lab"}, true, "lab:alice|dev,system:authenticated"},
		{"a rule naming the cluster besides its selector", byLabels, "legacy", map[string]string{}, true, "lab:alice|dev,system:authenticated"},
		{"no rule selects it: the caller's own names", byLabels, "edge-4", map[string]string{"idp": "other"}, true, "alice|dev,system:authenticated"},
		{"labels unknown before a selector: no identity (fail closed)", byLabels, "edge-5", nil, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := tc.m.In(tc.cluster, tc.labels, tc.known, caller)
			got := ""
			if ok {
				got = id.User + "|" + strings.Join(id.Groups, ",")
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
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
			{"rules:\n- userPrefix: x\n", "rules[0].clusters is empty and there is no clusterSelector"},
			{"rules:\n- clusterSelector: {matchLabels: {\"bad key!\": x}}\n", "rules[0].clusterSelector"},
			{"rules:\n- clusterSelector: {matchExpressions: [{key: env, operator: Near}]}\n", "rules[0].clusterSelector"},
			{"rules:\n- clusters: [Prod_EU]\n", `rules[0].clusters[0] "Prod_EU"`},
			{"rules:\n- clusters: [\"*\"]\n  groupPrefix: \"system:\"\n", "rules[0].groupPrefix"},
			{"rules:\n- clusters: [a]\n  user: x\n", "unknown field"},
			// A proper prefix of system: would complete a hub name such
			// as ":masters" into system:masters (issue #43).
			{"rules:\n- clusters: [\"*\"]\n  groupPrefix: system\n", `rules[0].groupPrefix "system": a prefix must end with ":"`},
			{"rules:\n- clusters: [a]\n- clusters: [b]\n  userPrefix: sys\n", `rules[1].userPrefix "sys": a prefix must end with ":"`},
			{"rules:\n- clusters: [a]\n  groupPrefix: s\n", `rules[0].groupPrefix "s"`},
			{"rules:\n- clusters: [a]\n  userPrefix: oidc\n", `rules[0].userPrefix "oidc": a prefix must end with ":" (such as "oidc:")`},
			{"rules:\n- clusters: [a]\n  userPrefix: \"system:x:\"\n", `rules[0].userPrefix "system:x:": a prefix may not begin with system:`},
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
		// A rule selecting members by labels: c3's record says
		// idp=elsewhere, so alice is elsewhere:alice there. Before the hub
		// knows c3's labels it asks c3 about no one; a label change is a
		// change (Generation) and decides c3 again.
		sel := &Members{Map: &IdentityMap{Rules: []MapRule{{Clusters: []string{"c2"}, UserPrefix: "oidc:"},
			{ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"idp": "elsewhere"}}, UserPrefix: "elsewhere:"}}}}
		if err := sel.Map.Validate(); err != nil {
			t.Fatal(err)
		}
		for c, subject := range map[string]string{"c1": "alice", "c2": "oidc:alice", "c3": "elsewhere:alice"} {
			if err := sel.Upsert(c, reader); err != nil {
				t.Fatal(err)
			}
			if err := sel.Upsert(c, rb("shop", "b", "ClusterRole", "pod-reader", userSubject(subject))); err != nil {
				t.Fatal(err)
			}
		}
		reach := func() string {
			r := sel.Reach(context.Background(), Identity{User: "alice"}, "list", Resource{Resource: "pods"})
			var cs []string
			for _, g := range r.Groups {
				cs = append(cs, g.Clusters...)
			}
			return strings.Join(cs, ",")
		}
		// No labels known: c1 and c3 (before the selector rule) are asked
		// about no one, c2 is named first.
		if got := reach(); got != "c2" {
			t.Fatalf("labels unknown: reach %s, want c2 alone", got)
		}
		gen := sel.Generation()
		sel.SetLabels("c1", map[string]string{"idp": "corp"}, true)
		sel.SetLabels("c3", map[string]string{"idp": "elsewhere"}, true)
		if sel.Generation() == gen {
			t.Fatal("a label change is no change")
		}
		if got := reach(); got != "c1,c2,c3" {
			t.Fatalf("labels known: reach %s, want c1 (alice), c2 (oidc:alice), c3 (elsewhere:alice)", got)
		}
		gen = sel.Generation()
		sel.SetLabels("c3", map[string]string{"idp": "elsewhere"}, true)
		if sel.Generation() != gen {
			t.Fatal("a heartbeat with the same labels counted as a change")
		}
		sel.SetLabels("c3", map[string]string{"idp": "corp"}, true)
		if got := reach(); got != "c1,c2" {
			t.Fatalf("c3 relabelled: reach %s, want c1,c2 (alice is alice in c3 now, unbound)", got)
		}
		sel.SetLabels("c1", nil, false)
		if got := reach(); got != "c2" {
			t.Fatalf("c1's record gone: reach %s, want c2", got)
		}

		// system:masters is every member's only where the map leaves it.
		masters := Identity{User: "root", Groups: []string{"system:masters"}}
		if ms.Reach(context.Background(), masters, "list", Resource{Resource: "pods"}).Masters {
			t.Fatal("a mapped fleet treats system:masters as every member's")
		}
	})
}

// TestIdentityMapReservedNames: a mapped user or group is checked after
// mapping (issue #43): no rule may hand a member one of its own system:
// names, unless the name was that before and the rule says
// allowSystemNames; a cluster no rule applies to sees the caller as it is.
// Validate refuses the prefixes that would, and Map refuses them in a map
// that was never validated too.
func TestIdentityMapReservedNames(t *testing.T) {
	masters := Identity{User: "root", Groups: []string{"system:masters"}}
	cases := []struct {
		name   string
		rule   MapRule
		caller Identity
		want   string // user|groups, or the error's words
	}{
		{"prefix completing :masters", MapRule{Clusters: ss("*"), GroupPrefix: "system"}, Identity{User: "m", Groups: ss(":masters")}, `group ":masters" "system:masters"`},
		{"prefix completing :anonymous", MapRule{Clusters: ss("*"), UserPrefix: "system"}, Identity{User: ":anonymous"}, `user ":anonymous" "system:anonymous"`},
		{"group left as it is", MapRule{Clusters: ss("c1"), UserPrefix: "corp:"}, masters, `group "system:masters" "system:masters"`},
		{"user left as it is", MapRule{Clusters: ss("c1"), GroupPrefix: "corp:"}, Identity{User: "system:serviceaccount:a:b"}, `user "system:serviceaccount:a:b"`},
		{"allowed: the same name", MapRule{Clusters: ss("c1"), UserPrefix: "corp:", AllowSystemNames: true}, masters, "corp:root|system:masters"},
		{"allowed names no new one", MapRule{Clusters: ss("c1"), GroupPrefix: "sys", AllowSystemNames: true}, Identity{User: "m", Groups: ss("tem:masters")}, `group "tem:masters" "system:masters"`},
		{"prefixed: no system: name", MapRule{Clusters: ss("c1"), UserPrefix: "corp:", GroupPrefix: "corp:"}, masters, "corp:root|corp:system:masters"},
		{"no rule applies: as authenticated", MapRule{Clusters: ss("c2"), GroupPrefix: "corp:"}, masters, "root|system:masters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &IdentityMap{Rules: []MapRule{tc.rule}}
			id, err := m.Map("c1", nil, true, tc.caller)
			got := id.User + "|" + strings.Join(id.Groups, ",")
			if err != nil {
				if !errors.Is(err, ErrReservedName) {
					t.Fatalf("error %v is not ErrReservedName", err)
				}
				got = err.Error()
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if _, ok := m.In("c1", nil, true, tc.caller); ok != (err == nil) {
				t.Fatalf("In ok %v, Map error %v", ok, err)
			}
			// Members decide reads for no one there.
			ms := &Members{Map: m}
			if err := ms.Upsert("c1", clusterRole("all", rule(ss("*"), ss("*"), ss("*")))); err != nil {
				t.Fatal(err)
			}
			if err := ms.Upsert("c1", crb("all", "all", groupSubject("system:masters"), groupSubject("system:authenticated"))); err != nil {
				t.Fatal(err)
			}
			d := ms.Decide(context.Background(), "c1", tc.caller, Request{Verb: "get", Resource: "secrets", Namespace: "x"})
			if d.Allowed != (err == nil) {
				t.Fatalf("Decide allowed %v (%s) with mapping error %v", d.Allowed, d.Reason, err)
			}
			if r := ms.Reach(context.Background(), tc.caller, "list", Resource{Resource: "secrets"}); err != nil && (r.Masters || r.HasCluster("c1")) {
				t.Fatalf("Reach %+v includes c1 where the caller has no identity", r)
			}
		})
	}
	if err := (&IdentityMap{Rules: []MapRule{{Clusters: ss("*"), GroupPrefix: "system"}}}).Validate(); err == nil {
		t.Fatal("Validate took groupPrefix system")
	}
}
