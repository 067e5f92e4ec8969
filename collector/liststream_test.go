package collector

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// listResult is everything a listReader reads from one response.
type listResult struct {
	items     []string
	rv, cont  string
	headKnown bool
	headCont  string // the continue token as known right after readHead
}

func readAllList(r io.Reader, buf []byte) (listResult, *listReader, error) {
	var res listResult
	lr := newListReader(r, buf)
	if err := lr.readHead(); err != nil {
		return res, lr, err
	}
	res.headKnown = lr.headKnown()
	if res.headKnown {
		res.headCont = lr.meta.continueToken
	}
	for {
		item, ok, err := lr.next()
		if err != nil {
			return res, lr, err
		}
		if !ok {
			break
		}
		res.items = append(res.items, string(item)) // copied: item is valid until next
	}
	res.rv, res.cont = lr.meta.resourceVersion, lr.meta.continueToken
	return res, lr, nil
}

// splitReader returns data in two reads split at p.
type splitReader struct {
	data []byte
	p    int
	n    int
}

func (r *splitReader) Read(b []byte) (int, error) {
	if r.n >= len(r.data) {
		return 0, io.EOF
	}
	end := len(r.data)
	if r.n < r.p {
		end = r.p
	}
	n := copy(b, r.data[r.n:end])
	r.n += n
	return n, nil
}

// chunkReader returns data in reads of the given sizes in turn (a size 0 is
// a read that returns nothing and no error), the last one with io.EOF.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(b []byte) (int, error) {
	size := r.sizes[r.i%len(r.sizes)]
	r.i++
	n := copy(b, r.data[:min(size, len(r.data))])
	r.data = r.data[n:]
	if len(r.data) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// readers returns every way the tests deliver one body: whole, one byte at
// a time, odd-size chunks with empty reads in between, data and EOF
// together, and split in two at every possible offset.
func readers(body string) map[string]func() io.Reader {
	b := []byte(body)
	rs := map[string]func() io.Reader{
		"whole":        func() io.Reader { return bytes.NewReader(b) },
		"one byte":     func() io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) },
		"odd chunks":   func() io.Reader { return &chunkReader{data: b, sizes: []int{3, 0, 7, 1, 13, 5, 0, 2}} },
		"data and EOF": func() io.Reader { return iotest.DataErrReader(iotest.HalfReader(bytes.NewReader(b))) },
	}
	for p := 1; p < len(b); p++ {
		rs[fmt.Sprintf("split at %d", p)] = func() io.Reader { return &splitReader{data: b, p: p} }
	}
	return rs
}

func TestListReader(t *testing.T) {
	cases := []struct {
		name string
		body string
		want listResult
	}{
		{"metadata first", `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"abc"},"items":[{"a":1}, {"b":[2,"]"]}]}`,
			listResult{items: []string{`{"a":1}`, `{"b":[2,"]"]}`}, rv: "7", cont: "abc", headKnown: true, headCont: "abc"}},
		{"empty items", `{"metadata":{"resourceVersion":"8"},"items":[]}`,
			listResult{rv: "8", headKnown: true}},
		{"items null", `{"metadata":{"resourceVersion":"9"},"items":null}`,
			listResult{rv: "9", headKnown: true}},
		{"items null before metadata", `{"items":null,"metadata":{"resourceVersion":"9","continue":"n"}}`,
			listResult{rv: "9", cont: "n", headKnown: true, headCont: "n"}},
		{"no items member", `{"kind":"List","metadata":{"resourceVersion":"1"}}`,
			listResult{rv: "1", headKnown: true}},
		{"metadata after items", `{"items":[{"x":1},{"y":"a\"b"}],"metadata":{"resourceVersion":"10","continue":"c2"},"kind":"PodList"}`,
			listResult{items: []string{`{"x":1}`, `{"y":"a\"b"}`}, rv: "10", cont: "c2"}},
		{"no metadata", `{"items":[{}]}`,
			listResult{items: []string{`{}`}}},
		{"empty objects", `{"metadata":{},"items":[{},{},{}]}`,
			listResult{items: []string{`{}`, `{}`, `{}`}, headKnown: true}},
		{"escaped quotes and backslashes", `{"metadata":{"continue":"k\"\\"},"items":[{"s":"ends with \\"},{"t":"q\"}]\\\\"},{"u":"\\\"","v":["\\\\",{"w":"}"}]}]}`,
			listResult{items: []string{`{"s":"ends with \\"}`, `{"t":"q\"}]\\\\"}`, `{"u":"\\\"","v":["\\\\",{"w":"}"}]}`}, cont: `k"\`, headKnown: true, headCont: `k"\`}},
		{"white space everywhere", " \n{ \"metadata\" : { \"continue\" : \"\" } ,\r\n \"items\" : [ { } ,\t{ \"a\" : [ ] } ] } \n ",
			listResult{items: []string{`{ }`, `{ "a" : [ ] }`}, headKnown: true}},
		{"scalars in items", `{"metadata":{"resourceVersion":"3"},"items":[{"n":1},{"n":-2.5e3,"b":true,"z":null}],"extra":12}`,
			listResult{items: []string{`{"n":1}`, `{"n":-2.5e3,"b":true,"z":null}`}, rv: "3", headKnown: true}},
	}
	for _, tc := range cases {
		for rname, r := range readers(tc.body) {
			got, _, err := readAllList(r(), nil)
			if err != nil {
				t.Fatalf("%s, %s: %v", tc.name, rname, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s, %s:\n got %+v\nwant %+v", tc.name, rname, got, tc.want)
			}
		}
	}
}

func TestListReaderRejectsMalformed(t *testing.T) {
	valid := []string{
		`{"kind":"PodList","metadata":{"resourceVersion":"7","continue":"abc"},"items":[{"a":"x\"y"},{"b":[2,"]"]}]}`,
		`{"items":[{"x":1},{"y":"a\\"}],"metadata":{"resourceVersion":"10"}}`,
		`{"metadata":{},"items":null}`,
	}
	cases := map[string]string{
		"empty body":             ``,
		"white space only":       " \n",
		"not an object":          `[]`,
		"a string":               `"x"`,
		"items an object":        `{"items":{}}`,
		"items a number":         `{"items":1}`,
		"items twice":            `{"items":[],"items":[]}`,
		"data after the list":    `{"items":[]} x`,
		"second list":            `{"items":[]}{"items":[]}`,
		"missing item comma":     `{"items":[{} {}]}`,
		"trailing item comma":    `{"items":[{},]}`,
		"missing member comma":   `{"metadata":{} "items":[]}`,
		"missing colon":          `{"metadata" {}}`,
		"key not a string":       `{metadata:{}}`,
		"bad metadata":           `{"metadata":{"continue":1},"items":[]}`,
		"metadata not an object": `{"metadata":[],"items":[]}`,
		"unterminated string":    `{"items":[{"a":"b}]}`,
	}
	for _, v := range valid {
		// Every proper prefix of a valid list is a truncated body.
		for p := range len(v) {
			cases[fmt.Sprintf("truncated %q", v[:p])] = v[:p]
		}
	}
	for name, body := range cases {
		for rname, r := range map[string]func() io.Reader{
			"whole":      func() io.Reader { return strings.NewReader(body) },
			"one byte":   func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) },
			"split at 5": func() io.Reader { return &splitReader{data: []byte(body), p: 5} },
		} {
			got, _, err := readAllList(r(), nil)
			if !errors.Is(err, ErrBadJSON) {
				t.Fatalf("%s, %s: got %+v, %v; want ErrBadJSON", name, rname, got, err)
			}
		}
	}
}

func TestListReaderErrorsNameTheProblem(t *testing.T) {
	for body, want := range map[string]string{
		`{"metadata":{},"items":[{"a":1}`:    "truncated after 31 bytes (1 items read)",
		`{"items":[{"a":1} {"b":2}]}`:        "',' or ']' expected after item 1 at offset 18",
		`{"items":"all"}`:                    `"items" is not an array`,
		`{"items":[]} trailing`:              "data after the list object at offset 13",
		`{"metadata":{"continue":1}}`:        "metadata.continue",
		`{"metadata":{},"items":[{"a":1},]}`: "value expected, got ']' at offset 32",
	} {
		_, _, err := readAllList(strings.NewReader(body), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to say %q", body, err, want)
		}
	}
}

func TestListReaderPassesReadErrors(t *testing.T) {
	broken := errors.New("connection reset")
	body := `{"metadata":{"continue":"c"},"items":[{"a":1},{"b":2}]}`
	for cut := range len(body) {
		r := io.MultiReader(strings.NewReader(body[:cut]), iotest.ErrReader(broken))
		if _, _, err := readAllList(r, nil); !errors.Is(err, broken) {
			t.Fatalf("cut at %d: %v, want the read error", cut, err)
		}
	}
}

// A page's window grows to its largest item, not with the page: a list of
// many small items keeps the initial window, a list with a 1.5 MiB item
// (escapes included, read one byte at a time) grows it to less than twice
// that.
func TestListReaderWindowFollowsTheLargestItem(t *testing.T) {
	small := `{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[{"name":"c","args":["a\"b","c\\"]}]}}`
	var b strings.Builder
	b.WriteString(`{"metadata":{"continue":"next"},"items":[`)
	for i := range 20000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(small)
	}
	b.WriteString(`]}`)
	got, lr, err := readAllList(&chunkReader{data: []byte(b.String()), sizes: []int{4093, 65536, 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.items) != 20000 || got.items[19999] != small || got.cont != "next" {
		t.Fatalf("read %d items, last %q, continue %q", len(got.items), got.items[len(got.items)-1], got.cont)
	}
	if c := cap(lr.window()); c != listWindow {
		t.Fatalf("window grew to %d bytes for a %d-byte page of small items", c, b.Len())
	}

	bigValue := strings.Repeat(`x\"\\`, (3<<19)/6) // 1.5 MiB of JSON, escapes included
	big := `{"metadata":{"name":"big","uid":"u2"},"data":{"k":"` + bigValue + `"}}`
	body := `{"metadata":{},"items":[` + small + `,` + big + `,` + small + `]}`
	for rname, r := range map[string]io.Reader{
		"one byte":   iotest.OneByteReader(strings.NewReader(body)),
		"odd chunks": &chunkReader{data: []byte(body), sizes: []int{1, 4093, 17, 0, 65521}},
	} {
		got, lr, err := readAllList(r, nil)
		if err != nil {
			t.Fatalf("%s: %v", rname, err)
		}
		if len(got.items) != 3 || got.items[1] != big || got.items[2] != small {
			t.Fatalf("%s: the large item did not come through whole (%d items)", rname, len(got.items))
		}
		if c := cap(lr.window()); c < len(big) || c > 2*len(big)+2*minFree {
			t.Fatalf("%s: window of %d bytes for a %d-byte item", rname, c, len(big))
		}
		m, err := readMeta([]byte(got.items[1]))
		if err != nil || m.name != "big" {
			t.Fatalf("%s: readMeta of the large item: %+v, %v", rname, m, err)
		}
	}
}

// BenchmarkListReader is the per-page cost of splitting a list into items
// (the part of the list hot path before readMeta and prune).
func BenchmarkListReader(b *testing.B) {
	pod := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0000001-x1","namespace":"team-01","uid":"00000001-0004-4000-8000-000000001eef","resourceVersion":"12345","labels":{"app":"web"},"annotations":{"a":"q\"uoted"}},"spec":{"containers":[{"name":"web","image":"registry.example.com/web:1.2.3","args":["--flag=\\x"]}]},"status":{"phase":"Running"}}`
	var sb strings.Builder
	sb.WriteString(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"c"},"items":[`)
	for i := range 500 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(pod)
	}
	sb.WriteString(`]}`)
	page := []byte(sb.String())
	b.SetBytes(int64(len(page)))
	buf := make([]byte, 0, listWindow)
	for b.Loop() {
		lr := newListReader(bytes.NewReader(page), buf)
		if err := lr.readHead(); err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			_, ok, err := lr.next()
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				break
			}
			n++
		}
		if n != 500 {
			b.Fatalf("%d items", n)
		}
		buf = lr.window()
	}
}
