package query

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/testing/benchdata/podjson"
)

var (
	podsGVR   = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	widgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func TestCompileFieldsErrors(t *testing.T) {
	for _, tc := range []struct {
		sel  string
		want []string // substrings of the error
	}{
		{"spec.replicas>1", []string{`"spec.replicas>1"`, "operator >"}},
		{"spec.replicas<1", []string{"operator <"}},
		{"status.phase in (a,b)", []string{"operator in"}},
		{"status.phase notin (a)", []string{"operator notin"}},
		{"!spec.nodeName", []string{"operator !"}},
		{"spec.nodeName", []string{"operator existence"}},
		{"a=1,spec.nodeName", []string{`"spec.nodeName"`, "operator existence"}},
		{"spec..x=1", []string{`field "spec..x"`, "single dots"}},
		{".spec=1", []string{`field ".spec"`}},
		{"spec.=1", []string{`field "spec."`}},
		{"spec.containers[0].image=a", []string{`field "spec.containers[0].image"`, "array indexes"}},
		{"spec.a*b=1", []string{"not allowed"}},
		{strings.Repeat("a.", 40) + "a=1", []string{"more than 32"}},
		{"=x", []string{"fieldSelector"}},
	} {
		_, err := CompileFields(widgetGVR, tc.sel)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("CompileFields(%q) = %v: want ErrInvalid", tc.sel, err)
			continue
		}
		for _, w := range append(tc.want, "fieldSelector") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CompileFields(%q) = %q: want it to name %q", tc.sel, err, w)
			}
		}
	}
}

func TestFieldFilterMatches(t *testing.T) {
	pod := `{"metadata":{"name":"p","ownerReferences":[{"kind":"ReplicaSet","name":"rs"},{"kind":"Node"}],
		"finalizers":["a","b"],"labels":{"app":"web"}},
		"spec":{"nodeName":"node-a","priority":7,"enableServiceLinks":true,"containers":[{"image":"nginx"},{"name":"x"}],
		"weird\u0020key":"v","nil":null,"obj":{"k":"v"}},
		"status":{"phase":"Running","message":"a\"b"}}`
	unscheduled := `{"metadata":{"name":"q"},"spec":{"containers":[]},"status":{"phase":"Pending"}}`
	widget := `{"spec":{"size":3,"ratio":1.50,"flags":[[true],[false]]}}`
	for _, tc := range []struct {
		gvr      schema.GroupVersionResource
		sel, obj string
		want     bool
	}{
		{podsGVR, "spec.nodeName=node-a", pod, true},
		{podsGVR, "spec.nodeName==node-a", pod, true},
		{podsGVR, "spec.nodeName!=node-a", pod, false},
		{podsGVR, "spec.nodeName=", unscheduled, true},
		{podsGVR, "spec.nodeName=", pod, false},
		{podsGVR, "status.phase!=Running", unscheduled, true},
		{podsGVR, "status.phase!=Running,spec.nodeName=", unscheduled, true},
		{podsGVR, "status.phase!=Running,spec.nodeName=", pod, false},
		{podsGVR, "status.message=a\"b", pod, true},
		// numbers and booleans compare as their JSON text
		{podsGVR, "spec.priority=7", pod, true},
		{podsGVR, "spec.enableServiceLinks=true", pod, true},
		{widgetGVR, "spec.size=3", widget, true},
		{widgetGVR, "spec.size=3.0", widget, false},
		{widgetGVR, "spec.ratio=1.50", widget, true},
		{widgetGVR, "spec.size!=3", widget, false},
		{widgetGVR, "spec.size=", `{}`, true},
		// through arrays: = when any element is the value, != when none is
		{podsGVR, "metadata.ownerReferences.kind=ReplicaSet", pod, true},
		{podsGVR, "metadata.ownerReferences.kind=Node", pod, true},
		{podsGVR, "metadata.ownerReferences.kind!=ReplicaSet", pod, false},
		{podsGVR, "metadata.ownerReferences.kind!=Deployment", pod, true},
		{podsGVR, "metadata.ownerReferences.kind=", unscheduled, true},
		{podsGVR, "metadata.ownerReferences.name=", pod, false},
		{podsGVR, "metadata.finalizers=b", pod, true},
		{podsGVR, "spec.containers.image=nginx", pod, true},
		{podsGVR, "spec.containers.image=", unscheduled, true},
		{widgetGVR, "spec.flags=false", widget, true},
		// null reads as absent, an object equals nothing
		{podsGVR, "spec.nil=", pod, true},
		{podsGVR, "spec.obj=", pod, false},
		{podsGVR, "spec.obj!=x", pod, true},
		{podsGVR, "spec.nodeName.x=", pod, true},
		{podsGVR, "metadata.labels.app=web", pod, true},
		// fields Kubernetes types read their zero value when absent
		{podsGVR, "spec.hostNetwork=false", pod, true},
		{podsGVR, "spec.hostNetwork=", pod, false},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, "status.replicas=0", `{"status":{}}`, true},
		{schema.GroupVersionResource{Version: "v1", Resource: "events"}, "source=kubelet", `{"source":{"component":"kubelet"}}`, true},
		// metadata.name and namespace come from the key
		{podsGVR, "metadata.name=k,metadata.namespace=ns", `{"metadata":{"name":"other"}}`, true},
		{podsGVR, "metadata.name!=k", `{}`, false},
	} {
		f, err := CompileFields(tc.gvr, tc.sel)
		if err != nil {
			t.Errorf("CompileFields(%q): %v", tc.sel, err)
			continue
		}
		got, err := f.Matches("ns", "k", []byte(tc.obj))
		if err != nil || got != tc.want {
			t.Errorf("%q on %s = %v, %v: want %v", tc.sel, tc.obj, got, err, tc.want)
		}
	}
}

func TestFieldFilterMatchesCorrupt(t *testing.T) {
	f, err := CompileFields(podsGVR, "spec.nodeName=a")
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []string{``, `{"spec":`, `{"spec":{"nodeName":"a"}} x`, `[1]`} {
		if _, err := f.Matches("", "", []byte(obj)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Matches on %q = %v: want ErrCorrupt", obj, err)
		}
	}
}

// BenchmarkFieldFilterMatches is the cost per stored Pod of a selector on
// fields the Pod has, one through an array.
func BenchmarkFieldFilterMatches(b *testing.B) {
	pod := podjson.Pod("c", 7, 3)
	f, err := CompileFields(podsGVR, "status.phase!=Running,spec.containers.image=nginx")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(pod)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Matches("ns", "p", pod); err != nil {
			b.Fatal(err)
		}
	}
}
