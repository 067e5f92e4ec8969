package badger

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageRecycler writes back the value log's freshly written pages and drops
// them from the page cache, once each, a little behind Badger's writer.
//
// Why: Badger appends object JSON to the value log through a shared mmap of
// a sparse file, so every new page is a page-cache page the kernel must
// find, zero and map on the writer goroutine, the one Badger's throughput
// hangs on. Left alone, the value log's pages stay cached until memory runs
// short: the page cache grows with everything ever written, fresh pages
// come from free memory, and on a VM that returns free memory to its host
// (free page reporting) each of them costs about ten times as much
// (measured: docs/benchmarks/materializer.md#2026-11-29-evening-the-page-cache-and-the-skiplist--at-the-targets-without-margin).
// Under a memory limit the kernel recycles them and the
// writer gets faster; recycling them here does the same without one, and
// moves the writeback Badger otherwise does synchronously (msync when a
// value-log file is rotated) off the writer.
//
// Only the write stream is dropped, once: pages read back later (an
// update's previous labels, a Get) are left to the kernel's LRU.
type pageRecycler struct {
	dir string
	// keep is how far behind the newest resident page of the value log
	// being written nothing is touched: the writer's current pages and
	// the kernel's readahead beyond them.
	keep int64
	// done is, per value-log file, the offset up to which pages were
	// written back and dropped.
	done map[string]int64
	fds  map[string]*os.File
	vec  []byte
	page int64
	// br and fields are each pass's reader of /proc/self/maps and a
	// line's fields, kept: a new 64 KiB reader and a field slice per
	// line every 100 ms were garbage an idle hub made at ~0.7 MB/s, which
	// grew its heap to the collector's goal beside whatever it served
	// (docs/benchmarks/query.md).
	br     *bufio.Reader
	fields [][]byte
}

func newPageRecycler(dir string) *pageRecycler {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return &pageRecycler{dir: filepath.Clean(abs), keep: 32 << 20, done: map[string]int64{}, fds: map[string]*os.File{}, page: int64(os.Getpagesize())}
}

// Run recycles every interval until ctx ends. Errors are not fatal to the
// store (the cost is only speed and page cache), so they are returned only
// for the first pass, which shows whether recycling works here at all.
func (r *pageRecycler) Run(ctx context.Context, interval time.Duration) error {
	defer r.close()
	if err := r.pass(); err != nil {
		return err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_ = r.pass()
		}
	}
}

func (r *pageRecycler) close() {
	for p, f := range r.fds {
		f.Close()
		delete(r.fds, p)
	}
}

type mapping struct {
	path       string
	start, end uintptr
}

// scanChunk is how much of a mapping one mincore call looks at. The
// scan starts where the last pass stopped and ends after scanGap chunks
// with nothing resident, so a pass costs in proportion to what was written
// since the last one, not to the size of the mapping (512 MiB per file,
// most of it beyond the write offset). The gap lets it step over pages
// the kernel reclaimed itself under memory pressure.
const (
	scanChunk = 2 << 20
	scanGap   = 8
)

// lastResident is the end of the resident run of m's pages that starts at
// or after from: Badger writes each value-log file front to back, so what
// was written since the last pass (and the kernel's readahead past it) is
// resident and the rest of the file is not.
func (r *pageRecycler) lastResident(m mapping, from int64) (int64, error) {
	size := int64(m.end - m.start)
	if cap(r.vec) < scanChunk/int(r.page) {
		r.vec = make([]byte, scanChunk/int(r.page))
	}
	last, empty := from, 0
	for off := from; off < size && empty < scanGap; off += scanChunk {
		n := min(size-off, scanChunk)
		vec := r.vec[:(n+r.page-1)/r.page]
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, m.start+uintptr(off), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			return 0, fmt.Errorf("mincore %s: %w", m.path, e)
		}
		empty++
		for i := len(vec) - 1; i >= 0; i-- {
			if vec[i]&1 != 0 {
				last, empty = off+int64(i+1)*r.page, 0
				break
			}
		}
	}
	return last, nil
}

// vlogMappings are this process's mappings of value-log files in r.dir,
// oldest file first (Badger numbers them in order).
func (r *pageRecycler) vlogMappings() ([]mapping, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	if r.br == nil {
		r.br = bufio.NewReaderSize(f, 64<<10)
	} else {
		r.br.Reset(f)
	}
	defer r.br.Reset(nil) // holds no closed file between passes
	for {
		line, err := r.br.ReadSlice('\n')
		if m, ok := r.parseMapping(line); ok {
			out = append(out, m)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b mapping) int { return strings.Compare(a.path, b.path) })
	return out, nil
}

// parseMapping reads one /proc/self/maps line:
// "start-end perms offset dev inode path", where the path is the rest of
// the line (it may hold spaces) and a deleted file's ends in " (deleted)".
func (r *pageRecycler) parseMapping(line []byte) (mapping, bool) {
	r.fields = appendFields(r.fields[:0], line)
	fields := r.fields
	if len(fields) < 6 || len(fields[1]) < 4 || fields[1][3] != 's' {
		return mapping{}, false
	}
	if off, err := strconv.ParseUint(string(fields[2]), 16, 64); err != nil || off != 0 {
		return mapping{}, false
	}
	rest := line
	for range 5 {
		rest = bytes.TrimLeft(rest, " \t")
		rest = rest[bytes.IndexAny(rest, " \t"):]
	}
	path := string(bytes.TrimSpace(rest))
	if strings.HasSuffix(path, " (deleted)") || !strings.HasSuffix(path, ".vlog") || filepath.Dir(path) != r.dir {
		return mapping{}, false
	}
	lo, hi, ok := bytes.Cut(fields[0], []byte{'-'})
	if !ok {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(lo), 16, 64)
	end, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return mapping{}, false
	}
	return mapping{path: path, start: uintptr(start), end: uintptr(end)}, true
}

// appendFields appends the fields of line separated by ASCII spaces and
// tabs (the separators of /proc/self/maps) to dst.
func appendFields(dst [][]byte, line []byte) [][]byte {
	start := -1
	for i, c := range line {
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' {
			if start >= 0 {
				dst = append(dst, line[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		dst = append(dst, line[start:])
	}
	return dst
}

func (r *pageRecycler) pass() error {
	ms, err := r.vlogMappings()
	if err != nil {
		return fmt.Errorf("read mappings: %w", err)
	}
	live := map[string]bool{}
	var firstErr error
	for i, m := range ms {
		live[m.path] = true
		if err := r.recycle(m, i == len(ms)-1); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for p, f := range r.fds {
		if !live[p] {
			f.Close()
			delete(r.fds, p)
			delete(r.done, p)
		}
	}
	return firstErr
}

// recycle writes back and drops the pages of m from where the last pass
// stopped to the newest resident page (less keep when newest: that file is
// still being written).
func (r *pageRecycler) recycle(m mapping, newest bool) error {
	from := r.done[m.path]
	last, err := r.lastResident(m, from)
	if err != nil {
		return err
	}
	upto := last
	if newest {
		upto -= r.keep
	}
	if upto <= from {
		return nil
	}
	f := r.fds[m.path]
	if f == nil {
		var err error
		if f, err = os.Open(m.path); errors.Is(err, fs.ErrNotExist) {
			return nil // deleted since the mappings were read
		} else if err != nil {
			return err
		}
		r.fds[m.path] = f
	}
	if err := unix.SyncFileRange(int(f.Fd()), from, upto-from, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER); err != nil {
		return fmt.Errorf("write back %s: %w", m.path, err)
	}
	// MADV_PAGEOUT only hints: if Badger unmapped the range meanwhile it
	// fails or touches pages of whatever is mapped there now, which stay
	// correct (reclaim never loses data).
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.start+uintptr(from), uintptr(upto-from), unix.MADV_PAGEOUT); e != 0 {
		return fmt.Errorf("drop pages of %s: %w", m.path, e)
	}
	r.done[m.path] = upto
	return nil
}

// recycleInterval is how often the recycler looks at the value log: often
// enough that at a full-speed apply each look finds only a few megabytes
// to drop (docs/benchmarks/materializer.md#figures-behind-code-comments).
const recycleInterval = 100 * time.Millisecond

// runRecycler runs a pageRecycler for the store in dir until ctx ends.
// Where it cannot work (no /proc, a kernel without MADV_PAGEOUT) it logs
// why once and stops; the store works the same, only with the page cache
// the kernel keeps.
func runRecycler(ctx context.Context, dir string, log *slog.Logger) {
	if err := newPageRecycler(dir).Run(ctx, recycleInterval); err != nil {
		log.Warn("value-log page recycling off", "dir", dir, "err", err)
	}
}
