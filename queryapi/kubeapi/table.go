package kubeapi

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/rawjson"
)

// clusterAnnotation names the member cluster an object was cached from.
const clusterAnnotation = "fleetview.io/cluster"

// A Table is written as bytes, like a list: each row is the CLUSTER cell,
// then the cells the member's own printer wrote for the object when its
// collector listed or watched it (stored beside the object), with the Age
// cell computed again for now; the row's object is the stored bytes
// (includeObject=Object), their metadata member cut out (Metadata,
// kubectl's default), or nothing (None). No object is decoded, so a
// Table costs about what the same list in JSON costs, and every kind
// prints as its member prints it: built-in kinds, a CRD's printer
// columns, aggregated APIs.
//
// A row whose cells do not match the resource's columns (an object stored
// without cells, or a member whose printer disagrees with the columns
// most clusters report, catalog.Resource.Columns) gets its Name and Age
// and "<unknown>" for the rest: one cluster's cells never shift another's
// columns.

// genericColumns are the columns of a resource no cluster reported any for.
var genericColumns = []inventory.Column{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the object"},
	{Name: "Age", Type: "string", Description: "Time since the object was created"},
}

// tableWriter writes the rows of one resource's Table.
type tableWriter struct {
	c       cached
	cols    []inventory.Column
	include metav1.IncludeObjectPolicy
	now     time.Time
	// name and age are the columns filled from the object's metadata
	// (-1: none): age is the Age column, which the member printed
	// relative to when it printed (built-in printers as "string", a CRD's
	// creationTimestamp column as "date", both already relative).
	name, age int
	// cellSpans is the cells' elements, reused from row to row.
	cellSpans []rawjson.Span
	// ages are the Age cells written, by whole seconds since creation:
	// a Table's objects were created over far fewer distinct seconds
	// than it has rows, and formatting one cost a fifth of a row.
	ages map[int64]string
}

func newTableWriter(c cached, include metav1.IncludeObjectPolicy) *tableWriter {
	cols := c.columns
	if len(cols) == 0 {
		cols = genericColumns
	}
	t := &tableWriter{c: c, cols: cols, include: include, now: time.Now(), name: -1, age: -1}
	for i, col := range cols {
		switch {
		case col.Name == "Name" && t.name < 0:
			t.name = i
		case col.Name == "Age" && (col.Type == "string" || col.Type == "date") && t.age < 0:
			t.age = i
		}
	}
	return t
}

// appendHead writes a Table up to its first row, its metadata first when
// lm is given (else the answer's end writes it, listBody.end).
func (t *tableWriter) appendHead(b []byte, lm *metav1.ListMeta) []byte {
	b = append(b, `{"kind":"Table","apiVersion":"meta.k8s.io/v1"`...)
	if lm != nil {
		b = append(b, `,"metadata":`...)
		b = appendListMeta(b, *lm, false)
	}
	defs := make([]metav1.TableColumnDefinition, 0, len(t.cols)+1)
	defs = append(defs, metav1.TableColumnDefinition{Name: "Cluster", Type: "string", Description: "The member cluster the object is cached from"})
	for _, c := range t.cols {
		defs = append(defs, metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description, Priority: c.Priority})
	}
	d, _ := json.Marshal(defs) // strings and integers: cannot fail
	b = append(b, `,"columnDefinitions":`...)
	b = append(b, d...)
	return append(b, `,"rows":[`...)
}

// tableTail ends what appendHead began.
const tableTail = "]}\n"

// appendRow writes the row of one stored object and its stored cells.
// spans are where the row's parts lie in obj when the backend found them
// as it stored obj (nil: the row finds them).
func (t *tableWriter) appendRow(b []byte, obj, cells []byte, spans *rawjson.RowSpans) ([]byte, error) {
	var m rawjson.RowSpans
	if spans != nil && spans.Valid(obj) {
		m = *spans
	} else {
		var err error
		if m, err = rawjson.FindRowSpans(obj, clusterAnnotation); err != nil {
			return b, fmt.Errorf("decode cached object: %w", err)
		}
	}
	b = append(b, `{"cells":[`...)
	if m.Annotation != (rawjson.Span{}) {
		// A JSON string of a checked object: a cell as it is.
		b = append(b, obj[m.Annotation.Start:m.Annotation.End]...)
	} else {
		b = append(b, `""`...)
	}
	cellSpans := t.cellSpans[:0]
	var err error
	if len(cells) > 0 {
		// Backends other than Badger are reachable by other writers:
		// cells are checked again here, where they are read.
		if cellSpans, err = rawjson.Elements(cells, cellSpans); err != nil {
			cellSpans = cellSpans[:0]
		}
	}
	t.cellSpans = cellSpans
	whole := len(cellSpans) == len(t.cols)
	for i := range t.cols {
		b = append(b, ',')
		switch {
		case i == t.age:
			age := "<unknown>"
			if m.Created != (rawjson.Span{}) {
				if age, err = t.ageOfStored(obj[m.Created.Start:m.Created.End]); err != nil {
					return b, fmt.Errorf("decode cached object: metadata.creationTimestamp: %w", err)
				}
			}
			b = strconv.AppendQuote(b, age)
		case whole:
			b = append(b, cells[cellSpans[i].Start:cellSpans[i].End]...)
		case i == t.name && m.Name != (rawjson.Span{}):
			b = append(b, obj[m.Name.Start:m.Name.End]...)
		case i == t.name:
			b = append(b, `""`...)
		default:
			b = append(b, `"<unknown>"`...)
		}
	}
	b = append(b, ']')
	switch t.include {
	case metav1.IncludeObject:
		b = append(b, `,"object":`...)
		b = appendItem(b, t.c, obj)
	case metav1.IncludeMetadata:
		b = append(b, `,"object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":`...)
		b = append(b, obj[m.Metadata.Start:m.Metadata.End]...)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// ageOfStored is ageOf the stored creationTimestamp raw (a JSON string).
// Kubernetes writes it as "2006-01-02T15:04:05Z", which is read here
// from the bytes: decoding it into a string first was the one
// allocation of every row, 150k per Table of a 150k-Pod fleet
// (BenchmarkTableAnswer). Any other form is decoded as before.
func (t *tableWriter) ageOfStored(raw []byte) (string, error) {
	if c, ok := parseStoredUTC(raw); ok {
		return t.ageSince(c), nil
	}
	created, err := rawjson.String(raw)
	if err != nil {
		return "", err
	}
	return t.ageOf(created), nil
}

// parseStoredUTC reads raw as the JSON string "YYYY-MM-DDTHH:MM:SSZ";
// false for anything else, or a date or time time.Parse would refuse.
func parseStoredUTC(raw []byte) (time.Time, bool) {
	if len(raw) != 22 || raw[0] != '"' || raw[21] != '"' || raw[5] != '-' || raw[8] != '-' || raw[11] != 'T' ||
		raw[14] != ':' || raw[17] != ':' || raw[20] != 'Z' {
		return time.Time{}, false
	}
	num := func(i, n int) (int, bool) {
		v := 0
		for _, c := range raw[i : i+n] {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	y, ok1 := num(1, 4)
	mo, ok2 := num(6, 2)
	d, ok3 := num(9, 2)
	h, ok4 := num(12, 2)
	mi, ok5 := num(15, 2)
	sec, ok6 := num(18, 2)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59 {
		return time.Time{}, false
	}
	c := time.Date(y, time.Month(mo), d, h, mi, sec, 0, time.UTC)
	if c.Day() != d { // past the month's end: time.Parse refuses it
		return time.Time{}, false
	}
	return c, true
}

// ageOf is kubectl's AGE of an object created at ts (RFC 3339).
func (t *tableWriter) ageOf(ts string) string {
	if ts == "" {
		return "<unknown>"
	}
	created, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return "<unknown>"
	}
	return t.ageSince(created)
}

// ageSince is the Age cell of an object created at created.
func (t *tableWriter) ageSince(created time.Time) string {
	d := t.now.Sub(created).Truncate(time.Second)
	if a, ok := t.ages[int64(d)]; ok {
		return a
	}
	if t.ages == nil {
		t.ages = map[int64]string{}
	}
	a := duration.HumanDuration(d)
	t.ages[int64(d)] = a
	return a
}
