package collector

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// A list response is read item by item from the response body rather than
// whole: a page of Pods is megabytes of JSON and the collector used to
// hold up to three of them (measured: docs/benchmarks/collector.md#findings) (one being read, one ready, one being
// published), so memory grew with the page size and bigger pages, which the
// apiserver serves faster, did not fit the collector's memory budget. Now a
// page costs one window buffer that grows only to the largest single item.
//
// The apiserver writes a list's "metadata" (resourceVersion, continue)
// before its "items", so the fetcher reads just the head of a response, can
// ask for the next page at once (the apiserver then builds it while this
// one is published), and hands the rest of the body on. A list whose
// metadata comes after its items still reads correctly: its items are
// streamed the same way and the continue token is known at the end of the
// body, so only the early request for the next page is lost.

// Window sizes of a listReader.
const (
	// listWindow is the initial window: a few dozen typical objects, so a
	// read is a useful amount of work and a compaction moves at most one
	// partial object per window.
	listWindow = 64 << 10
	// minFree is the least free space a read is given; a window with less
	// free space after compaction doubles.
	minFree = 16 << 10
)

// listState is where a listReader is in the response.
type listState uint8

const (
	stateHead  listState = iota // before the items array
	stateItems                  // inside the items array
	stateTail                   // after the items array
	stateDone                   // the response object ended
)

// listMeta is what the collector reads of a list's metadata.
type listMeta struct {
	resourceVersion, continueToken string
}

// listReader reads one list response ({"metadata":{...},"items":[...]}), or
// one Table ({"metadata":{...},"columnDefinitions":[...],"rows":[...]}).
// readHead reads up to the first item; next returns the items one at a time;
// after the last one, metadata holds the list's metadata wherever in the
// object it was. An item returned by next is a sub-slice of the window and is
// valid only until the next call: callers must copy what they keep.
type listReader struct {
	r   io.Reader
	buf []byte // buf[off:] is read from r and not yet consumed
	off int
	// discarded counts bytes dropped from the front of buf by compaction,
	// so errors can name the offset in the response.
	discarded int64
	eof       bool
	rerr      error

	state      listState
	firstKey   bool // no member read yet in the top-level object
	firstItem  bool // no item read yet in the items array
	items      int  // items returned so far
	metaSeen   bool
	itemsSeen  bool
	meta       listMeta
	itemsFirst bool // the items array came before the metadata
	// rows: the response is a Table (meta.k8s.io/v1), whose "rows" are
	// the items, each {"cells":[...],"object":{...}}; columns is its
	// "columnDefinitions" (a copy), when it had them.
	rows    bool
	columns []byte
}

// newListReader reads r using buf (len 0, any capacity) as its window.
func newListReader(r io.Reader, buf []byte) *listReader {
	if cap(buf) < listWindow {
		buf = make([]byte, 0, listWindow)
	}
	return &listReader{r: r, buf: buf[:0], firstKey: true}
}

// window returns the window buffer for reuse by another listReader.
func (l *listReader) window() []byte { return l.buf[:0] }

// headKnown reports whether the list metadata was read with the head, i.e.
// the continue token is known before the items are read.
func (l *listReader) headKnown() bool { return l.metaSeen && !l.itemsFirst }

// pos is the offset in the response of buf[i], for error messages.
func (l *listReader) pos(i int) int64 { return l.discarded + int64(i) }

func (l *listReader) bad(format string, args ...any) error {
	return fmt.Errorf("%w: list response: %s", ErrBadJSON, fmt.Sprintf(format, args...))
}

// errTruncated is wrapped when the body ends inside the JSON document.
var errTruncated = errors.New("truncated")

// fill reads more of the body, compacting the window (dropping consumed
// bytes, keeping an unfinished value) and doubling it when too little is
// free. It returns an error when nothing more can be read: the body ended
// inside the document, or the read failed.
func (l *listReader) fill() error {
	if l.rerr != nil {
		return l.rerr
	}
	if l.eof {
		return fmt.Errorf("%w: list response %w after %d bytes (%d items read)", ErrBadJSON, errTruncated, l.pos(len(l.buf)), l.items)
	}
	if l.off > 0 {
		n := copy(l.buf[:cap(l.buf)], l.buf[l.off:])
		l.discarded += int64(l.off)
		l.buf, l.off = l.buf[:n], 0
	}
	if cap(l.buf)-len(l.buf) < minFree {
		nb := make([]byte, len(l.buf), 2*cap(l.buf))
		copy(nb, l.buf)
		l.buf = nb
	}
	// A reader may return 0, nil; give up after as many tries as bufio.
	for range 100 {
		n, err := l.r.Read(l.buf[len(l.buf):cap(l.buf)])
		l.buf = l.buf[:len(l.buf)+n]
		switch {
		case err == io.EOF:
			l.eof = true
		case err != nil:
			l.rerr = fmt.Errorf("read list response after %d bytes: %w", l.pos(len(l.buf)), err)
			if n == 0 {
				return l.rerr
			}
		}
		if n > 0 {
			return nil
		}
		if l.eof {
			return l.fill() // the truncation error
		}
	}
	l.rerr = fmt.Errorf("read list response: %w", io.ErrNoProgress)
	return l.rerr
}

// peek skips white space and returns the next byte without consuming it.
func (l *listReader) peek() (byte, error) {
	for {
		l.off = rawjson.SkipSpace(l.buf, l.off)
		if l.off < len(l.buf) {
			return l.buf[l.off], nil
		}
		if err := l.fill(); err != nil {
			return 0, err
		}
	}
}

// value reads the complete JSON value starting at buf[off] (no leading
// space), reading more of the body as needed; it returns its span in buf,
// valid until the next fill, and consumes it.
func (l *listReader) value() (vs, ve int, err error) {
	var sc valueScan
	for {
		end, done, err := sc.scan(l.buf[l.off:])
		if err != nil {
			return 0, 0, l.bad("%v at offset %d", err, l.pos(l.off))
		}
		if done {
			vs, ve = l.off, l.off+end
			l.off = ve
			return vs, ve, nil
		}
		if err := l.fill(); err != nil { // keeps buf[off:], moves it to 0
			return 0, 0, err
		}
	}
}

// readHead reads the response up to its first item (or its end, for a list
// whose items are null or absent).
func (l *listReader) readHead() error {
	c, err := l.peek()
	if err != nil {
		return err
	}
	if c != '{' {
		return l.bad("object expected at offset %d, got %q", l.pos(l.off), c)
	}
	l.off++
	return l.members()
}

// members reads top-level members until the items array opens (state
// items) or the object ends (state done).
func (l *listReader) members() error {
	for {
		c, err := l.peek()
		if err != nil {
			return err
		}
		if c == '}' {
			l.off++
			l.state = stateDone
			return l.end()
		}
		if !l.firstKey {
			if c != ',' {
				return l.bad("',' or '}' expected after a member at offset %d, got %q", l.pos(l.off), c)
			}
			l.off++
			if c, err = l.peek(); err != nil {
				return err
			}
		}
		l.firstKey = false
		if c != '"' {
			return l.bad("member name expected at offset %d, got %q", l.pos(l.off), c)
		}
		ks, ke, err := l.value()
		if err != nil {
			return err
		}
		key := string(l.buf[ks+1 : ke-1]) // copied before the next fill moves it
		if c, err = l.peek(); err != nil {
			return err
		}
		if c != ':' {
			return l.bad("':' expected after %q at offset %d, got %q", key, l.pos(l.off), c)
		}
		l.off++
		if c, err = l.peek(); err != nil {
			return err
		}
		switch key {
		case "items", "rows":
			if l.itemsSeen {
				return l.bad(`"items" or "rows" appears twice`)
			}
			l.itemsSeen = true
			l.rows = key == "rows"
			if c == '[' {
				l.off++
				l.state, l.firstItem = stateItems, true
				l.itemsFirst = !l.metaSeen
				return nil
			}
			vs, ve, err := l.value()
			if err != nil {
				return err
			}
			if string(l.buf[vs:ve]) != "null" {
				return l.bad(`%q is not an array at offset %d`, key, l.pos(vs))
			}
		case "columnDefinitions":
			vs, ve, err := l.value()
			if err != nil {
				return err
			}
			l.columns = append(l.columns[:0], l.buf[vs:ve]...)
		case "metadata":
			vs, ve, err := l.value()
			if err != nil {
				return err
			}
			if err := l.readMeta(l.buf[vs:ve]); err != nil {
				return err
			}
		default:
			if _, _, err := l.value(); err != nil {
				return err
			}
		}
	}
}

func (l *listReader) readMeta(v []byte) error {
	var mbuf [8]rawjson.Member
	md, _, err := rawjson.Members(v, 0, mbuf[:0])
	if err != nil {
		return l.bad("metadata: %v", err)
	}
	l.metaSeen = true
	for _, g := range md {
		switch string(g.Key) {
		case "resourceVersion":
			l.meta.resourceVersion, err = rawjson.String(v[g.ValueStart:g.ValueEnd])
		case "continue":
			l.meta.continueToken, err = rawjson.String(v[g.ValueStart:g.ValueEnd])
		}
		if err != nil {
			return l.bad("metadata.%s: %v", g.Key, err)
		}
	}
	return nil
}

// end checks that nothing but white space follows the response object.
func (l *listReader) end() error {
	for {
		l.off = rawjson.SkipSpace(l.buf, l.off)
		if l.off < len(l.buf) {
			return l.bad("data after the list object at offset %d", l.pos(l.off))
		}
		if l.eof {
			return nil
		}
		if err := l.fill(); err != nil {
			if l.eof && l.rerr == nil {
				return nil // the body ended where the object did
			}
			return err
		}
	}
}

// next returns the next item, or ok false after the last one, by which time
// the whole response has been read and checked. The item is valid until the
// next call.
func (l *listReader) next() (item []byte, ok bool, err error) {
	if l.state != stateItems {
		if l.state == stateHead {
			return nil, false, errors.New("listReader: next before readHead")
		}
		return nil, false, nil
	}
	c, err := l.peek()
	if err != nil {
		return nil, false, err
	}
	if c == ']' {
		l.off++
		l.state = stateTail
		return nil, false, l.members()
	}
	if !l.firstItem {
		if c != ',' {
			return nil, false, l.bad("',' or ']' expected after item %d at offset %d, got %q", l.items, l.pos(l.off), c)
		}
		l.off++
		if _, err = l.peek(); err != nil {
			return nil, false, err
		}
	}
	l.firstItem = false
	vs, ve, err := l.value()
	if err != nil {
		return nil, false, err
	}
	l.items++
	return l.buf[vs:ve], true, nil
}

// valueScan finds the end of one JSON value across reads: it keeps where
// it stopped, so a value that arrives in many reads is scanned once.
type valueScan struct {
	pos     int // next byte to look at, relative to the value's start
	depth   int // open objects and arrays
	started bool
	inStr   bool
	scalar  bool
}

// scan continues over b (the value's bytes so far, from its first byte) and
// returns the value's length once it is complete. It only finds where an
// item ends, by depth and strings, across reads; readMeta checks the item
// whole with rawjson, which is strict, before anything is published.
func (s *valueScan) scan(b []byte) (int, bool, error) {
	i := s.pos
	if !s.started {
		if len(b) == 0 {
			return 0, false, nil
		}
		s.started = true
		switch b[0] {
		case '"':
			s.inStr = true
		case '{', '[':
			s.depth = 1
		case ',', '}', ']', ':':
			return 0, false, fmt.Errorf("value expected, got %q", b[0])
		default:
			s.scalar = true
		}
		i = 1
	}
	if s.scalar {
		for ; i < len(b); i++ {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i, true, nil
			}
		}
		s.pos = i
		return 0, false, nil
	}
	for {
		if s.inStr {
			k := bytes.IndexByte(b[i:], '"')
			if k < 0 {
				s.pos = len(b)
				return 0, false, nil
			}
			q := i + k
			i = q + 1
			// A quote preceded by an odd number of backslashes is
			// escaped. The value's first byte is a quote or a bracket, so
			// the count stops inside the value.
			n := 0
			for p := q - 1; p >= 0 && b[p] == '\\'; p-- {
				n++
			}
			if n%2 == 1 {
				continue
			}
			s.inStr = false
			if s.depth == 0 {
				return i, true, nil
			}
		}
		// Outside strings: brackets until the next quote.
		for ; i < len(b) && !s.inStr; i++ {
			switch b[i] {
			case '"':
				s.inStr = true
			case '{', '[':
				s.depth++
			case '}', ']':
				s.depth--
				if s.depth == 0 {
					return i + 1, true, nil
				}
			}
		}
		if !s.inStr {
			s.pos = i
			return 0, false, nil
		}
	}
}
