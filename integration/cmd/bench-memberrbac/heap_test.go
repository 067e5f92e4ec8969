package main

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/pprof"
	"testing"

	"github.com/fleetview/fleetview/internal/memberrbac"
)

// TestParseHeap: RoleBindings decoded by internal/memberrbac and kept are
// what parseHeap counts as the mirror in this process's own heap profile
// (sampled as the benchmark's hub samples it), within a quarter of what
// the runtime says they hold, and the rest of the heap is not.
func TestParseHeap(t *testing.T) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 512
	defer func() { runtime.MemProfileRate = old }()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept := make([]any, 3000)
	for i := range kept {
		raw := fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"alice-pods","namespace":"ns-%04d","uid":"8f0c6a1e-%04d-4b7e-9a52-3c1d2e4f5a6b","resourceVersion":"%d","creationTimestamp":"2026-12-04T17:00:00Z"},`+
			`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"fv-bench-pod-reader"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"alice"}]}`, i, i, 1000+i)
		obj, err := memberrbac.Decode("rolebindings", []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		kept[i] = obj
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	var prof bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&prof, 1); err != nil {
		t.Fatal(err)
	}
	u, err := parseHeap(prof.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(kept)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if u.rate != 512 {
		t.Fatalf("sampling rate %d, want 512", u.rate)
	}
	if u.mirror < held*3/4 || u.mirror > held*5/4 {
		t.Fatalf("the mirror counts %d B, the decoded RoleBindings hold %d B", u.mirror, held)
	}
	if u.total <= u.mirror {
		t.Fatalf("the heap in use %d B is no more than the mirror's %d B", u.total, u.mirror)
	}
	t.Logf("3,000 RoleBindings: %d B counted, %d B held (%d B each); heap in use %d B", u.mirror, held, u.mirror/3000, u.total)
}
