package query

import "k8s.io/apimachinery/pkg/fields"

// KeyRequirements are the selector's requirements when each reads only
// metadata.name or metadata.namespace (ok false otherwise): a backend
// can then apply the selector as exact clauses on its own keys, without
// the object.
func (f *FieldFilter) KeyRequirements() (fields.Requirements, bool) {
	if f == nil {
		return nil, true
	}
	for _, r := range f.reqs {
		if r.Field != "metadata.name" && r.Field != "metadata.namespace" {
			return nil, false
		}
	}
	return f.reqs, true
}
