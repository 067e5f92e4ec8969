package badger

import (
	"bytes"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/relations"
)

// The relationship key families (doc.go):
//
//	E/<cluster>/<group>/<version>/<resource>/<ns>/<name>  -> the object's relations (encodeRelations)
//	R/<cluster>/<tgroup>/<tkind>/<tns>/<tname>/<code><group>/<version>/<resource>/[<ns>/]<name> -> the source's kind, uid (reverseValue)
//	Q/<cluster>/<ns>/<group>/<version>/<resource>/<name>  -> the object's label selector (JSON)
//	K/<group>/<kind>                                       -> version, resource, cluster-scoped

func relKey(cluster string, g schema.GroupVersionResource, ns, name string) []byte {
	return join("E", cluster, g.Group, g.Version, g.Resource, ns, name)
}

func reversePrefix(cluster string, t relations.Target) []byte {
	return append(join("R", cluster, t.Group, t.Kind, t.Namespace, t.Name), sep)
}

// An R/ key's source part starts with one byte, its code: the edge's
// type, and whether the source's namespace is the target's (a Pod's
// owner, ConfigMaps, ServiceAccount), and then left out. Keys written
// before 2026-12-07 13:00 (oldReverseKey) spell the type out, repeat the
// namespace, and their value holds the uid as text; both forms are read
// (cutReverseKey), and an E/ entry says per edge which form its R/ key
// has (relate_edges.go), so the writer deletes the key that exists. The
// codes are below the letters the older form's type words begin with.
const (
	revOwnerSameNS byte = 1 + iota
	revOwnerOwnNS
	revRefSameNS
	revRefOwnNS
)

// reverseKey is the R/ key of an edge of type typ from the object at
// (g, ns, name) to t. typ is Owner or References (encodeRelations
// stores no other).
func reverseKey(cluster string, t relations.Target, typ relations.EdgeType, g schema.GroupVersionResource, ns, name string) []byte {
	return appendReverseKey(make([]byte, 0, reverseKeyLen(cluster, t, g, ns, name)), cluster, t, typ, g, ns, name)
}

// reverseKeyLen is at least the length of reverseKey's key.
func reverseKeyLen(cluster string, t relations.Target, g schema.GroupVersionResource, ns, name string) int {
	return 11 + len(cluster) + len(t.Group) + len(t.Kind) + len(t.Namespace) + len(t.Name) + len(g.Group) + len(g.Version) + len(g.Resource) + len(ns) + len(name)
}

// appendReverseKey appends reverseKey's key to b.
func appendReverseKey(b []byte, cluster string, t relations.Target, typ relations.EdgeType, g schema.GroupVersionResource, ns, name string) []byte {
	b = append(b, 'R', sep)
	for _, s := range []string{cluster, t.Group, t.Kind, t.Namespace, t.Name} {
		b = append(append(b, s...), sep)
	}
	code := revRefSameNS
	if typ == relations.Owner {
		code = revOwnerSameNS
	}
	if ns != t.Namespace {
		code++
	}
	b = append(b, code)
	b = append(append(append(append(append(append(b, g.Group...), sep), g.Version...), sep), g.Resource...), sep)
	if ns != t.Namespace {
		b = append(append(b, ns...), sep)
	}
	return append(b, name...)
}

// oldReverseKey is the R/ key of the form before reverseKey's.
func oldReverseKey(cluster string, t relations.Target, typ relations.EdgeType, g schema.GroupVersionResource, ns, name string) []byte {
	return join("R", cluster, t.Group, t.Kind, t.Namespace, t.Name, string(typ), g.Group, g.Version, g.Resource, ns, name)
}

// reverseParts is an R/ key's source, cut in place from the key.
type reverseParts struct {
	typ                      relations.EdgeType
	group, version, resource []byte
	ns, name                 []byte
	// old: the key has the form before reverseKey's (and so its value).
	old bool
}

var ownerWord, referencesWord = []byte(relations.Owner), []byte(relations.References)

// cutReverseKey cuts an R/ key's source part (what follows its target's
// prefix, reversePrefix) of either form; tns is the target's namespace.
// ok false: not an R/ key's source.
func cutReverseKey(rest, tns []byte) (p reverseParts, ok bool) {
	if len(rest) == 0 {
		return p, false
	}
	switch code := rest[0]; code {
	case revOwnerSameNS, revOwnerOwnNS, revRefSameNS, revRefOwnNS:
		p.typ = relations.References
		if code <= revOwnerOwnNS {
			p.typ = relations.Owner
		}
		if code == revOwnerSameNS || code == revRefSameNS {
			var parts [4][]byte
			if !splitN(rest[1:], parts[:]) {
				return p, false
			}
			p.group, p.version, p.resource, p.ns, p.name = parts[0], parts[1], parts[2], tns, parts[3]
			return p, true
		}
		var parts [5][]byte
		if !splitN(rest[1:], parts[:]) {
			return p, false
		}
		p.group, p.version, p.resource, p.ns, p.name = parts[0], parts[1], parts[2], parts[3], parts[4]
		return p, true
	}
	var parts [6][]byte
	if !splitN(rest, parts[:]) {
		return p, false
	}
	switch {
	case bytes.Equal(parts[0], ownerWord):
		p.typ = relations.Owner
	case bytes.Equal(parts[0], referencesWord):
		p.typ = relations.References
	default:
		return p, false
	}
	p.group, p.version, p.resource, p.ns, p.name, p.old = parts[1], parts[2], parts[3], parts[4], parts[5], true
	return p, true
}

func selectorPrefix(cluster, ns string) []byte { return append(join("Q", cluster, ns), sep) }

func selectorKey(cluster, ns string, g schema.GroupVersionResource, name string) []byte {
	return join("Q", cluster, ns, g.Group, g.Version, g.Resource, name)
}

func kindKey(group, kind string) []byte { return join("K", group, kind) }
