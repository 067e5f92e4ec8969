package query

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
)

// DimensionKind is what a count groups objects by.
type DimensionKind int

const (
	// DimCluster groups by the member cluster holding the object.
	DimCluster DimensionKind = iota + 1
	// DimNamespace groups by namespace ("" for cluster-scoped objects).
	DimNamespace
	// DimKind groups by resource: one row per resource of the count.
	DimKind
	// DimLabel groups by the value of one label key ("" without it).
	DimLabel
	// DimField groups by the values at one field path ("" when absent).
	DimField
	// DimImage groups by container image: an object is counted once per
	// distinct image of its containers and init containers.
	DimImage
)

// Dimension is one group-by of a count, as a request names it: cluster,
// namespace, kind, image, label:<key> or field:<path>.
type Dimension struct {
	Kind DimensionKind
	// Key is the label key or the field path.
	Key  string
	path []string
}

// ParseDimension parses one group-by; a bad one is ErrInvalid naming it.
func ParseDimension(s string) (Dimension, error) {
	switch s {
	case "cluster":
		return Dimension{Kind: DimCluster}, nil
	case "namespace":
		return Dimension{Kind: DimNamespace}, nil
	case "kind":
		return Dimension{Kind: DimKind}, nil
	case "image":
		return Dimension{Kind: DimImage}, nil
	}
	kind, key, ok := strings.Cut(s, ":")
	switch {
	case ok && kind == "label":
		if errs := validateLabelKey(key); errs != "" {
			return Dimension{}, fmt.Errorf("%w: by=%q: label key: %s", ErrInvalid, s, errs)
		}
		return Dimension{Kind: DimLabel, Key: key}, nil
	case ok && kind == "field":
		if err := checkPath(key); err != nil {
			return Dimension{}, fmt.Errorf("%w: by=%q: %v", ErrInvalid, s, err)
		}
		return Dimension{Kind: DimField, Key: key, path: strings.Split(key, ".")}, nil
	}
	return Dimension{}, fmt.Errorf("%w: by=%q: a dimension is cluster, namespace, kind, image, label:<key> or field:<path>", ErrInvalid, s)
}

// validateLabelKey is "" for a key a label selector accepts, else why not.
func validateLabelKey(key string) string {
	if _, err := labels.NewRequirement(key, "exists", nil); err != nil {
		return err.Error()
	}
	return ""
}

// String is the dimension as a request names it.
func (d Dimension) String() string {
	switch d.Kind {
	case DimCluster:
		return "cluster"
	case DimNamespace:
		return "namespace"
	case DimKind:
		return "kind"
	case DimImage:
		return "image"
	case DimLabel:
		return "label:" + d.Key
	case DimField:
		return "field:" + d.Key
	}
	return "?"
}

// IndexName is the name a store's value index keeps the dimension under
// ("image", or the field path); "" for dimensions the object's key or
// labels answer.
func (d Dimension) IndexName() string {
	switch d.Kind {
	case DimImage:
		return "image"
	case DimField:
		return d.Key
	}
	return ""
}

// podImagePaths are where a Pod's container images lie, imagePaths a
// workload's Pod template's (Deployment, Job, CronJob): read only when an
// object has no Pod images, so a Pod costs two walks of its JSON.
var podImagePaths = [][]string{
	{"spec", "containers", "image"},
	{"spec", "initContainers", "image"},
}

var imagePaths = [][]string{
	{"spec", "template", "spec", "containers", "image"},
	{"spec", "template", "spec", "initContainers", "image"},
	{"spec", "jobTemplate", "spec", "template", "spec", "containers", "image"},
}

// ObjectValues are the dimension's distinct values in an object's JSON,
// sorted; a field with no scalar value is [""]. Only for image and field
// dimensions; a store with an index for the dimension answers without it.
func (d Dimension) ObjectValues(obj []byte) ([]string, error) {
	var raw [][]byte
	var err error
	switch d.Kind {
	case DimImage:
		for _, p := range podImagePaths {
			if raw, err = rawjson.PathValues(obj, p, raw); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, d, err)
			}
		}
		for i := 0; len(raw) == 0 && i < len(imagePaths); i++ {
			if raw, err = rawjson.PathValues(obj, imagePaths[i], raw); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, d, err)
			}
		}
	case DimField:
		if raw, err = rawjson.PathValues(obj, d.path, raw); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, d, err)
		}
	default:
		return nil, fmt.Errorf("%w: %s is not read from objects", ErrInvalid, d)
	}
	out := make([]string, 0, len(raw))
	for _, v := range raw {
		switch v[0] {
		case '{', '[', 'n': // an object, an empty array or null: no value
			continue
		case '"':
			s, err := rawjson.String(v)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, d, err)
			}
			out = append(out, s)
		default:
			out = append(out, string(v))
		}
	}
	if len(out) == 0 {
		return []string{""}, nil
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// CountOptions select objects like ListOptions and group them.
type CountOptions struct {
	// GVR is the resource counted; More adds resources (the kind
	// dimension tells them apart), each with the same selectors.
	GVR       schema.GroupVersionResource
	More      []schema.GroupVersionResource
	Namespace string
	Labels    labels.Selector
	Fields    *FieldFilter
	// Clusters restricts the count; nil is every cluster, an empty
	// non-nil slice none.
	Clusters []string
	// Visible is what the caller may see (nil: everything): hidden
	// objects are not counted, in any row or the total.
	Visible *Visibility
	By      []Dimension
}

// Resources are the resources counted, GVR first.
func (o *CountOptions) Resources() []schema.GroupVersionResource {
	return append([]schema.GroupVersionResource{o.GVR}, o.More...)
}

// LabelSelector is Labels, or everything.
func (o *CountOptions) LabelSelector() labels.Selector {
	if o.Labels == nil {
		return labels.Everything()
	}
	return o.Labels
}

// CountRow is one group: a value per dimension, in the order of By.
type CountRow struct {
	Values []string
	Count  int64
}

// Counts is a count's answer: rows sorted by their values, and the total
// of objects selected (an object in several image rows counts once).
type Counts struct {
	Rows  []CountRow
	Total int64
	// Scanned says how the backend answered: "counters" when from
	// counters kept as objects were applied, "index" when from indexes
	// alone, "objects" when it read the selected objects (a field
	// selector, or a field no index keeps).
	Scanned string
}

// scanCost orders Counts.Scanned from cheapest.
func scanCost(s string) int {
	switch s {
	case "counters":
		return 1
	case "index":
		return 2
	case "objects":
		return 3
	}
	return 0
}

// CostlierScan is the Scanned of a count made of parts scanned as a and
// b: the costlier ("" is no part yet).
func CostlierScan(a, b string) string {
	if scanCost(b) > scanCost(a) {
		return b
	}
	return a
}

// Tally accumulates rows by their values.
type Tally struct {
	rows  map[string]*CountRow
	Total int64
	// recent are the groups last added to, looked up before the map: a
	// count by cluster x phase meets its few groups over and over, and
	// comparing a few short keys costs less than hashing one.
	recent [recentGroups]recentGroup
	next   int
}

const recentGroups = 8

type recentGroup struct {
	key string
	row *CountRow
}

// NewTally is an empty tally.
func NewTally() *Tally { return &Tally{rows: map[string]*CountRow{}} }

// Add counts n objects in the group of values (joined is its key: the
// values joined by a 0 byte). values is copied when the group is new.
func (t *Tally) Add(joined []byte, values []string, n int64) {
	for i := range t.recent {
		if g := &t.recent[i]; g.row != nil && g.key == string(joined) {
			g.row.Count += n
			return
		}
	}
	r, ok := t.rows[string(joined)]
	if ok {
		r.Count += n
	} else {
		r = &CountRow{Values: slices.Clone(values), Count: n}
		t.rows[string(joined)] = r
	}
	t.recent[t.next] = recentGroup{key: string(joined), row: r}
	t.next = (t.next + 1) % recentGroups
}

// AddRow merges a row of another tally (another backend's).
func (t *Tally) AddRow(r CountRow) {
	t.Add([]byte(strings.Join(r.Values, "\x00")), r.Values, r.Count)
}

// Counts is the tally's answer, rows sorted by values.
func (t *Tally) Counts(scanned string) Counts {
	out := Counts{Total: t.Total, Scanned: scanned, Rows: make([]CountRow, 0, len(t.rows))}
	for _, r := range t.rows {
		out.Rows = append(out.Rows, *r)
	}
	slices.SortFunc(out.Rows, func(a, b CountRow) int { return slices.Compare(a.Values, b.Values) })
	return out
}

// Values are the dimension's values for one object of gvr in cluster
// (its JSON, namespace from metadata): what a backend without indexes for
// counts reads from each selected object.
func (d Dimension) Values(gvr schema.GroupVersionResource, cluster string, obj []byte) ([]string, error) {
	switch d.Kind {
	case DimCluster:
		return []string{cluster}, nil
	case DimKind:
		if gvr.Group == "" {
			return []string{gvr.Resource}, nil
		}
		return []string{gvr.Resource + "." + gvr.Group}, nil
	case DimNamespace:
		return Dimension{Kind: DimField, path: []string{"metadata", "namespace"}}.ObjectValues(obj)
	case DimLabel:
		// A label key holds dots and slashes: one path member.
		return Dimension{Kind: DimField, path: []string{"metadata", "labels", d.Key}}.ObjectValues(obj)
	}
	return d.ObjectValues(obj)
}
