package badger

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fleetview/fleetview/internal/relations"
	"github.com/fleetview/fleetview/internal/testing/benchdata"
)

// scanPodCases are Pods (and odd shapes) whose references the scan in
// relDoc's pass must read as relations.Extract reads the document, or
// leave to it (scanned false).
var scanPodCases = []struct {
	name, obj string
	scanned   bool
}{
	{"empty", `{}`, true},
	{"no spec", `{"kind":"Pod","metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"r"}]}}`, true},
	{"metadata after spec", `{"spec":{"nodeName":"n","volumes":[{"configMap":{"name":"c"}}]},"kind":"Pod","metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"A/B","name":"x"},{"kind":"A","name":"B/x"}]}}`, true},
	{"owners not an array", `{"kind":"Pod","metadata":{"ownerReferences":"x"},"spec":{"nodeName":"n"}}`, true},
	{"owners null", `{"kind":"Pod","metadata":{"ownerReferences":null},"spec":{"nodeName":"n"}}`, true},
	{"containers not an array", `{"kind":"Pod","spec":{"containers":{"env":[]},"initContainers":null,"nodeName":"n"}}`, true},
	{"odd containers", `{"kind":"Pod","spec":{"containers":[3,null,{"env":[{"valueFrom":{"secretKeyRef":{"name":"s"}}}],"envFrom":[{"configMapRef":{"name":"c"}}]},"x"]}}`, true},
	{"kind not a string", `{"kind":7,"spec":{"nodeName":"n"}}`, true},
	{"kind null", `{"kind":null,"metadata":{},"spec":null}`, true},
	{"spec not an object", `{"kind":"Pod","spec":[1]}`, true},
	{"other kinds' member", `{"kind":"Pod","spec":{"selector":{"app":"a"},"nodeName":"n"}}`, false},
	{"key in another case", `{"kind":"Pod","spec":{"NodeName":"n","nodeName":"m"}}`, true},
	{"member twice", `{"kind":"Pod","spec":{"nodeName":"a","nodeName":"b"}}`, false},
	{"env twice", `{"kind":"Pod","spec":{"containers":[{"env":[],"env":[{"valueFrom":{"configMapKeyRef":{"name":"c"}}}]}]}}`, false},
	{"containers twice", `{"kind":"Pod","spec":{"containers":[],"containers":[{"envFrom":[{"secretRef":{"name":"s"}}]}]}}`, false},
	{"owners twice", `{"kind":"Pod","metadata":{"ownerReferences":[],"ownerReferences":[{"kind":"K","name":"n"}]}}`, false},
	{"metadata twice", `{"metadata":{"ownerReferences":[{"kind":"K","name":"n"}]},"metadata":{},"kind":"Pod","spec":{}}`, false},
	{"spec twice", `{"spec":{"nodeName":"a"},"kind":"Pod","spec":{"nodeName":"b"},"metadata":{}}`, false},
	{"escaped kind", `{"kind":"P\u006fd","spec":{"nodeName":"n"}}`, false},
	{"escaped name", `{"kind":"Pod","spec":{"nodeName":"n\u0031"}}`, false},
	{"number for a name", `{"kind":"Pod","spec":{"serviceAccountName":1}}`, false},
	{"after the scan stops", `{"kind":"Pod","metadata":{},"spec":{"nodeName":"a"},"spec":{"nodeName":"b"}}`, true},
	{"not json", `{"kind":"Pod","spec":{"nodeName":"a"`, false},
	{"not json inside a scanned value", `{"kind":"Pod","spec":{"volumes":[{"configMap":{"name":"a"}},]}}`, false},
}

// relScanOf is what the read-ahead reads of a Pod obj in one pass: the
// document, kind and uid relDoc gives, and the relations the scan read
// (scanned false: it could not say).
func relScanOf(b *relDocBuf, obj []byte) (doc []byte, kind, uid string, rel relations.Relations, scanned bool, err error) {
	b.scan.Reset(obj, "ns")
	doc, kindV, kind, uid, err := b.buildScan(obj, true, &b.scan)
	if err == nil {
		rel, scanned = b.scan.Relations(kindV)
	}
	b.scan.Reset(nil, "")
	return doc, kind, uid, rel, scanned, err
}

// checkRelScan fails t unless the one pass over obj gives the document,
// kind and uid relDoc gives, and, when the scan read the relations, what
// relations.Extract reads of that document.
func checkRelScan(t *testing.T, b *relDocBuf, obj []byte) (scanned bool) {
	t.Helper()
	wantDoc, wantKind, wantUID, wantErr := relDoc(obj, true)
	doc, kind, uid, rel, scanned, err := relScanOf(b, obj)
	if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("%q: one pass: %v; relDoc: %v", obj, err, wantErr)
	}
	if !bytes.Equal(doc, wantDoc) || kind != wantKind || uid != wantUID {
		t.Fatalf("%q: one pass:\n%s %q %q\nrelDoc:\n%s %q %q", obj, doc, kind, uid, wantDoc, wantKind, wantUID)
	}
	if err != nil || !scanned {
		return scanned
	}
	want, err := relations.Extract(podsGVR.GroupResource(), "ns", wantDoc)
	if err != nil {
		t.Fatalf("%q: the scan read %+v, Extract of the document fails: %v", obj, rel, err)
	}
	if !reflect.DeepEqual(rel, want) {
		t.Fatalf("%q: the scan read\n%+v\nExtract of the document\n%+v", obj, rel, want)
	}
	return scanned
}

// TestRelScanPodMatchesDocument: the read-ahead's one pass over an added
// Pod gives the document relDoc gives (its hash leads the E/ entry) and
// the relations Extract reads of it, for internal/relations' test Pod,
// benchdata's Pods and odd shapes, and it reads real Pods itself.
func TestRelScanPodMatchesDocument(t *testing.T) {
	var shared relDocBuf // reused, as a worker reuses it
	for _, c := range scanPodCases {
		t.Run(c.name, func(t *testing.T) {
			if got := checkRelScan(t, &shared, []byte(c.obj)); got != c.scanned {
				t.Fatalf("scanned %v, want %v", got, c.scanned)
			}
		})
	}
	golden, err := os.ReadFile(filepath.Join("../../internal/relations/testdata/in/pod.json"))
	if err != nil {
		t.Fatal(err)
	}
	real := [][]byte{golden[len(`{"group":"","resource":"pods","namespace":"shop","object":`) : len(golden)-2]}
	for i := range 5 {
		real = append(real, benchdata.Event(fmt.Sprintf("c%d", i), i*7919, i+1).Object)
	}
	for i, obj := range real {
		t.Run(fmt.Sprintf("real/%d", i), func(t *testing.T) {
			if !checkRelScan(t, &shared, obj) {
				t.Fatalf("a real Pod was left to Extract: %s", obj)
			}
		})
	}
}

// FuzzRelScanPod: whatever the read-ahead's one pass reads of a Pod, relDoc
// and relations.Extract of its document read the same.
func FuzzRelScanPod(f *testing.F) {
	for _, c := range scanPodCases {
		f.Add(c.obj)
	}
	f.Add(string(benchdata.Event("c1", 3, 1).Object))
	var b relDocBuf
	f.Fuzz(func(t *testing.T, obj string) {
		checkRelScan(t, &b, []byte(obj))
	})
}
