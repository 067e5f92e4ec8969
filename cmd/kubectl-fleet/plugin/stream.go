package plugin

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// feedWriter prints a change feed page by page as it arrives: the last
// hour of a busy fleet is millions of changes, never held at once. A
// table's columns are aligned over blocks of tableBlock rows (what it
// holds at most); JSON and YAML are one document whose list is written
// item by item.
type feedWriter struct {
	w      *bufio.Writer
	format string
	// header is the table's; list names the document's list.
	header []string
	list   string
	// wrap is the fixed members of a List document (deleted -o ...).
	wrap map[string]string
	tw   *tabwriter.Writer
	n    int
	row  func(tw io.Writer, e *Entry)
	item func(e *Entry) (any, bool)
}

func (f *feedWriter) page(entries []Entry) error {
	for i := range entries {
		e := &entries[i]
		if f.format == "" {
			if f.tw == nil {
				f.tw = newTable(f.w, f.header...)
			}
			f.row(f.tw, e)
			f.n++
			if f.n%tableBlock == 0 {
				if err := f.tw.Flush(); err != nil {
					return err
				}
			}
			continue
		}
		v, ok := f.item(e)
		if !ok {
			continue
		}
		if err := f.writeItem(v); err != nil {
			return err
		}
	}
	return f.w.Flush()
}

// tableBlock rows are aligned together.
const tableBlock = 4096

func (f *feedWriter) open() {
	if f.format == "json" {
		fmt.Fprint(f.w, "{\n")
		for _, k := range sortedKeys(f.wrap) {
			fmt.Fprintf(f.w, "    %q: %q,\n", k, f.wrap[k])
		}
		fmt.Fprintf(f.w, "    %q: [", f.list)
		return
	}
	for _, k := range sortedKeys(f.wrap) {
		fmt.Fprintf(f.w, "%s: %s\n", k, f.wrap[k])
	}
	fmt.Fprintf(f.w, "%s:\n", f.list)
}

func (f *feedWriter) writeItem(v any) error {
	if f.n == 0 {
		f.open()
	}
	f.n++
	if f.format == "json" {
		b, err := json.MarshalIndent(v, "        ", "    ")
		if err != nil {
			return err
		}
		if f.n > 1 {
			f.w.WriteByte(',')
		}
		fmt.Fprintf(f.w, "\n        %s", b)
		return nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return err
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(y), "\n"), "\n") {
		if i == 0 {
			fmt.Fprintf(f.w, "- %s\n", line)
		} else {
			fmt.Fprintf(f.w, "  %s\n", line)
		}
	}
	return nil
}

// close ends the document (or says there was nothing).
func (f *feedWriter) close(stderr io.Writer, none string) error {
	if f.tw != nil {
		if err := f.tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case f.format == "" && f.n == 0:
		fmt.Fprintln(stderr, none)
	case f.format == "json" && f.n == 0:
		f.open()
		fmt.Fprint(f.w, "]\n}\n")
	case f.format == "json":
		fmt.Fprint(f.w, "\n    ]\n}\n")
	case f.format == "yaml" && f.n == 0:
		for _, k := range sortedKeys(f.wrap) {
			fmt.Fprintf(f.w, "%s: %s\n", k, f.wrap[k])
		}
		fmt.Fprintf(f.w, "%s: []\n", f.list)
	}
	return f.w.Flush()
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
