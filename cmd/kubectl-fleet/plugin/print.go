package plugin

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"
)

// newTable writes aligned columns as kubectl's printers do (their
// tabwriter settings).
func newTable(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

func row(tw io.Writer, cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "<none>"
		}
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
}

func timeCell(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func operationCell(e *Entry) string {
	if e.Subresource != "" && e.Operation != "" {
		return e.Operation + " (" + e.Subresource + ")"
	}
	return e.Operation
}

// writeData prints v as JSON or YAML.
func writeData(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return err
	}
	if format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	} else {
		b = append(b, '\n')
	}
	_, err = w.Write(b)
	return err
}

// quietPaths change with every revision and are in their own columns.
var quietPaths = []string{"metadata.resourceVersion", "metadata.managedFields"}

// summary says in one line what a change did: for a modification, the
// field paths its merge patch sets ("-" before a removed one). A revision
// the hub stored as a full snapshot carries no patch: prev, when known,
// gives it.
func summary(e, prev *Entry, maxPaths int) string {
	switch e.Type {
	case "ADDED":
		return "created"
	case "DELETED":
		return "deleted"
	}
	p := e.Patch
	if len(p) == 0 && prev != nil && len(prev.Object) > 0 && len(e.Object) > 0 {
		if mp, err := jsonpatch.CreateMergePatch(prev.Object, e.Object); err == nil {
			p = mp
		}
	}
	if len(p) == 0 {
		return "(no earlier revision in the window)"
	}
	var patch any
	if err := json.Unmarshal(p, &patch); err != nil {
		return "(unreadable patch)"
	}
	var paths []string
	patchPaths(patch, "", &paths)
	paths = slices.DeleteFunc(paths, func(p string) bool {
		return slices.Contains(quietPaths, strings.TrimPrefix(p, "-"))
	})
	if len(paths) == 0 {
		return "(resourceVersion only)"
	}
	slices.Sort(paths)
	if len(paths) > maxPaths {
		return strings.Join(paths[:maxPaths], ", ") + fmt.Sprintf(", +%d more", len(paths)-maxPaths)
	}
	return strings.Join(paths, ", ")
}

// patchPaths collects the leaves of a JSON merge patch (RFC 7386): a
// null removes a field, an object recurses, anything else (arrays
// included, which a merge patch replaces whole) sets one.
func patchPaths(v any, prefix string, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok || prefix != "" && len(m) == 0 {
		if v == nil {
			*out = append(*out, "-"+prefix)
		} else {
			*out = append(*out, prefix)
		}
		return
	}
	for k, x := range m {
		p := k
		if strings.ContainsAny(k, "./") {
			p = "[" + k + "]"
		} else if prefix != "" {
			p = "." + k
		}
		patchPaths(x, prefix+p, out)
	}
}

// revisionLabel names one side of a diff.
func revisionLabel(e *Entry, n int) string {
	if e == nil {
		return "(nothing)"
	}
	obj := e.GR() + "/" + e.Name
	if e.Namespace != "" {
		obj = e.Namespace + "/" + obj
	}
	who := e.Manager
	if who == "" {
		who = "<none>"
	}
	return fmt.Sprintf("%s %s revision %d (%s, resourceVersion %s, %s by %s)", e.Cluster, obj, n, e.Type, e.ResourceVersion, timeCell(e.Time), who)
}

// unifiedDiff is the YAML of two revisions' objects, diffed.
func unifiedDiff(from, to *Entry, fromN, toN int) (string, error) {
	a, err := objectYAML(from)
	if err != nil {
		return "", err
	}
	b, err := objectYAML(to)
	if err != nil {
		return "", err
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(a), B: lines(b),
		FromFile: revisionLabel(from, fromN), ToFile: revisionLabel(to, toN), Context: 3,
	})
}

// lines splits YAML into lines, each with its newline (difflib's
// SplitLines would add an empty last line).
func lines(s string) []string {
	if s == "" {
		return nil
	}
	return difflib.SplitLines(strings.TrimSuffix(s, "\n"))
}

func objectYAML(e *Entry) (string, error) {
	if e == nil {
		return "", nil
	}
	if len(e.Object) == 0 {
		return "", fmt.Errorf("%w: revision %s of %s/%s carries no object", ErrNotFound, e.ResourceVersion, e.GR(), e.Name)
	}
	y, err := yaml.JSONToYAML(e.Object)
	return string(y), err
}
