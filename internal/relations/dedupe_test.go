package relations

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// dedupeReference is dedupe as it sorted before slices.SortFunc: with
// sort.Slice.
func dedupeReference(refs []Ref) []Ref {
	if len(refs) < 2 {
		return refs
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Type != refs[j].Type {
			return refs[i].Type < refs[j].Type
		}
		return compareTargets(refs[i].Target, refs[j].Target) < 0
	})
	out := refs[:1]
	for _, r := range refs[1:] {
		if r != out[len(out)-1] {
			out = append(out, r)
		}
	}
	return out
}

// TestDedupeKeepsSortSliceOrder: dedupe gives what it gave with
// sort.Slice, refs that compare equal but differ ("a/b" as group and kind
// or as kind and namespace) in the same order, at a Pod's few refs and at
// many.
func TestDedupeKeepsSortSliceOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 1))
	parts := []string{"", "a", "b", "a/b", "b/a", "a/", "/b"}
	pick := func() string { return parts[rng.IntN(len(parts))] }
	types := []EdgeType{Owner, References, Selects}
	for round := range 3000 {
		n := rng.IntN(6)
		if round%3 == 0 {
			n = rng.IntN(80)
		}
		refs := make([]Ref, n)
		for i := range refs {
			refs[i] = Ref{Type: types[rng.IntN(len(types))], Target: Target{Group: pick(), Kind: pick(), Namespace: pick(), Name: pick()}}
		}
		in := append([]Ref(nil), refs...)
		want := dedupeReference(append([]Ref(nil), refs...))
		if got := dedupe(refs); !slices.Equal(got, want) {
			t.Fatalf("dedupe(%v)\n= %v\nsort.Slice's %v", in, got, want)
		}
	}
}

func BenchmarkDedupe(b *testing.B) {
	refs := []Ref{
		{References, Target{Kind: "Node", Name: "node-001"}}, {Owner, Target{Group: "apps", Kind: "ReplicaSet", Namespace: "ns", Name: "r"}},
		{References, Target{Kind: "ConfigMap", Namespace: "ns", Name: "kube-root-ca.crt"}}, {References, Target{Kind: "ConfigMap", Namespace: "ns", Name: "cfg"}},
		{References, Target{Kind: "ServiceAccount", Namespace: "ns", Name: "sa"}},
	}
	for _, c := range []struct {
		name string
		f    func([]Ref) []Ref
	}{{"slices", dedupe}, {"sort.Slice", dedupeReference}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]Ref, len(refs))
			for b.Loop() {
				copy(buf, refs)
				c.f(buf)
			}
		})
	}
}
