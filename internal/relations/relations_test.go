package relations

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestExtractGolden reads each testdata/in/<case>.json (a resource, a
// namespace and an object) and compares what Extract reads from it with
// testdata/<case>.golden.json. FV_UPDATE_GOLDEN=1 rewrites the golden files.
func TestExtractGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/in/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var in struct {
				Group, Resource, Namespace string
				Object                     json.RawMessage
			}
			if err := json.Unmarshal(b, &in); err != nil {
				t.Fatal(err)
			}
			r, err := Extract(schema.GroupResource{Group: in.Group, Resource: in.Resource}, in.Namespace, in.Object)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(r, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden.json")
			if os.Getenv("FV_UPDATE_GOLDEN") == "1" {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(want)) != string(got) {
				t.Errorf("Extract(%s):\n%s\nwant\n%s", name, got, want)
			}
		})
	}
}

func TestExtractInvalid(t *testing.T) {
	for _, c := range []struct {
		name, obj, want string
	}{
		{"not json", `{"kind":`, "invalid"},
		{"bad operator", `{"kind":"Deployment","metadata":{"name":"d"},"spec":{"selector":{"matchExpressions":[{"key":"a","operator":"Gt","values":["1"]}]}}}`, `unknown operator "Gt"`},
		{"in without values", `{"kind":"Deployment","metadata":{"name":"d"},"spec":{"selector":{"matchExpressions":[{"key":"a","operator":"In"}]}}}`, `key "a": operator In needs values`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Extract(schema.GroupResource{Group: "apps", Resource: "deployments"}, "ns", []byte(c.obj))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want ErrInvalid naming %q", err, c.want)
			}
		})
	}
}

func TestSelectorMatches(t *testing.T) {
	sel := &Selector{Kind: "Pod", MatchLabels: map[string]string{"app": "web"}, MatchExpr: []Requirement{
		{Key: "tier", Operator: "In", Values: []string{"front", "edge"}},
		{Key: "env", Operator: "NotIn", Values: []string{"dev"}},
		{Key: "canary", Operator: "DoesNotExist"},
		{Key: "team", Operator: "Exists"},
	}}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"all hold", map[string]string{"app": "web", "tier": "edge", "team": "a"}, true},
		{"env prod", map[string]string{"app": "web", "tier": "edge", "team": "a", "env": "prod"}, true},
		{"env dev", map[string]string{"app": "web", "tier": "edge", "team": "a", "env": "dev"}, false},
		{"wrong app", map[string]string{"app": "api", "tier": "edge", "team": "a"}, false},
		{"tier missing", map[string]string{"app": "web", "team": "a"}, false},
		{"canary", map[string]string{"app": "web", "tier": "edge", "team": "a", "canary": ""}, false},
		{"no team", map[string]string{"app": "web", "tier": "edge"}, false},
	} {
		if got := sel.Matches(c.labels); got != c.want {
			t.Errorf("%s: Matches = %v, want %v", c.name, got, c.want)
		}
	}
	if (*Selector)(nil).Matches(map[string]string{}) {
		t.Error("a nil selector selects nothing")
	}
	if !(&Selector{Kind: "Pod"}).Matches(map[string]string{"x": "y"}) {
		t.Error("an empty selector selects everything")
	}
	if k, v, ok := sel.Equality(); !ok || k != "app" || v != "web" {
		t.Errorf("Equality = %q %q %v", k, v, ok)
	}
	if _, _, ok := (&Selector{MatchExpr: []Requirement{{Key: "a", Operator: "Exists"}}}).Equality(); ok {
		t.Error("Exists is no equality")
	}
}

func TestShared(t *testing.T) {
	for _, c := range []struct {
		group, kind, name string
		want              bool
	}{
		{"", "ConfigMap", "kube-root-ca.crt", true},
		{"", "ServiceAccount", "default", true},
		{"", "ConfigMap", "default", false},
		{"", "ServiceAccount", "kube-root-ca.crt", false},
		{"", "ConfigMap", "web-config", false},
		{"", "ServiceAccount", "web", false},
		{"example.com", "ConfigMap", "kube-root-ca.crt", false},
		{"", "Secret", "default", false},
		{"", "Node", "default", false},
	} {
		if got := Shared(c.group, c.kind, c.name); got != c.want {
			t.Errorf("Shared(%q, %q, %q) = %v, want %v", c.group, c.kind, c.name, got, c.want)
		}
	}
}
