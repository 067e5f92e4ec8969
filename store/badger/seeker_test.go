package badger

import (
	"fmt"
	"math/rand/v2"
	"testing"

	bdg "github.com/dgraph-io/badger/v4"
)

// TestSeekerMatchesSeek checks that a seeker lands where a fresh seek
// does, for targets rising by small and large strides, falling, repeated,
// between keys and past the last, and that each and item agree with it.
func TestSeekerMatchesSeek(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// Keys k/000 .. k/399, every third one missing, each with two children.
	err = s.db.Update(func(txn *bdg.Txn) error {
		for i := range 400 {
			if i%3 == 1 {
				continue
			}
			for _, c := range []string{"a", "b"} {
				if err := txn.Set(fmt.Appendf(nil, "k/%03d/%s", i, c), []byte(c)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 49))
	tests := []struct {
		name    string
		targets func() []int
	}{
		{"rising by one", func() []int { return seq(0, 420, func() int { return 1 }) }},
		{"rising by small strides", func() []int { return seq(0, 420, func() int { return 1 + rng.IntN(5) }) }},
		{"rising by strides past maxSteps", func() []int { return seq(0, 420, func() int { return 20 + rng.IntN(40) }) }},
		{"random, falling too", func() []int {
			out := make([]int, 300)
			for i := range out {
				out[i] = rng.IntN(420)
			}
			return out
		}},
		{"repeated", func() []int { return []int{5, 5, 5, 6, 6, 3, 3, 399, 399, 400, 400, 0} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.db.View(func(txn *bdg.Txn) error {
				sk := newSeeker(txn)
				defer sk.close()
				ref := txn.NewIterator(bdg.IteratorOptions{})
				defer ref.Close()
				for step, i := range tc.targets() {
					// Between keys (k/007 < k/007/a), at an item, a prefix.
					var got, want []string
					switch step % 3 {
					case 0:
						key := fmt.Appendf(nil, "k/%03d", i)
						sk.seek(key)
						ref.Seek(key)
						got, want = []string{position(sk.it)}, []string{position(ref)}
					case 1:
						key := fmt.Appendf(nil, "k/%03d/b", i)
						it := sk.item(key)
						ref.Seek(key)
						got = []string{fmt.Sprint(it != nil)}
						want = []string{fmt.Sprint(ref.Valid() && string(ref.Item().Key()) == string(key))}
					default:
						pre := fmt.Appendf(nil, "k/%03d/", i)
						if err := sk.each(pre, func(k []byte, _ *bdg.Item) error {
							got = append(got, string(k))
							return nil
						}); err != nil {
							return err
						}
						for ref.Seek(pre); ref.ValidForPrefix(pre); ref.Next() {
							want = append(want, string(ref.Item().Key()))
						}
					}
					if fmt.Sprint(got) != fmt.Sprint(want) {
						return fmt.Errorf("step %d, target %d: seeker %v, seek %v", step, i, got, want)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// seq is from, from+stride(), ... below to.
func seq(from, to int, stride func() int) []int {
	var out []int
	for i := from; i < to; i += stride() {
		out = append(out, i)
	}
	return out
}

func position(it *bdg.Iterator) string {
	if !it.Valid() {
		return "end"
	}
	return string(it.Item().Key())
}
