package relations

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// EdgeType is what an edge says.
type EdgeType string

const (
	// Owner: the source is owned by the target (an ownerReference).
	Owner EdgeType = "owner"
	// Selects: the source's label selector selects the target.
	Selects EdgeType = "selects"
	// References: the source's spec names the target.
	References EdgeType = "references"
	// Copy: the same group, kind, namespace and name in another cluster.
	Copy EdgeType = "copy"
)

// Target names an object of the same cluster by group, kind, namespace
// and name, as references do (an ownerReference has no resource).
type Target struct {
	Group     string `json:"g,omitempty"`
	Kind      string `json:"k"`
	Namespace string `json:"ns,omitempty"`
	Name      string `json:"n"`
}

func (t Target) String() string {
	return fmt.Sprintf("%s/%s/%s/%s", t.Group, t.Kind, t.Namespace, t.Name)
}

// Ref is one outgoing edge of an object.
type Ref struct {
	Type   EdgeType `json:"t"`
	Target Target   `json:"to"`
}

// Requirement is one matchExpressions entry (In, NotIn, Exists,
// DoesNotExist).
type Requirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// Selector is a label selector over the Pods of one namespace. A nil
// *Selector selects nothing; an empty one selects every Pod of the
// namespace (a NetworkPolicy's podSelector: {}).
type Selector struct {
	// Group and Kind of what it selects (always Pods today).
	Group       string            `json:"g,omitempty"`
	Kind        string            `json:"k"`
	Namespace   string            `json:"ns,omitempty"`
	MatchLabels map[string]string `json:"ml,omitempty"`
	MatchExpr   []Requirement     `json:"me,omitempty"`
}

// Matches reports whether an object with labels lbls is selected.
func (s *Selector) Matches(lbls map[string]string) bool {
	if s == nil {
		return false
	}
	for k, v := range s.MatchLabels {
		if got, ok := lbls[k]; !ok || got != v {
			return false
		}
	}
	for _, r := range s.MatchExpr {
		v, ok := lbls[r.Key]
		switch r.Operator {
		case "In":
			if !ok || !contains(r.Values, v) {
				return false
			}
		case "NotIn":
			if ok && contains(r.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		default:
			return false // refused by Extract; never matches
		}
	}
	return true
}

// Equality is one label the selector requires with one value, for an
// index lookup, or false when it requires none (then every Pod of the
// namespace is a candidate). The lowest key wins, so the choice is stable.
func (s *Selector) Equality() (key, value string, ok bool) {
	keys := make([]string, 0, len(s.MatchLabels))
	for k := range s.MatchLabels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		return keys[0], s.MatchLabels[keys[0]], true
	}
	for _, r := range s.MatchExpr {
		if r.Operator == "In" && len(r.Values) == 1 {
			return r.Key, r.Values[0], true
		}
	}
	return "", "", false
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Relations is what Extract reads from one object.
type Relations struct {
	// Kind is the object's own kind (from its JSON).
	Kind string `json:"kind,omitempty"`
	// Refs are its outgoing owner and reference edges, sorted and
	// without duplicates.
	Refs []Ref `json:"refs,omitempty"`
	// Selector is its label selector, or nil.
	Selector *Selector `json:"sel,omitempty"`
}

// Empty reports whether the object relates to nothing.
func (r Relations) Empty() bool { return len(r.Refs) == 0 && r.Selector == nil }

// podSelectors are the resources whose spec.selector is a LabelSelector
// over Pods (and the field it is in).
var podSelectors = map[schema.GroupResource][]string{
	{Group: "apps", Resource: "deployments"}:                  {"spec", "selector"},
	{Group: "apps", Resource: "replicasets"}:                  {"spec", "selector"},
	{Group: "apps", Resource: "statefulsets"}:                 {"spec", "selector"},
	{Group: "apps", Resource: "daemonsets"}:                   {"spec", "selector"},
	{Group: "batch", Resource: "jobs"}:                        {"spec", "selector"},
	{Group: "policy", Resource: "poddisruptionbudgets"}:       {"spec", "selector"},
	{Group: "networking.k8s.io", Resource: "networkpolicies"}: {"spec", "podSelector"},
}

// Extract reads the relations of obj, an object of resource gr in
// namespace ns. Only the fields it needs are decoded.
func Extract(gr schema.GroupResource, ns string, obj []byte) (Relations, error) {
	if gr == (schema.GroupResource{Resource: "pods"}) {
		if r, err := extractPod(ns, obj); err == nil {
			return r, nil
		}
	}
	return extractJSON(gr, ns, obj)
}

// extractJSON is Extract by encoding/json, for every kind.
func extractJSON(gr schema.GroupResource, ns string, obj []byte) (Relations, error) {
	var o object
	if err := json.Unmarshal(obj, &o); err != nil {
		return Relations{}, fmt.Errorf("%w: object of %s %s: %v", ErrInvalid, gr, ns, err)
	}
	o.Spec.ServiceSelector, o.Spec.Selector = o.Spec.RawSelector.asMap, o.Spec.RawSelector.asSel
	r := Relations{Kind: o.Kind}
	add := func(t EdgeType, group, kind, tns, name string) {
		if name == "" || kind == "" {
			return
		}
		if ClusterScoped(group, kind) {
			tns = ""
		}
		r.Refs = append(r.Refs, Ref{Type: t, Target: Target{Group: group, Kind: kind, Namespace: tns, Name: name}})
	}
	for _, or := range o.Metadata.OwnerReferences {
		add(Owner, groupOf(or.APIVersion), or.Kind, ns, or.Name)
	}
	switch gr {
	case schema.GroupResource{Resource: "pods"}:
		o.Spec.pod(ns, add)
	case schema.GroupResource{Resource: "services"}:
		if len(o.Spec.ServiceSelector) > 0 {
			r.Selector = &Selector{Kind: "Pod", Namespace: ns, MatchLabels: o.Spec.ServiceSelector}
		}
	case schema.GroupResource{Resource: "persistentvolumeclaims"}:
		add(References, "", "PersistentVolume", "", o.Spec.VolumeName)
	case schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"}:
		if b := o.Spec.DefaultBackend; b != nil && b.Service != nil {
			add(References, "", "Service", ns, b.Service.Name)
		}
		for _, rule := range o.Spec.Rules {
			if rule.HTTP == nil {
				continue
			}
			for _, p := range rule.HTTP.Paths {
				if p.Backend.Service != nil {
					add(References, "", "Service", ns, p.Backend.Service.Name)
				}
			}
		}
	case schema.GroupResource{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:
		if t := o.Spec.ScaleTargetRef; t != nil {
			add(References, groupOf(t.APIVersion), t.Kind, ns, t.Name)
		}
	}
	if _, ok := podSelectors[gr]; ok {
		sel := o.Spec.Selector
		if gr.Resource == "networkpolicies" {
			sel = o.Spec.PodSelector
		}
		s, err := sel.selector(ns)
		if err != nil {
			return Relations{}, fmt.Errorf("%w: %s %s/%s: %v", ErrInvalid, gr, ns, o.Metadata.Name, err)
		}
		r.Selector = s
	}
	r.Refs = dedupe(r.Refs)
	return r, nil
}

func dedupe(refs []Ref) []Ref {
	if len(refs) < 2 {
		return refs
	}
	// slices.SortFunc, not sort.Slice: its reflection cost two
	// allocations an object. The same pdqsort (and, at a Pod's dozen refs
	// or fewer, the same insertion sort) on the same order, so refs that
	// compare equal but differ keep the order sort.Slice gave them.
	slices.SortFunc(refs, func(a, b Ref) int {
		if a.Type != b.Type {
			return strings.Compare(string(a.Type), string(b.Type))
		}
		return compareTargets(a.Target, b.Target)
	})
	out := refs[:1]
	for _, r := range refs[1:] {
		if r != out[len(out)-1] {
			out = append(out, r)
		}
	}
	return out
}

// compareTargets orders targets as their String forms would be ordered,
// without building them: the sort ran fmt.Sprintf twice per comparison,
// a tenth of what an initial load spent on relations.
func compareTargets(a, b Target) int {
	as := [4]string{a.Group, a.Kind, a.Namespace, a.Name}
	bs := [4]string{b.Group, b.Kind, b.Namespace, b.Name}
	var i, j, ai, bi int // part and offset in it, of a and of b
	for {
		ca, oka := joinedByte(&as, &i, &ai)
		cb, okb := joinedByte(&bs, &j, &bi)
		switch {
		case !oka && !okb:
			return 0
		case !oka:
			return -1
		case !okb:
			return 1
		case ca != cb:
			return int(ca) - int(cb)
		}
	}
}

// joinedByte is the next byte of parts joined by '/', at part *p, offset
// *o, and advances past it; false at the end.
func joinedByte(parts *[4]string, p, o *int) (byte, bool) {
	for *p < len(parts) {
		if *o < len(parts[*p]) {
			c := parts[*p][*o]
			*o++
			return c, true
		}
		if *p == len(parts)-1 {
			*p++
			return 0, false
		}
		*p++
		*o = 0
		return '/', true
	}
	return 0, false
}

// groupOf is the group of an apiVersion ("apps/v1" -> "apps", "v1" -> "").
func groupOf(apiVersion string) string {
	if i := strings.IndexByte(apiVersion, '/'); i >= 0 {
		return apiVersion[:i]
	}
	return ""
}

// HasSpecRelations reports whether objects of gr can name others or
// select Pods in their spec (beyond ownerReferences, which any object
// may have): a store skips reading the rest.
func HasSpecRelations(gr schema.GroupResource) bool {
	if _, ok := podSelectors[gr]; ok {
		return true
	}
	switch gr {
	case schema.GroupResource{Resource: "pods"}, schema.GroupResource{Resource: "services"},
		schema.GroupResource{Resource: "persistentvolumeclaims"},
		schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"},
		schema.GroupResource{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:
		return true
	}
	return false
}
