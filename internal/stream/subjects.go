package stream

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/natsnames"
)

// groupToken encodes an API group as one subject token, the core group as
// kubepath.CoreGroupName. Groups are DNS subdomains: they may hold dots
// (token separators) but never '_'.
func groupToken(group string) string {
	return strings.ReplaceAll(kubepath.GroupName(group), ".", "_")
}

func groupFromToken(tok string) string {
	return kubepath.GroupFromName(strings.ReplaceAll(tok, "_", "."))
}

// ResourceToken is the "<group>.<version>.<resource>" part of a subject.
func ResourceToken(gvr schema.GroupVersionResource) string {
	return groupToken(gvr.Group) + "." + gvr.Version + "." + gvr.Resource
}

// ObjectSubject is where the current state of one object lives:
// fv.obj.<cluster>.<group>.<version>.<resource>.<uid>.
func ObjectSubject(cluster string, gvr schema.GroupVersionResource, uid string) string {
	return natsnames.SubjectRoot + ".obj." + cluster + "." + ResourceToken(gvr) + "." + uid
}

// ResourceFilter matches every object subject of one resource in a cluster.
func ResourceFilter(cluster string, gvr schema.GroupVersionResource) string {
	return natsnames.SubjectRoot + ".obj." + cluster + "." + ResourceToken(gvr) + ".*"
}

// ClusterObjects matches every object subject of a cluster.
func ClusterObjects(cluster string) string { return natsnames.SubjectRoot + ".obj." + cluster + ".>" }

// ClusterControls matches every control subject of a cluster.
func ClusterControls(cluster string) string { return natsnames.SubjectRoot + ".ctl." + cluster + ".>" }

// ClusterSubjects are the subjects of a cluster's stream: its objects and
// its control records. A collector may publish into these only.
func ClusterSubjects(cluster string) []string {
	return []string{ClusterObjects(cluster), ClusterControls(cluster)}
}

// AllObjects matches every cluster's object subjects: a stream listed by it
// is a cluster stream.
const AllObjects = natsnames.SubjectRoot + ".obj.>"

// ControlSubject carries sync markers and removal records of one resource.
// It shares the cluster stream so consumers see it in order with the objects.
func ControlSubject(cluster string, gvr schema.GroupVersionResource) string {
	return natsnames.SubjectRoot + ".ctl." + cluster + "." + ResourceToken(gvr)
}

// ParsedSubject is an object or control subject taken apart.
type ParsedSubject struct {
	Control bool
	Cluster string
	GVR     schema.GroupVersionResource
	UID     string
}

// ParseSubject reverses ObjectSubject and ControlSubject. A subject with
// an empty token is refused: neither renders one, and an empty group token
// would otherwise parse as the core group, giving an object a second
// subject (and so a second message in the compacted stream).
func ParseSubject(subj string) (ParsedSubject, error) {
	t := strings.Split(subj, ".")
	if slices.Contains(t, "") {
		return ParsedSubject{}, fmt.Errorf("%w: %q has an empty token", ErrBadSubject, subj)
	}
	switch {
	case len(t) == 7 && t[0] == natsnames.SubjectRoot && t[1] == "obj":
		return ParsedSubject{Cluster: t[2], GVR: schema.GroupVersionResource{Group: groupFromToken(t[3]), Version: t[4], Resource: t[5]}, UID: t[6]}, nil
	case len(t) == 6 && t[0] == natsnames.SubjectRoot && t[1] == "ctl":
		return ParsedSubject{Control: true, Cluster: t[2], GVR: schema.GroupVersionResource{Group: groupFromToken(t[3]), Version: t[4], Resource: t[5]}}, nil
	}
	return ParsedSubject{}, fmt.Errorf("%w: %q", ErrBadSubject, subj)
}
