package query

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fleetview/fleetview/internal/rawjson"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
)

// maxPathDepth bounds the member names of one field path; no Kubernetes
// field is nearly this deep.
const maxPathDepth = 32

// fieldSpec is how a field name Kubernetes itself supports differs from
// the generic reading of a path: a field named apart from where it lies,
// or the value Kubernetes gives an absent one. Kubernetes renders its
// supported fields from typed objects, where an omitted boolean is "false"
// and an omitted count "0"; the stored JSON omits them.
type fieldSpec struct {
	path   []string
	absent string
}

// resourceFields are those of Kubernetes' supported field selectors (from
// the resources' registry strategies) that the generic path reading would
// answer differently.
var resourceFields = map[schema.GroupResource]map[string]fieldSpec{
	{Resource: "pods"}:                       {"spec.hostNetwork": {absent: "false"}},
	{Resource: "nodes"}:                      {"spec.unschedulable": {absent: "false"}},
	{Resource: "replicationcontrollers"}:     {"status.replicas": {absent: "0"}},
	{Group: "apps", Resource: "replicasets"}: {"status.replicas": {absent: "0"}},
	{Group: "batch", Resource: "jobs"}:       {"status.successful": {absent: "0"}},
	{Resource: "events"}:                     {"source": {path: []string{"source", "component"}}},
}

// FieldFilter is a compiled field selector for one resource.
type FieldFilter struct {
	sel   fields.Selector
	reqs  fields.Requirements  // sel's, once: Requirements copies them on every call
	paths map[string]fieldSpec // object fields the selector reads
	// rels are the relation requirements (fieldrel.go); relsResolved:
	// the backend applies them, Matches skips them.
	rels         []RelationField
	relsResolved bool
	relVisible   *Visibility
}

// CompileFields parses a Kubernetes field selector for gvr. An empty
// selector is nil (matches everything). Any field path is accepted, for
// every kind: member names joined by dots, an array standing for each of
// its elements (see Matches). metadata.name and metadata.namespace are
// read from the key, every other field from the stored object. Operators
// are Kubernetes' (=, ==, !=; a comma is AND); anything else, and a
// malformed path, is ErrInvalid naming the selector and the field.
func CompileFields(gvr schema.GroupVersionResource, s string) (*FieldFilter, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	if err := checkOperators(s); err != nil {
		return nil, err
	}
	sel, err := fields.ParseSelector(s)
	if err != nil {
		return nil, fmt.Errorf("%w: fieldSelector %q: %v", ErrInvalid, s, err)
	}
	f := &FieldFilter{sel: sel, reqs: sel.Requirements(), paths: map[string]fieldSpec{}}
	known := resourceFields[gvr.GroupResource()]
	for _, r := range f.reqs {
		switch r.Field {
		case "metadata.name", "metadata.namespace":
			continue
		}
		if isRelationField(r.Field) {
			rf, err := relationField(s, r)
			if err != nil {
				return nil, err
			}
			f.rels = append(f.rels, rf)
			continue
		}
		if err := checkPath(r.Field); err != nil {
			return nil, fmt.Errorf("%w: fieldSelector %q: field %q: %v", ErrInvalid, s, r.Field, err)
		}
		spec := known[r.Field]
		if spec.path == nil {
			spec.path = strings.Split(r.Field, ".")
		}
		f.paths[r.Field] = spec
	}
	return f, nil
}

// checkOperators names an operator label selectors know but field
// selectors do not, which fields.ParseSelector would only call a term it
// cannot understand.
func checkOperators(s string) error {
	for _, term := range splitTerms(s) {
		t := strings.TrimSpace(term)
		if strings.Contains(t, "=") {
			continue // =, == or !=; ParseSelector checks the rest
		}
		op := ""
		switch {
		case strings.HasPrefix(t, "!"):
			op = "!"
		case strings.ContainsAny(t, "<>"):
			op = string(t[strings.IndexAny(t, "<>")])
		case strings.Contains(t, " notin "), strings.Contains(t, " notin("):
			op = "notin"
		case strings.Contains(t, " in "), strings.Contains(t, " in("):
			op = "in"
		case t != "":
			op = "existence"
		}
		if op != "" {
			return fmt.Errorf("%w: fieldSelector %q: %q: operator %s is not supported (field selectors accept =, == and !=, and a comma for AND)",
				ErrInvalid, s, t, op)
		}
	}
	return nil
}

// splitTerms splits a selector at its unescaped commas.
func splitTerms(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case ',':
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// checkPath refuses what cannot be a path of member names: empty names,
// array indexes (an array stands for all its elements), white space and
// operator characters.
func checkPath(field string) error {
	names := strings.Split(field, ".")
	if len(names) > maxPathDepth {
		return fmt.Errorf("more than %d names", maxPathDepth)
	}
	for _, n := range names {
		if n == "" {
			return fmt.Errorf("a path is member names joined by single dots")
		}
		if strings.ContainsAny(n, "[]") {
			return fmt.Errorf("array indexes are not supported (a path through an array matches any element)")
		}
		for _, c := range n {
			if c <= ' ' || c == 0x7f || strings.ContainsRune(`!=<>(),*"\`, c) {
				return fmt.Errorf("character %q is not allowed in a field path", c)
			}
		}
	}
	return nil
}

// String renders the selector canonically: its terms rendered one by one
// and then sorted. fields.Selector's own String keeps the order in which
// ParseSelector sorted the terms as written, and a term renders apart from
// how it was written ("a==" is "a="), so it is not a fixed point:
// "a=0,a==" renders "a=0,a=", which renders "a=,a=0".
func (f *FieldFilter) String() string {
	if f == nil {
		return ""
	}
	terms := make([]string, len(f.reqs))
	for i, r := range f.reqs {
		if r.Operator == selection.NotEquals {
			terms[i] = fields.OneTermNotEqualSelector(r.Field, r.Value).String()
		} else {
			terms[i] = fields.OneTermEqualSelector(r.Field, r.Value).String()
		}
	}
	sort.Strings(terms)
	return strings.Join(terms, ",")
}

// NeedsObject reports whether matching reads more than namespace and name.
func (f *FieldFilter) NeedsObject() bool { return f != nil && len(f.paths) > 0 }

// Namespace is the namespace an equality requirement pins, if any, so a
// backend can narrow its scan.
func (f *FieldFilter) Namespace() (string, bool) {
	if f == nil {
		return "", false
	}
	return f.sel.RequiresExactMatch("metadata.namespace")
}

// FieldEquality is one requirement path = value of a field selector.
type FieldEquality struct{ Path, Value string }

// Equalities are the selector's requirements path = value that an index of
// the path's values (Dimension.ObjectValues, as "field:<path>") can
// answer: every object Matches accepts has Value among those values. Left
// out: metadata.name and metadata.namespace (in the key), relation
// fields, the fields Kubernetes renders apart from their path or with
// their own absent value, and values an array or an object would render
// (which ObjectValues does not index).
func (f *FieldFilter) Equalities() []FieldEquality {
	if f == nil {
		return nil
	}
	var out []FieldEquality
	for _, r := range f.reqs {
		spec, ok := f.paths[r.Field]
		if !ok || r.Operator == selection.NotEquals || spec.absent != "" || strings.Join(spec.path, ".") != r.Field ||
			strings.HasPrefix(r.Value, "[") || strings.HasPrefix(r.Value, "{") {
			continue
		}
		out = append(out, FieldEquality{Path: r.Field, Value: r.Value})
	}
	return out
}

// Requirements is how many requirements the selector has.
func (f *FieldFilter) Requirements() int {
	if f == nil {
		return 0
	}
	return len(f.reqs)
}

// Matches evaluates the selector; obj is read only when NeedsObject. A
// field's values are compared as strings: a string as it decodes, a number
// or boolean as its JSON text, null and an absent field as "" (or, for the
// fields Kubernetes types, its zero value). Through an array a field has
// the value of each element: = holds when one of them is the value, != when
// none is (so != is always the complement of =), and a field with no value
// at all (absent, or an empty array) is "". An object is no value: it
// equals nothing.
func (f *FieldFilter) Matches(namespace, name string, obj []byte) (bool, error) {
	if f == nil {
		return true, nil
	}
	var vals [][]byte
	for _, r := range f.reqs {
		var eq bool
		switch r.Field {
		case "metadata.name":
			eq = name == r.Value
		case "metadata.namespace":
			eq = namespace == r.Value
		case FieldOwnedBy, FieldSelectedBy, FieldReferences:
			if !f.relsResolved {
				return false, fmt.Errorf("%w: field selector %s: relation fields are answered only by lists of a store that keeps relations", ErrInvalid, r.Field)
			}
			continue
		default:
			spec := f.paths[r.Field]
			var err error
			if vals, err = rawjson.PathValues(obj, spec.path, vals[:0]); err != nil {
				return false, fmt.Errorf("%w: field selector: %v", ErrCorrupt, err)
			}
			if eq, err = anyEquals(vals, spec.absent, r.Value); err != nil {
				return false, fmt.Errorf("%w: field selector: %v", ErrCorrupt, err)
			}
		}
		if (r.Operator == selection.NotEquals) == eq {
			return false, nil
		}
	}
	return true, nil
}

// anyEquals reports whether one of the raw values reads as want; no
// values read as absent.
func anyEquals(vals [][]byte, absent, want string) (bool, error) {
	if len(vals) == 0 {
		return want == absent, nil
	}
	for _, v := range vals {
		switch v[0] {
		case '{':
			continue
		case 'n': // null reads as absent
			if want == absent {
				return true, nil
			}
		case '"':
			s, err := rawjson.String(v)
			if err != nil {
				return false, err
			}
			if s == want {
				return true, nil
			}
		default:
			if string(v) == want {
				return true, nil
			}
		}
	}
	return false, nil
}
