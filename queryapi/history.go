package queryapi

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/kubepath"
	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/rawjson"
	fleetviewv1 "github.com/fleetview/fleetview/proto/fleetview/v1"
	"github.com/fleetview/fleetview/queryapi/apierr"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// HistoryReader is what the history's reads need from a backend (issue
// #48): the fleet's change feed and one object's revisions, each narrowed
// by the caller's visibility before its limit.
type HistoryReader interface {
	Changes(ctx context.Context, o query.ChangesOptions) (query.ChangePage, error)
	Revisions(ctx context.Context, o query.RevisionsOptions) (query.RevisionPage, error)
}

// errNoHistory answers a history read when no backend keeps one.
func errNoHistory() error {
	return status501("the hub keeps no history (--history-retention is 0 or the backend keeps none)")
}

// parseTime reads an RFC 3339 request time; empty is the zero time.
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: %q is not an RFC 3339 time (e.g. 2026-12-06T18:00:00Z)", query.ErrInvalid, field, s)
	}
	return t, nil
}

// parseAsOf reads an as-of time: a moment of the past (query.ParseAsOf).
func parseAsOf(s string, now time.Time) (time.Time, error) { return query.ParseAsOf(s, now) }

// timeRange reads since and until, [since, until).
func timeRange(since, until string) (s, u time.Time, err error) {
	if s, err = parseTime("since", since); err != nil {
		return s, u, err
	}
	if u, err = parseTime("until", until); err != nil {
		return s, u, err
	}
	if !s.IsZero() && !u.IsZero() && s.After(u) {
		return s, u, fmt.Errorf("%w: since (%s) is after until (%s)", query.ErrInvalid, since, until)
	}
	return s, u, nil
}

// splitList reads a repeated parameter whose entries may also be
// comma-separated (clusters=a,b or clusters=a&clusters=b).
func splitList(vs []string) []string {
	var out []string
	for _, v := range vs {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// ParseChangeResources reads the change feed's resources as Kubernetes
// names them: resource[.group] ("pods", "deployments.apps"; "pods.core"
// is the core group too).
func ParseChangeResources(vs []string) ([]schema.GroupResource, error) {
	var out []schema.GroupResource
	for _, r := range splitList(vs) {
		gr := schema.ParseGroupResource(r)
		gr.Group = kubepath.GroupFromName(gr.Group)
		if gr.Resource == "" || strings.ContainsAny(r, "/ ") {
			return nil, fmt.Errorf("%w: resources: %q is not resource[.group] (e.g. pods, deployments.apps)", query.ErrInvalid, r)
		}
		if !slices.Contains(out, gr) {
			out = append(out, gr)
		}
	}
	return out, nil
}

func (q *queryService) ListChanges(ctx context.Context, req *fleetviewv1.ListChangesRequest) (*fleetviewv1.ListChangesResponse, error) {
	resp, err := q.listChanges(ctx, req)
	return resp, apierr.ToStatus(err)
}

func (q *queryService) listChanges(ctx context.Context, req *fleetviewv1.ListChangesRequest) (*fleetviewv1.ListChangesResponse, error) {
	if q.history == nil {
		return nil, errNoHistory()
	}
	since, until, err := timeRange(req.GetSince(), req.GetUntil())
	if err != nil {
		return nil, err
	}
	grs, err := ParseChangeResources(req.GetResources())
	if err != nil {
		return nil, err
	}
	sel, err := labels.Parse(req.GetLabelSelector())
	if err != nil {
		return nil, fmt.Errorf("%w: labelSelector: %v", query.ErrInvalid, err)
	}
	var types []query.ChangeType
	for _, s := range splitList(req.GetTypes()) {
		t, err := query.ParseChangeType(s)
		if err != nil {
			return nil, fmt.Errorf("types: %w", err)
		}
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	if req.GetLimit() < 0 {
		return nil, fmt.Errorf("%w: limit must not be negative", query.ErrInvalid)
	}
	cs, err := q.resolveClusters(ctx, splitList(req.GetClusters()), req.GetClusterSelector())
	if err != nil {
		return nil, err
	}
	rs := make([]string, 0, len(grs))
	for _, gr := range grs {
		rs = append(rs, gr.String())
	}
	slices.Sort(rs)
	ts := make([]string, 0, len(types))
	for _, t := range types {
		ts = append(ts, t.String())
	}
	slices.Sort(ts)
	// The caller's visibility (set by the Guard, per resource as for a
	// search) binds the token: a page is never continued under another scope.
	vis := authz.VisibleFrom(ctx)
	hashed := []string{"changes", req.GetSince(), req.GetUntil(), clustersPart(cs), req.GetNamespace(), strings.Join(rs, ","),
		sel.String(), strings.Join(ts, ","), strconv.FormatBool(req.GetObjects())}
	if vis != nil {
		hashed = append(hashed, vis.String())
	}
	h := requestHash(hashed...)
	cur, err := openContinue(q.sealer, req.GetContinue(), h)
	if err != nil {
		return nil, err
	}
	page, err := q.history.Changes(ctx, query.ChangesOptions{Since: since, Until: until, Clusters: cs, Namespace: req.GetNamespace(),
		Resources: grs, Labels: sel, Types: types, Objects: req.GetObjects(), Visible: vis,
		Limit: q.limits.pageLimit(req.GetLimit()), Continue: cur})
	if err != nil {
		return nil, err
	}
	resp := &fleetviewv1.ListChangesResponse{Continue: sealContinue(q.sealer, page.Continue, h)}
	resp.Changes, err = q.entries(ctx, "changes", page.Changes, vis, req.GetStructured())
	return resp, err
}

func (q *queryService) ListRevisions(ctx context.Context, req *fleetviewv1.ListRevisionsRequest) (*fleetviewv1.ListRevisionsResponse, error) {
	resp, err := q.listRevisions(ctx, req)
	return resp, apierr.ToStatus(err)
}

func (q *queryService) listRevisions(ctx context.Context, req *fleetviewv1.ListRevisionsRequest) (*fleetviewv1.ListRevisionsResponse, error) {
	if q.history == nil {
		return nil, errNoHistory()
	}
	gvr, err := authz.RequestGVR(req.GetGroup(), req.GetVersion(), req.GetResource())
	if err != nil {
		return nil, err
	}
	if req.GetName() == "" {
		return nil, fmt.Errorf("%w: name required", query.ErrInvalid)
	}
	since, until, err := timeRange(req.GetSince(), req.GetUntil())
	if err != nil {
		return nil, err
	}
	if req.GetLimit() < 0 {
		return nil, fmt.Errorf("%w: limit must not be negative", query.ErrInvalid)
	}
	// As for a Get, the caller's visibility (set by the Guard) narrows
	// the read itself: a hidden object's history is not found, in the
	// words of a missing object.
	vis := authz.VisibleFrom(ctx)
	hashed := []string{"revisions", gvr.String(), req.GetNamespace(), req.GetName(), req.GetCluster(), req.GetUid(), req.GetSince(), req.GetUntil()}
	if vis != nil {
		hashed = append(hashed, vis.String())
	}
	h := requestHash(hashed...)
	cur, err := openContinue(q.sealer, req.GetContinue(), h)
	if err != nil {
		return nil, err
	}
	page, err := q.history.Revisions(ctx, query.RevisionsOptions{
		Object: query.GetOptions{GVR: gvr, Namespace: req.GetNamespace(), Name: req.GetName(), Cluster: req.GetCluster(), Visible: vis},
		UID:    req.GetUid(), Since: since, Until: until, Limit: q.limits.pageLimit(req.GetLimit()), Continue: cur})
	if err != nil {
		return nil, err
	}
	resp := &fleetviewv1.ListRevisionsResponse{Continue: sealContinue(q.sealer, page.Continue, h)}
	resp.Revisions, err = q.entries(ctx, "revisions", page.Revisions, vis, req.GetStructured())
	return resp, err
}

// entries turns a page of revisions into the wire's entries. What the
// caller may not see is left out again (the backend applied the
// visibility already; this keeps one that ignored it from leaking), and so
// is an entry whose stored object or patch is not valid JSON (reported, as
// a list's malformed objects are).
func (q *queryService) entries(ctx context.Context, verb string, revs []query.Revision, vis *query.Visibility, structured bool) ([]*fleetviewv1.HistoryEntry, error) {
	out := make([]*fleetviewv1.HistoryEntry, 0, len(revs))
	kinds := make([][]byte, 0, 1)
	for i := range revs {
		r := &revs[i]
		if !vis.Allows(r.GVR.GroupResource(), r.Cluster, r.Namespace) {
			continue
		}
		kind, err := checkHistoryJSON(r, kinds[:0])
		if err != nil {
			q.reportMalformed(ctx, verb, r.Cluster, err)
			continue
		}
		e := &fleetviewv1.HistoryEntry{Cluster: r.Cluster, Group: r.GVR.Group, Version: r.GVR.Version, Resource: r.GVR.Resource,
			Namespace: r.Namespace, Name: r.Name, Uid: r.UID, Seq: r.Seq, Time: timestamppb.New(r.Time), Type: r.Type.String(),
			ResourceVersion: r.ResourceVersion, Manager: r.Manager, Operation: r.Operation, Subresource: r.Subresource, Labels: r.Labels,
			Kind: kind}
		if !structured {
			e.RawObject, e.RawPatch = r.Object, r.Patch
		} else {
			var err error
			if len(r.Object) > 0 {
				if e.Object, err = toStruct(r.Object); err != nil {
					return nil, err
				}
			}
			if len(r.Patch) > 0 {
				if e.Patch, err = toStruct(r.Patch); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// checkHistoryJSON checks the stored bytes an entry carries and reads
// the object's kind ("" when it does not say) in the same pass: PathValues
// checks the whole document as Check does (FuzzScan), so an object is
// scanned once, not once for the check and again for its kind (half the
// service's time for an object's revisions, BenchmarkHistoryRevisionsAPI).
// kinds is scratch space.
func checkHistoryJSON(r *query.Revision, kinds [][]byte) (string, error) {
	var kind string
	if len(r.Object) > 0 {
		vs, err := rawjson.PathValues(r.Object, []string{"kind"}, kinds)
		if err != nil {
			return "", err
		}
		kind = kindFrom(vs)
	}
	if len(r.Patch) > 0 {
		if err := rawjson.Check(r.Patch); err != nil {
			return "", err
		}
	}
	return kind, nil
}

// kindOf is an object's kind, "" when it does not say.
func kindOf(obj []byte) string {
	vs, err := rawjson.PathValues(obj, []string{"kind"}, nil)
	if err != nil {
		return ""
	}
	return kindFrom(vs)
}

// kindFrom is the kind an object's values of "kind" say, "" unless one
// string.
func kindFrom(vs [][]byte) string {
	if len(vs) != 1 {
		return ""
	}
	k, err := strconv.Unquote(string(vs[0]))
	if err != nil {
		return ""
	}
	return k
}
