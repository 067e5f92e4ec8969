package collector

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetview/fleetview/internal/inventory"
	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/stream"
)

// The collector lists and watches as a Table, as kubectl asks, with the
// whole object in each row (includeObject=Object): the member's own
// printers (a CRD's printer columns, an aggregated API's convertor) write
// each object's cells once, when it changes, and the hub stores them
// beside the object, so a Table answer needs no printer of its own and
// prints every kind as the member does. A server that cannot make a
// Table for the resource answers the plain JSON the Accept header also
// offers, and the objects go without cells.
const (
	tableAccept   = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
	includeObject = "Object"
)

// tableRow cuts one Table row ({"cells":[...],"object":{...}}) into the
// object and its cells; cells is nil when the member's are unusable
// (cellsOf), so the object is still published.
func (s *resourceSync) tableRow(row []byte) (obj, cells []byte, err error) {
	var buf [4]rawjson.Member
	ms, err := rawjson.ObjectMembers(row, buf[:0])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: table row: %w", ErrBadJSON, err)
	}
	for _, m := range ms {
		switch string(m.Key) {
		case "object":
			obj = row[m.ValueStart:m.ValueEnd]
		case "cells":
			cells = row[m.ValueStart:m.ValueEnd]
		}
	}
	if len(obj) == 0 || obj[0] != '{' {
		return nil, nil, fmt.Errorf("%w: table row without its object (includeObject=Object)", ErrBadJSON)
	}
	return obj, s.cellsOf(cells), nil
}

// cellsOf returns cells if the hub will take them (stream.Decode's
// checks), else nil and a log line: a member whose printer writes too much
// loses its columns for that object, never the object.
func (s *resourceSync) cellsOf(cells []byte) []byte {
	if len(cells) == 0 {
		return nil
	}
	if len(cells) > stream.MaxCellsBytes {
		s.log.Warn("table cells too large; the object is published without them", "bytes", len(cells), "max", stream.MaxCellsBytes)
		return nil
	}
	var arr [16]rawjson.Span
	spans, err := rawjson.Elements(cells, arr[:0])
	if err != nil || len(spans) > stream.MaxColumns {
		s.log.Warn("table cells not acceptable; the object is published without them", "cells", len(spans), "err", err)
		return nil
	}
	return cells
}

// setColumns records the resource's column definitions (a Table's
// "columnDefinitions") for the inventory record, when they changed.
func (s *resourceSync) setColumns(raw []byte) error {
	if len(raw) == 0 {
		return nil
	}
	var defs []metav1.TableColumnDefinition
	if err := json.Unmarshal(raw, &defs); err != nil {
		return fmt.Errorf("%w: columnDefinitions: %w", ErrBadJSON, err)
	}
	cols := columnsOf(defs)
	if old := s.columns.Load(); old != nil && slices.Equal(*old, cols) {
		return nil
	}
	s.columns.Store(&cols)
	s.pub.syncChanged()
	return nil
}

// columnsOf converts a member's column definitions into the inventory's,
// within its bounds: descriptions (which kubectl never prints) cut, and
// columns past inventory's bounds dropped with every cell, since a row
// whose cells do not match its columns is printed without them.
func columnsOf(defs []metav1.TableColumnDefinition) []inventory.Column {
	if len(defs) > stream.MaxColumns {
		return nil
	}
	cols := make([]inventory.Column, 0, len(defs))
	for _, d := range defs {
		if d.Name == "" || len(d.Name) > inventory.MaxColumnName || len(d.Type) > inventory.MaxColumnType || len(d.Format) > inventory.MaxColumnType {
			return nil
		}
		cols = append(cols, inventory.Column{Name: d.Name, Type: d.Type, Format: d.Format, Priority: d.Priority,
			Description: cut(d.Description, inventory.MaxColumnDescription)})
	}
	return cols
}

// cut shortens s to at most n bytes at a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// columnsNow is the resource's columns as last listed or watched.
func (s *resourceSync) columnsNow() []inventory.Column {
	if c := s.columns.Load(); c != nil {
		return *c
	}
	return nil
}
