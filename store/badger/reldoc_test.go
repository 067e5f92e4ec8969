package badger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fleetview/fleetview/internal/rawjson"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// TestRelDocMatchesReference: relDoc's single pass gives the same
// document, byte for byte (its hash is stored in every E/ entry), as the
// earlier reading that skipped metadata and spec and walked them again
// (relDocReference below), for internal/relations' test objects,
// benchdata's Pods and odd shapes.
func TestRelDocMatchesReference(t *testing.T) {
	var objs [][]byte
	files, err := filepath.Glob("../../internal/relations/testdata/in/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("test objects: %v (%d)", err, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, b)
	}
	for i := range 3 {
		objs = append(objs, benchdata.Event("c", i, 1).Object)
	}
	objs = append(objs,
		[]byte(`{"kind":"Pod","metadata":{"name":"a"},"spec":{"containers":[],"initContainers":[ {"env":[{"name":"x"}],"envFrom":[]} , 3 ,{"name":"n"}],"nodeName":"n1"}}`),
		[]byte(`{"spec":null,"metadata":{"ownerReferences":[{"kind":"X","name":"y"}]},"kind":"Thing"}`),
		[]byte(`{"kind":7,"metadata":{},"spec":{"containers":"none","volumes":[]}, "status":{}}`),
		[]byte(`{"kind":"A","metadata":{"ownerReferences":null},"spec":{"selector":{"app":"a"}},"spec":{"rules":[]}}`),
		[]byte(`{ "kind" : "B" , "spec" : { "containers" : [ { "env" : [ ] } ] } , "metadata" : { } }`),
	)
	// One buffer for every object, as a writer reuses it: what an object
	// leaves in it must not show in the next one's document.
	var shared relDocBuf
	for i, obj := range objs {
		if err := rawjson.Check(obj); err != nil {
			t.Fatalf("object %d is not JSON: %v", i, err)
		}
		for _, withSpec := range []bool{true, false} {
			t.Run(fmt.Sprintf("%d/spec=%v", i, withSpec), func(t *testing.T) {
				want, wantKind, wantErr := relDocReference(obj, withSpec)
				for _, build := range []struct {
					name string
					f    func([]byte, bool) ([]byte, string, string, error)
				}{{"fresh", relDoc}, {"reused", shared.build}} {
					doc, kind, _, err := build.f(obj, withSpec)
					if !bytes.Equal(doc, want) || kind != wantKind || (err == nil) != (wantErr == nil) {
						t.Fatalf("relDoc (%s buffer):\n%s %q %v\nreference:\n%s %q %v", build.name, doc, kind, err, want, wantKind, wantErr)
					}
				}
			})
		}
	}
}

// BenchmarkRelDoc: relDoc's single pass against the reference on a
// benchdata Pod (~3 KB), side by side.
func BenchmarkRelDoc(b *testing.B) {
	obj := benchdata.Event("c", 1, 1).Object
	for _, f := range []struct {
		name string
		fn   func([]byte, bool) ([]byte, string, error)
	}{{"single-pass", func(obj []byte, spec bool) ([]byte, string, error) {
		doc, kind, _, err := relDoc(obj, spec)
		return doc, kind, err
	}}, {"reference", relDocReference}} {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(obj)))
			for b.Loop() {
				if _, _, err := f.fn(obj, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// relDocReference is relDoc as it read before its single pass, kept to
// check that one: the part of obj relations are read from, as a small document
// relations.Extract reads: kind, metadata.ownerReferences and (withSpec)
// spec, copied as they are. One pass over the members, which stops once
// it has them (status, after spec, is not scanned); decoding the document
// costs a fraction of the object's.
func relDocReference(obj []byte, withSpec bool) (doc []byte, kind string, err error) {
	var kindV, owners, spec []byte
	var seenKind, seenMeta, seenSpec bool
	_, err = rawjson.EachMember(obj, 0, func(m rawjson.Member) (int, error) {
		end, err := rawjson.SkipValue(obj, m.ValueStart)
		if err != nil {
			return 0, err
		}
		switch string(m.Key) {
		case "kind":
			kindV, seenKind = obj[m.ValueStart:end], true
		case "spec":
			spec, seenSpec = obj[m.ValueStart:end], true
		case "metadata":
			seenMeta = true
			if _, err := rawjson.EachMember(obj, m.ValueStart, func(mm rawjson.Member) (int, error) {
				e, err := rawjson.SkipValue(obj, mm.ValueStart)
				if err == nil && string(mm.Key) == "ownerReferences" {
					owners = obj[mm.ValueStart:e]
				}
				return e, err
			}); err != nil {
				return 0, err
			}
		}
		if seenKind && seenMeta && (seenSpec || !withSpec) {
			return 0, errStopScan
		}
		return end, nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return nil, "", err
	}
	doc = append(doc, `{"kind":`...)
	if len(kindV) > 0 && kindV[0] == '"' {
		doc = append(doc, kindV...)
		kind, _ = rawjson.String(kindV)
	} else {
		doc = append(doc, `""`...)
	}
	if len(owners) > 0 && owners[0] == '[' {
		doc = append(append(append(doc, `,"metadata":{"ownerReferences":`...), owners...), '}')
	}
	if withSpec && len(spec) > 0 && spec[0] == '{' {
		if doc, err = appendSpecReference(append(doc, `,"spec":`...), spec); err != nil {
			return nil, "", err
		}
	}
	return append(doc, '}'), kind, nil
}

// specMembers are the spec members relations.Extract reads; containers
// (the bulk of a Pod's spec) are kept as their envFrom and env alone.
var specMembers = map[string]bool{"selector": true, "podSelector": true, "nodeName": true, "serviceAccountName": true,
	"volumes": true, "imagePullSecrets": true, "volumeName": true, "defaultBackend": true, "rules": true, "scaleTargetRef": true}

var containerLists = map[string]bool{"containers": true, "initContainers": true, "ephemeralContainers": true}

// appendSpec appends to doc the members of spec that relations read:
// a Pod's spec shrinks to about a fifth, and so does its decode.
func appendSpecReference(doc, spec []byte) ([]byte, error) {
	doc = append(doc, '{')
	first := true
	member := func(key, v []byte) {
		if !first {
			doc = append(doc, ',')
		}
		first = false
		doc = append(append(append(append(doc, '"'), key...), `":`...), v...)
	}
	_, err := rawjson.EachMember(spec, 0, func(m rawjson.Member) (int, error) {
		end, err := rawjson.SkipValue(spec, m.ValueStart)
		if err != nil {
			return 0, err
		}
		v := spec[m.ValueStart:end]
		switch {
		case specMembers[string(m.Key)]:
			member(m.Key, v)
		case containerLists[string(m.Key)] && len(v) > 0 && v[0] == '[':
			var out []byte
			if out, err = containerRefsReference(v); err != nil {
				return 0, err
			}
			member(m.Key, out)
		}
		return end, nil
	})
	return append(doc, '}'), err
}

// containerRefs is a containers array with each container's envFrom and
// env only.
func containerRefsReference(arr []byte) ([]byte, error) {
	els, err := rawjson.Elements(arr, nil)
	if err != nil {
		return nil, err
	}
	out := []byte{'['}
	for i, e := range els {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, '{')
		c := arr[e.Start:e.End]
		n := 0
		if len(c) > 0 && c[0] == '{' {
			if _, err := rawjson.EachMember(c, 0, func(m rawjson.Member) (int, error) {
				end, err := rawjson.SkipValue(c, m.ValueStart)
				if err == nil && (string(m.Key) == "envFrom" || string(m.Key) == "env") {
					if n > 0 {
						out = append(out, ',')
					}
					n++
					out = append(append(append(append(out, '"'), m.Key...), `":`...), c[m.ValueStart:end]...)
				}
				return end, err
			}); err != nil {
				return nil, err
			}
		}
		out = append(out, '}')
	}
	return append(out, ']'), nil
}
