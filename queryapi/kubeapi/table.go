package kubeapi

import (
	"encoding/json"
	"errors"
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
	spans     []rawjson.Span
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

// appendHead writes a Table up to its first row.
func (t *tableWriter) appendHead(b []byte, lm metav1.ListMeta) []byte {
	b = append(b, `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{`...)
	if lm.ResourceVersion != "" {
		b = append(b, `"resourceVersion":`...)
		b = strconv.AppendQuote(b, lm.ResourceVersion)
		b = append(b, ',')
	}
	if lm.Continue != "" {
		b = append(b, `"continue":`...)
		b = strconv.AppendQuote(b, lm.Continue)
		b = append(b, ',')
	}
	if lm.RemainingItemCount != nil {
		b = append(b, `"remainingItemCount":`...)
		b = strconv.AppendInt(b, *lm.RemainingItemCount, 10)
		b = append(b, ',')
	}
	if b[len(b)-1] == ',' {
		b = b[:len(b)-1]
	}
	defs := make([]metav1.TableColumnDefinition, 0, len(t.cols)+1)
	defs = append(defs, metav1.TableColumnDefinition{Name: "Cluster", Type: "string", Description: "The member cluster the object is cached from"})
	for _, c := range t.cols {
		defs = append(defs, metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description, Priority: c.Priority})
	}
	d, _ := json.Marshal(defs) // strings and integers: cannot fail
	b = append(b, `},"columnDefinitions":`...)
	b = append(b, d...)
	return append(b, `,"rows":[`...)
}

// tableTail ends what appendHead began.
const tableTail = "]}\n"

// rowMeta is what a row needs of an object's metadata.
type rowMeta struct {
	// span is the metadata member's value in the object.
	span rawjson.Span
	// name is the name member's value, still quoted: a row whose stored
	// cells are whole never prints it.
	name              []byte
	cluster           string
	creationTimestamp string
}

var errNoMetadata = errors.New("object without metadata")

// readRowMeta reads the metadata member of a stored object (grammar
// already checked: the backend vouched for it or the query API checked
// it), stopping there rather than walking the rest of the object. Each
// byte of the metadata is scanned once: a member's value is skipped, or
// walked (annotations), not both.
func readRowMeta(obj []byte) (rowMeta, error) {
	var m rowMeta
	found := false
	str := func(v []byte, dst *string) error {
		if len(v) == 0 || v[0] != '"' {
			return fmt.Errorf("metadata member is %.20s, not a string", v)
		}
		s, err := rawjson.String(v)
		*dst = s
		return err
	}
	_, err := rawjson.EachMember(obj, 0, func(top rawjson.Member) (int, error) {
		if string(top.Key) != "metadata" {
			return rawjson.SkipValue(obj, top.ValueStart)
		}
		if obj[top.ValueStart] != '{' {
			return 0, errNoMetadata
		}
		found = true
		end, err := rawjson.EachMember(obj, top.ValueStart, func(f rawjson.Member) (int, error) {
			if string(f.Key) == "annotations" {
				if obj[f.ValueStart] != '{' {
					return 0, errors.New("metadata.annotations is not an object")
				}
				return rawjson.EachMember(obj, f.ValueStart, func(a rawjson.Member) (int, error) {
					aend, err := rawjson.SkipValue(obj, a.ValueStart)
					if err == nil && string(a.Key) == clusterAnnotation {
						err = str(obj[a.ValueStart:aend], &m.cluster)
					}
					return aend, err
				})
			}
			fend, err := rawjson.SkipValue(obj, f.ValueStart)
			if err != nil {
				return 0, err
			}
			v := obj[f.ValueStart:fend]
			switch string(f.Key) {
			case "name":
				if v[0] != '"' {
					return 0, fmt.Errorf("metadata member is %.20s, not a string", v)
				}
				m.name = v
			case "creationTimestamp":
				if string(v) != "null" {
					err = str(v, &m.creationTimestamp)
				}
			}
			return fend, err
		})
		if err == nil {
			m.span = rawjson.Span{Start: top.ValueStart, End: end}
			err = errMetadataRead // the rest of the object is not the row's
		}
		return end, err
	})
	switch {
	case errors.Is(err, errMetadataRead):
		err = nil
	case err == nil && !found:
		err = errNoMetadata
	}
	return m, err
}

// errMetadataRead stops readRowMeta's walk once the metadata is read:
// kind and apiVersion come first and metadata next, so a row reads a few
// hundred bytes of a Pod, not its spec and status.
var errMetadataRead = errors.New("metadata read")

// appendRow writes the row of one stored object and its stored cells.
func (t *tableWriter) appendRow(b []byte, obj, cells []byte) ([]byte, error) {
	m, err := readRowMeta(obj)
	if err != nil {
		return b, fmt.Errorf("decode cached object: %w", err)
	}
	b = append(b, `{"cells":[`...)
	b = strconv.AppendQuote(b, m.cluster)
	spans := t.spans[:0]
	if len(cells) > 0 {
		// Backends other than Badger are reachable by other writers:
		// cells are checked again here, where they are read.
		if spans, err = rawjson.Elements(cells, spans); err != nil {
			spans = spans[:0]
		}
	}
	t.spans = spans
	whole := len(spans) == len(t.cols)
	for i := range t.cols {
		b = append(b, ',')
		switch {
		case i == t.age:
			b = strconv.AppendQuote(b, t.ageOf(m.creationTimestamp))
		case whole:
			b = append(b, cells[spans[i].Start:spans[i].End]...)
		case i == t.name && m.name != nil:
			name, err := rawjson.String(m.name)
			if err != nil {
				return b, fmt.Errorf("decode cached object: metadata.name: %w", err)
			}
			b = strconv.AppendQuote(b, name)
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
		b = append(b, obj[m.span.Start:m.span.End]...)
		b = append(b, '}')
	}
	return append(b, '}'), nil
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
	return duration.HumanDuration(t.now.Sub(created))
}
