package relations

import (
	"errors"
	"os"
	"reflect"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
)

var podsGR = schema.GroupResource{Resource: "pods"}

// podCases are Pods extractPod must read as encoding/json does, or leave
// to it (fallback true).
var podCases = []struct {
	name     string
	obj      string
	fallback bool
}{
	{"golden", "", false},
	{"benchdata", string(podjson.Pod("c1", 7, 1)), false},
	{"empty", `{}`, false},
	{"null", `null`, false},
	{"nulls", `{"kind":null,"metadata":null,"spec":{"nodeName":null,"volumes":null,"containers":[null,{"env":null,"envFrom":[null]}]}}`, false},
	{"owner without kind", `{"kind":"Pod","metadata":{"ownerReferences":[{"apiVersion":"v1","name":"x"}]}}`, false},
	{"owner without name", `{"kind":"Pod","metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Node"}]}}`, false},
	{"duplicates collapse", `{"spec":{"volumes":[{"configMap":{"name":"a"}},{"configMap":{"name":"a"}}],"containers":[{"envFrom":[{"configMapRef":{"name":"a"}}]}]}}`, false},
	{"unknown members", `{"kind":"Pod","status":{"spec":{"nodeName":"n"}},"spec":{"x":[1,{"y":true}],"nodeName":"n2"}}`, false},
	{"utf8 name", `{"spec":{"nodeName":"nöde"}}`, false},
	{"space", " { \"spec\" : { \"nodeName\" : \"n\" } } ", false},
	{"key in another case", `{"spec":{"NodeName":"n"}}`, true},
	{"kind in another case", `{"Kind":"Pod"}`, true},
	{"key twice", `{"spec":{"nodeName":"a","nodeName":"b"}}`, true},
	{"escaped key", `{"spec":{"node\u004eame":"n"}}`, true},
	{"escaped value", `{"spec":{"nodeName":"n\u0031"}}`, true},
	{"non-ascii key", `{"spec":{"nodeNamé":"n"}}`, true},
	{"number for a string", `{"spec":{"nodeName":1}}`, true},
	{"string for an array", `{"spec":{"volumes":"v"}}`, true},
	{"array for an object", `{"metadata":[]}`, true},
	{"another kind's member", `{"spec":{"selector":{"app":"x"}}}`, true},
	{"another kind's member, other case", `{"spec":{"Rules":1}}`, true},
	{"trailing data", `{} {}`, true},
	{"not json", `{"spec":`, true},
}

func TestExtractPodMatchesJSON(t *testing.T) {
	golden, err := os.ReadFile("testdata/in/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range podCases {
		t.Run(c.name, func(t *testing.T) {
			obj := []byte(c.obj)
			if c.name == "golden" {
				obj = golden[len(`{"group":"","resource":"pods","namespace":"shop","object":`) : len(golden)-2]
			}
			got, err := extractPod("shop", obj)
			if c.fallback {
				if !errors.Is(err, errFallback) {
					t.Fatalf("extractPod = %+v, %v; want errFallback", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("extractPod: %v", err)
			}
			want, err := extractJSON(podsGR, "shop", obj)
			if err != nil {
				t.Fatalf("extractJSON: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("extractPod = %+v\nencoding/json  %+v", got, want)
			}
			if c.name == "golden" && len(got.Refs) != 11 {
				t.Fatalf("golden Pod: %d refs, want 11: %+v", len(got.Refs), got.Refs)
			}
		})
	}
}

// FuzzExtractPod: whatever extractPod reads, encoding/json reads the same.
func FuzzExtractPod(f *testing.F) {
	for _, c := range podCases {
		f.Add(c.obj)
	}
	f.Fuzz(func(t *testing.T, obj string) {
		got, err := extractPod("ns", []byte(obj))
		if err != nil {
			return
		}
		want, err := extractJSON(podsGR, "ns", []byte(obj))
		if err != nil {
			t.Fatalf("extractPod read %q, encoding/json fails: %v", obj, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: extractPod = %+v\nencoding/json  %+v", obj, got, want)
		}
	})
}

func TestCompareTargetsOrdersAsString(t *testing.T) {
	ts := []Target{
		{Kind: "Node", Name: "n"}, {Kind: "Foo", Name: "a"}, {Kind: "Foo.bar", Name: "a"}, {Kind: "Foo", Namespace: "ns", Name: "a"},
		{Kind: "Foo", Namespace: "ns-1", Name: "a"}, {Group: "apps", Kind: "ReplicaSet", Namespace: "ns", Name: "r"},
		{Kind: "ConfigMap", Namespace: "ns", Name: "a"}, {Kind: "ConfigMap", Namespace: "ns", Name: "a-b"}, {Kind: "ConfigMap", Namespace: "ns", Name: "a/b"},
		{Kind: "ConfigMap", Namespace: "ns", Name: ""}, {Kind: "", Name: "x"}, {},
	}
	for _, a := range ts {
		for _, b := range ts {
			want := 0
			if a.String() < b.String() {
				want = -1
			} else if a.String() > b.String() {
				want = 1
			}
			got := compareTargets(a, b)
			if got < 0 {
				got = -1
			} else if got > 0 {
				got = 1
			}
			if got != want {
				t.Errorf("compareTargets(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	sorted := append([]Target(nil), ts...)
	sort.Slice(sorted, func(i, j int) bool { return compareTargets(sorted[i], sorted[j]) < 0 })
	if !sort.SliceIsSorted(sorted, func(i, j int) bool { return sorted[i].String() < sorted[j].String() }) {
		t.Errorf("not in String order: %v", sorted)
	}
}

func BenchmarkExtractPod(b *testing.B) {
	obj := podjson.Pod("c1", 7, 1)
	for _, c := range []struct {
		name string
		f    func(string, []byte) (Relations, error)
	}{
		{"rawjson", extractPod},
		{"encoding-json", func(ns string, obj []byte) (Relations, error) { return extractJSON(podsGR, ns, obj) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.f("ns", obj); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
