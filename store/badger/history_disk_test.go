package badger

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/fleetview/fleetview/internal/feed"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// historyFamilies are the key families the history writes (doc.go).
const historyFamilies = "rftxJHnhgabe"

// TestHistoryDiskBytesPerChange measures what a one-label change of a
// benchdata Pod costs on disk: the LSM tables' and the value log's bytes
// once the memtables are flushed and every level is merged into one (so
// superseded versions are gone), with history on against off in the same
// run (off: the object's own update, not history), and beside it the
// logical bytes of each family the history counts
// (docs/benchmarks/history.md).
func TestHistoryDiskBytesPerChange(t *testing.T) {
	// 256 changes of each Pod: two whole chains of 127 one-label
	// changes (chainCost), so their whole states are in the figure.
	const pods, changes = 100, 256
	none := options.None
	cases := []struct {
		name string
		// compression replaces the store's choice (lsmCompression:
		// ZSTD with history, none without) when set.
		compression *options.CompressionType
		// limit: the history's bytes on disk (LSM and value log) per
		// change, at most; 0: printed only.
		limit int64
	}{
		// 288 measured 2026-12-07 22:00 (LSM 273, value log 15: a whole
		// state every 128th revision, chainCost); 396 with one every 16th
		// (271 + 125; 404 at 400 Pods x 32 changes).
		{"no compression", &none, 0},
		// 97 measured 2026-12-07 22:00 (LSM 82, value log 15); 209 with a
		// whole state every 16th revision (84 + 125).
		{"the store's (ZSTD with history)", nil, 105},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			off := measureDisk(t, false, tc.compression, pods, changes)
			on := measureDisk(t, true, tc.compression, pods, changes)
			n := int64(pods * changes)
			per := func(d diskBytes) (lsm, vlog int64) {
				return (d.changed.lsm - d.added.lsm) / n, (d.changed.vlog - d.added.vlog) / n
			}
			offL, offV := per(off)
			onL, onV := per(on)
			// Without history an update only replaces keys: once settled,
			// the LSM holds no more than before it. More means superseded
			// versions survived the settle, and every figure would count
			// them.
			if offL > 4 {
				t.Fatalf("without history the LSM grew by %d B per update once settled, want about 0: superseded versions kept", offL)
			}
			t.Logf("%d Pods x %d one-label changes, on disk per change: history off LSM %d + value log %d = %d B; on LSM %d + value log %d = %d B",
				pods, changes, offL, offV, offL+offV, onL, onV, onL+onV)
			t.Logf("the whole store after the changes: history off LSM %d B, value log %d B; on LSM %d B, value log %d B",
				off.changed.lsm, off.changed.vlog, on.changed.lsm, on.changed.vlog)
			hist := onL + onV - offL - offV
			t.Logf("the history's share: %d B per change on disk (LSM %d, value log %d); after the adds, per Pod: history off %d B, on %d B",
				hist, onL-offL, onV-offV, (off.added.lsm+off.added.vlog)/pods, (on.added.lsm+on.added.vlog)/pods)
			logical := int64(0)
			for _, f := range sortedFamilies(on.families) {
				d := on.families[f].minus(on.addFamilies[f])
				if d.bytes/n == 0 {
					continue
				}
				if strings.IndexByte(historyFamilies, f) >= 0 {
					logical += d.bytes
				}
				t.Logf("  %c/: %6.2f entries, %4d B logical per change (keys %d, values %d)", f,
					float64(d.entries)/float64(n), d.bytes/n, d.keys/n, (d.bytes-d.keys)/n)
			}
			t.Logf("logical bytes of the history families per change: %d", logical/n)
			if tc.limit > 0 && hist > tc.limit {
				t.Errorf("%d bytes of history on disk per change, want at most %d", hist, tc.limit)
			}
		})
	}
}

// diskSize is what a settled store holds: its .sst files' bytes and its
// value log's.
type diskSize struct{ lsm, vlog int64 }

type famBytes struct{ entries, keys, bytes int64 }

func (a famBytes) minus(b famBytes) famBytes {
	return famBytes{a.entries - b.entries, a.keys - b.keys, a.bytes - b.bytes}
}

// diskBytes is a measured store after its adds and after its changes.
type diskBytes struct {
	added, changed        diskSize
	addFamilies, families map[byte]famBytes
}

// measureDisk adds pods benchdata Pods to a fresh store (keeping history
// when history), then changes each Pod's app label changes times, one
// batch per round, and settles the store after the adds and after the
// changes (settleStore).
func measureDisk(t *testing.T, history bool, comp *options.CompressionType, pods, changes int) diskBytes {
	t.Helper()
	o := Options{Dir: t.TempDir(), ValueLogGCInterval: -1, compression: comp}
	if history {
		o.History = HistoryOptions{Retention: 24 * time.Hour, MaxBytes: 1 << 40, RetainInterval: -1}
	}
	var d diskBytes
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	evs := make([]feed.Event, 0, pods)
	for i := range pods {
		evs = append(evs, feed.Event{Seq: uint64(i + 1), Event: benchdata.Event("c1", i, 1)})
	}
	if err := s.Apply(ctx, "c1", evs, uint64(pods)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	d.added, d.addFamilies = settleStore(t, o)
	if s, err = Open(o); err != nil {
		t.Fatal(err)
	}
	seq := uint64(pods)
	for c := range changes {
		evs, seq = labelRound(evs[:0], pods, c, seq)
		if err := s.Apply(ctx, "c1", evs, seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	d.changed, d.families = settleStore(t, o)
	return d
}

// settleStore merges a closed store's tables into one level, so every
// superseded version is dropped and the tables hold what a long-running
// store's compaction leaves, and returns its bytes on disk and its
// entries' logical bytes by family. Closing the store flushed its
// memtables into level 0; a close with CompactL0OnClose merges level 0
// into the levels below, and Flatten those into one.
func settleStore(t *testing.T, o Options) (diskSize, map[byte]famBytes) {
	t.Helper()
	db, err := bdg.Open(badgerOptions(o).WithCompactL0OnClose(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = bdg.Open(badgerOptions(o)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	if err := db.Flatten(2); err != nil {
		t.Fatal(err)
	}
	levels := map[int]bool{}
	for _, tb := range db.Tables() {
		levels[tb.Level] = true
	}
	if len(levels) > 1 {
		t.Fatalf("the settled store's tables are on %d levels, want one", len(levels))
	}
	fams := map[byte]famBytes{}
	if err := db.View(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			f := fams[k[0]]
			f.entries++
			f.keys += int64(len(k))
			f.bytes += int64(len(k)) + it.Item().ValueSize()
			fams[k[0]] = f
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return dirBytes(t, o.Dir), fams
}

// dirBytes sums a store directory's table and value-log files.
func dirBytes(t *testing.T, dir string) diskSize {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var d diskSize
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(e.Name()) {
		case ".sst":
			d.lsm += fi.Size()
		case ".vlog":
			// The newest value-log file is made sparse at twice
			// ValueLogFileSize when opened: count what it holds.
			d.vlog += min(fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks*512)
		}
	}
	return d
}

func sortedFamilies(m map[byte]famBytes) []byte {
	var fs []byte
	for f := range m {
		fs = append(fs, f)
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i] < fs[j] })
	return fs
}
