package query

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Edge types of a relationship answer (internal/relations names the same).
const (
	EdgeOwner      = "owner"
	EdgeSelects    = "selects"
	EdgeReferences = "references"
	EdgeCopy       = "copy"
)

// MaxRelatedDepth bounds a related read: each hop can fan out (a Service
// selecting thousands of Pods), so depth is a cost the caller chooses
// within a limit.
const MaxRelatedDepth = 5

// MaxRelatedNodes bounds one answer; a graph cut there says so
// (Graph.Truncated).
const MaxRelatedNodes = 2000

// RelatedOptions names one object and how far to follow its relations.
type RelatedOptions struct {
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
	// Cluster holds the object; required (relations are within a cluster,
	// copies across clusters are found from it).
	Cluster string
	// Depth is how many hops to follow (1..MaxRelatedDepth).
	Depth int
	// Kinds, when set, restricts the objects followed and answered (the
	// starting object always is) to these kinds, matched case-insensitively
	// against the kind or the resource.
	Kinds []string
	// Visible is what the caller may see; nil: everything. A node it does
	// not allow is neither answered nor followed, and no edge names it.
	Visible *Visibility
}

// Sees reports whether the caller may see node n (Visible). A node of
// an unknown resource is not seen: the caller's grants cannot be judged.
// Every backend's walk asks this one question.
func (o *RelatedOptions) Sees(n Node) bool {
	if o.Visible == nil {
		return true
	}
	if n.Resource == "" {
		return false
	}
	return o.Visible.Allows(schema.GroupResource{Group: n.Group, Resource: n.Resource}, n.Cluster, n.Namespace)
}

// Validate checks the options, naming the field at fault.
func (o *RelatedOptions) Validate() error {
	switch {
	case o.GVR.Version == "" || o.GVR.Resource == "":
		return fmt.Errorf("%w: related needs version and resource", ErrInvalid)
	case o.Name == "":
		return fmt.Errorf("%w: related needs name", ErrInvalid)
	case o.Cluster == "":
		return fmt.Errorf("%w: related needs cluster (relations are within one cluster)", ErrInvalid)
	case o.Depth < 0 || o.Depth > MaxRelatedDepth:
		return fmt.Errorf("%w: depth %d: must be 1..%d", ErrInvalid, o.Depth, MaxRelatedDepth)
	}
	if o.Depth == 0 {
		o.Depth = 1
	}
	return nil
}

// Follows reports whether a node of kind and resource is within Kinds.
func (o *RelatedOptions) Follows(kind, resource string) bool {
	if len(o.Kinds) == 0 {
		return true
	}
	for _, k := range o.Kinds {
		if strings.EqualFold(k, kind) || strings.EqualFold(k, resource) {
			return true
		}
	}
	return false
}

// Node is one object of a relationship answer. A node that is not Cached
// is a reference only: something a cached object names that no cluster
// has sent (its Version and UID are then empty, and Resource is known
// only for built-in kinds and kinds the store has seen).
type Node struct {
	Cluster   string
	Group     string
	Version   string
	Resource  string
	Kind      string
	Namespace string
	Name      string
	UID       string
	Cached    bool
}

// ID is the node's identity in edges: cluster, group, kind, namespace,
// name.
func (n Node) ID() string {
	return strings.Join([]string{n.Cluster, n.Group, n.Kind, n.Namespace, n.Name}, "/")
}

// Edge is one relation between two nodes of an answer, by their IDs.
type Edge struct {
	Type string
	From string
	To   string
}

// Graph is a relationship answer: the starting object first.
type Graph struct {
	Nodes []Node
	Edges []Edge
	// Truncated: MaxRelatedNodes was reached; deeper nodes are missing.
	Truncated bool
}
