package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// mirrorFrame matches the functions whose allocations are the RBAC mirror:
// internal/memberrbac (the decoded objects, the per-member stores and
// indexes, the remembered reaches) and the query API's follower of the
// RBAC objects (what it holds per object).
var mirrorFrame = regexp.MustCompile(`fleetview/fleetview/internal/memberrbac\.|fleetview/fleetview/queryapi/authz\.\(\*(RBACFollower|followRun)\)`)

// heapUse is what a heap profile says is in use: in all, and allocated
// under a mirrorFrame.
type heapUse struct {
	total, mirror int64
	// rate is the profile's sampling rate (runtime.MemProfileRate).
	rate int64
}

// mirrorHeap takes the hub's heap profile after a garbage collection
// (/debug/pprof/heap?gc=1, its text form) and sums the in-use bytes of
// the records with a mirrorFrame in their stack.
func mirrorHeap(ctx context.Context, metrics string) (heapUse, error) {
	code, body, err := get(ctx, metrics+"/debug/pprof/heap?gc=1&debug=1", "")
	if err != nil {
		return heapUse{}, err
	}
	if code != http.StatusOK {
		return heapUse{}, fmt.Errorf("heap profile: %d %.200s", code, body)
	}
	return parseHeap(body)
}

// recordLine is a record's first line: in-use objects and bytes, [allocated
// objects and bytes], @ its stack's addresses.
var recordLine = regexp.MustCompile(`^(\d+): (\d+) \[(\d+): (\d+)\] @`)

// parseHeap reads the text form of a Go heap profile (runtime/pprof's
// debug=1): a header "heap profile: ... @ heap/<2*rate>", then records,
// each its counts line and one "#\t0x...\tfunction+0x..\tfile:line" line
// per frame. Sampled counts are scaled as pprof scales them.
func parseHeap(b []byte) (heapUse, error) {
	var u heapUse
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	if !sc.Scan() {
		return u, fmt.Errorf("empty heap profile")
	}
	head := sc.Text()
	i := strings.LastIndex(head, "@ heap/")
	if i < 0 {
		return u, fmt.Errorf("heap profile header %q", head)
	}
	r, err := strconv.ParseInt(head[i+len("@ heap/"):], 10, 64)
	if err != nil || r < 2 {
		return u, fmt.Errorf("heap profile header %q", head)
	}
	u.rate = r / 2
	var objs, size int64
	inRecord, mirror := false, false
	flush := func() {
		if inRecord {
			s := scaled(objs, size, u.rate)
			u.total += s
			if mirror {
				u.mirror += s
			}
		}
		inRecord, mirror = false, false
	}
	for sc.Scan() {
		l := sc.Text()
		if m := recordLine.FindStringSubmatch(l); m != nil {
			flush()
			objs, _ = strconv.ParseInt(m[1], 10, 64)
			size, _ = strconv.ParseInt(m[2], 10, 64)
			inRecord = true
			continue
		}
		if strings.HasPrefix(l, "#\t0x") {
			if inRecord && mirrorFrame.MatchString(l) {
				mirror = true
			}
			continue
		}
		flush()
	}
	flush()
	return u, sc.Err()
}

// scaled is a record's in-use bytes unsampled, as pprof scales them: a
// sample of average size s was recorded with probability 1-exp(-s/rate).
func scaled(objs, size, rate int64) int64 {
	if objs == 0 || size == 0 || rate <= 1 {
		return size
	}
	avg := float64(size) / float64(objs)
	return int64(float64(size) / (1 - math.Exp(-avg/float64(rate))))
}
