package queryapi

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetview/fleetview/internal/query"
	"github.com/fleetview/fleetview/internal/stream"
	"github.com/fleetview/fleetview/queryapi/authz"
)

// selection is what List and Watch select.
type selection struct {
	gvr       schema.GroupVersionResource
	namespace string
	labels    labels.Selector
	fields    *query.FieldFilter
	clusters  []string // nil: every cluster
	inCluster map[string]bool
	// visible is what the caller may see (set by the Guard, taken when the selection is built);
	// nil: everything.
	visible *query.Visibility
}

func (f *selection) clusterOK(c string) bool { return f.inCluster == nil || f.inCluster[c] }

// tracked: the filter reads labels or object fields, which a tombstone
// does not carry, so the watch remembers what it told the client.
func (f *selection) tracked() bool { return !f.labels.Empty() || f.fields.NeedsObject() }

// metaOK evaluates what a tombstone can be judged on.
func (f *selection) metaOK(ns, name string) bool {
	if f.namespace != "" && ns != f.namespace {
		return false
	}
	if f.fields != nil && !f.fields.NeedsObject() {
		ok, _ := f.fields.Matches(ns, name, nil)
		return ok
	}
	return true
}

func (f *selection) listOptions() query.ListOptions {
	return query.ListOptions{GVR: f.gvr, Namespace: f.namespace, Labels: f.labels, Fields: f.fields, Clusters: f.clusters, Visible: f.visible}
}

// resolveClusters combines explicit cluster names and a cluster label
// selector (evaluated against the inventory). nil means every cluster; an
// empty slice, none.
func (q *queryService) resolveClusters(ctx context.Context, names []string, selector string) ([]string, error) {
	for _, c := range names {
		if err := stream.ValidateCluster(c); err != nil {
			return nil, fmt.Errorf("%w: clusters: %v", query.ErrInvalid, err)
		}
	}
	out := names
	if len(out) == 0 {
		out = nil
	}
	sel, err := parseClusterSelector(selector)
	if err != nil {
		return nil, err
	}
	if sel == nil {
		return out, nil
	}
	recs, err := clusterRecords(ctx, q.catalog, q.inv)
	if err != nil {
		return nil, err
	}
	matched := []string{}
	for _, r := range recs {
		if sel.Matches(labels.Set(r.Labels)) && (out == nil || slices.Contains(out, r.Name)) {
			matched = append(matched, r.Name)
		}
	}
	return matched, nil
}

// parseClusterSelector parses a request's cluster label selector; nil
// when blank (no selection). It touches nothing but its argument, so the
// network-facing parsing is fuzzed apart from the inventory.
func parseClusterSelector(selector string) (labels.Selector, error) {
	if strings.TrimSpace(selector) == "" {
		return nil, nil
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, fmt.Errorf("%w: clusterSelector: %v", query.ErrInvalid, err)
	}
	return sel, nil
}

// selection validates and compiles the filters List and Watch share.
func (q *queryService) selection(ctx context.Context, group, version, resource, namespace, labelSel, fieldSel string, clusters []string, clusterSel string) (*selection, error) {
	gvr, err := authz.RequestGVR(group, version, resource)
	if err != nil {
		return nil, err
	}
	sel, err := labels.Parse(labelSel)
	if err != nil {
		return nil, fmt.Errorf("%w: labelSelector: %v", query.ErrInvalid, err)
	}
	fs, err := query.CompileFields(gvr, fieldSel)
	if err != nil {
		return nil, err
	}
	// A relation field goes through other resources than the one listed:
	// it may only go through what the caller may read of them.
	fs = fs.WithRelationVisibility(authz.RelationVisibleFrom(ctx))
	cs, err := q.resolveClusters(ctx, clusters, clusterSel)
	if err != nil {
		return nil, err
	}
	// The caller's visibility (set by the Guard) is part of the
	// selection, for lists and watches alike: hidden objects are neither
	// listed nor judged, sealed or queued for a watch.
	f := &selection{gvr: gvr, namespace: namespace, labels: sel, fields: fs, clusters: cs, visible: authz.VisibleFrom(ctx)}
	if cs != nil {
		f.inCluster = map[string]bool{}
		for _, c := range cs {
			f.inCluster[c] = true
		}
	}
	return f, nil
}

func (f *selection) hash() string {
	return requestHash(f.gvr.String(), f.namespace, f.labels.String(), f.fields.String(), clustersPart(f.clusters))
}
