package badger

import (
	"bytes"
	"errors"
	"fmt"

	bdg "github.com/dgraph-io/badger/v4"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/rawjson"
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

// relState is what a batch did to an object's E/ entry: its new value, or
// gone.
type relState struct {
	gone bool
	v    []byte
}

// kindSeen remembers, per process, the resources whose kind index entry
// (K/) was written, so the entry costs one write per resource and process,
// not one per event.
type kindSeen struct{ gvr schema.GroupVersionResource }

// relate keeps the relations of the object at (gvr, ns, name) of the
// writer's cluster: it reads them from obj and rewrites the E/, R/ and Q/
// entries only when they changed (rewriteEdges: only the R/ and Q/
// entries that changed). lbls are the object's labels, kept in the E/
// entry of a Pod (what Related matches selectors against). mayExist is
// false for an object the store does not hold, whose old relations need
// not be read.
//
// What relations come from (kind, owner references, spec) is hashed and
// the hash leads the E/ entry: an update that keeps them (a status
// update, most updates) is recognized by one small read and the hash,
// without decoding anything. A kind the store has indexed that names
// nothing in its spec and has no "ownerReferences" in its bytes (most
// ConfigMaps, Secrets, Nodes) is not read at all.
func (w *writer) relate(gvr schema.GroupVersionResource, ns, name string, obj []byte, lbls map[string]string, mayExist bool) error {
	if w.s.noRelations {
		return nil
	}
	_, kindKnown := w.s.kinds.Load(kindSeen{gvr})
	gr := gvr.GroupResource()
	spec := relations.HasSpecRelations(gr)
	read := !kindKnown || spec || bytes.Contains(obj, ownerRefsMember)
	var rd *relRead
	var doc []byte // rd's document, when this goroutine read it
	if read {
		// Read ahead by the batch's workers (relate_pre.go), else here.
		if rd = w.preRead(gvr, ns, name, obj); rd == nil {
			rd = &relRead{}
			doc = w.relDoc.readHeader(rd, gr, obj, spec)
		}
		if rd.err != nil {
			return rd.err // checked by the materializer: not reached
		}
		if !kindKnown && rd.kind != "" {
			if err := w.set(kindKey(gvr.Group, rd.kind), encodeKind(gvr, ns == "")); err != nil {
				return err
			}
			w.s.kinds.Store(kindSeen{gvr}, true)
		}
	}
	fkey := relKey(w.cluster, gvr, ns, name)
	var old []byte
	if mayExist {
		var err error
		if old, err = w.relations(fkey); err != nil {
			return err
		}
	}
	var head []byte
	if read {
		if gvr != podsGVR {
			lbls = nil
		}
		head = relHeader(rd.h, rd.kind, rd.uid, lbls)
		// The header is self-delimiting: a prefix is the same header.
		if bytes.HasPrefix(old, head) {
			return nil // what relations come from, and the node, did not change
		}
	}
	var nv, sel []byte
	var kind, uid string
	var refs []relations.Ref
	var rkeys [][]byte
	if read {
		if !rd.extracted {
			if doc == nil { // read ahead without its edges: read again
				x := relRead{}
				doc = w.relDoc.readHeader(&x, gr, obj, spec)
				if x.err != nil {
					return x.err
				}
			}
			x := *rd // not changed in place: the read-ahead result may be taken again (an event applied again)
			x.extract(w.cluster, gvr, ns, name, doc, false)
			rd = &x
		}
		if rd.extErr != nil {
			// The object is stored all the same, relating to nothing: a
			// selector the member's apiserver accepted but this reader
			// cannot is no reason to drop the object.
			w.s.log.Warn("object stored without its relations", "cluster", w.cluster, "resource", gvr.String(), "namespace", ns, "name", name, "err", rd.extErr)
		}
		if rd.encErr != nil {
			return rd.encErr
		}
		// Kept even when empty: the hash spares the next update a decode.
		nv = append(append(make([]byte, 0, len(head)+len(rd.edges)), head...), rd.edges...)
		if rd.selLen > 0 {
			sel = nv[len(nv)-rd.selLen:]
		}
		kind, uid, refs, rkeys = rd.kind, rd.uid, rd.rel.Refs, rd.rkeys
	}
	if bytes.Equal(old, nv) {
		return nil
	}
	if nv == nil {
		if err := w.dropRelations(gvr, ns, name, old); err != nil {
			return err
		}
		w.rels()[string(fkey)] = relState{gone: true}
		return w.del(fkey)
	}
	if err := w.rewriteEdges(gvr, ns, name, old, kind, uid, refs, rkeys, sel); err != nil {
		return err
	}
	w.rels()[string(fkey)] = relState{v: nv}
	return w.set(fkey, nv)
}

// relDoc is the part of obj relations are read from, as a small document
// relations.Extract reads: kind, metadata.ownerReferences and (withSpec)
// spec, copied as they are. One pass over the members, which stops once
// it has them (status, after spec, is not scanned), and reads each byte
// once: metadata and spec are walked as they are skipped, not skipped and
// walked again; decoding the document costs a fraction of the object's.
//
// It also returns the object's kind and metadata.uid (what a Related node
// shows), read on the way.
func relDoc(obj []byte, withSpec bool) (doc []byte, kind, uid string, err error) {
	var b relDocBuf
	return b.build(obj, withSpec)
}

// relDocBuf holds the buffers relDoc builds in, which a writer reuses
// from one object to the next: the document is read (hashed, extracted)
// before the next is built, and nothing keeps it. Allocating them for
// every object was a third of what relDoc cost an initial load.
//
// pre is the batch's read-ahead (relate_pre.go), kept here, with the
// writer's other relate state.
type relDocBuf struct {
	doc, spec []byte
	pre       *relPrepass
}

// build is relDoc, in b's buffers.
func (b *relDocBuf) build(obj []byte, withSpec bool) (doc []byte, kind, uid string, err error) {
	var kindV, owners []byte
	spec := b.spec[:0]
	var seenKind, seenMeta, seenSpec, hasSpec bool
	_, err = rawjson.EachMember(obj, 0, func(m rawjson.Member) (int, error) {
		var end int
		var err error
		switch string(m.Key) {
		case "kind":
			if end, err = rawjson.SkipValue(obj, m.ValueStart); err == nil {
				kindV, seenKind = obj[m.ValueStart:end], true
			}
		case "spec":
			seenSpec = true
			if withSpec && m.ValueStart < len(obj) && obj[m.ValueStart] == '{' {
				spec, end, err = appendSpec(spec[:0], obj, m.ValueStart)
				hasSpec = true
			} else {
				hasSpec = false
				end, err = rawjson.SkipValue(obj, m.ValueStart)
			}
		case "metadata":
			seenMeta = true
			end, err = rawjson.EachMember(obj, m.ValueStart, func(mm rawjson.Member) (int, error) {
				e, err := rawjson.SkipValue(obj, mm.ValueStart)
				if err == nil {
					switch string(mm.Key) {
					case "ownerReferences":
						owners = obj[mm.ValueStart:e]
					case "uid":
						uid, _ = rawjson.String(obj[mm.ValueStart:e])
					}
				}
				return e, err
			})
		default:
			end, err = rawjson.SkipValue(obj, m.ValueStart)
		}
		if err != nil {
			return 0, err
		}
		if seenKind && seenMeta && (seenSpec || !withSpec) {
			return 0, errStopScan
		}
		return end, nil
	})
	b.spec = spec
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, "", "", err
	}
	doc = append(b.doc[:0], `{"kind":`...)
	if len(kindV) > 0 && kindV[0] == '"' {
		doc = append(doc, kindV...)
		kind, _ = rawjson.String(kindV)
	} else {
		doc = append(doc, `""`...)
	}
	if len(owners) > 0 && owners[0] == '[' {
		doc = append(append(append(doc, `,"metadata":{"ownerReferences":`...), owners...), '}')
	}
	if hasSpec {
		doc = append(append(doc, `,"spec":`...), spec...)
	}
	doc = append(doc, '}')
	b.doc = doc
	return doc, kind, uid, nil
}

// isSpecMember reports whether key is a spec member relations.Extract
// reads; containers (the bulk of a Pod's spec) are kept as their envFrom
// and env alone.
func isSpecMember(key []byte) bool {
	switch string(key) {
	case "selector", "podSelector", "nodeName", "serviceAccountName", "volumes", "imagePullSecrets",
		"volumeName", "defaultBackend", "rules", "scaleTargetRef":
		return true
	}
	return false
}

func isContainerList(key []byte) bool {
	switch string(key) {
	case "containers", "initContainers", "ephemeralContainers":
		return true
	}
	return false
}

// appendSpec appends to doc the members of the spec object at b[i] that
// relations read, and returns the offset past the spec: a Pod's spec
// shrinks to about a fifth, and so does its decode.
func appendSpec(doc, b []byte, i int) ([]byte, int, error) {
	doc = append(doc, '{')
	first := true
	key := func(k []byte) {
		if !first {
			doc = append(doc, ',')
		}
		first = false
		doc = append(append(append(doc, '"'), k...), `":`...)
	}
	end, err := rawjson.EachMember(b, i, func(m rawjson.Member) (int, error) {
		switch {
		case isSpecMember(m.Key):
			end, err := rawjson.SkipValue(b, m.ValueStart)
			if err == nil {
				key(m.Key)
				doc = append(doc, b[m.ValueStart:end]...)
			}
			return end, err
		case isContainerList(m.Key) && m.ValueStart < len(b) && b[m.ValueStart] == '[':
			key(m.Key)
			var end int
			var err error
			doc, end, err = containerRefs(doc, b, m.ValueStart)
			return end, err
		}
		return rawjson.SkipValue(b, m.ValueStart)
	})
	return append(doc, '}'), end, err
}

// containerRefs appends to out the containers array at b[i] with each
// container's envFrom and env only, and returns the offset past the array.
func containerRefs(out, b []byte, i int) ([]byte, int, error) {
	out = append(out, '[')
	i = rawjson.SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return append(out, ']'), i + 1, nil
	}
	for k := 0; ; k++ {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, '{')
		var end int
		var err error
		if i < len(b) && b[i] == '{' {
			n := 0
			end, err = rawjson.EachMember(b, i, func(m rawjson.Member) (int, error) {
				e, err := rawjson.SkipValue(b, m.ValueStart)
				if err == nil && (string(m.Key) == "envFrom" || string(m.Key) == "env") {
					if n > 0 {
						out = append(out, ',')
					}
					n++
					out = append(append(append(append(out, '"'), m.Key...), `":`...), b[m.ValueStart:e]...)
				}
				return e, err
			})
		} else {
			end, err = rawjson.SkipValue(b, i)
		}
		if err != nil {
			return nil, 0, err
		}
		out = append(out, '}')
		if i = rawjson.SkipSpace(b, end); i >= len(b) {
			return nil, 0, fmt.Errorf("%w: containers: unterminated array", errCorrupt)
		}
		switch b[i] {
		case ',':
			i = rawjson.SkipSpace(b, i+1)
		case ']':
			return append(out, ']'), i + 1, nil
		default:
			return nil, 0, fmt.Errorf("%w: containers: %q after an element", errCorrupt, b[i])
		}
	}
}

// errStopScan ends relDoc's scan once it has what it reads.
var errStopScan = errors.New("scan done")

// unrelate drops the relations of a deleted object.
func (w *writer) unrelate(gvr schema.GroupVersionResource, ns, name string) error {
	if w.s.noRelations {
		return nil
	}
	fkey := relKey(w.cluster, gvr, ns, name)
	old, err := w.relations(fkey)
	if err != nil || old == nil {
		return err
	}
	if err := w.dropRelations(gvr, ns, name, old); err != nil {
		return err
	}
	w.rels()[string(fkey)] = relState{gone: true}
	return w.del(fkey)
}

// dropRelations deletes the R/ and Q/ entries of the relations old (nil:
// none).
func (w *writer) dropRelations(gvr schema.GroupVersionResource, ns, name string, old []byte) error {
	if old == nil {
		return nil
	}
	rel, err := decodeRelations(old)
	if err != nil {
		return fmt.Errorf("relations of %s %s/%s: %w", gvr, ns, name, err)
	}
	for i, r := range rel.Refs {
		if !rel.keyed(i) {
			continue
		}
		if err := w.del(reverseKeyOf(rel.old(i), w.cluster, r.Target, r.Type, gvr, ns, name)); err != nil {
			return err
		}
	}
	if rel.Selector != nil {
		return w.del(selectorKey(w.cluster, ns, gvr, name))
	}
	return nil
}

func (w *writer) rels() map[string]relState {
	if w.ov.rels == nil {
		w.ov.rels = map[string]relState{}
	}
	return w.ov.rels
}

// relations is the stored E/ value at fkey (nil: none), newest first from
// this batch, the batch in flight, then the snapshot (read ahead by
// relatePrepass, or now).
func (w *writer) relations(fkey []byte) ([]byte, error) {
	for _, o := range []*overlay{w.ov, w.prev} {
		if o == nil {
			continue
		}
		if st, ok := o.rels[string(fkey)]; ok {
			return st.v, nil
		}
	}
	if pp := w.relDoc.pre; pp != nil {
		if v, ok := pp.stored[string(fkey)]; ok {
			return v, nil // read ahead (storedRelations)
		}
	}
	it, err := w.txn.Get(fkey)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return it.ValueCopy(nil)
}

// encodeKind is a K/ entry's value: version, resource, and whether the
// resource is cluster-scoped.
func encodeKind(g schema.GroupVersionResource, clustered bool) []byte {
	c := "n"
	if clustered {
		c = "c"
	}
	return join(g.Version, g.Resource, c)
}

func decodeKind(group string, v []byte) (schema.GroupVersionResource, bool, error) {
	p := bytes.Split(v, []byte{sep})
	if len(p) != 3 {
		return schema.GroupVersionResource{}, false, errCorrupt
	}
	return schema.GroupVersionResource{Group: group, Version: string(p[0]), Resource: string(p[1])}, string(p[2]) == "c", nil
}
