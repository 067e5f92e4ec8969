package badger

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestParseMapping(t *testing.T) {
	r := newPageRecycler("/var/lib/fleetview/badger")
	for _, tc := range []struct {
		line string
		want mapping
		ok   bool
	}{
		{"7f0000000000-7f0020000000 rw-s 00000000 fd:01 1234 /var/lib/fleetview/badger/000001.vlog\n", mapping{"/var/lib/fleetview/badger/000001.vlog", 0x7f0000000000, 0x7f0020000000}, true},
		{"7f0000000000-7f0020000000 r--s 00000000 fd:01 1234 /var/lib/fleetview/badger/000002.vlog", mapping{"/var/lib/fleetview/badger/000002.vlog", 0x7f0000000000, 0x7f0020000000}, true},
		// Another store's value log, a private mapping, a mapping not
		// from the start of the file, a memtable, an anonymous mapping.
		{"7f0000000000-7f0020000000 rw-s 00000000 fd:01 1234 /var/lib/fleetview/badger.new/000001.vlog", mapping{}, false},
		{"7f0000000000-7f0020000000 rw-p 00000000 fd:01 1234 /var/lib/fleetview/badger/000001.vlog", mapping{}, false},
		{"7f0000000000-7f0020000000 rw-s 00001000 fd:01 1234 /var/lib/fleetview/badger/000001.vlog", mapping{}, false},
		{"7f0000000000-7f0020000000 rw-s 00000000 fd:01 1234 /var/lib/fleetview/badger/00001.mem", mapping{}, false},
		{"7f0000000000-7f0020000000 rw-p 00000000 00:00 0", mapping{}, false},
		// A deleted value-log file.
		{"7f0000000000-7f0020000000 rw-s 00000000 fd:01 1234 /var/lib/fleetview/badger/000003.vlog (deleted)", mapping{}, false},
		// Malformed address ranges.
		{"7f0020000000-7f0000000000 rw-s 00000000 fd:01 1234 /var/lib/fleetview/badger/000001.vlog", mapping{}, false},
		{"zz-7f0000000000 rw-s 00000000 fd:01 1234 /var/lib/fleetview/badger/000001.vlog", mapping{}, false},
		{"7f0000000000 rw-s 00000000 fd:01 1234 /var/lib/fleetview/badger/000001.vlog", mapping{}, false},
		{"", mapping{}, false},
	} {
		got, ok := r.parseMapping([]byte(tc.line))
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseMapping(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseMappingPathWithSpaces(t *testing.T) {
	r := newPageRecycler("/var/lib/fleet view/badger")
	line := "7f0000000000-7f0020000000 rw-s 00000000 fd:01 1234   /var/lib/fleet view/badger/000001.vlog\n"
	want := mapping{"/var/lib/fleet view/badger/000001.vlog", 0x7f0000000000, 0x7f0020000000}
	if got, ok := r.parseMapping([]byte(line)); !ok || got != want {
		t.Errorf("parseMapping(%q) = %+v, %v; want %+v, true", line, got, ok, want)
	}
}

// resident counts the pages of [start, start+n) in the page cache.
func resident(t *testing.T, start uintptr, n int64) (in, all int) {
	t.Helper()
	page := int64(unix.Getpagesize())
	vec := make([]byte, (n+page-1)/page)
	if len(vec) == 0 {
		return 0, 0
	}
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, start, uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	for _, v := range vec {
		if v&1 != 0 {
			in++
		}
	}
	return in, len(vec)
}

// TestRecyclerDropsWrittenValueLog writes ~65 MB of Pods (~3.3 KB each) into a real store,
// has the recycler drop what was written, and checks that the pages are out
// of the page cache and that every key and value reads back the same.
func TestRecyclerDropsWrittenValueLog(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, KeepPageCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var seq uint64
	applyPods(t, s, 20000, 1, 1000, &seq)
	before := dump(t, s)

	// The default keep (32 MB behind the newest resident page, which
	// the kernel's readahead puts past the write offset): of ~65 MB
	// written, at least 25 MB are dropped.
	r := newPageRecycler(dir)
	defer r.close()
	if err := r.pass(); err != nil {
		t.Fatal(err)
	}
	ms, err := r.vlogMappings()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatalf("no value-log mapping of %s in /proc/self/maps", dir)
	}
	var dropped int64
	for _, m := range ms {
		if filepath.Dir(m.path) != dir {
			t.Errorf("mapping %s is not in %s", m.path, dir)
		}
		done := r.done[m.path]
		dropped += done
		if in, all := resident(t, m.start, done); in*100 > all {
			t.Errorf("%s: %d of the %d recycled pages still in the page cache", m.path, in, all)

		}
	}
	if want := int64(25 << 20); dropped < want {
		t.Errorf("recycled %d bytes of value log, want at least %d", dropped, want)
	}
	// Nothing new was written: a second pass does nothing.
	doneBefore := fmt.Sprint(r.done)
	if err := r.pass(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r.done); got != doneBefore {
		t.Errorf("second pass moved on from %s to %s", doneBefore, got)
	}
	if after := dump(t, s); after != before {
		t.Error("store contents differ after recycling its value log")
	}
}

// residentShare is the share of the first n bytes of dir's oldest
// value-log file that is in the page cache.
func residentShare(t *testing.T, dir string, n int64) float64 {
	t.Helper()
	ms, err := newPageRecycler(dir).vlogMappings()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatalf("no value-log mapping of %s", dir)
	}
	in, all := resident(t, ms[0].start, n)
	return float64(in) / float64(all)
}

// TestStoreRecyclesUnlessKeepPageCache runs two stores side by side, one
// with the default background recycler and one with KeepPageCache, writes
// ~65 MB of Pods into each, and waits for the first to drop the oldest
// 16 MB of its value log; by then the second must still hold them.
func TestStoreRecyclesUnlessKeepPageCache(t *testing.T) {
	stores := map[bool]string{}
	for _, keep := range []bool{false, true} {
		dir := t.TempDir()
		s, err := Open(Options{Dir: dir, KeepPageCache: keep})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var seq uint64
		applyPods(t, s, 20000, 1, 1000, &seq)
		stores[keep] = dir
	}
	const oldest = 16 << 20
	deadline := time.Now().Add(20 * time.Second)
	for residentShare(t, stores[false], oldest) > 0.01 {
		if time.Now().After(deadline) {
			t.Fatalf("the default store still has %.0f%% of its oldest value-log pages cached after 20 s", 100*residentShare(t, stores[false], oldest))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if share := residentShare(t, stores[true], oldest); share < 0.99 {
		t.Errorf("the KeepPageCache store has only %.0f%% of its oldest value-log pages cached", 100*share)
	}
}

// TestRecyclerPassAllocatesLittle: reading this process's mappings, as
// every pass does each 100 ms, reuses the reader and the fields of the
// last pass: a new 64 KiB reader and a field slice per line were garbage
// an idle hub made at ~0.7 MB/s. The mappings found are the same.
func TestRecyclerPassAllocatesLittle(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fill(t, s, "c1", 0, 50, 0)
	r := newPageRecycler(dir)
	want, err := r.vlogMappings()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("no value-log mapping of the store")
	}
	var got []mapping
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	const passes = 20
	allocs := testing.AllocsPerRun(passes, func() {
		if got, err = r.vlogMappings(); err != nil {
			t.Fatal(err)
		}
	})
	runtime.ReadMemStats(&ms)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("mappings %v, want %v", got, want)
	}
	// The mappings, their paths and the file: a few allocations, not one
	// per line of /proc/self/maps.
	if perPass := (ms.TotalAlloc - before) / (passes + 1); allocs > 32 || perPass > 16<<10 {
		t.Errorf("a pass allocates %.0f times, %d bytes; want at most 32 and 16 KiB", allocs, perPass)
	}
}
