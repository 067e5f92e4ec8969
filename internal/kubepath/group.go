package kubepath

// CoreGroupName spells the core API group (the group "", served under
// /api) wherever fleetview needs a group to be a non-empty word: the group
// of a gRPC or REST request and of a search's "group/version/resource"
// (proto/fleetview/v1), and the group token of the object stream's
// subjects (internal/stream), which stored subjects and OpenSearch
// document ids carry: a wire name that must never change.
const CoreGroupName = "core"

// GroupName spells group as a request or a subject names it:
// CoreGroupName for the core group.
func GroupName(group string) string {
	if group == "" {
		return CoreGroupName
	}
	return group
}

// GroupFromName is the API group name spells: the core group "" for
// CoreGroupName (and for ""), else name itself.
func GroupFromName(name string) string {
	if name == CoreGroupName {
		return ""
	}
	return name
}
