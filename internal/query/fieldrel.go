package query

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"
)

// The relation fields: a field selector over an object's relations, not
// its JSON (docs/api.md, "Relations"). Their value names
// another object as Kind/name or Kind.group/name, in the same cluster and
// namespace as the objects listed.
const (
	// FieldOwnedBy selects objects owned by the named one, transitively
	// (a Pod is owned by its ReplicaSet's Deployment).
	FieldOwnedBy = "fleetview.io/ownedBy"
	// FieldSelectedBy selects the Pods the named object's label selector
	// selects (a Service, a workload controller, a PDB, a NetworkPolicy).
	FieldSelectedBy = "fleetview.io/selectedBy"
	// FieldReferences selects objects whose spec names the named one (Pods
	// mounting a Secret).
	FieldReferences = "fleetview.io/references"
)

// RelationField is one relation requirement of a field selector.
type RelationField struct {
	Field string
	// Group may be empty for the core group; Kind is matched
	// case-insensitively.
	Group, Kind, Name string
}

func isRelationField(f string) bool {
	return strings.HasPrefix(f, "fleetview.io/")
}

// relationField parses a relation requirement (only = and ==).
func relationField(sel string, r fields.Requirement) (RelationField, error) {
	switch r.Field {
	case FieldOwnedBy, FieldSelectedBy, FieldReferences:
	default:
		return RelationField{}, fmt.Errorf("%w: fieldSelector %q: unknown relation field %q (%s, %s or %s)", ErrInvalid, sel, r.Field, FieldOwnedBy, FieldSelectedBy, FieldReferences)
	}
	if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
		return RelationField{}, fmt.Errorf("%w: fieldSelector %q: field %q: only = and == are supported", ErrInvalid, sel, r.Field)
	}
	kind, name, ok := strings.Cut(r.Value, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return RelationField{}, fmt.Errorf("%w: fieldSelector %q: field %q: value %q: want Kind/name or Kind.group/name", ErrInvalid, sel, r.Field, r.Value)
	}
	kind, group, _ := strings.Cut(kind, ".")
	return RelationField{Field: r.Field, Group: group, Kind: kind, Name: name}, nil
}

// Relations are the selector's relation requirements; a backend that
// lists with them resolves them to a set of objects and asks
// RelationsResolved for the filter of the rest.
func (f *FieldFilter) Relations() []RelationField {
	if f == nil {
		return nil
	}
	return f.rels
}

// RelationsResolved is f for a backend that applies its relation
// requirements itself: Matches then skips them. Matches on f itself
// refuses them, so a backend or path that cannot answer them says so
// instead of ignoring them.
func (f *FieldFilter) RelationsResolved() *FieldFilter {
	if f == nil || len(f.rels) == 0 {
		return f
	}
	c := *f
	c.relsResolved = true
	return &c
}

// WithRelationVisibility is f whose relation requirements may go only
// through objects vis allows (nil: any), whatever the list's own
// visibility, which covers the listed resource alone.
func (f *FieldFilter) WithRelationVisibility(vis *Visibility) *FieldFilter {
	if f == nil || len(f.rels) == 0 {
		return f
	}
	c := *f
	c.relVisible = vis
	return &c
}

// RelationVisibility is what WithRelationVisibility set.
func (f *FieldFilter) RelationVisibility() *Visibility {
	if f == nil {
		return nil
	}
	return f.relVisible
}
