package query

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ChangeType is what one recorded change did to an object (issue #48).
type ChangeType uint8

const (
	// ChangeAdded: the first revision of the object the hub saw.
	ChangeAdded ChangeType = 1
	// ChangeModified: a later revision.
	ChangeModified ChangeType = 2
	// ChangeDeleted: the object is gone; its revision holds the last state.
	ChangeDeleted ChangeType = 3
)

var changeTypeNames = [...]string{ChangeAdded: "ADDED", ChangeModified: "MODIFIED", ChangeDeleted: "DELETED"}

// String is the type as the APIs spell it (a Kubernetes watch's words).
func (t ChangeType) String() string {
	if int(t) < len(changeTypeNames) && changeTypeNames[t] != "" {
		return changeTypeNames[t]
	}
	return fmt.Sprintf("ChangeType(%d)", uint8(t))
}

// ParseChangeType reads a change type as String spells it, in any case.
func ParseChangeType(s string) (ChangeType, error) {
	for t, n := range changeTypeNames {
		if n != "" && strings.EqualFold(n, s) {
			return ChangeType(t), nil
		}
	}
	return 0, fmt.Errorf("%w: change type %q: want ADDED, MODIFIED or DELETED", ErrInvalid, s)
}

// ParseAsOf reads an as-of time (the asOf parameter of every read API:
// REST, gRPC's as_of, the Kubernetes paths): RFC 3339, a moment of the
// past (up to a second ahead of now is read as now, a little clock skew
// between client and hub); empty is the zero time, no as-of. Each API
// boundary parses it once into the time every later step uses.
func ParseAsOf(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: asOf: %q is not an RFC 3339 time (e.g. 2026-12-06T18:00:00Z)", ErrInvalid, s)
	}
	if t.After(now.Add(time.Second)) {
		return time.Time{}, fmt.Errorf("%w: asOf: %s is in the future", ErrInvalid, s)
	}
	return t, nil
}

// FormatAsOf is an as-of time as ParseAsOf reads it back, exactly.
func FormatAsOf(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Change is one recorded change of one object in one cluster: an entry
// of the fleet's change feed.
type Change struct {
	Cluster   string
	GVR       schema.GroupVersionResource
	Namespace string
	Name      string
	UID       string
	// Seq is the change's sequence on its cluster's stream; with Cluster
	// it names the revision.
	Seq uint64
	// Time is when the collector observed the change.
	Time time.Time
	Type ChangeType
	// ResourceVersion is the member's metadata.resourceVersion.
	ResourceVersion string
	// Manager, Operation and Subresource are the field manager of the
	// change as the object's managedFields tell it (the entry with the
	// latest time); empty when the object does not say.
	Manager     string
	Operation   string
	Subresource string
	// Labels are the object's labels after the change (for a delete,
	// its last ones).
	Labels map[string]string
}

// Revision is a change with the object's state.
type Revision struct {
	Change
	// Object is the object's JSON after the change; for a delete its last
	// state. Nil in a change feed page that did not ask for objects.
	Object []byte
	// Patch is the JSON merge patch (RFC 7386) from the object's previous
	// revision to this one; nil for the first revision kept and for a
	// delete.
	Patch []byte
}

// ChangesOptions selects changes of the fleet's change feed.
type ChangesOptions struct {
	// Since and Until bound the change's Time: [Since, Until). A zero
	// Since is the start of the retention window, a zero Until now.
	Since, Until time.Time
	// Clusters restricts the feed; nil means every cluster.
	Clusters []string
	// Namespace restricts it to one namespace; empty means all.
	Namespace string
	// Resources restricts it to some resources (any version); nil: all.
	Resources []schema.GroupResource
	// Labels selects by the labels of the change (Change.Labels).
	Labels labels.Selector
	// Types restricts the change types; nil means all.
	Types []ChangeType
	// Objects asks for each change's object (Revision.Object): the
	// "recently deleted" view shows what a deleted object held.
	Objects bool
	// Visible is what the caller may see, applied before the limit as
	// for a list.
	Visible  *Visibility
	Limit    int64
	Continue string
}

// ChangePage is one page of the change feed, oldest first.
type ChangePage struct {
	Changes  []Revision
	Continue string
}

// RevisionsOptions names one object whose revisions are read.
type RevisionsOptions struct {
	// Object names it as a Get does (cluster, namespace, name, and what
	// the caller may see). A deleted object is found by its name too.
	Object GetOptions
	// UID picks one incarnation when the name was reused; empty: all.
	UID          string
	Since, Until time.Time
	Limit        int64
	Continue     string
}

// RevisionPage is one page of an object's revisions, oldest first.
type RevisionPage struct {
	Revisions []Revision
	Continue  string
}

// HistoryWindow is what a store's history holds: changes observed from
// Start on, and per cluster every change after Seq[cluster] (a watch
// resumed from a sequence at or past it replays exactly; before it the
// history has lost changes). A cluster without an entry has nothing
// recorded.
type HistoryWindow struct {
	Start time.Time
	Seq   map[string]uint64
}
