package badger

import (
	"errors"
	"fmt"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/relations"
)

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
	scan      relations.PodScan
	pre       *relPrepass
}

// build is relDoc, in b's buffers.
func (b *relDocBuf) build(obj []byte, withSpec bool) (doc []byte, kind, uid string, err error) {
	doc, _, kind, uid, err = b.buildScan(obj, withSpec, nil)
	return doc, kind, uid, err
}

// buildScan is build that also hands scan (when not nil: a Pod's, reset
// for obj) every value the document keeps of metadata and spec, which it
// reads in place (relations.PodScan): the document need not be read
// again. kindV is the object's kind value (nil: none), for
// scan.Relations.
func (b *relDocBuf) buildScan(obj []byte, withSpec bool, scan *relations.PodScan) (doc, kindV []byte, kind, uid string, err error) {
	var owners []byte
	spec := b.spec[:0]
	var seenKind, seenMeta, seenSpec, hasSpec bool
	_, err = rawjson.EachMember(obj, 0, func(m rawjson.Member) (int, error) {
		var end int
		var err error
		if scan != nil {
			scan.Top(m.Key)
		}
		switch string(m.Key) {
		case "kind":
			if end, err = rawjson.SkipValue(obj, m.ValueStart); err == nil {
				kindV, seenKind = obj[m.ValueStart:end], true
			}
		case "spec":
			seenSpec = true
			if withSpec && m.ValueStart < len(obj) && obj[m.ValueStart] == '{' {
				spec, end, err = appendSpec(spec[:0], obj, m.ValueStart, scan)
				hasSpec = true
			} else {
				hasSpec = false
				end, err = rawjson.SkipValue(obj, m.ValueStart)
			}
		case "metadata":
			seenMeta = true
			end, err = rawjson.EachMember(obj, m.ValueStart, func(mm rawjson.Member) (int, error) {
				var e int
				var err error
				if scan != nil && string(mm.Key) == "ownerReferences" {
					e, err = scan.Owners(mm.ValueStart)
				} else {
					e, err = rawjson.SkipValue(obj, mm.ValueStart)
				}
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
		return nil, nil, "", "", err
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
	return doc, kindV, kind, uid, nil
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
// shrinks to about a fifth, and so does its decode. scan (nil: none) reads
// the members kept (buildScan).
func appendSpec(doc, b []byte, i int, scan *relations.PodScan) ([]byte, int, error) {
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
			var end int
			var err error
			if scan != nil {
				end, err = scan.SpecMember(m.Key, m.ValueStart)
			} else {
				end, err = rawjson.SkipValue(b, m.ValueStart)
			}
			if err == nil {
				key(m.Key)
				doc = append(doc, b[m.ValueStart:end]...)
			}
			return end, err
		case isContainerList(m.Key) && m.ValueStart < len(b) && b[m.ValueStart] == '[':
			key(m.Key)
			if scan != nil {
				scan.ContainerList(m.Key)
			}
			var end int
			var err error
			doc, end, err = containerRefs(doc, b, m.ValueStart, scan)
			return end, err
		}
		return rawjson.SkipValue(b, m.ValueStart)
	})
	return append(doc, '}'), end, err
}

// containerRefs appends to out the containers array at b[i] with each
// container's envFrom and env only, and returns the offset past the array;
// scan (nil: none) reads those.
func containerRefs(out, b []byte, i int, scan *relations.PodScan) ([]byte, int, error) {
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
			if scan != nil {
				scan.Container()
			}
			end, err = rawjson.EachMember(b, i, func(m rawjson.Member) (int, error) {
				env := string(m.Key) == "envFrom" || string(m.Key) == "env"
				var e int
				var err error
				if scan != nil && env {
					e, err = scan.ContainerMember(m.Key, m.ValueStart)
				} else {
					e, err = rawjson.SkipValue(b, m.ValueStart)
				}
				if err == nil && env {
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
