package badger

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func vlogFiles(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// TestValueLogGCReclaimsSupersededObjects writes 500 Pods eight times over
// into 1 MiB value-log files, so seven eighths of the value log is old
// versions, and checks that the GC deletes files and that the store reads
// back the same before and after.
func TestValueLogGCReclaimsSupersededObjects(t *testing.T) {
	dir := t.TempDir()
	// Each round is flushed to a level-0 table when the store closes;
	// with l0Tables 1, compaction then drops the previous round's
	// versions, which is how Badger learns how much of each value-log
	// file is superseded.
	o := Options{Dir: dir, ValueLogFileSize: 1 << 20, ValueLogGCInterval: -1, l0Tables: 1}
	const pods, rounds, batch = 500, 8, 100
	var seq uint64
	for rv := 1; rv <= rounds; rv++ {
		s, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		applyPods(t, s, pods, rv, batch, &seq)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before, filesBefore := dump(t, s), vlogFiles(t, dir)
	var n int
	for deadline := time.Now().Add(30 * time.Second); n == 0 && time.Now().Before(deadline); {
		// Compaction runs in the background: wait for it to have found
		// something to reclaim.
		if n, err = s.collectValueLog(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	filesAfter := vlogFiles(t, dir)
	t.Logf("value-log files: %d before, %d rewritten, %d after", filesBefore, n, filesAfter)
	if n == 0 || filesAfter >= filesBefore {
		t.Errorf("GC rewrote %d files; value-log files %d -> %d, want fewer", n, filesBefore, filesAfter)
	}
	if after := dump(t, s); after != before {
		t.Error("store contents differ after the value-log GC")
	}
}
