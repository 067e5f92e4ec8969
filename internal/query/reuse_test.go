package query

import (
	"context"
	"testing"
)

// TestReuse: a chunk or object slice is lent again only after Written,
// never while the read it was lent to may still be held; a nil Reuse
// lends new memory every time.
func TestReuse(t *testing.T) {
	first := func(b []byte) *byte { return &b[:1][0] }
	for _, tc := range []struct {
		name string
		r    *Reuse
		// again: memory lent before Written is lent again after it.
		again bool
	}{
		{"a Reuse", &Reuse{}, true},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.r.Chunk(), tc.r.Chunk()
			if cap(a) != ReuseChunk || cap(b) != ReuseChunk || len(a) != 0 {
				t.Fatalf("chunks of len %d cap %d and cap %d, want empty of %d", len(a), cap(a), cap(b), ReuseChunk)
			}
			if first(a) == first(b) {
				t.Fatal("one chunk lent twice before Written")
			}
			items := append(tc.r.Items(), Object{Cluster: "c1"}, Object{Cluster: "c2"})
			tc.r.KeepItems(items)
			if got := tc.r.Items(); cap(got) != 0 {
				t.Fatalf("the object slice lent again before Written (cap %d)", cap(got))
			}
			tc.r.Written()
			c, d := tc.r.Chunk(), tc.r.Chunk()
			lentAgain := (first(c) == first(a) || first(c) == first(b)) && (first(d) == first(a) || first(d) == first(b)) && first(c) != first(d)
			if lentAgain != tc.again {
				t.Fatalf("chunks lent again after Written: %v, want %v", lentAgain, tc.again)
			}
			if e := tc.r.Chunk(); first(e) == first(a) || first(e) == first(b) || first(e) == first(c) || first(e) == first(d) {
				t.Fatal("a chunk lent twice after Written")
			}
			got := tc.r.Items()
			if reused := cap(got) == cap(items) && cap(got) > 0 && &got[:1][0] == &items[0]; reused != tc.again {
				t.Fatalf("object slice lent again after Written: %v, want %v", reused, tc.again)
			}
			if len(got) != 0 {
				t.Fatalf("object slice lent with %d objects", len(got))
			}
		})
	}
}

// TestReuseContext: a context carries the Reuse it was given; one that
// was given none carries nil.
func TestReuseContext(t *testing.T) {
	r := &Reuse{}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want *Reuse
	}{
		{"given", WithReuse(context.Background(), r), r},
		{"none", context.Background(), nil},
	} {
		if got := ReuseFrom(tc.ctx); got != tc.want {
			t.Errorf("%s: %p, want %p", tc.name, got, tc.want)
		}
	}
}
