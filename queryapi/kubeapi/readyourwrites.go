package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetview/fleetview/internal/kubepath"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
)

// Read your writes (issue #30): the answer to a forwarded write of a
// cached resource is held until the cache holds what the member wrote (the
// object at the resourceVersion the member returned, or gone after a
// delete), at most ActThroughConfig.ReadYourWrites; kubectl reads through
// the cache right after it writes (a delete's --wait, an apply's next get),
// and so does a user. Past the bound the answer goes out with a Warning.

// maxAwaitedAnswer is the largest answer read whole to learn what to wait
// for (an object is at most ~1.5 MiB); a larger one streams unwaited.
const maxAwaitedAnswer = 4 << 20

// awaitsCache says whether a forwarded request's answer waits for the
// cache: a write whose answer is the object (or its scale), of a resource
// the cache holds for that cluster.
func (h *Handler) awaitsCache(verb, cluster string, t kubepath.Request) bool {
	if h.act.ReadYourWrites <= 0 {
		return false
	}
	switch verb {
	case "create", "update", "patch", "delete":
	default:
		return false
	}
	if t.Subresource != "" && t.Subresource != "status" && t.Subresource != "scale" {
		return false
	}
	_, _, ok := h.catalog.Current().Lookup(nil, cluster, t.GroupVersion().WithResource(t.Resource))
	return ok
}

// rywResult is what a wait for the cache found.
type rywResult struct {
	rv       string
	waited   time.Duration
	caughtUp bool
	polls    int
}

func (r rywResult) auditAttrs() []any {
	if r.rv == "" && !r.caughtUp {
		return nil
	}
	return []any{"cacheWait", r.waited.String(), "cacheCaughtUp", r.caughtUp}
}

// readYourWrites reads the answer and waits for the cache; it returns the
// answer to write (read whole, or what was read and the rest of body).
func (h *Handler) readYourWrites(ctx context.Context, body io.Reader, cluster string, t kubepath.Request, verb string) (io.Reader, rywResult) {
	b, err := io.ReadAll(io.LimitReader(body, maxAwaitedAnswer+1))
	if err != nil || len(b) > maxAwaitedAnswer {
		return io.MultiReader(bytes.NewReader(b), body), rywResult{}
	}
	var written struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name            string `json:"name"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(b, &written) != nil {
		return bytes.NewReader(b), rywResult{}
	}
	name := t.Name
	if name == "" {
		name = written.Metadata.Name // a create names it in its answer
	}
	// A delete answered with a Status: the object is gone at once.
	gone := verb == "delete" && written.Kind == "Status"
	res := rywResult{rv: written.Metadata.ResourceVersion}
	if name == "" || (res.rv == "" && !gone) {
		return bytes.NewReader(b), rywResult{}
	}
	start := time.Now()
	deadline := start.Add(h.act.ReadYourWrites)
	delay := 2 * time.Millisecond
	for {
		res.polls++
		got, err := h.query.Get(ctx, &fleetviewv1.GetRequest{Group: grpcGroup(t.Group), Version: t.Version, Resource: t.Resource,
			Namespace: t.Namespace, Name: name, Cluster: cluster})
		switch {
		case status.Code(err) == codes.NotFound:
			res.caughtUp = verb == "delete"
		case err != nil:
			// The caller cannot read it from the cache (or the cache
			// cannot answer): nothing to wait for, nothing to warn of.
			return bytes.NewReader(b), rywResult{}
		default:
			res.caughtUp = !gone && rvAtLeast(storedRV(got.GetRawObject()), res.rv)
		}
		if res.caughtUp || !time.Now().Before(deadline) {
			res.waited = time.Since(start)
			return bytes.NewReader(b), res
		}
		select {
		case <-ctx.Done():
			res.waited = time.Since(start)
			return bytes.NewReader(b), res
		case <-time.After(min(delay, time.Until(deadline))):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// storedRV is a stored object's metadata.resourceVersion ("" when
// unreadable).
func storedRV(raw []byte) string {
	var o struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return ""
	}
	return o.Metadata.ResourceVersion
}

// rvAtLeast says whether the cache's resourceVersion have is want or
// later. Kubernetes calls them opaque, but every kube-apiserver's are
// etcd revisions: numbers compare as numbers; anything else must match.
func rvAtLeast(have, want string) bool {
	h, herr := strconv.ParseUint(have, 10, 64)
	w, werr := strconv.ParseUint(want, 10, 64)
	if herr != nil || werr != nil {
		return have == want
	}
	return h >= w
}
