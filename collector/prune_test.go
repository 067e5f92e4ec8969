package collector

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return m
}

func TestPrune(t *testing.T) {
	podGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	cases := []struct {
		name string
		gvr  schema.GroupVersionResource
		keep bool
		in   string
		want string
	}{
		{"managedFields and last-applied dropped, annotations added", podGVR, false,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u1","resourceVersion":"5","managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}],"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"big\":\"blob\"}","keep":"me","fleetview.io/cluster":"spoofed"}},"spec":{"containers":[{"name":"c","args":["}{\"]"]}]}}`,
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u1","resourceVersion":"5","annotations":{"keep":"me","fleetview.io/cluster":"m1","resource.karmada.io/cached-from-cluster":"m1"}},"spec":{"containers":[{"name":"c","args":["}{\"]"]}]}}`},
		{"no annotations yet", podGVR, false,
			` { "metadata" : { "name" : "p" , "uid":"u"} , "spec" : { } } `,
			`{"metadata":{"name":"p","uid":"u","annotations":{"fleetview.io/cluster":"m1","resource.karmada.io/cached-from-cluster":"m1"}},"spec":{}}`},
		{"null annotations, empty metadata", podGVR, false,
			`{"metadata":{"annotations":null}}`,
			`{"metadata":{"annotations":{"fleetview.io/cluster":"m1","resource.karmada.io/cached-from-cluster":"m1"}}}`},
		{"secret data stripped by default", secretsGVR, false,
			`{"kind":"Secret","data":{"password":"aHVudGVyMg=="},"metadata":{"name":"s","uid":"u"},"stringData":{"a":"b"},"type":"Opaque"}`,
			`{"kind":"Secret","metadata":{"name":"s","uid":"u","annotations":{"fleetview.io/cluster":"m1","fleetview.io/secret-data":"stripped","resource.karmada.io/cached-from-cluster":"m1"}},"type":"Opaque"}`},
		{"secret data kept when opted in", secretsGVR, true,
			`{"kind":"Secret","data":{"password":"aHVudGVyMg=="},"metadata":{"name":"s","uid":"u"}}`,
			`{"kind":"Secret","data":{"password":"aHVudGVyMg=="},"metadata":{"name":"s","uid":"u","annotations":{"fleetview.io/cluster":"m1","resource.karmada.io/cached-from-cluster":"m1"}}}`},
		{"secret without data is not marked", secretsGVR, false,
			`{"kind":"Secret","metadata":{"name":"s","uid":"u"}}`,
			`{"kind":"Secret","metadata":{"name":"s","uid":"u","annotations":{"fleetview.io/cluster":"m1","resource.karmada.io/cached-from-cluster":"m1"}}}`},
		{"data of other resources untouched", podGVR, false,
			`{"data":{"x":"1"},"metadata":{"name":"c","uid":"u"}}`,
			`{"data":{"x":"1"},"metadata":{"name":"c","uid":"u","annotations":{"fleetview.io/cluster":"m1","resource.karmada.io/cached-from-cluster":"m1"}}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			orig := string(in)
			got, err := prune(in, "m1", tc.gvr, tc.keep)
			if err != nil {
				t.Fatal(err)
			}
			if string(in) != orig {
				t.Fatal("input modified")
			}
			if g, w := decodeMap(t, got), decodeMap(t, []byte(tc.want)); !reflect.DeepEqual(g, w) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestPruneAndReadRejectMalformed(t *testing.T) {
	// The scanner is strict past the members the collector reads: a
	// mismatched bracket deep in spec, a bad literal at the top level or
	// data after the object is refused.
	strict := []string{`{"metadata":{"name":"p","uid":"u"}}x`, `{"metadata":{"name":"p","uid":"u"}},{}`, `{"metadata":{"name":"p","uid":"u"},"spec":{"a":[}]}}`, `{"metadata":{"name":"p","uid":"u"},"spec":tru}`, `"x"`}
	for _, in := range append([]string{``, `[]`, `{"metadata":`, `{"metadata":{"name":"p"}`, `{"metadata":{"name":"p}}`, `{"a" 1}`, `{"a":1,}`, `{"spec":{}}`, `{"metadata":{"annotations":{"a":1}}}`}, strict...) {
		if _, err := prune([]byte(in), "m1", secretsGVR, false); !errors.Is(err, ErrBadJSON) {
			t.Errorf("prune(%q) = %v, want ErrBadJSON", in, err)
		}
	}
	for _, in := range append([]string{`{"metadata":{"name":"p"}}`, `{"metadata":{"uid":"u"}}`, `{"metadata":{"uid":1,"name":"p"}}`, `{"metadata":`}, strict...) {
		if _, err := readMeta([]byte(in)); !errors.Is(err, ErrBadJSON) {
			t.Errorf("readMeta(%q) = %v, want ErrBadJSON", in, err)
		}
	}
}

func TestReadMeta(t *testing.T) {
	m, err := readMeta([]byte(`{"kind":"Pod","metadata":{"labels":{"name":"not-this"},"name":"we\"ird","namespace":"ns","uid":"u-1","resourceVersion":"42"},"spec":{"name":"nor-this"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m != (objMeta{uid: "u-1", namespace: "ns", name: `we"ird`, rv: "42"}) {
		t.Fatalf("readMeta = %+v", m)
	}
	m, err = readMeta([]byte(`{"metadata":{"annotations":{"a":"ends with \\\\","b":"q\\\"}"},"name":"back\\\\","uid":"u"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.name != `back\\` || m.uid != "u" {
		t.Fatalf("escaped backslashes: %+v", m)
	}
}

// BenchmarkPrune is the per-object cost of the list hot path.
func BenchmarkPrune(b *testing.B) {
	obj := []byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-0000001-x1","namespace":"team-01","uid":"00000001-0004-4000-8000-000000001eef","resourceVersion":"12345","creationTimestamp":"2026-11-01T10:01:00Z","labels":{"app":"web","pod-template-hash":"7d9f8c0001","tier":"backend"},"annotations":{"prometheus.io/scrape":"true","prometheus.io/port":"9090"},"managedFields":[{"manager":"kube-controller-manager","operation":"Update","apiVersion":"v1","time":"2026-11-01T10:01:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}}]},"spec":{"containers":[{"name":"web","image":"registry.example.com/web:1.2.3","ports":[{"name":"http","containerPort":8080,"protocol":"TCP"}],"resources":{"limits":{"cpu":"500m","memory":"512Mi"}}}],"nodeName":"node-001"},"status":{"phase":"Running"}}`)
	b.SetBytes(int64(len(obj)))
	for b.Loop() {
		if _, err := readMeta(obj); err != nil {
			b.Fatal(err)
		}
		if _, err := prune(obj, "m1", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, false); err != nil {
			b.Fatal(err)
		}
	}
}
