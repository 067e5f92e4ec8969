package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	forkedreflect "k8s.io/apimachinery/third_party/forked/golang/reflect"
)

// FuzzDecode checks the registry decoder and validator, which read what
// the registry API and the CLI receive. For any input:
//
//  1. Decode either fails with ErrDecode or ErrUnsupportedType, or gives a
//     registry; DecodeAll agrees (the same single registry, or an error);
//  2. Validate either lists violations that each name a field path, which
//     ToError makes an ErrInvalid *InvalidError, or none;
//  3. a valid registry encodes (json.Marshal, as the API answers it) to a
//     document that decodes and validates, whose own encoding is the same
//     bytes and whose value equals the first decoding as far as JSON
//     carries it (roundTripEqual).
func FuzzDecode(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"apiVersion: fleetview.io/v1alpha1\nkind: ResourceRegistry\nmetadata: {name: r}\nspec:\n  targetCluster: {}\n  resourceSelectors: [{apiVersion: v1, kind: Pod}]\n",
		`{"apiVersion":"fleetview.io/v1alpha1","kind":"ResourceRegistry","metadata":{"name":"r","creationTimestamp":"2026-01-02T03:04:05.5+01:00"},"spec":{"targetCluster":{"exclude":["a"]},"resourceSelectors":[{"apiVersion":"apps/v1","kind":"Deployment","namespace":"x"}]}}`,
		`{"apiVersion":"fleetview.io/v1alpha1","kind":"ResourceRegistry","metadata":{"name":"r"},"spec":{"targetCluster":{"fieldSelector":{"matchExpressions":[{"key":"zone","operator":"Exists"}]}},"resourceSelectors":[]}}`,
		`{"apiVersion":"fleetview.io/v1alpha1","kind":"ResourceRegistry","metadata":{"name":"r"},"spec":{"targetCluster":{},"resourceSelectors":[{"apiVersion":"v1","kind":"Pod"}],"backendStore":{"openSearch":{"addresses":["http://u:p@h:9200"],"secretRef":{"name":"s"}}}}}`,
		`{"apiVersion":"fleetview.io/v1alpha1","kind":"ResourceRegistry","metadata":{"name":"r","managedFields":[{"manager":"m","fieldsType":"FieldsV1","fieldsV1":{ "f:spec" : {} },"time":"2026-01-02T03:04:05Z"}]},"spec":{"targetCluster":{},"resourceSelectors":[{"apiVersion":"v1","kind":"Pod"}]},"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-01-02T03:04:05.9Z","reason":"R","message":""}]}}`,
		"apiVersion: fleetview.io/v1alpha1\nkind: ResourceRegistry\nkind: ResourceRegistry\n",
		"---\n---\n# only a comment\n",
		"a: b\n---\nc: d\n",
		"[]", "null", "{}", "\"x\"", "{\"apiVersion\":1}", "\t- x", ": :",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := Decode(in)
		all, allErr := DecodeAll(in)
		if err != nil {
			if !errors.Is(err, ErrDecode) && !errors.Is(err, ErrUnsupportedType) {
				t.Fatalf("Decode(%q) = %v: want ErrDecode or ErrUnsupportedType", in, err)
			}
			if allErr != nil && !errors.Is(allErr, ErrDecode) && !errors.Is(allErr, ErrUnsupportedType) {
				t.Fatalf("DecodeAll(%q) = %v: want ErrDecode or ErrUnsupportedType", in, allErr)
			}
			return
		}
		if allErr != nil || len(all) != 1 || !reflect.DeepEqual(all[0], r) {
			t.Fatalf("Decode(%q) gave one registry, DecodeAll %d, %v", in, len(all), allErr)
		}
		if errs := Validate(r); len(errs) > 0 {
			for _, e := range errs {
				if e.Field == "" {
					t.Fatalf("Validate(%q): %v names no field", in, e)
				}
			}
			var ie *InvalidError
			if err := ToError(errs); !errors.Is(err, ErrInvalid) || !errors.As(err, &ie) || len(ie.Errs) != len(errs) {
				t.Fatalf("ToError(%v) = %v", errs, err)
			}
			return
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("a valid registry from %q does not encode: %v", in, err)
		}
		r2, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(%q) encodes to %s, which does not decode: %v", in, enc, err)
		}
		if errs := Validate(r2); len(errs) > 0 {
			t.Fatalf("Decode(%q) encodes to %s, which does not validate: %v", in, enc, errs)
		}
		enc2, err := json.Marshal(r2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("Decode(%q) encodes to\n%s\nwhich re-encodes to\n%s (%v)", in, enc, enc2, err)
		}
		if !roundTripEqual(r, r2) {
			t.Fatalf("Decode(%q) = %+v\nencodes to %s\nwhich decodes to %+v", in, r, enc, r2)
		}
	})
}

// roundTripEqual compares a registry with its JSON round trip by what
// JSON carries, as the API machinery does: omitempty drops an empty list
// or map (status.conditions: []), so nil and empty are the same value; a
// metav1.Time is written in whole seconds in UTC (Kubernetes' format), so
// times are compared to the second; a managedFields entry is raw JSON,
// compared compacted.
func roundTripEqual(a, b *ResourceRegistry) bool {
	eq := forkedreflect.EqualitiesOrDie(
		func(a, b metav1.Time) bool { return a.Unix() == b.Unix() },
		func(a, b metav1.FieldsV1) bool {
			var ca, cb bytes.Buffer
			ea, eb := json.Compact(&ca, a.Raw), json.Compact(&cb, b.Raw)
			return (ea == nil) == (eb == nil) && bytes.Equal(ca.Bytes(), cb.Bytes())
		},
	)
	return eq.DeepEqual(a, b)
}
