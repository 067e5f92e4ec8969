package badger

import (
	"errors"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"

	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

func TestRawMergePatch(t *testing.T) {
	cases := []struct {
		name, old, cur, want string
		err                  error
	}{
		{"same", `{"a":1}`, `{"a":1}`, `{}`, nil},
		{"scalar", `{"a":1,"b":"x"}`, `{"a":2,"b":"x"}`, `{"a":2}`, nil},
		{"nested", `{"m":{"l":{"a":"1","b":"2"},"rv":"1"},"s":{}}`, `{"m":{"l":{"a":"1","b":"3"},"rv":"2"},"s":{}}`, `{"m":{"l":{"b":"3"},"rv":"2"}}`, nil},
		{"array kept as written", `{"s":{"cs":[{"z":1,"a":2}]}}`, `{"s":{"cs":[{"z":1,"a":3}]}}`, `{"s":{"cs":[{"z":1,"a":3}]}}`, nil},
		{"added", `{"a":1}`, `{"a":1,"b":{"c":true}}`, `{"b":{"c":true}}`, nil},
		{"removed", `{"a":1,"b":2}`, `{"a":1}`, `{"b":null}`, nil},
		{"object to scalar", `{"a":{"x":1}}`, `{"a":"s"}`, `{"a":"s"}`, nil},
		{"set to null", `{"a":1}`, `{"a":null}`, ``, errNoPatch},
		{"added before a kept member", `{"a":1,"c":3}`, `{"a":1,"b":2,"c":3}`, ``, errNoPatch},
		{"added object holding a null", `{"a":1}`, `{"a":1,"b":{"c":null}}`, ``, errNoPatch},
		{"array holding nulls", `{"s":[{"t":null}]}`, `{"s":[{"t":null},{"t":1}]}`, `{"s":[{"t":null},{"t":1}]}`, nil},
		{"not an object", `[1]`, `{"a":1}`, ``, errNoPatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rawMergePatch([]byte(tc.old), []byte(tc.cur))
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if string(got) != tc.want {
				t.Errorf("patch %s, want %s", got, tc.want)
			}
			// Applied by the library and by the store. The library also
			// drops nulls inside arrays, which RFC 7386 keeps (an array is
			// a value, not merged): Pod conditions hold "lastProbeTime":null.
			back, err := jsonpatch.MergePatch([]byte(tc.old), got)
			if tc.name != "array holding nulls" && (err != nil || string(back) != tc.cur) {
				t.Errorf("applied by the library: %s, %v; want %s", back, err, tc.cur)
			}
			back, err = rawApplyMergePatch([]byte(tc.old), got)
			if err != nil || string(back) != tc.cur {
				t.Errorf("applied by the store: %s, %v; want %s", back, err, tc.cur)
			}
		})
	}
}

// TestRawMergePatchExact: where the diff vouches for its patch, applying
// it gives back cur's exact bytes; where a level is not written as
// applying writes it, or members moved or repeat, it does not vouch (and
// mergePatch applies the patch to check).
func TestRawMergePatchExact(t *testing.T) {
	cases := []struct {
		name, old, cur string
		exact          bool
	}{
		{"compact", `{"a":1,"m":{"rv":"1","x":[1, 2]}}`, `{"a":1,"m":{"rv":"2","x":[1, 2]}}`, true},
		{"same", `{"a":1}`, `{"a":1}`, true},
		{"empty objects", `{}`, `{"a":{}}`, true},
		{"added and removed", `{"a":1,"b":2}`, `{"a":1,"c":{"d":"e"}}`, true},
		{"unchanged value with spaces", `{"a":{"b": 1},"c":1}`, `{"a":{"b": 1},"c":2}`, true},
		{"space between members", `{"a":1,"b":2}`, `{"a":1, "b":3}`, false},
		{"space after a colon", `{"a":1,"b":2}`, `{"a":1,"b": 3}`, false},
		{"space in an entered level", `{"m":{"a":1,"b":2}}`, `{"m":{ "a":1,"b":3}}`, false},
		{"trailing newline", `{"a":1}`, "{\"a\":2}\n", false},
		{"leading space", `{"a":1}`, ` {"a":2}`, false},
		{"members moved", `{"a":1,"b":2}`, `{"b":2,"a":3}`, false},
		{"duplicate in old", `{"a":1,"a":2}`, `{"a":1}`, false},
		{"duplicate in cur", `{"a":1}`, `{"a":1,"a":2}`, false},
		{"same members, other bytes", `{"m":{"a": 1},"b":1}`, `{"m":{"a":1},"b":2}`, false},
		// The benchmarks' Pod, as the collector writes objects: the fast path.
		{"pod update", string(benchdata.Pod("c1", 7, 1)), string(benchdata.Pod("c1", 7, 2)), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, exact, err := rawMergePatchExact([]byte(tc.old), []byte(tc.cur))
			if err != nil {
				t.Fatalf("diff: %v", err)
			}
			if exact != tc.exact {
				t.Errorf("exact %v, want %v (patch %s)", exact, tc.exact, p)
			}
			back, err := rawApplyMergePatch([]byte(tc.old), p)
			if exact && (err != nil || string(back) != tc.cur) {
				t.Errorf("vouched for, but applied: %s, %v; want %s", back, err, tc.cur)
			}
		})
	}
}

// BenchmarkMergePatch: the write path's patch of a Pod update (3 KB, the
// resourceVersion and status changed), checked by applying it and
// comparing the bytes (before rawMergePatchExact) against vouched for by
// the diff (mergePatch now).
func BenchmarkMergePatch(b *testing.B) {
	old, cur := benchdata.Pod("c1", 7, 1), benchdata.Pod("c1", 7, 2)
	b.Run("apply-and-compare", func(b *testing.B) {
		for b.Loop() {
			p, err := rawMergePatch(old, cur)
			if err != nil {
				b.Fatal(err)
			}
			if back, err := rawApplyMergePatch(old, p); err != nil || string(back) != string(cur) {
				b.Fatal("not exact")
			}
		}
	})
	b.Run("vouched", func(b *testing.B) {
		for b.Loop() {
			if _, ok := mergePatch(old, cur); !ok {
				b.Fatal("no patch")
			}
		}
	})
}

// TestMergePatchesReverseOnly: a change no forward patch gives back
// exactly (a member added before kept ones) keeps its reverse patch,
// which gives back the older bytes; the others keep both or neither.
func TestMergePatchesReverseOnly(t *testing.T) {
	pod := string(benchdata.Pod("c1", 7, 1))
	cases := []struct {
		name, old, cur string
		fwd, rev       bool
	}{
		{"value changed", pod, strings.Replace(pod, `"tier":"`, `"tier":"x`, 1), true, true},
		{"label added last", pod, strings.Replace(pod, `"shard":"s7"`, `"shard":"s7","zzz":"x"`, 1), true, true},
		{"label added first", pod, strings.Replace(pod, `"labels":{`, `"labels":{"aaa":"x",`, 1), false, true},
		{"added first, nested", `{"m":{"l":{"b":"1"},"r":"1"},"s":"xxxxxxxxxxxxxxxxxxxxxxxx"}`, `{"m":{"l":{"a":"0","b":"1"},"r":"2"},"s":"xxxxxxxxxxxxxxxxxxxxxxxx"}`, false, true},
		{"added object holding a null", `{"a":1,"s":"xxxxxxxxxxxxxxxxxxxxxxxx"}`, `{"a":1,"b":{"c":null},"s":"xxxxxxxxxxxxxxxxxxxxxxxx"}`, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.old == tc.cur {
				t.Fatal("the case changes nothing")
			}
			fwd, rev := mergePatches([]byte(tc.old), []byte(tc.cur))
			if (fwd != nil) != tc.fwd || (rev != nil) != tc.rev {
				t.Fatalf("forward %s, reverse %s; want forward %v, reverse %v", fwd, rev, tc.fwd, tc.rev)
			}
			if rev != nil {
				if back, err := rawApplyMergePatch([]byte(tc.cur), rev); err != nil || string(back) != tc.old {
					t.Errorf("reverse %s applied: %s, %v; want %s", rev, back, err, tc.old)
				}
				// The change shown, made from the reverse patch, is the
				// change by RFC 7386.
				shown, err := forwardFromReverse([]byte(tc.cur), rev)
				if err != nil {
					t.Fatal(err)
				}
				want, err := jsonpatch.CreateMergePatch([]byte(tc.old), []byte(tc.cur))
				if err != nil {
					t.Fatal(err)
				}
				if !jsonpatch.Equal(shown, want) {
					t.Errorf("shown %s, want %s", shown, want)
				}
			}
			if fwd != nil {
				if back, err := rawApplyMergePatch([]byte(tc.old), fwd); err != nil || string(back) != tc.cur {
					t.Errorf("forward %s applied: %s, %v", fwd, back, err)
				}
			}
		})
	}
}
